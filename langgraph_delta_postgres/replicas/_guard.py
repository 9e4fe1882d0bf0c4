"""The guard's decision: what a replica must show before a read runs there (:class:`Need`,
checked by the ``replicas.guard`` statement), the bounds of every replica statement and
the primary's server it is checked against (:class:`ReplicaBounds`), and what a replica's
failure means: how long it is left alone (docs/replicas.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

from .._deadline import Deadline
from .._server import ServerIdentity
from ._tokens import int_to_lsn, lsn_to_int

#: A replica statement waits at most this long for a lock (a lock replayed from the
#: primary is held until its commit is replayed, which recovery_min_apply_delay delays).
LOCK_TIMEOUT_S = 0.2
#: The client-side deadline's margin over the server-side statement_timeout.
DEADLINE_MARGIN_S = 0.5
#: How long a replica that is not a standby of the primary (promoted, another cluster
#: or timeline) is left alone before it is checked again (seconds, at least retry_after).
MISMATCH_RETRY_S = 30.0


class Unsafe(Exception):  # noqa: N818  # a routing decision, not an error anyone sees
    """The replica cannot be shown to give the primary's answer for this read; ``reason``
    is one of ``not_standby``, ``mismatch`` (another cluster or timeline), ``behind``,
    ``absent``, ``head``, ``unsealed_page``; ``detail`` says what was found."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Need:
    """What the guard statement must find on a replica before a read runs there."""

    floor: int | None
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str | None
    present: bool
    sealed: bool
    #: a history page of this many checkpoints below checkpoint_id, gated in its own
    #: statement (``replicas.page_gate``, see :meth:`ReplicaSaver._list_gate`): the guard
    #: runs only for a floor
    page: int | None = None
    gate: bool = False

    def params(self, max_wait: float) -> dict[str, Any]:
        return {"thread_id": self.thread_id, "checkpoint_ns": self.checkpoint_ns,
                "checkpoint_id": self.checkpoint_id,
                "floor": None if self.floor is None else int_to_lsn(self.floor),
                "max_wait_ms": int(max_wait * 1000)}

    def check(self, row: tuple[Any, ...]) -> None:
        standby, replay, present, sealed = row
        if not standby or replay is None:
            raise Unsafe("not_standby", "it is not in recovery (promoted?)")
        if self.floor is not None and lsn_to_int(replay) < self.floor:
            raise Unsafe("behind")
        if self.present and not present:
            raise Unsafe("absent")
        if self.sealed and not sealed:
            raise Unsafe("head")


#: The requirement of the read running in this context on a replica saver: checked on
#: the connection its statement will run on, when it takes one (a read answered without
#: a statement, e.g. from the prefetch, needs none).
_NEED: ContextVar[Need | None] = ContextVar("lgdp_replica_need", default=None)


class ReplicaBounds:
    """What a routing saver tells its replica savers: the primary's server (a replica
    must be a hot standby of its cluster on its timeline; None until known), and the
    bounds of every replica statement. Shared by reference: a failover seen by the
    router updates ``expected`` for all of them."""

    def __init__(self, query_timeout: float, max_wait: float) -> None:
        self.expected: ServerIdentity | None = None
        #: how long the guard waits for a replica behind a read's floor (seconds)
        self.max_wait = max_wait
        #: the server-side bounds (sql/replicas.sql, bound_session)
        self.session = {
            "statement_timeout": f"{int(query_timeout * 1000)}ms",
            "lock_timeout": f"{int(min(query_timeout, LOCK_TIMEOUT_S) * 1000)}ms",
        }
        #: the client-side bound (see .._deadline): the server's, plus a margin for its
        #: cancellation to arrive
        self.deadline = query_timeout + DEADLINE_MARGIN_S

    def verify(self, ident: ServerIdentity | None) -> None:
        """Unsafe("mismatch") / Unsafe("not_standby") unless ``ident`` is a hot standby
        of the expected primary, on its timeline."""
        if ident is None:
            return
        if not ident.in_recovery:
            raise Unsafe("not_standby", f"it is not in recovery ({ident})")
        exp = self.expected
        if exp is None:
            return
        if ident.system_identifier != exp.system_identifier:
            raise Unsafe("mismatch", f"its system identifier is {ident.system_identifier}, "
                                     f"the primary's is {exp.system_identifier}: another "
                                     "cluster")
        if ident.timeline > exp.timeline:
            raise Unsafe("mismatch", f"it is on timeline {ident.timeline}, ahead of the "
                                     f"primary's {exp.timeline}: it follows another primary")
        if ident.timeline < exp.timeline:
            # a standby that followed a promotion may report its old timeline until its
            # next restartpoint (a role without pg_read_all_stats sees no WAL receiver):
            # not used meanwhile, checked again later; not an error at construction
            raise Unsafe("timeline", f"it reports timeline {ident.timeline}, behind the "
                                     f"primary's {exp.timeline}")


class ReplicaTimeout(Exception):  # noqa: N818  # a routing decision, as Unsafe
    """A replica statement outlived the saver's ``replica_query_timeout``: the client
    ended the connection (a silent network partition, a hung server)."""


@contextlib.contextmanager
def _timed_out(d: Deadline) -> Iterator[None]:
    """An error of a connection the deadline ended is a :class:`ReplicaTimeout`."""
    try:
        yield
    except psycopg.OperationalError as e:
        if d.expired:
            raise ReplicaTimeout(str(e)) from e
        raise


_CONFLICT_STATES = {"40001", "40P01", "55P03"}  # serialization, deadlock, lock timeout


def _failure_reason(e: BaseException, retry_after: float) -> tuple[str, float]:
    """Why a replica read failed, and how long the replica is left alone (0: not)."""
    if isinstance(e, Unsafe):
        if e.reason in ("not_standby", "mismatch", "timeline"):
            return e.reason, max(retry_after, MISMATCH_RETRY_S)
        return e.reason, 0.0
    if isinstance(e, ReplicaTimeout):
        return "timeout", retry_after
    if isinstance(e, psycopg.Error):
        state = getattr(e, "sqlstate", None)
        if state in _CONFLICT_STATES or "conflict with recovery" in str(e):
            return "conflict", 0.0
        if state == "57014":  # statement_timeout on the replica
            return "timeout", retry_after
        if isinstance(e, psycopg.OperationalError):
            return "down", retry_after  # connection lost, server shutting down, refused
        return "error", 0.0
    if isinstance(e, PoolTimeout):
        return "down", retry_after
    return "error", 0.0
