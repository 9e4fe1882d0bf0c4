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

import asyncio
import contextlib
import itertools
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar, cast

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from ._core import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_PREPARE_THRESHOLD,
    PruneStats,
    connect_kwargs,
)
from ._sql import Queries
from .aio import AsyncDeltaPostgresSaver
from .saver import DeltaPostgresSaver

__all__ = [
    "READ_AFTER_KEY",
    "AsyncRoutingSaver",
    "RoutingSaver",
    "RoutingStats",
    "parse_token",
]

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


def _ids(thread_ids: Sequence[str]) -> list[str]:
    return [str(t) for t in thread_ids] if not isinstance(thread_ids, str) else [thread_ids]


def _replica_pool_kwargs(conn_string: str, prepare_threshold: int | None,
                         replica_timeout: float) -> dict[str, Any]:
    kwargs = connect_kwargs(conn_string, prepare_threshold)
    kwargs["connect_timeout"] = max(1, int(replica_timeout + 0.999))
    return kwargs


class RoutingSaver(_RoutingCore):
    """A checkpointer that writes to a primary and reads from its streaming replicas
    when that gives the primary's answer (see the module docstring and
    docs/replicas.md).

    Args:
        primary: the saver on the primary.
        replicas: one ``ConnectionPool`` (or DSN) per hot standby of the primary.
        retry_after: seconds a replica that could not be reached is left alone.
        replica_timeout: seconds a read waits for a replica connection (a DSN's pool).
        cache_bytes: history cache budget of each replica's saver.
    """

    primary: DeltaPostgresSaver
    replicas: list[ReplicaSaver]

    def __init__(
        self,
        primary: DeltaPostgresSaver,
        replicas: Sequence[ConnectionPool[Any] | str],
        *,
        retry_after: float = DEFAULT_RETRY_AFTER,
        replica_timeout: float = DEFAULT_REPLICA_TIMEOUT,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        pool_size: int = 4,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
    ) -> None:
        if not isinstance(primary, DeltaPostgresSaver):
            raise TypeError(f"primary must be a DeltaPostgresSaver, not {type(primary).__name__}")
        if isinstance(replicas, str):
            raise TypeError("replicas must be a list of DSNs or pools, not a str")
        super().__init__(serde=primary.serde)
        self.primary = primary
        self._own_pools: list[ConnectionPool[Any]] = []
        savers: list[ReplicaSaver] = []
        for r in replicas:
            if isinstance(r, str):
                pool: ConnectionPool[Any] = ConnectionPool(
                    r, min_size=1, max_size=pool_size, timeout=replica_timeout,
                    kwargs=_replica_pool_kwargs(r, prepare_threshold, replica_timeout),
                    check=ConnectionPool.check_connection, open=True,
                )
                self._own_pools.append(pool)
            elif isinstance(r, ConnectionPool):
                pool = r
            else:
                raise TypeError(
                    f"a replica must be a DSN or a ConnectionPool, not {type(r).__name__}"
                )
            savers.append(ReplicaSaver(pool, serde=primary.serde, schema=primary.schema,
                                       cache_bytes=cache_bytes))
        self.replicas = savers
        self._init_routing(retry_after)

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        replicas: Sequence[str],
        pool_size: int | None = None,
        serde: SerializerProtocol | None = None,
        schema: str | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
        retry_after: float = DEFAULT_RETRY_AFTER,
        replica_timeout: float = DEFAULT_REPLICA_TIMEOUT,
    ) -> Iterator[RoutingSaver]:
        """A routing saver on ``conn_string`` (the primary) and ``replicas`` (DSNs of its
        hot standbys); every connection and pool is closed on exit."""
        with DeltaPostgresSaver.from_conn_string(
            conn_string, pool_size=pool_size, serde=serde, schema=schema,
            cache_bytes=cache_bytes, prepare_threshold=prepare_threshold,
        ) as primary:
            saver = cls(primary, list(replicas), retry_after=retry_after,
                        replica_timeout=replica_timeout, cache_bytes=cache_bytes,
                        pool_size=pool_size or 4, prepare_threshold=prepare_threshold)
            try:
                yield saver
            finally:
                saver.close()

    def close(self) -> None:
        """Close the pools this saver opened for replica DSNs."""
        for p in self._own_pools:
            p.close()

    def with_allowlist(self, extra_allowlist: Any) -> RoutingSaver:
        clone = super().with_allowlist(extra_allowlist)
        if clone is self:
            return self
        assert isinstance(clone, RoutingSaver)
        clone.primary = cast(DeltaPostgresSaver, self.primary.with_allowlist(extra_allowlist))
        clone.replicas = [cast(ReplicaSaver, r.with_allowlist(extra_allowlist))
                          for r in self.replicas]
        return clone

    # ------------------------------------------------------------------ floors, tokens

    def _fetch_lsn(self) -> int:
        self._counts["lsn_fetches"] += 1
        with self.primary._connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(self.queries["replicas.primary_lsn"])
            row = cur.fetchone()
        assert row is not None
        return lsn_to_int(row[0])

    def _resolve(self, thread_id: str) -> None:
        seq = self._pending(thread_id)
        if seq is not None:
            self._resolved(seq, self._fetch_lsn())

    def token(self) -> str:
        """A read token: the primary's WAL position now, at or past every write that has
        committed on it (this saver's and every other process's). A reader that passes
        it (:meth:`read_after`, or ``configurable["lgdp_read_after"]``) sees them all.
        It also fixes the floors of this saver's writes so far (see docs/replicas.md)."""
        with self._lock:
            seq = self._seq
        lsn = self._fetch_lsn()
        self._resolved(seq, lsn)
        return make_token(lsn)

    @contextlib.contextmanager
    def read_after(self, token: str | None) -> Iterator[None]:
        """Reads in this block (this thread or task) see at least what ``token`` covers."""
        lsn = parse_token(token) if token is not None else None
        cur = _TOKEN.get()
        reset = _TOKEN.set(lsn if cur is None or lsn is None else max(cur, lsn))
        try:
            yield
        finally:
            _TOKEN.reset(reset)

    # ------------------------------------------------------------------ routing

    def _route(self, need: Need | str, call: Callable[[Any], R],
               after: Callable[[Any, R], None] | None = None) -> tuple[R, int]:
        """``call(saver)`` on a replica that meets ``need``, else on the primary;
        ``after(replica, result)`` may raise Unsafe to reject a replica's answer."""
        if isinstance(need, Need):
            for i in self._order():
                replica = self.replicas[i]
                reset = _NEED.set(need)
                try:
                    got = call(replica)
                    if after is not None:
                        _NEED.set(None)
                        after(replica, got)
                except Exception as e:  # every doubt: the primary answers
                    self._failed(i, e)
                    continue
                finally:
                    _NEED.reset(reset)
                self._counts["replica"] += 1
                return got, i
            reason = "down" if not self._order() else "replica_miss"
        else:
            reason = need
        self._counts[f"primary_{reason}"] += 1
        return call(self.primary), -1

    def _thread_of(self, config: RunnableConfig | None) -> str | None:
        conf = (config or {}).get("configurable") or {}
        t = conf.get("thread_id")
        return None if t is None else str(t)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        if (t := self._thread_of(config)) is not None:
            self._resolve(t)
        need = self._need("tuple", config) if t is not None else "not_routable"
        got, i = self._route(need, lambda s: s.get_tuple(config))
        if got is not None and get_checkpoint_id(config) is None and t is not None:
            c = got.config["configurable"]
            _LAST_TUPLE.set((id(self), (t, c["checkpoint_ns"], c["checkpoint_id"]), i))
        return cast(CheckpointTuple | None, got)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        t = self._thread_of(config)
        last = _LAST_TUPLE.get()
        _LAST_TUPLE.set(None)
        if t is None:
            return self.primary.get_delta_channel_history(config=config, channels=channels)
        self._resolve(t)
        need = self._need("history", config)
        cid = get_checkpoint_id(config)
        key = (t, str((config.get("configurable") or {}).get("checkpoint_ns") or ""), cid)
        if last is not None and last[0] == id(self) and last[1] == key:
            # the saver that served get_tuple: its prefetch (same statement, one snapshot)
            if last[2] < 0:
                self._counts["primary_same_as_tuple"] += 1
                return self.primary.get_delta_channel_history(config=config, channels=channels)
            need = Need(None if isinstance(need, str) else need.floor, t, key[1], cid,
                        True, False)
            for_one = self.replicas[last[2]]
            reset = _NEED.set(need)
            try:
                got = for_one.get_delta_channel_history(config=config, channels=channels)
                self._counts["replica"] += 1
                return got
            except Exception as e:
                self._failed(last[2], e)
            finally:
                _NEED.reset(reset)
        return cast(Mapping[str, DeltaChannelHistory], self._route(
            need, lambda s: s.get_delta_channel_history(config=config, channels=channels)
        )[0])

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        if (t := self._thread_of(config)) is not None:
            self._resolve(t)
        got = self._list_need(config, filter, before)
        call = lambda s: list(s.list(config, filter=filter, before=before, limit=limit))  # noqa: E731
        if isinstance(got, str):
            yield from self._route(got, call)[0]
            return
        need, must_seal = got

        def check(replica: ReplicaSaver, page: list[CheckpointTuple]) -> None:
            if not must_seal or not page:
                return
            assert t is not None
            with replica._connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
                cur.execute(self.queries["replicas.sealed_ids"], self._sealed_params(t, page))
                if len(cur.fetchall()) != len(page):
                    raise Unsafe("unsealed_page")

        yield from self._route(need, call, check)[0]

    # ------------------------------------------------------------------ primary only

    def setup(self) -> None:
        self.primary.setup()

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        try:
            return self.primary.put(config, checkpoint, metadata, new_versions)
        finally:
            self._wrote([str(config["configurable"]["thread_id"])])

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        try:
            self.primary.put_writes(config, writes, task_id, task_path)
        finally:
            self._wrote([str(config["configurable"]["thread_id"])])

    def delete_thread(self, thread_id: str) -> None:
        try:
            self.primary.delete_thread(thread_id)
        finally:
            self._wrote([str(thread_id)])

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        try:
            self.primary.delete_for_runs(run_ids)
        finally:
            self._wrote(None)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        try:
            self.primary.copy_thread(source_thread_id, target_thread_id)
        finally:
            self._wrote([str(target_thread_id)])

    def prune(  # type: ignore[override]  # returns what it deleted instead of None
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
        before: datetime | None = None,
        dry_run: bool = False,
    ) -> PruneStats:
        try:
            return self.primary.prune(thread_ids, strategy=strategy, keep_last=keep_last,
                                      before=before, dry_run=dry_run)
        finally:
            if not dry_run:
                self._wrote(_ids(thread_ids))

    def get_delta_channel_keepset(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> set[str]:
        return self.primary.get_delta_channel_keepset(config=config, channels=channels)


class AsyncRoutingSaver(_RoutingCore):
    """The async twin of :class:`RoutingSaver` (``AsyncConnectionPool`` or DSNs)."""

    primary: AsyncDeltaPostgresSaver
    replicas: list[AsyncReplicaSaver]

    def __init__(
        self,
        primary: AsyncDeltaPostgresSaver,
        replicas: Sequence[AsyncConnectionPool[Any] | str],
        *,
        retry_after: float = DEFAULT_RETRY_AFTER,
        replica_timeout: float = DEFAULT_REPLICA_TIMEOUT,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        pool_size: int = 4,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
    ) -> None:
        if not isinstance(primary, AsyncDeltaPostgresSaver):
            raise TypeError(
                f"primary must be an AsyncDeltaPostgresSaver, not {type(primary).__name__}"
            )
        if isinstance(replicas, str):
            raise TypeError("replicas must be a list of DSNs or pools, not a str")
        super().__init__(serde=primary.serde)
        self.primary = primary
        self._own_pools: list[AsyncConnectionPool[Any]] = []
        savers: list[AsyncReplicaSaver] = []
        for r in replicas:
            if isinstance(r, str):
                pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                    r, min_size=1, max_size=pool_size, timeout=replica_timeout,
                    kwargs=_replica_pool_kwargs(r, prepare_threshold, replica_timeout),
                    check=AsyncConnectionPool.check_connection, open=False,
                )
                self._own_pools.append(pool)
            elif isinstance(r, AsyncConnectionPool):
                pool = r
            else:
                raise TypeError(
                    f"a replica must be a DSN or an AsyncConnectionPool, not {type(r).__name__}"
                )
            savers.append(AsyncReplicaSaver(pool, serde=primary.serde, schema=primary.schema,
                                            cache_bytes=cache_bytes))
        self.replicas = savers
        self._init_routing(retry_after)

    async def open(self) -> None:
        """Open the pools this saver made for replica DSNs (from_conn_string does)."""
        for p in self._own_pools:
            await p.open()

    async def close(self) -> None:
        for p in self._own_pools:
            await p.close()

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(
        cls,
        conn_string: str,
        *,
        replicas: Sequence[str],
        pool_size: int | None = None,
        serde: SerializerProtocol | None = None,
        schema: str | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
        retry_after: float = DEFAULT_RETRY_AFTER,
        replica_timeout: float = DEFAULT_REPLICA_TIMEOUT,
    ) -> AsyncIterator[AsyncRoutingSaver]:
        """See :meth:`RoutingSaver.from_conn_string`."""
        async with AsyncDeltaPostgresSaver.from_conn_string(
            conn_string, pool_size=pool_size, serde=serde, schema=schema,
            cache_bytes=cache_bytes, prepare_threshold=prepare_threshold,
        ) as primary:
            saver = cls(primary, list(replicas), retry_after=retry_after,
                        replica_timeout=replica_timeout, cache_bytes=cache_bytes,
                        pool_size=pool_size or 4, prepare_threshold=prepare_threshold)
            await saver.open()
            try:
                yield saver
            finally:
                await saver.close()

    def with_allowlist(self, extra_allowlist: Any) -> AsyncRoutingSaver:
        clone = super().with_allowlist(extra_allowlist)
        if clone is self:
            return self
        assert isinstance(clone, AsyncRoutingSaver)
        clone.primary = cast(AsyncDeltaPostgresSaver,
                             self.primary.with_allowlist(extra_allowlist))
        clone.replicas = [cast(AsyncReplicaSaver, r.with_allowlist(extra_allowlist))
                          for r in self.replicas]
        return clone

    # ------------------------------------------------------------------ floors, tokens

    async def _fetch_lsn(self) -> int:
        self._counts["lsn_fetches"] += 1
        async with self.primary._connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(self.queries["replicas.primary_lsn"])
            row = await cur.fetchone()
        assert row is not None
        return lsn_to_int(row[0])

    async def _resolve(self, thread_id: str) -> None:
        seq = self._pending(thread_id)
        if seq is not None:
            self._resolved(seq, await self._fetch_lsn())

    async def atoken(self) -> str:
        """See :meth:`RoutingSaver.token`."""
        with self._lock:
            seq = self._seq
        lsn = await self._fetch_lsn()
        self._resolved(seq, lsn)
        return make_token(lsn)

    @contextlib.contextmanager
    def read_after(self, token: str | None) -> Iterator[None]:
        """See :meth:`RoutingSaver.read_after` (a context variable: per task)."""
        lsn = parse_token(token) if token is not None else None
        cur = _TOKEN.get()
        reset = _TOKEN.set(lsn if cur is None or lsn is None else max(cur, lsn))
        try:
            yield
        finally:
            _TOKEN.reset(reset)

    # ------------------------------------------------------------------ routing

    async def _route(self, need: Need | str, call: Callable[[Any], Any],
                     after: Callable[[Any, Any], Any] | None = None) -> tuple[Any, int]:
        if isinstance(need, Need):
            for i in self._order():
                replica = self.replicas[i]
                reset = _NEED.set(need)
                try:
                    got = await call(replica)
                    if after is not None:
                        _NEED.set(None)
                        await after(replica, got)
                except Exception as e:
                    self._failed(i, e)
                    continue
                finally:
                    _NEED.reset(reset)
                self._counts["replica"] += 1
                return got, i
            reason = "down" if not self._order() else "replica_miss"
        else:
            reason = need
        self._counts[f"primary_{reason}"] += 1
        return await call(self.primary), -1

    def _thread_of(self, config: RunnableConfig | None) -> str | None:
        conf = (config or {}).get("configurable") or {}
        t = conf.get("thread_id")
        return None if t is None else str(t)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        if (t := self._thread_of(config)) is not None:
            await self._resolve(t)
        need = self._need("tuple", config) if t is not None else "not_routable"
        got, i = await self._route(need, lambda s: s.aget_tuple(config))
        if got is not None and get_checkpoint_id(config) is None and t is not None:
            c = got.config["configurable"]
            _LAST_TUPLE.set((id(self), (t, c["checkpoint_ns"], c["checkpoint_id"]), i))
        return got  # type: ignore[no-any-return]

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        t = self._thread_of(config)
        last = _LAST_TUPLE.get()
        _LAST_TUPLE.set(None)
        if t is None:
            return await self.primary.aget_delta_channel_history(config=config, channels=channels)
        await self._resolve(t)
        need = self._need("history", config)
        cid = get_checkpoint_id(config)
        key = (t, str((config.get("configurable") or {}).get("checkpoint_ns") or ""), cid)
        if last is not None and last[0] == id(self) and last[1] == key:
            if last[2] < 0:
                self._counts["primary_same_as_tuple"] += 1
                return await self.primary.aget_delta_channel_history(
                    config=config, channels=channels
                )
            need = Need(None if isinstance(need, str) else need.floor, t, key[1], cid,
                        True, False)
            for_one = self.replicas[last[2]]
            reset = _NEED.set(need)
            try:
                got = await for_one.aget_delta_channel_history(config=config, channels=channels)
                self._counts["replica"] += 1
                return got
            except Exception as e:
                self._failed(last[2], e)
            finally:
                _NEED.reset(reset)
        got2, _ = await self._route(
            need, lambda s: s.aget_delta_channel_history(config=config, channels=channels)
        )
        return got2  # type: ignore[no-any-return]

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        if (t := self._thread_of(config)) is not None:
            await self._resolve(t)
        got = self._list_need(config, filter, before)

        async def call(s: Any) -> list[CheckpointTuple]:
            return [x async for x in s.alist(config, filter=filter, before=before, limit=limit)]

        if isinstance(got, str):
            page, _ = await self._route(got, call)
        else:
            need, must_seal = got

            async def check(replica: AsyncReplicaSaver, page: list[CheckpointTuple]) -> None:
                if not must_seal or not page:
                    return
                assert t is not None
                async with replica._connection() as conn, conn.cursor(
                    row_factory=tuple_row
                ) as cur:
                    await cur.execute(
                        self.queries["replicas.sealed_ids"], self._sealed_params(t, page)
                    )
                    if len(await cur.fetchall()) != len(page):
                        raise Unsafe("unsealed_page")

            page, _ = await self._route(need, call, check)
        for tup in page:
            yield tup

    # ------------------------------------------------------------------ primary only

    async def setup(self) -> None:
        await self.primary.setup()

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        try:
            return await self.primary.aput(config, checkpoint, metadata, new_versions)
        finally:
            self._wrote([str(config["configurable"]["thread_id"])])

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        try:
            await self.primary.aput_writes(config, writes, task_id, task_path)
        finally:
            self._wrote([str(config["configurable"]["thread_id"])])

    async def adelete_thread(self, thread_id: str) -> None:
        try:
            await self.primary.adelete_thread(thread_id)
        finally:
            self._wrote([str(thread_id)])

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        try:
            await self.primary.adelete_for_runs(run_ids)
        finally:
            self._wrote(None)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        try:
            await self.primary.acopy_thread(source_thread_id, target_thread_id)
        finally:
            self._wrote([str(target_thread_id)])

    async def aprune(  # type: ignore[override]  # returns what it deleted instead of None
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
        before: datetime | None = None,
        dry_run: bool = False,
    ) -> PruneStats:
        try:
            return await self.primary.aprune(thread_ids, strategy=strategy,
                                             keep_last=keep_last, before=before,
                                             dry_run=dry_run)
        finally:
            if not dry_run:
                self._wrote(_ids(thread_ids))

    async def aget_delta_channel_keepset(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> set[str]:
        return await self.primary.aget_delta_channel_keepset(config=config, channels=channels)

    # sync calls from another thread, as the async savers allow (run on the loop)

    def _from_thread(self, coro: Any) -> Any:
        return self.primary._from_thread(coro)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._from_thread(self.aget_tuple(config))  # type: ignore[no-any-return]

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self._from_thread(  # type: ignore[no-any-return]
            self.aget_delta_channel_history(config=config, channels=channels)
        )

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        async def collect() -> list[CheckpointTuple]:
            return [x async for x in self.alist(config, filter=filter, before=before,
                                                limit=limit)]

        yield from self._from_thread(collect())

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._from_thread(  # type: ignore[no-any-return]
            self.aput(config, checkpoint, metadata, new_versions)
        )

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._from_thread(self.aput_writes(config, writes, task_id, task_path))


_ = asyncio  # the async twin's loop is the primary saver's (see _from_thread)
