"""A round of the replicas section: readers paging history and writers running turns for a
few seconds, on savers of one mode (``primary`` or ``replica``), with what the round cost
the primary and the standby; and how the section opens its savers."""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._local.workloads import build_graph, user_input
from langgraph_delta_postgres.replicas import RoutingSaver

from ..timing import run_threads

WORKLOAD = "coding_a"
#: scale -> (threads, turns per thread, readers, writers, seconds per round, rounds)
SIZES = {
    "full": (12, 40, 4, 2, 15.0, 6),
    "quick": (8, 24, 4, 2, 6.0, 3),
    "tiny": (4, 8, 2, 1, 2.0, 1),
}
#: history pages a reader asks for per second: the same reader load in both modes (a
#: reader that falls behind skips, it does not burst), below what this 2-core machine
#: served with the primary alone (about 4 a second per reader, 2 writers running), so
#: that the writers' latencies are compared under the same reader work
PAGES_PER_S = 2.0
PAGE = 10


def _num(x: float | None) -> float:
    return float("nan") if x is None else x


def _cpu_ms(pids: list[int]) -> float | None:
    """CPU time (user + system) of these server backends so far; None when /proc does
    not show them (a server on another machine)."""
    import os

    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    try:
        for pid in pids:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None
    return total * 1000 / tick


def _primary_pids(savers: list[Any]) -> list[int]:
    """The primary backends of these savers (single connections, as _savers makes)."""
    out = []
    for s in savers:
        base = s.primary if isinstance(s, RoutingSaver) else s
        assert isinstance(base.conn, psycopg.Connection)
        out.append(base.conn.info.backend_pid)
    return out


def _active_ms(dsn: str, dbname: str) -> float:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pg_stat_clear_snapshot()")
        row = c.execute(
            "SELECT active_time FROM pg_stat_database WHERE datname = %s", (dbname,)
        ).fetchone()
    return float(row[0]) if row and row[0] is not None else 0.0


