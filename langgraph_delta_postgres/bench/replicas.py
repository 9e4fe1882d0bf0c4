"""Benchmark of the routing saver (``langgraph-delta-pg bench --only replicas``): what a
streaming hot standby takes off the primary.

Setup: a scratch database on the server (``--dsn``, or the embedded one), a hot standby
of that server started from the same binaries (:mod:`.._local.standby`), and ``THREADS``
threads of the ``coding_a`` workload, ``TURNS`` user turns each, written through the
real graph (two DeltaChannel fields).

A round runs, for ``SECONDS`` seconds, ``WRITERS`` writer threads (each invoking turns on
a thread of its own, as fast as it can) and ``READERS`` reader threads (each paging
history as a UI does, ``PAGES_PER_S`` pages a second:
``get_state_history(limit=10, before=<a random checkpoint of a random thread>)``, which
is one ``list`` and one history call per state). Two modes, alternating order round by
round: ``primary`` (every saver a DeltaPostgresSaver on the primary) and ``replica``
(every saver a RoutingSaver with the standby; readers are other processes: no token).

Measured per round: the CPU time (``/proc/<pid>/stat``, when the server runs on this
machine) of the readers' own backends on the primary, per history page served: what
serving the pages cost the primary; the primary's statement time over all sessions
(writers included), from ``pg_stat_database.active_time`` of the scratch database (time
its backends spent running statements; flushed when the round's connections close, so
read after they have), per page; the standby's the same way; the writers' turn latencies
(p50, p99).
Ratios are taken round pair by round pair, and their median reported.
"""

from __future__ import annotations

import contextlib
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._local.standby import Standby, standby_of
from langgraph_delta_postgres._local.workloads import build_graph, run_turns, user_input
from langgraph_delta_postgres.replicas import RoutingSaver

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
        for w in workers:
            w.start()
        time.sleep(seconds)
        stop.set()
        for w in workers:
            w.join()
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


def run_replicas(dsn: str, server_dsn: str, scale: str, log: Callable[[str], None],
                 standby: Standby) -> dict[str, Any]:
    n_threads, n_turns, readers, writers, seconds, rounds = SIZES[scale]
    dbname = str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])
    threads = [f"h{i}" for i in range(n_threads)] + [f"w{j}" for j in range(writers)]
    log("replicas: savers " + "; ".join(f"{k} {v}" for k, v in OPENED.items()))
    log(f"replicas: writing {len(threads)} threads of {n_turns} turns")
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        graph = build_graph(WORKLOAD, saver)
        for t in threads:
            run_turns(graph, WORKLOAD, t, n_turns)
        anchors = {
            t: [x.config for x in saver.list({"configurable": {"thread_id": t,
                                                              "checkpoint_ns": ""}})][PAGE:]
            for t in threads
        }
    standby.catch_up()
    turn0 = dict.fromkeys(threads, n_turns)
    replica = standby.dsn_for(dbname)
    standby_admin = standby.dsn
    rng = random.Random(26)
    out: list[dict[str, Any]] = []
    for r in range(rounds):
        order = ("primary", "replica") if r % 2 == 0 else ("replica", "primary")
        pair = {}
        for mode in order:
            res = _round(mode, dsn, replica, dbname, standby_admin, threads, anchors,
                         readers, writers, seconds, turn0, rng)
            log(f"replicas: round {r + 1}/{rounds} {mode}: {res['pages']} pages, "
                f"{res['primary_ms_per_page']:.2f} ms primary statement time per page "
                f"(all sessions), readers' primary backends "
                f"{_num(res['reader_primary_cpu_ms_per_page']):.3f} ms CPU per page, "
                f"writers p50 {res['writer_p50_ms']:.1f} ms p99 {res['writer_p99_ms']:.1f} ms")
            pair[mode] = res
        out.append(pair)

    def ratio(key: str) -> float:
        pairs = [p["primary"][key] / p["replica"][key] for p in out
                 if p["primary"][key] is not None and p["replica"][key]]
        return statistics.median(pairs) if pairs else float("inf")

    def med(mode: str, key: str) -> float | None:
        vals = [p[mode][key] for p in out if p[mode][key] is not None]
        return statistics.median(vals) if vals else None

    latency = routed_latency(dsn, replica, threads, anchors, standby, LATENCY_READS[scale], log)
    loss = turn_loss(dsn, replica, standby, LOSS_TURNS[scale], log)
    return {
        "opened": dict(OPENED),
        "latency": latency,
        "turn_loss": loss,
        "sizes": {"threads": len(threads), "turns": n_turns, "readers": readers,
                  "writers": writers, "seconds_per_round": seconds, "rounds": rounds},
        "rounds": out,
        "primary_ms_per_page": {m: med(m, "primary_ms_per_page") for m in ("primary", "replica")},
        "reader_primary_cpu_ms_per_page": {
            m: med(m, "reader_primary_cpu_ms_per_page") for m in ("primary", "replica")
        },
        "ratio_reader_primary_cpu_per_page": ratio("reader_primary_cpu_ms_per_page"),
        "reader_primary_cpu_ms_per_read": {
            m: med(m, "reader_primary_cpu_ms_per_read") for m in ("primary", "replica")
        },
        "ratio_reader_primary_cpu_per_read": ratio("reader_primary_cpu_ms_per_read"),
        "writer_p50_ms": {m: med(m, "writer_p50_ms") for m in ("primary", "replica")},
        "writer_p99_ms": {m: med(m, "writer_p99_ms") for m in ("primary", "replica")},
        "pages": {m: med(m, "pages") for m in ("primary", "replica")},
        "ratio_primary_ms_per_page": ratio("primary_ms_per_page"),
        "ratio_writer_p99": ratio("writer_p99_ms"),
        "ratio_writer_p50": ratio("writer_p50_ms"),
    }


