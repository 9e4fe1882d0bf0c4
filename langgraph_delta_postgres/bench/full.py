"""The full run of ``langgraph-delta-pg bench`` (every section; without ``--only``):
the workloads, the history micro-benchmarks, ``EXPLAIN`` of the headline targets, then
retention, writes and list, the loads, the agent session and the load section; and its
headline."""

from __future__ import annotations

import argparse
import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any

from .._local.install import install_hint
from .scales import RTTS, Scale


def _log(msg: str) -> None:
    print(msg, flush=True)


def run_full(
    args: argparse.Namespace, scale: Scale, server: Callable[[str | None], Any], command: str
) -> dict[str, Any]:
    """Every section on the server ``server(args.dsn)`` gives; ``command``: the command line
    the results name."""
    import psycopg

    from ..migrate import migrate
    from .databases import freeze_autovacuum, scratch_database
    from .graphs import SaverSpec, run_workload
    from .loads import run_loads
    from .machine import machine_facts
    from .micro import run_micro
    from .proxy import LatencyProxy, upstream_of
    from .savers import open_savers

    started = time.time()
    t0 = time.perf_counter()
    res: dict[str, Any] = {
        "command": command,
        "scale": scale.name,
        "started_at": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
        "rtts_ms": [float(r) for r in scale.rtts],
    }
    with server(args.dsn) as (server_dsn, source), scratch_database(
        server_dsn, uuid.uuid4().hex[:10]
    ) as (dsn, where):
        res["database"] = {"source": source, "scratch": where}
        _log(f"bench ({scale.name}) on {source}, {where}")
        with psycopg.connect(dsn, autocommit=True) as meter:
            migrate(meter)
            freeze_autovacuum(meter)
            res["machine"] = machine_facts(meter)
            up = upstream_of(dsn)
            proxies: dict[str, LatencyProxy | None] = {}
            with contextlib.ExitStack() as stack:
                for label in scale.rtts:
                    proxies[label] = (
                        stack.enter_context(LatencyProxy(up, RTTS[label]))
                        if RTTS[label] > 0 else None
                    )
                meter_proxy = stack.enter_context(LatencyProxy(up, 0.0))
                res["select1_rtt"] = _select1(dsn, proxies)
                _log("  measured SELECT 1 round trip: " + ", ".join(
                    f"{k} ms -> {v['median_ms']:.3f} ms" for k, v in res["select1_rtt"].items()))

                savers = open_savers(dsn, proxies, meter_proxy)
                stack.callback(savers.close)
                _log("  savers: " + _opened_line(savers.opened))
                res["workloads"] = {}
                specs_msg = []
                for f in scale.messages_freqs:
                    specs_msg += [SaverSpec("ours", "ours", True, f),
                                  SaverSpec("official", "official", True, f)]
                specs_msg += [SaverSpec("ours_full", "ours", False, None),
                              SaverSpec("inmemory", "inmemory", True, None)]
                specs_std = [
                    SaverSpec("ours", "ours", True, None),
                    SaverSpec("official", "official", True, None),
                    SaverSpec("ours_full", "ours", False, None),
                    SaverSpec("inmemory", "inmemory", True, None),
                ]
                for wl, specs, points in (
                    ("messages", specs_msg, scale.messages_points),
                    ("coding_a", specs_std, scale.coding_a_points),
                    ("coding_b", specs_std, scale.coding_b_points),
                ):
                    if not points:
                        continue
                    w0 = time.perf_counter()
                    _log(f"workload {wl}: turns {list(points)}, {len(specs)} threads")
                    res["workloads"][wl] = run_workload(
                        wl, specs, points, savers, meter, scale.resume_rounds, _log
                    )
                    res["workloads"][wl]["seconds"] = time.perf_counter() - w0
                    res["workloads"][wl]["opened"] = dict(savers.opened)

                _log("history micro-benchmarks")
                m0 = time.perf_counter()
                net = open_savers(dsn, proxies, meter_proxy)
                stack.callback(net.close)
                _log("  savers: " + _opened_line(net.opened))
                res["micro"] = run_micro(dsn, net, scale.micro, _log)
                res["micro"]["seconds"] = time.perf_counter() - m0
                res["micro"]["opened"] = dict(net.opened)
                res["explain"] = _explain(dsn, res["micro"])
                from .retention import run_retention

                res["retention"] = run_retention(dsn, scale.name, _log)

                from .listput import run_listput

                _log("writes and list")
                res["listput"] = run_listput(dsn, scale.name, _log)
        _log("loads: resume loop and history page (threads written by the official saver)")
        l0 = time.perf_counter()
        with scratch_database(server_dsn, uuid.uuid4().hex[:10]) as (loads_dsn, loads_where):
            res["loads"] = run_loads(loads_dsn, scale.name, scale.resume_rounds, _log)
            res["loads"]["scratch"] = loads_where
        res["loads"]["seconds"] = time.perf_counter() - l0
        from .agent.section import run_agent
        from .agent.session import available

        if available():  # deepagents, of the bench extra
            _log("agent: a deepagents session, scripted model (ours, official, InMemorySaver)")
            a0 = time.perf_counter()
            with scratch_database(server_dsn, uuid.uuid4().hex[:10]) as (agent_dsn, _):
                res["agent"] = run_agent(agent_dsn, scale.name, _log)
            res["agent"]["seconds"] = time.perf_counter() - a0
        else:
            _log("agent: skipped (deepagents is not installed: " + install_hint("bench") + ")")
        from .load.section import run_load

        _log("load: concurrent sessions on one server")
        l0 = time.perf_counter()
        res["load"] = run_load(server_dsn, scale.name, _log)
        res["load"]["seconds"] = time.perf_counter() - l0
    res["seconds"] = time.perf_counter() - t0
    res["headline"] = _headline(res)
    return res


