"""Routing rules shared by the sync and async routing savers: tokens, the guard's
decision (:class:`Need`), replica savers (checked against the primary's server, bounded
in time) and their pools, failures and counters (docs/replicas.md). The routing of each
call, as steps, is in :mod:`._ops`.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    CheckpointTuple,
)
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import tuple_row
from psycopg_pool import PoolTimeout

from .._connect import connect_kwargs
from .._deadline import Deadline, deadline
from .._ops.write import resume
from .._server import ServerIdentity, log
from .._sql import Queries
from ..aio import AsyncDeltaPostgresSaver
from ..errors import ReplicaMismatchError
from ..saver import DeltaPostgresSaver

R = TypeVar("R")

#: The ``configurable`` key a caller may put a token under (see :meth:`RoutingSaver.token`).
READ_AFTER_KEY = "lgdp_read_after"
TOKEN_PREFIX = "lgdp-lsn:"
#: How long a replica that failed to connect (or was stopped) is left alone before it is
#: tried again (seconds).
DEFAULT_RETRY_AFTER = 2.0
#: How long a read waits for a connection of a replica's pool before it goes to the
#: primary (seconds): a replica that is down costs at most this, once per retry_after.
DEFAULT_REPLICA_TIMEOUT = 1.0
#: Default bound of every replica statement (seconds): past it the read goes to the
#: primary and the replica is left alone for retry_after.
DEFAULT_QUERY_TIMEOUT = 2.0
#: Default of how long a replica behind a read's floor is waited for before the primary
#: answers instead (seconds; a standby on another host lags by a few milliseconds).
DEFAULT_REPLICA_WAIT = 0.05
#: A replica statement waits at most this long for a lock (a lock replayed from the
#: primary is held until its commit is replayed, which recovery_min_apply_delay delays).
LOCK_TIMEOUT_S = 0.2
#: The client-side deadline's margin over the server-side statement_timeout.
DEADLINE_MARGIN_S = 0.5
#: How long a replica that is not a standby of the primary (promoted, another cluster
#: or timeline) is left alone before it is checked again (seconds, at least retry_after).
MISMATCH_RETRY_S = 30.0


def lsn_to_int(lsn: str) -> int:
    """``'16/B374D848'`` -> an int that orders like the LSN."""
    hi, lo = lsn.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def int_to_lsn(n: int) -> str:
    return f"{n >> 32:X}/{n & 0xFFFFFFFF:X}"


def parse_token(token: str) -> int:
    """The LSN of a token from :meth:`RoutingSaver.token` (ValueError if it is not one)."""
    if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX):
        raise ValueError(f"not a read token of this package: {token!r}")
    try:
        return lsn_to_int(token[len(TOKEN_PREFIX):])
    except ValueError:
        raise ValueError(f"not a read token of this package: {token!r}") from None


def make_token(lsn: int) -> str:
    return TOKEN_PREFIX + int_to_lsn(lsn)


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
#: Tokens given with read_after() in this context (the highest LSN).
_TOKEN: ContextVar[int | None] = ContextVar("lgdp_read_after", default=None)
#: The backend that served this context's last get_tuple of a latest checkpoint:
#: (routing saver id, (thread, ns, checkpoint id), backend index; -1: the primary).
_LAST_TUPLE: ContextVar[tuple[int, tuple[str, str, str], int] | None] = ContextVar(
    "lgdp_last_tuple", default=None
)


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


def _page_gate(saver: Any, params: dict[str, Any], filter: dict[str, Any] | None,
               limit: int | None) -> Any:
    """The replica savers' ``_list_gate``: the page gate when this context's need asks
    for it, for exactly the page it was made for; any other list under such a need is
    refused (it would run unchecked)."""
    need = _NEED.get()
    if need is None or not need.gate:
        return None
    if (filter or limit != need.page or params.get("thread_id") != need.thread_id
            or params.get("checkpoint_ns") != need.checkpoint_ns
            or params.get("before") != need.checkpoint_id):
        raise Unsafe("error", "a gated need for another list")
    return saver.queries["replicas.page_gate"]


class ReplicaSaver(DeltaPostgresSaver):
    """A DeltaPostgresSaver on a replica's pool: each connection is checked at its first
    use (a hot standby of the primary, on its timeline) and bounded (statement and lock
    timeouts); each use is bounded from the client side too; the guard statement runs
    first when a read in this context needs one (see :class:`Need`)."""

    bounds: ReplicaBounds

    def _run(
        self, op: Any, *, atomic: bool = False, retried: bool = False,
        changes: int | None = None,
    ) -> Any:
        # an answer made without a statement (the prefetch of a page's histories, the
        # cache) needs no connection, and no guard; a replica's broken connection is not
        # tried again here: the routing saver has the primary answer
        try:
            first = next(op)
        except StopIteration as stop:
            return stop.value
        return super()._run(resume(first, op), atomic=atomic, retried=True, changes=changes)

    def _list_gate(self, params: dict[str, Any], filter: dict[str, Any] | None,
                   limit: int | None) -> Any:
        return _page_gate(self, params, filter, limit)

    def _check_server(self, conn: psycopg.Connection[Any]) -> None:
        with deadline(conn, self.bounds.deadline) as d, _timed_out(d):
            super()._check_server(conn)

    def _new_connection(self, conn: psycopg.Connection[Any]) -> None:
        # autocommit: every statement its own snapshot (a guard and the read after it in
        # one transaction would share the guard's snapshot, taken before its wait, under
        # repeatable read), and the session's bounds are not rolled back with it
        if not conn.autocommit:
            conn.autocommit = True
        with conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(self.queries["replicas.bound_session"], self.bounds.session)

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        with super()._connection() as conn:
            self.bounds.verify(self._server.known(conn))
            need = _NEED.get()
            with deadline(conn, self.bounds.deadline) as d, _timed_out(d):
                if need is not None and not (need.gate and need.floor is None):
                    # the guard, then the read: two round trips. (Sent in one pipeline
                    # they still cost two: psycopg ends a pipeline with a Sync it waits
                    # for. A scratch A/B of the bench's routed page read, 400 pairs on
                    # loopback: 1.27x a direct standby read pipelined, 1.30x not.)
                    with conn.cursor(row_factory=tuple_row) as cur:
                        cur.execute(self.queries["replicas.guard"],
                                    need.params(self.bounds.max_wait))
                        row = cur.fetchone()
                    assert row is not None
                    need.check(row)
                yield conn
            if d.expired:  # ended after its last statement (decoding ran long): not lent
                conn.close()


class AsyncReplicaSaver(AsyncDeltaPostgresSaver):
    """The async twin of :class:`ReplicaSaver`."""

    bounds: ReplicaBounds

    async def _run(
        self, op: Any, *, atomic: bool = False, retried: bool = False,
        changes: int | None = None,
    ) -> Any:
        try:  # see ReplicaSaver._run
            first = next(op)
        except StopIteration as stop:
            return stop.value
        return await super()._run(resume(first, op), atomic=atomic, retried=True,
                                  changes=changes)

    def _list_gate(self, params: dict[str, Any], filter: dict[str, Any] | None,
                   limit: int | None) -> Any:
        return _page_gate(self, params, filter, limit)

    async def _check_server(self, conn: psycopg.AsyncConnection[Any]) -> None:
        with deadline(conn, self.bounds.deadline) as d, _timed_out(d):
            await super()._check_server(conn)

    async def _new_connection(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if not conn.autocommit:  # see ReplicaSaver._new_connection
            await conn.set_autocommit(True)
        async with conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(self.queries["replicas.bound_session"], self.bounds.session)

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with super()._connection() as conn:
            self.bounds.verify(self._server.known(conn))
            need = _NEED.get()
            with deadline(conn, self.bounds.deadline) as d, _timed_out(d):
                if need is not None and not (need.gate and need.floor is None):
                    # see ReplicaSaver._connection: the guard, then the read
                    async with conn.cursor(row_factory=tuple_row) as cur:
                        await cur.execute(self.queries["replicas.guard"],
                                          need.params(self.bounds.max_wait))
                        row = await cur.fetchone()
                    assert row is not None
                    need.check(row)
                yield conn
            if d.expired:  # see ReplicaSaver._connection
                await conn.close()


@contextlib.contextmanager
def _timed_out(d: Deadline) -> Iterator[None]:
    """An error of a connection the deadline ended is a :class:`ReplicaTimeout`."""
    try:
        yield
    except psycopg.OperationalError as e:
        if d.expired:
            raise ReplicaTimeout(str(e)) from e
        raise


@dataclass(frozen=True)
class RoutingStats:
    """What the routing saver did since it was made. ``replica_reads``: reads a replica
    answered; ``primary_reads``: reads the primary answered, by why (``empty``: the
    thread has no checkpoint in the namespace; ``not_routable``: a read that never goes
    to a replica, e.g. a list across threads; ``replica_miss``: every replica tried said
    no or failed; ``down``: no replica was usable; ``same_as_tuple``: the history of the
    tuple the primary had just served); ``replica_misses``: why replicas said no or
    failed (``behind``, ``absent``, ``head``, ``unsealed_page``, ``not_standby``: what
    the guard found; ``mismatch``: a replica of another cluster or timeline; ``down``:
    unreachable, stopped; ``timeout``: a statement outlived ``replica_query_timeout``;
    ``conflict``: a recovery conflict or a lock wait cancelled the query; ``error``: any
    other error); ``lsn_fetches``: statements that asked the primary for a read's floor
    (its WAL position, with the thread's head for a latest read) or a token;
    ``failovers``: changes of the primary's timeline this saver saw."""

    replica_reads: int
    primary_reads: dict[str, int]
    lsn_fetches: int
    replica_misses: dict[str, int] = field(default_factory=dict)
    failovers: int = 0


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


class _RoutingCore(BaseCheckpointSaver[str]):
    """Routing decisions, shared by the sync and async routing savers."""

    primary: Any
    replicas: list[Any]
    _own_pools: list[Any]
    #: set by each routing saver: the primary's saver class, the pool class of a
    #: replica, its saver class, and whether a pool made for a DSN opens at once (an
    #: async one opens in ``open()``, on the event loop)
    _primary_type: ClassVar[type[Any]]
    _pool_type: ClassVar[type[Any]]
    _replica_type: ClassVar[type[Any]]
    _open_pools_at_once: ClassVar[bool]
    #: the check and reset callbacks of a pool made for a replica DSN (.._connect)
    _pool_check: ClassVar[tuple[Any, Any]]

    def _init_savers(
        self, primary: Any, replicas: Sequence[Any], *, retry_after: float,
        replica_timeout: float, replica_query_timeout: float, replica_wait: float,
        cache_bytes: int,
        pool_size: int, prepare_threshold: int | None,
    ) -> None:
        """The routing saver's ``__init__``: a saver on each replica's pool (made for a
        DSN, with ``replica_timeout`` as its connect and wait timeouts)."""
        if not isinstance(primary, self._primary_type):
            raise TypeError(
                f"primary must be {_a(self._primary_type)}, not {type(primary).__name__}"
            )
        if isinstance(replicas, str):
            raise TypeError("replicas must be a list of DSNs or pools, not a str")
        for name, value in (("retry_after", retry_after), ("replica_timeout", replica_timeout),
                            ("replica_query_timeout", replica_query_timeout)):
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
        if (isinstance(replica_wait, bool) or not isinstance(replica_wait, int | float)
                or not 0 <= replica_wait < replica_query_timeout):
            raise ValueError("replica_wait must be a number of seconds from 0 to below "
                             f"replica_query_timeout, not {replica_wait!r}")
        super().__init__(serde=primary.serde)
        self.primary = primary
        self._bounds = ReplicaBounds(float(replica_query_timeout), float(replica_wait))
        self._own_pools = []
        savers = []
        for r in replicas:
            if isinstance(r, str):
                pool = self._pool_type(
                    r, min_size=1, max_size=pool_size, timeout=replica_timeout,
                    kwargs=_replica_pool_kwargs(r, prepare_threshold, replica_timeout,
                                                replica_query_timeout),
                    check=self._pool_check[0], reset=self._pool_check[1],
                    open=self._open_pools_at_once,
                )
                self._own_pools.append(pool)
            elif isinstance(r, self._pool_type):
                pool = r
            else:
                raise TypeError(
                    f"a replica must be a DSN or {_a(self._pool_type)}, not {type(r).__name__}"
                )
            saver = self._replica_type(pool, serde=primary.serde, schema=primary.schema,
                                       cache_bytes=cache_bytes)
            saver.bounds = self._bounds
            savers.append(saver)
        self.replicas = savers
        self._replica_names = [_describe(r) for r in replicas]
        self._init_routing(retry_after)

    def _with_allowlist(self, extra_allowlist: Any) -> Any:
        """``with_allowlist``: a clone whose primary and replica savers have it too."""
        clone = super().with_allowlist(extra_allowlist)
        if clone is self:
            return self
        assert isinstance(clone, type(self))
        clone.primary = self.primary.with_allowlist(extra_allowlist)
        clone.replicas = [r.with_allowlist(extra_allowlist) for r in self.replicas]
        return clone

    def _statement(self, key: str | tuple[str, ...]) -> Any:
        """A routing query: one block of sql/, or several joined into one statement."""
        return self.queries[key] if isinstance(key, str) else self.queries.join(*key)

    def _saver(self, i: int) -> Any:
        """The saver of a routing step: a replica's by its index, the primary's for -1."""
        return self.primary if i < 0 else self.replicas[i]

    def _init_routing(self, retry_after: float) -> None:
        self.retry_after = retry_after
        self._lock = threading.Lock()
        self._down_until = [0.0] * len(self.replicas)
        self._rr = itertools.count()
        self._counts: Counter[str] = Counter()
        self._maintenance_floor = 0
        self.queries = Queries(self.primary.schema)

    # ------------------------------------------------------------------ the primary

    def _primary_is(self, row: Sequence[Any]) -> None:
        """The primary's ``server.identity``: what every replica is checked against."""
        ident = ServerIdentity.of(row)
        if ident.in_recovery:
            raise ReplicaMismatchError(
                f"the primary given to the routing saver is in recovery ({ident}): give "
                "the primary's DSN (a multi-host DSN with target_session_attrs=read-write "
                "finds it)"
            )
        self._bounds.expected = ident

    def _primary_timeline(self, timeline: int) -> None:
        """The primary's timeline, as a read's floor statement reported it: a change is
        a promotion (a failover), see :meth:`_primary_changed`."""
        exp = self._bounds.expected
        if exp is not None and exp.timeline != int(timeline):
            self._primary_changed(ServerIdentity(exp.system_identifier, False, int(timeline)))

    def _primary_moved(self) -> None:
        """Before a routed read: the primary saver's connections reached another server
        (it checks each new one) since the replicas were last checked against it."""
        cur, exp = self.primary._server.current, self._bounds.expected
        if cur is not None and exp is not None and not cur.in_recovery \
                and not cur.same_history(exp):
            self._primary_changed(cur)

    def _primary_changed(self, ident: ServerIdentity) -> None:
        """The primary is now ``ident`` (a failover). Every replica connection is checked
        again before its next read, and what the replica savers' caches hold is
        dropped."""
        with self._lock:
            exp = self._bounds.expected
            if exp is None or exp.same_history(ident):
                return
            self._bounds.expected = ident
            self._counts["failovers"] += 1
        for r in self.replicas:
            r._server.reset()
            if r.history_cache is not None:
                r.history_cache.clear()
        _LAST_TUPLE.set(None)

    def _mismatch(self, i: int, e: Unsafe) -> ReplicaMismatchError:
        return ReplicaMismatchError(
            f"replica {self._replica_names[i]} is not a hot standby of the primary "
            f"({e.detail}); a routing saver reads only from streaming standbys of its "
            "primary's cluster (see docs/replicas.md)"
        )

    # ------------------------------------------------------------------ floors

    def _maintained(self, lsn: int) -> None:
        """A delete, prune or copy of this saver committed before the primary's ``lsn``."""
        with self._lock:
            self._maintenance_floor = max(self._maintenance_floor, lsn)

    def _token(self, config: RunnableConfig | None) -> int | None:
        """The floor of a read besides the primary's position: the caller's tokens and
        this saver's maintenance floor (see :func:`._ops.op_write`), if any."""
        token = _TOKEN.get()
        if self._maintenance_floor:
            token = max(token or 0, self._maintenance_floor)
        conf = (config or {}).get("configurable") or {}
        given = conf.get(READ_AFTER_KEY)
        if given is not None:
            lsn = parse_token(given)
            token = lsn if token is None else max(token, lsn)
        return token

    @contextlib.contextmanager
    def _reading_after(self, token: str | None) -> Iterator[None]:
        """``read_after``: the highest token given in this context, until the block ends."""
        lsn = parse_token(token) if token is not None else None
        cur = _TOKEN.get()
        reset = _TOKEN.set(lsn if cur is None or lsn is None else max(cur, lsn))
        try:
            yield
        finally:
            _TOKEN.reset(reset)

    # ------------------------------------------------------------------ decisions

    def _order(self) -> list[int]:
        """Replicas to try, healthy ones only, starting at the next in turn."""
        n = len(self.replicas)
        if not n:
            return []
        start = next(self._rr) % n
        now = time.monotonic()
        return [i % n for i in range(start, start + n) if self._down_until[i % n] <= now]

    def _failed(self, i: int, e: BaseException) -> None:
        reason, bench = _failure_reason(e, self.retry_after)
        if bench:
            self._down_until[i] = time.monotonic() + bench
            if reason in ("mismatch", "not_standby", "timeline", "timeout"):
                log.warning("langgraph-delta-postgres: replica %s left alone for %.0f s: %s",
                            self._replica_names[i], bench, e)
        self._counts[f"miss_{reason}"] += 1

    def routing_stats(self) -> RoutingStats:
        counts = dict(self._counts)
        return RoutingStats(
            replica_reads=counts.pop("replica", 0),
            lsn_fetches=counts.pop("lsn_fetches", 0),
            failovers=counts.pop("failovers", 0),
            primary_reads={k.removeprefix("primary_"): v for k, v in counts.items()
                           if k.startswith("primary_")},
            replica_misses={k.removeprefix("miss_"): v for k, v in counts.items()
                            if k.startswith("miss_")},
        )

    def _sealed_params(
        self, thread_id: str, tuples: list[CheckpointTuple]
    ) -> dict[str, Any]:
        return {
            "thread_id": thread_id,
            "checkpoint_ns": [t.config["configurable"]["checkpoint_ns"] for t in tuples],
            "checkpoint_ids": [t.config["configurable"]["checkpoint_id"] for t in tuples],
        }

    def get_next_version(self, current: str | None, channel: None) -> str:
        return self.primary.get_next_version(current, channel)  # type: ignore[no-any-return]


def _a(cls: type[Any]) -> str:
    """``'a ConnectionPool'``, ``'an AsyncConnectionPool'``."""
    return ("an " if cls.__name__[0] in "AEIOU" else "a ") + cls.__name__


def _describe(replica: Any) -> str:
    """A replica for messages: host, port and database of its DSN (no password)."""
    conninfo = replica if isinstance(replica, str) else getattr(replica, "conninfo", "")
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.Error:
        return "<replica>"
    return "{}:{}/{}".format(params.get("host", ""), params.get("port", ""),
                             params.get("dbname", ""))


def _replica_pool_kwargs(conn_string: str, prepare_threshold: int | None,
                         replica_timeout: float, query_timeout: float) -> dict[str, Any]:
    """A replica pool's connect arguments: the saver's, a connect timeout of
    ``replica_timeout``, and TCP keepalives and ``tcp_user_timeout`` so that a host that
    vanished (its packets lost) ends the connection within about ``query_timeout``
    (unix sockets ignore them; a peer that acknowledges and never answers is ended by the
    client-side deadline, see .._deadline)."""
    kwargs = connect_kwargs(conn_string, prepare_threshold)
    kwargs["connect_timeout"] = max(1, int(replica_timeout + 0.999))
    params = conninfo_to_dict(conn_string)
    probe = max(1, int(query_timeout))
    for key, value in (("keepalives", 1), ("keepalives_idle", probe),
                       ("keepalives_interval", probe), ("keepalives_count", 3),
                       ("tcp_user_timeout", int((query_timeout + DEADLINE_MARGIN_S) * 1000))):
        if key not in params:
            kwargs[key] = value
    return kwargs
