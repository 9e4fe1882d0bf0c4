"""The load section: each saver's database and template threads, the bytes per turn, the
levels and repetitions (the order alternating), the summary and the headline, and
``bench --only load``."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from langgraph_delta_postgres._local.workloads import build_graph, run_turns, user_input

from ..machine import loadavg
from ..savers import OFFICIAL_POOL_KWARGS, ONE_CONNECTION, aopen_saver, open_saver
from .scale import (
    HISTORY_EVERY,
    MODES,
    PAGE,
    POOL_CAP,
    SAVERS,
    SCALES,
    SESSION_WARM_TURNS,
    WARM_TURNS,
    LoadScale,
    _cfg,
    _pages_at,
)
from .server import Server, clone_threads
from .sessions import RunSpec, run_asyncio, run_procs, run_threads

# ---------------------------------------------------------------- setup and bytes


@dataclass
class SaverDb:
    saver: str
    dsn: str
    dbid: int
    template: str


def _setup(saver: str, dsn: str, server: Server, ls: LoadScale) -> SaverDb:
    """The saver's tables in its own database and its template threads (``prior`` turns,
    written by that saver through the workload's graph, and one per ``stagger`` offset: a
    copy of the previous one with the turns in between added)."""
    with open_saver(saver, dsn, None) as s:
        s.setup()
        g = build_graph(ls.workload, s)
        run_turns(g, ls.workload, "template", ls.prior)
        done = 0
        for off in sorted(set(ls.stagger) - {0}):
            with psycopg.connect(dsn, autocommit=True) as c:
                clone_threads(c, _template(done), [_template(off)])
            run_turns(g, ls.workload, _template(off), off - done, start=ls.prior + done)
            done = off
    with psycopg.connect(dsn, autocommit=True) as conn:
        from ..databases import freeze_autovacuum

        freeze_autovacuum(conn)
    return SaverDb(saver, dsn, server.dbid(dsn), "template")


def _template(offset: int) -> str:
    """The template thread holding ``prior + offset`` turns."""
    return "template" if offset == 0 else f"template+{offset}"


def _bytes_per_turn(db: SaverDb, ls: LoadScale, mode: str) -> dict[str, Any]:
    """One session behind a counting loopback proxy (untimed): bytes the server sent and
    received, and wire round trips, per turn (history pages included at their rate),
    counted after WARM_TURNS turns on the same connection (statements prepared)."""
    from ..proxy import LatencyProxy, upstream_of

    tid = f"meter-{mode}"
    with psycopg.connect(db.dsn, autocommit=True) as c:
        clone_threads(c, db.template, [tid])
    turns = ls.meter_turns
    with LatencyProxy(upstream_of(db.dsn), 0.0) as proxy:
        pdsn = proxy.dsn(db.dsn)
        pages = 0
        if mode == "threads":
            with open_saver(db.saver, pdsn, 1) as saver:
                g = build_graph(ls.workload, saver)
                for k in range(WARM_TURNS + turns):
                    if k == WARM_TURNS:  # counted once the statements are prepared
                        before = proxy.counts()
                    g.invoke(user_input(ls.workload, ls.prior + k), _cfg(tid))
                    g.get_state(_cfg(tid))
                    if _pages_at(0, k) or k < WARM_TURNS:
                        pages += k >= WARM_TURNS
                        list(g.get_state_history(_cfg(tid), limit=PAGE))
        else:
            box: dict[str, Any] = {}

            async def main() -> int:
                n = 0
                async with aopen_saver(db.saver, pdsn, 1) as saver:
                    g = build_graph(ls.workload, saver)
                    for k in range(WARM_TURNS + turns):
                        if k == WARM_TURNS:
                            box["before"] = proxy.counts()
                        await g.ainvoke(user_input(ls.workload, ls.prior + k), _cfg(tid))
                        await g.aget_state(_cfg(tid))
                        if _pages_at(0, k) or k < WARM_TURNS:
                            n += k >= WARM_TURNS
                            [s async for s in g.aget_state_history(_cfg(tid), limit=PAGE)]
                return n

            pages = asyncio.run(main())
            before = box["before"]
        d = proxy.counts() - before
    return {
        "turns": turns, "pages": pages,
        "sent_bytes_per_turn": d.down_bytes / turns,
        "received_bytes_per_turn": d.up_bytes / turns,
        "round_trips_per_turn": d.round_trips / turns,
    }


def _final_states_equal(dbs: dict[str, SaverDb], ls: LoadScale, threads: list[str]) -> bool:
    states = {}
    for name, db in dbs.items():
        with open_saver(name, db.dsn, None) as saver:
            g = build_graph(ls.workload, saver)
            states[name] = [g.get_state(_cfg(t)).values for t in threads]
    return bool(states["ours"] == states["official"])


# ---------------------------------------------------------------- the section


def run_load(admin_dsn: str, scale_name: str, log: Callable[[str], None]) -> dict[str, Any]:
    """``admin_dsn``: a server where two scratch databases are made (ours, official)."""
    import uuid

    from ..databases import scratch_database

    ls = SCALES[scale_name]
    server = Server.open(admin_dsn)
    tag = uuid.uuid4().hex[:8]
    out: dict[str, Any] = {
        "workload": ls.workload, "sessions": list(ls.sessions),
        "turns_per_session": {str(k): v for k, v in ls.turns.items()}, "reps": ls.reps,
        "prior_turns": ls.prior, "stagger": list(ls.stagger),
        "history_every": HISTORY_EVERY, "page": PAGE,
        "pool_cap": POOL_CAP, "max_connections": server.max_connections,
        "session_warm_turns": SESSION_WARM_TURNS,
        "client_procs": ls.client_procs,
        "opened": {
            "ours": f"DeltaPostgresSaver (threads) / AsyncDeltaPostgresSaver (asyncio) "
                    f".from_conn_string(pool_size=n), n: min(N, {POOL_CAP}) split among the "
                    "client processes",
            "official": "PostgresSaver / AsyncPostgresSaver on a ConnectionPool / "
                        "AsyncConnectionPool(min_size=n, max_size=n, kwargs: "
                        f"{OFFICIAL_POOL_KWARGS}) (its from_conn_string opens one "
                        "connection), n as ours",
            "setup_and_final_states": ONE_CONNECTION + " (each saver's own)",
        },
        "measures": {
            "db_time": "pg_stat_statements total_exec_time" if server.pgss else None,
            "backend_cpu": "utime+stime of the pool's backends (/proc)" if server.proc else None,
            "bytes": "loopback proxy, one session, untimed pass",
        },
    }
    log(
        f"load: {ls.workload}, sessions {list(ls.sessions)}, modes {list(MODES)}; "
        f"pg_stat_statements: {'yes' if server.pgss else 'no (not preloaded)'}; backend CPU "
        f"from /proc: {'yes' if server.proc else 'no'}; max_connections "
        f"{server.max_connections}, pools of min(N, {POOL_CAP})"
    )
    log("load: savers " + "; ".join(f"{k} {v}" for k, v in out["opened"].items()))
    try:
        with scratch_database(admin_dsn, f"{tag}o") as (ours_dsn, ours_where), scratch_database(
            admin_dsn, f"{tag}f"
        ) as (off_dsn, off_where):
            out["scratch"] = {"ours": ours_where, "official": off_where}
            dbs = {
                "ours": _setup("ours", ours_dsn, server, ls),
                "official": _setup("official", off_dsn, server, ls),
            }
            if dbs["ours"].dbid == dbs["official"].dbid:  # schema fallback: one database
                out["measures"]["db_time"] = None
                server.pgss = False
            out["bytes"] = {
                mode: {name: _bytes_per_turn(db, ls, mode) for name, db in dbs.items()}
                for mode in MODES
            }
            levels: dict[str, dict[str, Any]] = {m: {} for m in MODES}
            checked: list[str] = []
            for rep in range(ls.reps):
                for li, n in enumerate(ls.sessions):
                    for mode in MODES:
                        order = list(SAVERS) if (rep + li) % 2 == 0 else list(SAVERS)[::-1]
                        entry = levels[mode].setdefault(str(n), {"runs": []})
                        pair: dict[str, Any] = {"order": order, "loadavg": loadavg()}
                        prefix = f"{mode[0]}{n}r{rep}"
                        for name in order:
                            db = dbs[name]
                            spec = RunSpec(mode, name, db.dsn, db.dbid, n, ls.turns[n],
                                           ls.prior, ls.workload, prefix, ls.stagger)
                            ids = {off: [spec.thread(i) for i in range(n)
                                         if spec.prior_of(i) == ls.prior + off]
                                   for off in set(ls.stagger)}
                            ids[0] += [f"{prefix}-warm-{i:03}" for i in range(min(n, POOL_CAP))]
                            with psycopg.connect(db.dsn, autocommit=True) as c:
                                for off, some in ids.items():
                                    if some:
                                        clone_threads(c, _template(off), some)
                            procs = min(n, ls.client_procs)
                            if procs > 1:
                                pair[name] = run_procs(server, spec, procs)
                            else:
                                run = run_asyncio if mode == "asyncio" else run_threads
                                pair[name] = run(server, spec)
                                pair[name]["client_procs"] = 1
                        if rep == 0:
                            checked += [f"{prefix}-{i:03}" for i in range(n)]
                        entry["runs"].append(pair)
                        log("  " + _line(mode, n, rep, pair))
            out["levels"] = levels
            for mode in MODES:
                for e in levels[mode].values():
                    e["summary"] = _summarize(e["runs"])
            out["states_equal"] = _final_states_equal(dbs, ls, checked)
            log(f"  final states of both savers equal: {out['states_equal']}")
    finally:
        server.close()
    return out



def _line(mode: str, n: int, rep: int, pair: dict[str, Any]) -> str:
    o, f = pair["ours"], pair["official"]
    s = (f"{mode} {n:>2} sessions (rep {rep}): turns/s ours {o['turns_per_s']:.1f} official "
         f"{f['turns_per_s']:.1f}; p50/p99 ms ours {o['turn_ms']['p50']:.0f}/"
         f"{o['turn_ms']['p99']:.0f} official {f['turn_ms']['p50']:.0f}/{f['turn_ms']['p99']:.0f}")
    if "exec_ms_per_turn" in o:
        s += (f"; db exec ms/turn ours {o['exec_ms_per_turn']:.2f} official "
              f"{f['exec_ms_per_turn']:.2f}")
    if o["backend_cpu_ms_per_turn"] is not None:
        s += (f"; backend cpu ms/turn ours {o['backend_cpu_ms_per_turn']:.2f} official "
              f"{f['backend_cpu_ms_per_turn']:.2f}")
    return s


def _med(xs: list[float]) -> float:
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def _summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the repetitions, ratios pair by pair."""

    def ratio(get: Callable[[dict[str, Any]], float | None], a: str, b: str) -> float:
        xs = []
        for p in runs:
            x, y = get(p[a]), get(p[b])
            if x is not None and y is not None and y > 0:
                xs.append(x / y)
        return _med(xs)

    def med(get: Callable[[dict[str, Any]], float | None], who: str) -> float:
        return _med([v for p in runs if (v := get(p[who])) is not None])

    getters: dict[str, Callable[[dict[str, Any]], Any]] = {
        "turns_per_s": lambda r: r["turns_per_s"],
        "turn_p50_ms": lambda r: r["turn_ms"]["p50"],
        "turn_p99_ms": lambda r: r["turn_ms"]["p99"],
        "page_p50_ms": lambda r: r["page_ms"]["p50"],
        "exec_ms_per_turn": lambda r: r.get("exec_ms_per_turn"),
        "shared_blks_per_turn": lambda r: r.get("shared_blks_per_turn"),
        "calls_per_turn": lambda r: r.get("calls_per_turn"),
        "backend_cpu_ms_per_turn": lambda r: r.get("backend_cpu_ms_per_turn"),
    }
    s: dict[str, Any] = {k: {w: med(g, w) for w in SAVERS} for k, g in getters.items()}
    s["throughput_ours_over_official"] = ratio(getters["turns_per_s"], "ours", "official")
    s["exec_official_over_ours"] = ratio(getters["exec_ms_per_turn"], "official", "ours")
    s["cpu_official_over_ours"] = ratio(getters["backend_cpu_ms_per_turn"], "official", "ours")
    s["blks_official_over_ours"] = ratio(getters["shared_blks_per_turn"], "official", "ours")
    s["p99_ours_over_official"] = ratio(getters["turn_p99_ms"], "ours", "official")
    s["p50_ours_over_official"] = ratio(getters["turn_p50_ms"], "ours", "official")
    s["pairs"] = len(runs)
    return s



