"""Serve immutable reads from streaming hot standbys, never a stale answer.

:class:`RoutingSaver` (and :class:`AsyncRoutingSaver`) compose one
:class:`.DeltaPostgresSaver` on the primary with one saver per replica (a Postgres hot
standby of it, streaming replication). Writes, ``setup()``, prune, deletes, copies and
the keep-set go to the primary. A read goes to a replica only when the replica can be
shown to give the primary's answer; anything else, and any doubt (the replica is
behind, lacks the checkpoint, is unreachable, cancels the query for a recovery
conflict), is answered by the primary, with no error to the caller.

When a replica answers (``sql/replicas.sql``, ``guard``, run on the connection that then
runs the read, as the statement before it):

* **floor**: the replica has replayed past the floor of the read, when it has one: the
  primary's WAL position after the last write this saver made to the thread (or to
  threads it can't name: ``delete_for_runs``), and the caller's token
  (:meth:`RoutingSaver.read_after`, or ``configurable["lgdp_read_after"]``). A saver
  that did not write the thread and has no token has no floor for it.
* **the latest checkpoint** (``get_tuple`` / history without ``checkpoint_id``, ``list``
  without ``before``): only with a floor of the thread's own (its own writes or a
  token); without one, on the primary: nothing on a replica says it is not behind.
* **a checkpoint by id** (``get_tuple``): the checkpoint is on the replica, and, without
  a floor of the thread's own, has a child there (trap 2: the row of a head checkpoint
  is final, its pending writes are not).
* **the history of a checkpoint by id** (``get_delta_channel_history``): the checkpoint
  is on the replica (trap 1: on a replica that lacks it, the walk finds nothing and the
  history reads as empty channels). Its ancestors all have a child (the next one on the
  chain); its own writes are not part of its history.
* **a history page** (``list`` of one thread and namespace with ``before``): the
  ``before`` checkpoint is on the replica, and every checkpoint of the page has a child
  there (``sealed_ids``, after the page); else the page is read again on the primary.
* ``get_tuple`` of the latest checkpoint and the history LangGraph asks for next: the
  same server, one snapshot (the history came with the tuple, in one statement: the
  saver's prefetch); the routing saver sends the history call to the saver that served
  the tuple.

Read-your-writes across processes: a token (:meth:`RoutingSaver.token`) is the
primary's WAL position; a reader that carries it (``with saver.read_after(token):``, or
``configurable["lgdp_read_after"] = token``) sees at least everything committed on the
primary when the token was made, on a replica that has replayed that far, else on the
primary. See docs/replicas.md for the guarantees and what they assume.
"""

from __future__ import annotations

from ._async import AsyncRoutingSaver
from ._rules import READ_AFTER_KEY, RoutingStats, parse_token
from ._sync import RoutingSaver

__all__ = [
    "READ_AFTER_KEY",
    "AsyncRoutingSaver",
    "RoutingSaver",
    "RoutingStats",
    "parse_token",
]