#: scale -> reads per kind of the latency section (routed and direct, interleaved)
LATENCY_READS = {"full": 400, "quick": 150, "tiny": 20}
#: scale -> (workers, threads, turns per thread) of the turn-loss section
LOSS_TURNS = {"full": (3, 4, 30), "quick": (3, 3, 12), "tiny": (3, 2, 4)}


def routed_latency(dsn: str, replica: str, threads: list[str], anchors: dict[str, list[Any]],
                   standby: Standby, n: int, log: Callable[[str], None]) -> dict[str, Any]:
    """The time of a routed read next to the same read on the standby directly (a
    DeltaPostgresSaver on it), no writes running, the standby caught up: a history page
    (``list(before=, limit=10)``) and a latest ``get_state``. Interleaved pair by pair,
    each saver with its cache; the median of the pairs' ratios (routed / direct)."""
    standby.catch_up()
    rng = random.Random(7)
    out: dict[str, Any] = {}
    with _routing(dsn, replica) as routing, \
            DeltaPostgresSaver.from_conn_string(replica) as direct:
        g_routed = build_graph(WORKLOAD, routing)
        g_direct = build_graph(WORKLOAD, direct)
        kinds: dict[str, Callable[[Any, Any, str, Any], Any]] = {
            "page": lambda s, g, t, b: list(s.list(
                {"configurable": {"thread_id": t, "checkpoint_ns": ""}}, before=b,
                limit=PAGE)),
            "latest": lambda s, g, t, b: g.get_state({"configurable": {"thread_id": t}}),
        }
        for kind, read in kinds.items():
            ratios, routed_ms, direct_ms = [], [], []
            for k in range(n):
                t = rng.choice(threads)
                b = rng.choice(anchors[t])
                pair = [(routing, g_routed), (direct, g_direct)]
                if k % 2:
                    pair.reverse()
                took = {}
                for s, g in pair:
                    started = time.perf_counter()
                    read(s, g, t, b)
                    took[id(s)] = time.perf_counter() - started
                routed_ms.append(took[id(routing)] * 1000)
                direct_ms.append(took[id(direct)] * 1000)
                ratios.append(took[id(routing)] / took[id(direct)])
            out[kind] = {
                "routed_ms_p50": statistics.median(routed_ms),
                "direct_ms_p50": statistics.median(direct_ms),
                "ratio": statistics.median(ratios),
            }
            log(f"replicas: latency of a {kind} read, routed {out[kind]['routed_ms_p50']:.2f}"
                f" ms, on the standby directly {out[kind]['direct_ms_p50']:.2f} ms "
                f"(median of pair ratios {out[kind]['ratio']:.2f}x)")
        stats = routing.routing_stats()
        out["routing"] = {"replica_reads": stats.replica_reads,
                          "primary_reads": stats.primary_reads,
                          "replica_misses": stats.replica_misses}
    return out


