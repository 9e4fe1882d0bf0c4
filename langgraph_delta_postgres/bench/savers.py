"""How the benchmark opens its savers: as their users do (``from_conn_string``; the
official saver's pools with its documentation's settings), the words each section's
results use to say so, savers opened for one timed call (:class:`NewSavers`), and the
savers of the history and workload sections (:func:`open_savers`, with a statement
counter on the metered pair)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._connect import DEFAULT_PREPARE_THRESHOLD, connect_kwargs

from .proxy import LatencyProxy
from .timing import summary

# ---------------------------------------------------------------- counting cursor


class StatementCounter:
    """Counts ``execute``/``executemany`` calls on the connections it is attached to."""

    def __init__(self) -> None:
        self.n = 0

    def attach(self, conn: psycopg.Connection[Any]) -> None:
        counter = self
        base = conn.cursor_factory

        class CountingCursor(base):  # type: ignore[valid-type,misc]
            def execute(self, *a: Any, **k: Any) -> Any:
                counter.n += 1
                return super().execute(*a, **k)

            def executemany(self, *a: Any, **k: Any) -> Any:
                counter.n += 1
                return super().executemany(*a, **k)

        conn.cursor_factory = CountingCursor


def connect_ours(dsn: str) -> psycopg.Connection[Any]:
    """A connection as ``DeltaPostgresSaver.from_conn_string`` opens it (default
    ``prepare_threshold``, generic plans). For the scripts outside the bench; the bench's
    sections open their savers with ``from_conn_string`` itself (:data:`OPENED`)."""
    return psycopg.connect(dsn, **connect_kwargs(dsn, DEFAULT_PREPARE_THRESHOLD))


def connect_official(dsn: str) -> psycopg.Connection[Any]:
    """A connection as ``PostgresSaver.from_conn_string`` opens it (for the scripts, as
    :func:`connect_ours`)."""
    return psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row)


# ---------------------------------------------------------------- how savers are opened

#: How the sections open their savers: as the README tells users to, through each
#: saver's own constructor. Each section says which in the "savers" field of its results.
ONE_CONNECTION = "from_conn_string (one connection)"
#: A saver opened for one timed call and closed after it: a new connection, as a new
#: process has (opening it is not timed; its time is reported apart as ``open_ms``).
NEW_CONNECTION = "from_conn_string per timed call (a new connection each, opened untimed)"


def pooled(n: int) -> str:
    """What ``savers`` says of ``from_conn_string(pool_size=n)``."""
    return f"from_conn_string(pool_size={n})"


#: The official saver's ``from_conn_string`` opens one connection; for a pool, its
#: documentation has users make one with these connection settings.
OFFICIAL_POOL_KWARGS = "autocommit=True, prepare_threshold=0, row_factory=dict_row"


def official_pooled(n: int) -> str:
    """What ``savers`` says of the official saver on a pool of ``n`` (it has no
    ``from_conn_string`` with a pool)."""
    return (f"ConnectionPool(min_size={n}, max_size={n}, kwargs: {OFFICIAL_POOL_KWARGS}) "
            "(its from_conn_string opens one connection)")


def official_pool_kwargs() -> dict[str, Any]:
    """The connection settings of the official saver's pools (its documentation's)."""
    return {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}


@contextlib.contextmanager
def open_saver(name: str, dsn: str, pool: int | None) -> Iterator[Any]:
    """A sync saver as its users open it: ours (``"ours"``) by ``from_conn_string``
    (``pool_size=pool`` for a pool); the official one by its ``from_conn_string`` (one
    connection) or, for a pool, which its ``from_conn_string`` does not open, on a
    ``ConnectionPool`` of ``pool`` with :func:`official_pool_kwargs`, filled first."""
    if name == "ours":
        with DeltaPostgresSaver.from_conn_string(dsn, pool_size=pool) as s:
            yield s
        return
    from langgraph.checkpoint.postgres import PostgresSaver

    if pool is None:
        with PostgresSaver.from_conn_string(dsn) as off:
            yield off
        return
    from psycopg_pool import ConnectionPool

    with ConnectionPool(dsn, min_size=pool, max_size=pool, kwargs=official_pool_kwargs(),
                        open=True) as p:
        p.wait(timeout=60)
        yield PostgresSaver(p)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def aopen_saver(name: str, dsn: str, pool: int | None) -> AsyncIterator[Any]:
    """:func:`open_saver` for the async savers."""
    if name == "ours":
        from langgraph_delta_postgres.aio import AsyncDeltaPostgresSaver

        async with AsyncDeltaPostgresSaver.from_conn_string(dsn, pool_size=pool) as s:
            yield s
        return
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    if pool is None:
        async with AsyncPostgresSaver.from_conn_string(dsn) as off:
            yield off
        return
    from psycopg_pool import AsyncConnectionPool

    async with AsyncConnectionPool(dsn, min_size=pool, max_size=pool, open=False,
                                   kwargs=official_pool_kwargs()) as p:
        await p.wait(timeout=60)
        yield AsyncPostgresSaver(p)  # type: ignore[arg-type]


class NewSavers:
    """Savers opened by ``from_conn_string`` for one timed call each (a new connection, as
    a process that has not served the thread has), closed after it by :meth:`close`. The
    time each took to open is kept per name (``open_s``): it is not in the timed call."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self.open_s: dict[str, list[float]] = {}

    def open(self, name: str, cm: contextlib.AbstractContextManager[Any]) -> Any:
        t0 = time.perf_counter()
        saver = self._stack.enter_context(cm)
        self.open_s.setdefault(name, []).append(time.perf_counter() - t0)
        return saver

    def close(self, _arg: Any = None) -> None:
        stack, self._stack = self._stack, contextlib.ExitStack()
        stack.close()

    def open_ms(self) -> dict[str, dict[str, float]]:
        return {k: summary(v) for k, v in self.open_s.items()}