def headline(res: dict[str, Any]) -> dict[str, Any]:
    ld = res.get("load")
    if not ld or "levels" not in ld:
        return {}
    h: dict[str, Any] = {}
    for mode, levels in ld["levels"].items():
        top = max(levels, key=int)
        s = levels[top]["summary"]
        h[f"load_{mode}_{top}_sessions"] = {
            "throughput_ours_over_official": s["throughput_ours_over_official"],
            "db_exec_official_over_ours": s["exec_official_over_ours"],
            "backend_cpu_official_over_ours": s["cpu_official_over_ours"],
            "p99_ours_over_official": s["p99_ours_over_official"],
        }
    return h



def run_alone(
    args: Any, scale: str, server: Callable[[str | None], Any], command: str
) -> dict[str, Any]:
    """``langgraph-delta-pg bench --only load``: this part alone, on the same server the
    full run uses (two scratch databases)."""
    res: dict[str, Any] = {"command": command, "scale": scale}
    t0 = time.perf_counter()
    with server(args.dsn) as (server_dsn, source):
        res["database"] = {"source": source, "scratch": "two scratch databases"}
        with psycopg.connect(server_dsn, autocommit=True) as meter:
            from ..machine import machine_facts

            res["machine"] = machine_facts(meter)
        res["load"] = run_load(server_dsn, scale, lambda m: print(m, flush=True))
    res["seconds"] = time.perf_counter() - t0
    return res
