"""The replicas section: the threads written, the rounds in pairs (the order alternating),
the medians and pair-by-pair ratios, and ``bench --only replicas``."""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from typing import Any

import psycopg

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._local.standby import Standby, standby_of
from langgraph_delta_postgres._local.workloads import build_graph, run_turns

from .latency import LATENCY_READS, routed_latency
from .rounds import OPENED, PAGE, SIZES, WORKLOAD, _num, _round
from .turn_loss import LOSS_TURNS, turn_loss


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


def run_alone(
    args: Any, scale: str, server: Callable[[str | None], Any], command: str
) -> dict[str, Any]:
    """``langgraph-delta-pg bench --only replicas``: a scratch database, a standby of the
    server, the rounds; prints the summary."""
    from ..databases import section_database

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