@dataclass
class Savers:
    """The savers of a run: per RTT label, ours and the official one, each opened by its
    ``from_conn_string`` (one connection each; plus InMemorySaver at "0"); ``count`` holds
    a pair opened the same way behind the 0 ms metering proxy, whose statements
    ``counters`` count (a counting cursor class set on the saver's connection)."""

    by_rtt: dict[str, dict[str, Any]]
    count: dict[str, Any]
    counters: dict[str, StatementCounter]
    meter: LatencyProxy
    stack: contextlib.ExitStack

    #: how the savers were opened (the "savers" field of the sections that use them)
    opened = {"ours": f"DeltaPostgresSaver.{ONE_CONNECTION}, cache_bytes=0",
              "official": f"PostgresSaver.{ONE_CONNECTION}"}

    def close(self) -> None:
        self.stack.close()


def open_savers(dsn: str, proxies: dict[str, LatencyProxy | None], meter: LatencyProxy) -> Savers:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.postgres import PostgresSaver

    stack = contextlib.ExitStack()

    def pair(d: str) -> dict[str, Any]:
        # cache_bytes=0: these sections time one call repeated; with the cache every
        # repeat after the first would be answered from memory (loads.py times the cache)
        return {
            "ours": stack.enter_context(DeltaPostgresSaver.from_conn_string(d, cache_bytes=0)),
            "official": stack.enter_context(PostgresSaver.from_conn_string(d)),
        }

    try:
        by_rtt = {label: pair(proxy.dsn(dsn) if proxy else dsn)
                  for label, proxy in proxies.items()}
        by_rtt["0"]["inmemory"] = InMemorySaver()
        count = pair(meter.dsn(dsn))
    except BaseException:
        stack.close()
        raise
    counters = {"ours": StatementCounter(), "official": StatementCounter()}
    counters["ours"].attach(count["ours"].conn)
    counters["official"].attach(count["official"].conn)
    return Savers(by_rtt, count, counters, meter, stack)
