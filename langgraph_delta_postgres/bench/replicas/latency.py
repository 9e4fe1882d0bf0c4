"""The replicas section's latency part: a routed read against the same read on the
standby directly."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._local.standby import Standby
from langgraph_delta_postgres._local.workloads import build_graph

from .rounds import PAGE, WORKLOAD, _routing

#: scale -> reads per kind of the latency section (routed and direct, interleaved)
LATENCY_READS = {"full": 400, "quick": 150, "tiny": 20}



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