def turn_loss(dsn: str, replica: str, standby: Standby, size: tuple[int, int, int],
              log: Callable[[str], None]) -> dict[str, Any]:
    """Several workers, each with its own routing saver, run the turns of shared threads
    in alternation (turn k of a thread on worker k mod workers, as Agent Server's workers
    do), threads in parallel, with the standby's replay delayed by 20 ms
    (``recovery_min_apply_delay``, about a standby on another host). Counted: turns whose
    input is missing from the thread's final state on the primary."""
    workers, n_threads, turns = size
    threads = [f"loss{i}" for i in range(n_threads)]
    with standby.admin() as c:
        c.execute("ALTER SYSTEM SET recovery_min_apply_delay = '20ms'")
        c.execute("SELECT pg_reload_conf()")
    try:
        with contextlib.ExitStack() as stack:
            graphs = []
            for _ in range(workers):
                graphs.append(build_graph(WORKLOAD, stack.enter_context(_routing(dsn, replica))))
            started = time.perf_counter()
            for k in range(turns):
                errors: list[BaseException] = []

                def turn(j: int, t: str, k: int = k,
                         errors: list[BaseException] = errors) -> None:
                    try:
                        graphs[(k + j) % workers].invoke(
                            user_input(WORKLOAD, k), {"configurable": {"thread_id": t}})
                    except BaseException as e:  # noqa: BLE001  # raised below
                        errors.append(e)

                ts = [threading.Thread(target=turn, args=(j, t)) for j, t in enumerate(threads)]
                for th in ts:
                    th.start()
                for th in ts:
                    th.join()
                if errors:
                    raise errors[0]
            seconds = time.perf_counter() - started
    finally:
        with standby.admin() as c:
            c.execute("ALTER SYSTEM RESET recovery_min_apply_delay")
            c.execute("SELECT pg_reload_conf()")
    lost = 0
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as ref:
        g = build_graph(WORKLOAD, ref)
        want = [_human(user_input(WORKLOAD, k)) for k in range(turns)]
        for t in threads:
            msgs = g.get_state({"configurable": {"thread_id": t}}).values.get("messages", [])
            got = [m.content for m in msgs if getattr(m, "type", "") == "human"]
            lost += sum(1 for w in want if w not in got) if got != want else 0
    total = turns * n_threads
    log(f"replicas: {workers} workers alternating turns on {n_threads} threads, replay "
        f"delayed 20 ms: {lost} of {total} turns lost ({seconds:.1f} s)")
    return {"workers": workers, "threads": n_threads, "turns": total, "lost": lost,
            "seconds": round(seconds, 1)}


def _human(inp: Any) -> Any:
    """The content of the human message of a turn's input."""
    msgs = inp["messages"] if isinstance(inp, dict) else inp
    return msgs[-1].content if hasattr(msgs[-1], "content") else msgs[-1][1]


def run_alone(
    args: Any, scale: str, server: Callable[[str | None], Any], command: str
) -> dict[str, Any]:
    """``langgraph-delta-pg bench --only replicas``: a scratch database, a standby of the
    server, the rounds; prints the summary."""
    from .databases import section_database

    with section_database(args, scale, server, command) as (res, dsn, server_dsn):
        with standby_of(server_dsn) as standby:
            res["replicas"] = run_replicas(dsn, server_dsn, scale,
                                           lambda m: print(m, flush=True), standby)
    r = res["replicas"]
    per_read = r["reader_primary_cpu_ms_per_read"]
    if per_read["primary"] is not None:
        print(f"replicas: readers' primary backends, CPU per read (pages and latest states): "
              f"{per_read['primary']:.3f} ms without the replica, "
              f"{per_read['replica']:.3f} ms with it (median of pair ratios "
              f"{r['ratio_reader_primary_cpu_per_read']:.1f}x; inf: none at all)")
    for kind in ("page", "latest"):
        lat = r["latency"][kind]
        print(f"replicas: a routed {kind} read takes {lat['ratio']:.2f}x the same read on the "
              f"standby directly ({lat['routed_ms_p50']:.2f} / {lat['direct_ms_p50']:.2f} ms)")
    loss = r["turn_loss"]
    print(f"replicas: {loss['workers']} workers alternating on shared threads: "
          f"{loss['lost']} of {loss['turns']} turns lost")
    cpu = r["reader_primary_cpu_ms_per_page"]
    if cpu["primary"] is not None:
        print(f"replicas: readers' primary backends, CPU per history page: "
              f"{cpu['primary']:.3f} ms without the replica, {cpu['replica']:.3f} ms with it "
              f"(median of pair ratios {r['ratio_reader_primary_cpu_per_page']:.1f}x; "
              "inf: none at all)")
    print(
        f"replicas ({command}): primary statement time (all sessions, "
        f"pg_stat_database.active_time) per history page "
        f"{r['primary_ms_per_page']['primary']:.2f} ms without the replica, "
        f"{r['primary_ms_per_page']['replica']:.2f} ms with it "
        f"(median of pair ratios {r['ratio_primary_ms_per_page']:.1f}x); writers p50 "
        f"{r['writer_p50_ms']['primary']:.1f} / {r['writer_p50_ms']['replica']:.1f} ms, p99 "
        f"{r['writer_p99_ms']['primary']:.1f} / {r['writer_p99_ms']['replica']:.1f} ms "
        f"(without / with; p99 ratio without/with {r['ratio_writer_p99']:.2f})",
        flush=True,
    )
    return res
