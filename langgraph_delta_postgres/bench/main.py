"""``langgraph-delta-pg bench``: this saver against the official ``PostgresSaver`` 3.2.

What runs (one database, one thread per saver and workload):

* real compiled graphs (:mod:`.workloads`): ``messages`` (snapshot_frequency swept),
  ``coding_a``, ``coding_b`` on four savers -- ours with ``DeltaChannel`` fields, the
  official saver with the same fields, ours with classic full-snapshot fields (the
  O(N^2) baseline) and ``InMemorySaver`` (latency reference). Storage is the growth of
  ``pg_total_relation_size`` of the three tables (TOAST and indexes included) while
  that saver's thread grew; resume is ``get_state`` on a newly compiled graph.
* micro-benchmarks of ``get_delta_channel_history`` on the same rows for both savers:
  depth, channel count, forks, rows written by the official saver, 10,000 other threads,
  with statements (counted at the driver), wire round trips and bytes (counted by a
  loopback proxy), and the floor: deserializing the returned values + one ``SELECT 1``.
* every history / resume figure at 0 ms (direct) and 0.5 / 2 ms RTT (a loopback proxy
  that delays each direction by RTT/2).

Timings are medians of repeated, interleaved rounds (the order rotates every round)
with min/max; ratios are computed round by round.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._local.install import install_hint

BENCH_INSTALL_HINT = install_hint("bench")
RTTS = {"0": 0.0, "0.5": 0.5, "2": 2.0}


@dataclass(frozen=True)
class Scale:
    name: str
    messages_points: tuple[int, ...]
    messages_freqs: tuple[int | None, ...]
    coding_a_points: tuple[int, ...]
    coding_b_points: tuple[int, ...]
    resume_rounds: int
    micro: Any  # MicroScale
    rtts: tuple[str, ...]


def _scales() -> dict[str, Scale]:
    from .micro import MicroScale

    return {
        "full": Scale(
            "full",
            messages_points=(10, 100, 250, 500),
            messages_freqs=(1, 5, 10, 50, None),
            coding_a_points=(10, 50, 100, 200),
            coding_b_points=(10, 50, 100),
            resume_rounds=7,
            micro=MicroScale(
                depths=(10, 100, 1000, 5000), channel_depth=1000, fork_main=500, forks=100,
                fork_len=10, other_threads=10_000, headline_a_turns=200, headline_a_freq=50,
                headline_b_turns=1000, headline_b_freq=1000, rounds=11, deep_rounds=5,
            ),
            rtts=("0", "0.5", "2"),
        ),
        "quick": Scale(
            "quick",
            messages_points=(10, 50),
            messages_freqs=(10, None),
            coding_a_points=(10, 20),
            coding_b_points=(5,),
            resume_rounds=3,
            micro=MicroScale(
                depths=(10, 200), channel_depth=100, fork_main=100, forks=10, fork_len=5,
                other_threads=500, headline_a_turns=30, headline_a_freq=50,
                headline_b_turns=60, headline_b_freq=1000, rounds=5, deep_rounds=3,
            ),
            rtts=("0", "0.5", "2"),
        ),
        # for the test suite: the quick path, smaller
        "tiny": Scale(
            "tiny",
            messages_points=(5, 10),
            messages_freqs=(None,),
            coding_a_points=(5,),
            coding_b_points=(),
            resume_rounds=2,
            micro=MicroScale(
                depths=(10, 50), channel_depth=20, fork_main=30, forks=3, fork_len=3,
                other_threads=50, headline_a_turns=8, headline_a_freq=50,
                headline_b_turns=10, headline_b_freq=1000, rounds=2, deep_rounds=2,
            ),
            rtts=("0", "2"),
        ),
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Benchmark DeltaPostgresSaver against the official PostgresSaver 3.2 (same database, "
        "same rows). Needs the 'bench' extra: " + BENCH_INSTALL_HINT
    )
    p.add_argument(
        "--dsn",
        help="a Postgres where a scratch database (or, without CREATEDB, a schema) is "
        "created for the run and dropped afterwards (default: an embedded Postgres)",
    )
    p.add_argument(
        "--quick", action="store_true", help="smoke run: a few minutes (2-10 on 2 cores, by load)"
    )
    p.add_argument("--json", metavar="PATH", help="write machine-readable results here")
    p.add_argument("--out", metavar="DIR",
                   help="write DIR/benchmarks.md and DIR/img/*.png (plots)")
    p.add_argument("--scale", choices=("full", "quick", "tiny"), help=argparse.SUPPRESS)
    p.add_argument(
        "--only", choices=("retention", "load", "agent", "replicas", "writes"),
        help="run only this part of the benchmark (agent: a deepagents session, needs the "
        "'bench' extra's deepagents; replicas: starts a hot standby of the "
        "server, see docs/replicas.md; writes: a Send fan-out and concurrent runs on one "
        "thread)",
    )


def _missing_deps() -> list[str]:
    missing = []
    try:
        import langgraph.checkpoint.postgres  # noqa: F401
    except ImportError:
        missing.append("langgraph-checkpoint-postgres")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        missing.append("matplotlib")
    return missing


@contextlib.contextmanager
def _server(dsn: str | None) -> Iterator[tuple[str, str]]:
    if dsn:
        yield dsn, "--dsn"
        return
    from .._local.embedded import embedded_postgres

    with embedded_postgres() as d:
        yield d, "embedded (pgserver)"


def _command_line(args: argparse.Namespace) -> str:
    parts = ["langgraph-delta-pg", "bench"]
    if args.dsn:
        parts += ["--dsn", "<DSN>"]
    if args.quick:
        parts.append("--quick")
    if getattr(args, "scale", None):
        parts += ["--scale", args.scale]
    if getattr(args, "only", None):
        parts += ["--only", args.only]
    if args.json:
        parts += ["--json", args.json]
    if args.out:
        parts += ["--out", args.out]
    return shlex.join(parts)


def run(args: argparse.Namespace) -> int:
    missing = _missing_deps()
    if getattr(args, "only", None) == "agent":
        from .agent import available

        if not available():
            missing.append("deepagents")
    if missing:
        print(
            f"error: the benchmark needs {' and '.join(missing)}: {BENCH_INSTALL_HINT}",
            file=sys.stderr,
        )
        return 2
    from .._local.embedded import EmbeddedPostgresUnavailable

    scale_name = getattr(args, "scale", None) or ("quick" if args.quick else "full")
    scale = _scales()[scale_name]
    import psycopg

    try:
        if getattr(args, "only", None) == "retention":
            from .retention import run_alone

            results = run_alone(args, scale_name, _server, _command_line(args))
        elif getattr(args, "only", None) == "replicas":
            from .replicas import run_alone as run_replicas_alone

            results = run_replicas_alone(args, scale_name, _server, _command_line(args))
        elif getattr(args, "only", None) == "agent":
            from .agent import run_alone as run_agent_alone

            results = run_agent_alone(args, scale_name, _server, _command_line(args))
        elif getattr(args, "only", None) == "writes":
            from .writes import run_alone as run_writes_alone

            results = run_writes_alone(args, scale_name, _server, _command_line(args))
        elif getattr(args, "only", None) == "load":
            from .load import run_alone as run_load_alone

            results = run_load_alone(args, scale_name, _server, _command_line(args))
        else:
            results = _run(args, scale)
    except EmbeddedPostgresUnavailable as e:
        print(f"error: {e}; or pass --dsn to a Postgres you run", file=sys.stderr)
        return e.code
    except psycopg.OperationalError as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
        print(f"error: the database failed during the run: {msg}", file=sys.stderr)
        return 1
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1, default=str) + "\n")
        print(f"wrote {args.json}")
    if "agent" in results and "headline" not in results:  # --only agent
        from .agent import headline as agent_headline

        if args.out:
            from .report import write_agent_report

            print(f"wrote {write_agent_report(results, Path(args.out))}")
        for k, v in agent_headline(results).items():
            print(f"  {k}: " + ", ".join(
                f"{a}={b:.2f}" if isinstance(b, float) else f"{a}={b}" for a, b in v.items()))
        return 0
    if "headline" not in results:  # --only: no headline; load writes its own page
        if args.out and "load" in results:
            from .report import write_load_report

            for p in write_load_report(results, Path(args.out)):
                print(f"wrote {p}")
        return 0
    if args.out:
        from .report import write_report

        paths = write_report(results, Path(args.out))
        for p in paths:
            print(f"wrote {p}")
    _print_headline(results)
    return 0


def _log(msg: str) -> None:
    print(msg, flush=True)


def _run(args: argparse.Namespace, scale: Scale) -> dict[str, Any]:
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
        "command": _command_line(args),
        "scale": scale.name,
        "started_at": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
        "rtts_ms": [float(r) for r in scale.rtts],
    }
    with _server(args.dsn) as (server_dsn, source), scratch_database(
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
        from .agent import available, run_agent

        if available():  # deepagents, of the bench extra
            _log("agent: a deepagents session, scripted model (ours, official, InMemorySaver)")
            a0 = time.perf_counter()
            with scratch_database(server_dsn, uuid.uuid4().hex[:10]) as (agent_dsn, _):
                res["agent"] = run_agent(agent_dsn, scale.name, _log)
            res["agent"]["seconds"] = time.perf_counter() - a0
        else:
            _log("agent: skipped (deepagents is not installed: " + BENCH_INSTALL_HINT + ")")
        from .load import run_load

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
    from .agent import headline as agent_headline

    h.update(agent_headline(res))
    from .load import headline as load_headline

    h.update(load_headline(res))
    return h


def _print_headline(res: dict[str, Any]) -> None:
    print(f"\ndone in {res['seconds']:.0f}s ({res['scale']}); headline:")
    for k, v in res["headline"].items():
        print(f"  {k}: " + ", ".join(
            f"{a}={b:.2f}" if isinstance(b, float) else f"{a}={b}" for a, b in v.items()))
