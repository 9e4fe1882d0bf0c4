"""``SaverCore``: the shared context of the operations, which the two savers extend.

It holds what every operation module reads (the statements of ``sql/`` for the schema,
the serializer, the history cache, the walk counters, the depth guard) and composes the
statements made of several blocks. The operations themselves live in the modules beside
the SQL they run (see :mod:`langgraph_delta_postgres._ops`); the savers call them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from langgraph.checkpoint.base import BaseCheckpointSaver
from psycopg import sql

from .._cache import HistoryCache, Plan
from .._checks import INT8_MAX, check_int
from .._order import Turns
from .._server import ServerTracker
from .._sql import Queries
from .._stats import CacheStats, OrderStats, SaverStats, WalkCounters
from ..errors import SetupRequiredError, setup_required
from .base import _PREFETCH
from .write import next_version


class SaverCore(BaseCheckpointSaver[str]):
    """State shared by the sync and async savers and read by every operation."""

    queries: Queries
    #: Depth guard of the history walk: more ancestors than this is treated as corrupt.
    max_history_depth: int = 1_000_000
    #: the order of the saver's own writes (see _order; made by each saver's __init__)
    _turns: Turns

    def _init_core(self, schema: str | None, cache_bytes: int) -> None:
        self.queries = Queries(schema)  # checks the name (see _sql.check_schema)
        #: statements composed of several blocks, built on first use (history_query, ...)
        self._composed: dict[str, sql.Composed] = {}
        self.schema = schema
        check_int("cache_bytes", cache_bytes, low=0, high=INT8_MAX)
        cache = HistoryCache(cache_bytes)
        #: The decoded-value cache of get_delta_channel_history (None: cache_bytes=0).
        self.history_cache: HistoryCache | None = cache if cache_bytes else None
        self._walk = WalkCounters()
        #: the server of this saver's connections (each checked at its first use)
        self._server = ServerTracker()

    def stats(self) -> SaverStats:
        """A snapshot of this saver's counters: its history walks, its cache (None
        when ``cache_bytes=0``) and the order of its writes. No statement runs; see
        docs/observability.md."""
        cache = self.history_cache
        return SaverStats(
            self._walk.snapshot(),
            CacheStats(**cache.counters()) if cache is not None else None,
            OrderStats(**self._turns.counters()),
        )

    def _query(self, name: str, *parts: str | sql.SQL) -> sql.Composed:
        """The statement made of these blocks of sql/ (a name) and literal fragments,
        joined with spaces; composed on the first call, kept under ``name`` after."""
        got = self._composed.get(name)
        if got is None:
            got = self._composed[name] = sql.SQL(" ").join(
                [self.queries[p] if isinstance(p, str) else p for p in parts]
            )
        return got

    def history_query(self) -> sql.Composed:
        """The get_delta_channel_history statement (sql/delta_history.sql)."""
        return self._query(
            "history", "delta_history.walk", "delta_history.select_rows",
            "delta_history.rows", "delta_history.order_rows",
        )

    def tuple_history_query(self) -> sql.Composed:
        """get_tuple of the latest checkpoint with the history LangGraph asks for next,
        in one statement."""
        return self._query(
            "tuple_history", "delta_history.walk", "delta_history.tuple_history",
            "delta_history.rows", "delta_history.tuple_rows", "checkpoints.select_tuples",
            "checkpoints.from_checkpoints", sql.SQL("WHERE"), "checkpoints.where_target",
            "checkpoints.tuples_of", "delta_history.tuple_end",
        )

    def tuple_by_id_query(self) -> sql.Composed:
        """get_tuple of a checkpoint by id: the tuple alone."""
        return self._query(
            "tuple_by_id", "checkpoints.select_tuples", "checkpoints.from_checkpoints",
            sql.SQL("WHERE"),
            "checkpoints.where_thread", sql.SQL("AND"), "checkpoints.where_ns",
            sql.SQL("AND"), "checkpoints.where_id", sql.SQL("AND"),
            "checkpoints.where_visible", "checkpoints.tuples_of",
        )

    def _history_params(
        self, thread_id: str, ns: str, checkpoint_id: str | None, channels: list[str] | None,
        plan: Plan,
    ) -> dict[str, Any]:
        """The parameters of the history walk (both statements that start with it)."""
        return {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
            "channels": channels,
            "max_depth": self.max_history_depth,
            **plan.params(),
        }

    def _list_gate(
        self, params: dict[str, Any], filter: dict[str, Any] | None, limit: int | None
    ) -> sql.Composable | None:
        """A predicate ``list`` adds to its statement (None: none). A replica saver of
        the routing saver gates a history page with it (see .replicas._rules)."""
        return None

    def _server_seen(self, conn: Any, row: Sequence[Any]) -> None:
        """A new connection's ``server.identity`` row: when it reaches another server
        than the one the cache was filled from (a failover), drop the cache."""
        if self._server.observe(conn, row):
            _PREFETCH.set(None)
            if self.history_cache is not None:
                self.history_cache.clear()

    def _forget_threads(self, thread_ids: Sequence[str]) -> None:
        """Drop what the cache holds of these threads (after this saver changed them)."""
        _PREFETCH.set(None)
        if self.history_cache is not None:
            self.history_cache.forget(thread_ids)

    def get_next_version(self, current: str | None, channel: None) -> str:
        return next_version(current)

    def setup_required(self, error: psycopg.Error) -> SetupRequiredError:
        """What a driver raises instead of a statement's UndefinedTable/UndefinedColumn:
        the tables are missing, or older than this package (found without a statement of
        its own on the hot path: the driver translates the error when it happens)."""
        return setup_required(error, self.schema)