def _select1(dsn: str, proxies: dict[str, Any]) -> dict[str, Any]:
    import psycopg

    from .timing import Interleaved

    iv = Interleaved()
    conns = {}
    try:
        for label, proxy in proxies.items():
            conns[label] = psycopg.connect(proxy.dsn(dsn) if proxy else dsn, autocommit=True)
        iv.run({k: (lambda c=c: c.execute("SELECT 1").fetchall()) for k, c in conns.items()}, 30)
    finally:
        for c in conns.values():
            c.close()
    return {k: iv.stats(k) for k in conns}


def _opened_line(opened: dict[str, str]) -> str:
    return "; ".join(f"{k} {v}" for k, v in opened.items())


def _explain(dsn: str, micro: dict[str, Any]) -> dict[str, str]:
    """EXPLAIN (ANALYZE, BUFFERS) of our statement on the headline targets, on the
    connection of a saver ``from_conn_string`` opened (its planner settings)."""
    import psycopg
    from psycopg import sql
    from psycopg.rows import tuple_row

    from .. import DeltaPostgresSaver
    from .._cache import NO_PLAN

    out = {}
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as saver:
        conn = saver.conn
        assert isinstance(conn, psycopg.Connection)
        for key, m in micro.get("headline", {}).items():
            params = {
                "thread_id": m["thread_id"], "checkpoint_ns": "",
                "checkpoint_id": m["target_id"], "channels": m["channels"],
                "max_depth": saver.max_history_depth, **NO_PLAN.params(),
            }
            with conn.cursor(row_factory=tuple_row) as cur:
                rows = cur.execute(
                    sql.SQL("EXPLAIN (ANALYZE, BUFFERS) ") + saver.history_query(), params
                ).fetchall()
            out[key] = "\n".join(r[0] for r in rows)
    return out


def _headline(res: dict[str, Any]) -> dict[str, Any]:
    h: dict[str, Any] = {}
    micro = res.get("micro", {})
    for key, m in micro.get("headline", {}).items():
        h[f"history_{key}"] = {
            "what": f"{m['workload']} {m['turns']} turns, 2 channels, "
                    f"snapshot_frequency={m['snapshot_frequency']}",
            **{
                f"official_over_ours@{rtt}ms": r["ratio_official_ours"]["median"]
                for rtt, r in m["rtt"].items()
            },
            **{f"ours_over_floor@{rtt}ms": r["ratio_ours_floor"]["median"]
               for rtt, r in m["rtt"].items()},
        }
    for wl, w in res.get("workloads", {}).items():
        last = w["points"][-1]
        sv = last["savers"]
        full = sv.get("ours_full", {}).get("storage_bytes")
        delta = sv.get("ours@default", {}).get("storage_bytes")
        if full and delta:
            h[f"storage_{wl}"] = {
                "turns": last["turns"], "full_snapshot_bytes": full, "delta_bytes": delta,
                "full_over_delta": full / delta,
            }
    from .listput import headline as listput_headline

    h.update(listput_headline(res))
    from .agent.section import headline as agent_headline

    h.update(agent_headline(res))
    from .load.section import headline as load_headline

    h.update(load_headline(res))
    return h


def print_headline(res: dict[str, Any]) -> None:
    print(f"\ndone in {res['seconds']:.0f}s ({res['scale']}); headline:")
    for k, v in res["headline"].items():
        print(f"  {k}: " + ", ".join(
            f"{a}={b:.2f}" if isinstance(b, float) else f"{a}={b}" for a, b in v.items()))
