"""Routing rules shared by the sync and async routing savers: tokens, the guard's
decision (:class:`Need`), floors of a thread, replica savers and their pools, counters
(docs/replicas.md). The routing of each call, as steps, is in :mod:`._ops`.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    CheckpointTuple,
    get_checkpoint_id,
)
from psycopg.rows import tuple_row
from psycopg_pool import PoolTimeout

from .._connect import connect_kwargs
from .._sql import Queries
from ..aio import AsyncDeltaPostgresSaver
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
#: Threads whose floor this saver remembers; the oldest are folded into one floor for
#: all threads (conservative: reads of every thread then wait for it).
MAX_TRACKED_THREADS = 100_000


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
    is one of ``not_standby``, ``behind``, ``absent``, ``head``, ``unsealed_page``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Need:
    """What the guard statement must find on a replica before a read runs there."""

    floor: int | None
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str | None
    present: bool
    sealed: bool

    def params(self) -> dict[str, Any]:
        return {"thread_id": self.thread_id, "checkpoint_ns": self.checkpoint_ns,
                "checkpoint_id": self.checkpoint_id}

    def check(self, row: tuple[Any, ...]) -> None:
        standby, replay, present, sealed = row
        if not standby or replay is None:
            raise Unsafe("not_standby")
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


class ReplicaSaver(DeltaPostgresSaver):
    """A DeltaPostgresSaver on a replica's pool whose connections run the guard
    statement first when a read in this context needs one (see :class:`Need`)."""

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        with super()._connection() as conn:
            need = _NEED.get()
            if need is not None:
                with conn.cursor(row_factory=tuple_row) as cur:
                    cur.execute(self.queries["replicas.guard"], need.params())
                    row = cur.fetchone()
                assert row is not None
                need.check(row)
            yield conn


class AsyncReplicaSaver(AsyncDeltaPostgresSaver):
    """The async twin of :class:`ReplicaSaver`."""

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with super()._connection() as conn:
            need = _NEED.get()
            if need is not None:
                async with conn.cursor(row_factory=tuple_row) as cur:
                    await cur.execute(self.queries["replicas.guard"], need.params())
                    row = await cur.fetchone()
                assert row is not None
                need.check(row)
            yield conn


@dataclass(frozen=True)
class RoutingStats:
    """What the routing saver did since it was made. ``replica_reads``: reads a replica
    answered; ``primary_reads``: reads the primary answered, by why (``latest``: the
    latest checkpoint without a floor of the thread's own; ``not_routable``: a read that
    never goes to a replica, e.g. a list across threads; ``replica_miss``: every replica
    tried said no or failed; ``down``: no replica was reachable; ``same_as_tuple``: the
    history of the tuple the primary had just served); ``replica_misses``: why replicas
    said no or failed (``behind``, ``absent``, ``head``, ``unsealed_page``,
    ``not_standby``: what the guard found; ``down``: unreachable, stopped; ``conflict``: a
    recovery conflict cancelled the query; ``error``: any other error);
    ``lsn_fetches``: statements that asked the primary for its WAL position (floors of
    this saver's writes, tokens)."""

    replica_reads: int
    primary_reads: dict[str, int]
    lsn_fetches: int
    replica_misses: dict[str, int] = field(default_factory=dict)


_CONFLICT_STATES = {"40001", "40P01"}  # serialization failure, deadlock: both on conflicts


def _failure_reason(e: BaseException) -> tuple[str, bool]:
    """Why a replica read failed, and whether the replica should be left alone awhile."""
    if isinstance(e, Unsafe):
        return e.reason, False
    if isinstance(e, psycopg.Error):
        state = getattr(e, "sqlstate", None)
        if state in _CONFLICT_STATES or "conflict with recovery" in str(e):
            return "conflict", False
        if isinstance(e, psycopg.OperationalError) and state not in ("57014",):
            return "down", True  # connection lost, server shutting down, refused
        return "error", False
    if isinstance(e, PoolTimeout):
        return "down", True
    return "error", False


_PENDING = -1  # a floor whose LSN is not fetched yet (a write happened, no read since)


class _RoutingCore(BaseCheckpointSaver[str]):
    """Routing decisions and floors, shared by the sync and async routing savers."""

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

    def _init_savers(
        self, primary: Any, replicas: Sequence[Any], *, retry_after: float,
        replica_timeout: float, cache_bytes: int, pool_size: int,
        prepare_threshold: int | None,
    ) -> None:
        """The routing saver's ``__init__``: a saver on each replica's pool (made for a
        DSN, with ``replica_timeout`` as its connect and wait timeouts)."""
        if not isinstance(primary, self._primary_type):
            raise TypeError(
                f"primary must be {_a(self._primary_type)}, not {type(primary).__name__}"
            )
        if isinstance(replicas, str):
            raise TypeError("replicas must be a list of DSNs or pools, not a str")
        super().__init__(serde=primary.serde)
        self.primary = primary
        self._own_pools = []
        savers = []
        for r in replicas:
            if isinstance(r, str):
                pool = self._pool_type(
                    r, min_size=1, max_size=pool_size, timeout=replica_timeout,
                    kwargs=_replica_pool_kwargs(r, prepare_threshold, replica_timeout),
                    check=self._pool_type.check_connection, open=self._open_pools_at_once,
                )
                self._own_pools.append(pool)
            elif isinstance(r, self._pool_type):
                pool = r
            else:
                raise TypeError(
                    f"a replica must be a DSN or {_a(self._pool_type)}, not {type(r).__name__}"
                )
            savers.append(self._replica_type(pool, serde=primary.serde, schema=primary.schema,
                                             cache_bytes=cache_bytes))
        self.replicas = savers
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

    def _saver(self, i: int) -> Any:
        """The saver of a routing step: a replica's by its index, the primary's for -1."""
        return self.primary if i < 0 else self.replicas[i]

    def _init_routing(self, retry_after: float) -> None:
        self.retry_after = retry_after
        self._lock = threading.Lock()
        #: thread id -> (floor LSN or _PENDING, write sequence number)
        self._floors: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self._global: tuple[int, int] = (0, 0)  # floor of every thread
        self._seq = 0
        self._down_until = [0.0] * len(self.replicas)
        self._rr = itertools.count()
        self._counts: Counter[str] = Counter()
        self.queries = Queries(self.primary.schema)

    # ------------------------------------------------------------------ floors

    def _wrote(self, thread_ids: Sequence[str] | None) -> None:
        """A write committed on the primary, to these threads (None: threads unknown)."""
        _LAST_TUPLE.set(None)
        with self._lock:
            self._seq += 1
            if thread_ids is None:
                self._global = (_PENDING, self._seq)
                return
            for t in thread_ids:
                self._floors[t] = (_PENDING, self._seq)
                self._floors.move_to_end(t)
            while len(self._floors) > MAX_TRACKED_THREADS:
                _, (lsn, _s) = self._floors.popitem(last=False)
                g = self._global[0]
                merged = _PENDING if _PENDING in (lsn, g) else max(lsn, g)
                self._global = (merged, self._seq)

    def _pending(self, thread_id: str) -> int | None:
        """The write sequence number to resolve if a floor of this read is pending."""
        with self._lock:
            own = self._floors.get(thread_id)
            if (own is not None and own[0] == _PENDING) or self._global[0] == _PENDING:
                return self._seq
        return None

    def _resolved(self, seq: int, lsn: int) -> None:
        """The primary's position ``lsn``, fetched after write ``seq`` had committed:
        the floor of every write up to ``seq`` (a later write stays pending)."""
        with self._lock:
            for t, (f, s) in self._floors.items():
                if f == _PENDING and s <= seq:
                    self._floors[t] = (lsn, s)
            if self._global[0] == _PENDING and self._global[1] <= seq:
                self._global = (lsn, self._global[1])

    def _floor(self, config: RunnableConfig | None, thread_id: str) -> tuple[int | None, bool]:
        """(the floor of a read of this thread, whether it is the thread's own: a write of
        this saver to it, or a token). Floors are resolved before this is called."""
        token = _TOKEN.get()
        conf = (config or {}).get("configurable") or {}
        given = conf.get(READ_AFTER_KEY)
        if given is not None:
            lsn = parse_token(given)
            token = lsn if token is None else max(token, lsn)
        with self._lock:
            own = self._floors.get(thread_id)
            g = self._global[0]
        floors = [f for f in (token, own[0] if own else None, g or None) if f is not None]
        knows = token is not None or own is not None
        return (max(floors) if floors else None), knows

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

    def _need(self, kind: str, config: RunnableConfig) -> Need | str:
        """What a replica must show to answer this read, or why only the primary can."""
        conf = config.get("configurable") or {}
        thread_id = conf.get("thread_id")
        if thread_id is None:
            return "not_routable"
        thread_id = str(thread_id)
        ns = str(conf.get("checkpoint_ns") or "")
        cid = get_checkpoint_id(config) or None
        floor, knows = self._floor(config, thread_id)
        if kind == "tuple":
            if cid is None:
                return Need(floor, thread_id, ns, None, False, False) if knows else "latest"
            return Need(floor, thread_id, ns, cid, True, not knows)
        if kind == "history":
            if cid is None:
                return Need(floor, thread_id, ns, None, False, False) if knows else "latest"
            return Need(floor, thread_id, ns, cid, True, False)
        raise AssertionError(kind)

    def _list_need(
        self, config: RunnableConfig | None, filter: Mapping[str, Any] | None,
        before: RunnableConfig | None,
    ) -> tuple[Need, bool] | str:
        """(need, whether the page's checkpoints must all be sealed) of a list, or why
        only the primary answers it."""
        if config is None:
            return "not_routable"
        conf = config.get("configurable") or {}
        if conf.get("thread_id") is None or get_checkpoint_id(config):
            return "not_routable"
        thread_id = str(conf["thread_id"])
        floor, knows = self._floor(config, thread_id)
        before_id = get_checkpoint_id(before) if before is not None else None
        ns = conf.get("checkpoint_ns")
        if before_id and ns is not None:
            need = Need(floor, thread_id, str(ns), before_id, True, False)
            return need, not knows
        if knows:
            return Need(floor, thread_id, str(ns or ""), None, False, False), False
        return "latest" if not before_id else "not_routable"

    def _order(self) -> list[int]:
        """Replicas to try, healthy ones only, starting at the next in turn."""
        n = len(self.replicas)
        if not n:
            return []
        start = next(self._rr) % n
        now = time.monotonic()
        return [i % n for i in range(start, start + n) if self._down_until[i % n] <= now]

    def _failed(self, i: int, e: BaseException) -> None:
        reason, leave_alone = _failure_reason(e)
        if leave_alone:
            self._down_until[i] = time.monotonic() + self.retry_after
        self._counts[f"miss_{reason}"] += 1

    def routing_stats(self) -> RoutingStats:
        counts = dict(self._counts)
        return RoutingStats(
            replica_reads=counts.pop("replica", 0),
            lsn_fetches=counts.pop("lsn_fetches", 0),
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


def _replica_pool_kwargs(conn_string: str, prepare_threshold: int | None,
                         replica_timeout: float) -> dict[str, Any]:
    kwargs = connect_kwargs(conn_string, prepare_threshold)
    kwargs["connect_timeout"] = max(1, int(replica_timeout + 0.999))
    return kwargs