def _quiet(dsn: str, dbname: str, timeout: float = 30.0) -> None:
    """Wait until no other backend is connected to the database (their statistics are
    flushed when they exit)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as c:
        while time.monotonic() < deadline:
            n = c.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                "AND pid <> pg_backend_pid()", (dbname,)
            ).fetchone()
            if n is not None and n[0] == 0:
                break
            time.sleep(0.05)
    time.sleep(0.2)


@contextlib.contextmanager
def _savers(mode: str, dsn: str, replica: str, n: int) -> Iterator[list[Any]]:
    """``n`` savers of one mode (one per worker thread, each with its own connection)."""
    with contextlib.ExitStack() as stack:
        out: list[Any] = []
        for _ in range(n):
            if mode == "primary":
                out.append(stack.enter_context(DeltaPostgresSaver.from_conn_string(dsn)))
            else:
                out.append(stack.enter_context(_routing(dsn, replica)))
        yield out


def _routing(dsn: str, replica: str) -> contextlib.AbstractContextManager[RoutingSaver]:
    """A routing saver as docs/replicas.md opens one, without ``pool_size``: the primary
    on one connection (whose backend the readers' CPU is read from), the standby on a pool
    of up to 4 that opens its connections as they are asked for."""
    return RoutingSaver.from_conn_string(dsn, replicas=[replica])


#: how the section opens its savers (the "opened" field of its results)
OPENED = {
    "primary": "DeltaPostgresSaver.from_conn_string (one connection per worker)",
    "replica": "RoutingSaver.from_conn_string(dsn, replicas=[standby]) per worker (the "
               "primary on one connection, the standby on a pool of up to 4)",
    "latency_direct": "DeltaPostgresSaver.from_conn_string(standby) (one connection)",
}


def _round(mode: str, dsn: str, replica: str, dbname: str, standby_admin: str,
           threads: list[str], anchors: dict[str, list[Any]], readers: int, writers: int,
           seconds: float, turn0: dict[str, int], rng: random.Random) -> dict[str, Any]:
    _quiet(dsn, dbname)
    p0 = _active_ms(dsn, dbname)
    s0 = _active_ms(standby_admin, dbname)
    stop = threading.Event()
    pages = [0] * readers
    latest = [0] * readers
    turns: list[list[float]] = [[] for _ in range(writers)]
    errors: list[BaseException] = []
    seeds = [rng.random() for _ in range(readers)]
    with _savers(mode, dsn, replica, readers + writers) as savers:

        def read(i: int) -> None:
            r = random.Random(seeds[i])
            graph = build_graph(WORKLOAD, savers[i])
            due = time.monotonic() + r.random() / PAGES_PER_S  # staggered starts
            try:
                while not stop.is_set():
                    now = time.monotonic()
                    if now < due:
                        stop.wait(due - now)
                        continue
                    due = max(due + 1 / PAGES_PER_S, now)
                    t = r.choice(threads)
                    conf = {"configurable": {"thread_id": t, "checkpoint_ns": ""}}
                    if i % 2:  # a UI's latest state (the primary is asked for the floor)
                        latest[i] += 1 if graph.get_state(conf).values else 0
                        continue
                    before = r.choice(anchors[t])
                    n = sum(1 for _ in graph.get_state_history(conf, before=before,
                                                               limit=PAGE))
                    pages[i] += 1 if n else 0
            except BaseException as e:  # noqa: BLE001  # reported after the round
                errors.append(e)

        def write(j: int) -> None:
            t = f"w{j}"
            graph = build_graph(WORKLOAD, savers[readers + j])
            try:
                while not stop.is_set():
                    started = time.perf_counter()
                    graph.invoke(user_input(WORKLOAD, turn0[t]),
                                 {"configurable": {"thread_id": t}})
                    turns[j].append(time.perf_counter() - started)
                    turn0[t] += 1
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        reader_pids = _primary_pids(savers[:readers])
        cpu0 = _cpu_ms(reader_pids)
        workers = [threading.Thread(target=read, args=(i,)) for i in range(readers)]
        workers += [threading.Thread(target=write, args=(j,)) for j in range(writers)]
        run_threads(workers, seconds, stop)
        cpu1 = _cpu_ms(reader_pids)
        routed = [s.routing_stats() for s in savers if isinstance(s, RoutingSaver)]
    if errors:
        raise errors[0]
    _quiet(dsn, dbname)
    primary_ms = _active_ms(dsn, dbname) - p0
    standby_ms = _active_ms(standby_admin, dbname) - s0
    lat = sorted(x for w in turns for x in w)
    served = sum(pages)
    reads = served + sum(latest)

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else float("nan")

    res: dict[str, Any] = {
        "mode": mode,
        "pages": served,
        "writer_turns": len(lat),
        "primary_statement_ms": round(primary_ms, 1),
        "standby_statement_ms": round(standby_ms, 1),
        "primary_ms_per_page": primary_ms / served if served else float("nan"),
        # the readers' own primary backends: what serving the pages cost the primary
        "reader_primary_cpu_ms": (cpu1 - cpu0) if cpu0 is not None and cpu1 is not None
        else None,
        "reader_primary_cpu_ms_per_page": ((cpu1 - cpu0) / served)
        if cpu0 is not None and cpu1 is not None and served else None,
        # per read of any kind: pages and latest states (a latest read routed to the
        # replica still costs the primary its floor statement)
        "latest_reads": sum(latest),
        "reader_primary_cpu_ms_per_read": ((cpu1 - cpu0) / reads)
        if cpu0 is not None and cpu1 is not None and reads else None,
        "writer_p50_ms": pct(0.50),
        "writer_p99_ms": pct(0.99),
    }
    if routed:
        res["replica_reads"] = sum(r.replica_reads for r in routed)
        misses: dict[str, int] = {}
        for r in routed:
            for k, v in r.primary_reads.items():
                misses[k] = misses.get(k, 0) + v
        res["primary_reads"] = misses
    return res
