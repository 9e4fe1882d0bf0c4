"""The agent section's floor: what any saver that writes each call to Postgres adds to a
turn at the least.

:class:`RoundTripSaver` is ``InMemorySaver`` that also runs ``SELECT 1`` on a connection
of its own for every ``put`` and ``put_writes`` before storing in memory: one round trip
per call, with no server work, no parameters and no serialization sent. LangGraph calls
those from its background threads (``durability="async"``), where each round trip gives
up the GIL and waits to get it back from the thread running the graph. A Postgres saver
cannot do less per call, so ``ours/floor`` is what is left to win in ours, and
``floor/InMemorySaver`` what no such saver can win back."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver


class RoundTripSaver(InMemorySaver):
    """``InMemorySaver`` plus one ``SELECT 1`` round trip per ``put`` / ``put_writes``
    (sync only: the section's async runs compare the Postgres savers)."""

    def __init__(self, dsn: str) -> None:
        super().__init__()
        self._conn = psycopg.connect(dsn, autocommit=True)
        self._lock = threading.Lock()  # one connection, used from LangGraph's threads

    def _round_trip(self) -> None:
        with self._lock:
            self._conn.execute("SELECT 1", prepare=True)

    def put(self, *args: Any, **kwargs: Any) -> Any:
        self._round_trip()
        return super().put(*args, **kwargs)

    # the parameters spelled out: LangGraph passes task_path only to a put_writes whose
    # signature names it (without it the writes of parallel tasks replay by task id)
    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
        task_path: str = "",
    ) -> None:
        self._round_trip()
        super().put_writes(config, writes, task_id, task_path)

    def close(self) -> None:
        self._conn.close()
