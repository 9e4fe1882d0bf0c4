"""Serve immutable reads from streaming hot standbys, never a stale answer.

:class:`RoutingSaver` (and :class:`AsyncRoutingSaver`) compose one
:class:`.DeltaPostgresSaver` on the primary with one saver per replica (a Postgres hot
standby of it, streaming replication). Writes, ``setup()``, prune, deletes, copies and
the keep-set go to the primary. A read goes to a replica only when the replica can be
shown to give the primary's answer; anything else, and any doubt (the replica is
behind, lacks the checkpoint, is unreachable, cancels the query for a recovery
conflict), is answered by the primary, with no error to the caller.

**The rule: a read that LangGraph may build on is never older than the primary at the
moment the read began.** No saver keeps a floor of its own writes (another worker's
writes would not raise it): a read of a thread's latest checkpoint (``get_tuple`` or its
history without ``checkpoint_id``, ``list`` without ``before``) first asks the primary,
in one indexed statement (``sql/replicas.sql``, ``head``), for its WAL position and the
thread's head; a replica answers only once it has replayed past that position and has
the head (``guard``, run on the connection that then runs the read, as the statement
before it); else the primary answers.

Reads of what is final are answered by a replica without asking the primary:

* **a checkpoint by id** (``get_tuple``): the checkpoint is there and has a child there
  (trap 2: the row of a head checkpoint is final, its pending writes are not).
* **the history of a checkpoint by id** (``get_delta_channel_history``): the checkpoint
  is there (trap 1: on a replica that lacks it, the walk finds nothing and the history
  reads as empty channels). Its ancestors all have a child; its own writes are not part
  of its history.
* **a history page** (``list`` of one thread and namespace with ``before``): the
  ``before`` checkpoint is there, and every checkpoint of the page has a child there
  (``sealed_ids``, after the page); else the page is read again on the primary.
* ``get_tuple`` of the latest checkpoint and the history LangGraph asks for next: the
  same server, one snapshot (the saver's prefetch).

A caller's token (:meth:`RoutingSaver.token`, ``read_after``, or
``configurable["lgdp_read_after"]``) adds a floor to every read.

Replicas are checked (``sql/server.sql``): at construction (async: ``open()``), a
replica that is not a hot standby of the primary's cluster on its timeline is a
:class:`~langgraph_delta_postgres.errors.ReplicaMismatchError`; every new replica
connection is checked again, and a replica that fails (promoted, another timeline) is
left alone. Every replica statement is bounded (``replica_query_timeout``: statement and
lock timeouts on the server, a deadline on the client, TCP keepalives): past it the
primary answers and the replica is left alone for ``retry_after``. A change of the
primary's timeline (a failover) drops the replica savers' caches and checks every
replica connection again; every saver drops its own cache when its connections reach
another server (see :mod:`langgraph_delta_postgres._server`).
"""

from __future__ import annotations

from ..errors import ReplicaMismatchError
from ._async import AsyncRoutingSaver
from ._rules import RoutingStats
from ._sync import RoutingSaver
from ._tokens import READ_AFTER_KEY, parse_token

__all__ = [
    "READ_AFTER_KEY",
    "AsyncRoutingSaver",
    "ReplicaMismatchError",
    "RoutingSaver",
    "RoutingStats",
    "parse_token",
]
