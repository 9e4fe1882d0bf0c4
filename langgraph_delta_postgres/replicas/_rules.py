"""The routing saver's rules, shared by the sync and async routing savers
(:class:`_RoutingCore`): its replica savers made and checked against the primary, the
floors of a read (the caller's tokens, the saver's maintenance), which replica to try
and what a failure costs it, and the counters (docs/replicas.md). Tokens are in
:mod:`._tokens`, the guard's decision and the bounds in :mod:`._guard`, the replica
savers and their pools in :mod:`._replica_savers`; the routing of each call, as steps,
is in :mod:`._ops`.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    CheckpointTuple,
)

from .._server import ServerIdentity, log
from .._sql import Queries
from ..errors import ReplicaMismatchError
from ._guard import _NEED as _NEED  # `X as X`: ._ops imports these from here
from ._guard import Need as Need
from ._guard import ReplicaBounds, _failure_reason
from ._guard import Unsafe as Unsafe
from ._replica_savers import _describe, _replica_pool_kwargs
from ._tokens import _TOKEN, READ_AFTER_KEY, parse_token
from ._tokens import lsn_to_int as lsn_to_int
from ._tokens import make_token as make_token

R = TypeVar("R")

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

#: The backend that served this context's last get_tuple of a latest checkpoint:
#: (routing saver id, (thread, ns, checkpoint id), backend index; -1: the primary).
_LAST_TUPLE: ContextVar[tuple[int, tuple[str, str, str], int] | None] = ContextVar(
    "lgdp_last_tuple", default=None
)


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
    #: the check callback of a pool made for a replica DSN (.._connect.check_if_idle)
    _pool_check: ClassVar[Any]

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
                    check=self._pool_check,
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
