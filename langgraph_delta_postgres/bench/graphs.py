"""Workloads through real compiled graphs: storage, per-invoke latency, resume latency."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from .._local.workloads import build_graph, user_input
from .databases import storage_bytes, thread_payload_bytes
from .micro import count_call
from .savers import Savers
from .timing import Interleaved, summary


@dataclass(frozen=True)
class SaverSpec:
    label: str  # e.g. "ours", "official", "ours_full", "inmemory"
    kind: str  # "ours" | "official" | "inmemory"
    delta: bool
    freq: int | None  # snapshot_frequency (None: DeltaChannel's default)

    @property
    def key(self) -> str:
        f = "default" if self.freq is None else str(self.freq)
        return self.label if not self.delta else f"{self.label}@{f}"


def _graph(workload: str, saver: Any, spec: SaverSpec) -> Any:
    return build_graph(workload, saver, delta=spec.delta, snapshot_frequency=spec.freq)


def _cfg(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def run_workload(
    workload: str,
    specs: Sequence[SaverSpec],
    points: Sequence[int],
    savers: Savers,
    meter_conn: psycopg.Connection[Any],
    rounds: int,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Grow one thread per saver to each of ``points`` turns, in lockstep; at each point
    record storage and resume latency (interleaved across savers)."""
    threads = {s.key: f"{workload}-{s.key}" for s in specs}
    graphs = {s.key: _graph(workload, savers.by_rtt["0"][s.kind], s) for s in specs}
    storage = {s.key: 0 for s in specs}
    out: dict[str, Any] = {
        "workload": workload,
        "savers": {s.key: vars(s) for s in specs},
        "points": [],
    }
    done = 0
    for pi, n in enumerate(points):
        point: dict[str, Any] = {"turns": n, "savers": {}}
        order = list(specs) if pi % 2 == 0 else list(reversed(specs))
        for s in order:
            t0 = time.perf_counter()
            before = storage_bytes(meter_conn) if s.kind != "inmemory" else 0
            invokes: list[float] = []
            g, cfg = graphs[s.key], _cfg(threads[s.key])
            for t in range(done, n):
                inp = user_input(workload, t)
                a = time.perf_counter()
                g.invoke(inp, cfg)
                invokes.append(time.perf_counter() - a)
            entry: dict[str, Any] = {"invoke": summary(invokes), "turns_in_segment": n - done}
            if s.kind != "inmemory":
                storage[s.key] += storage_bytes(meter_conn) - before
                entry["storage_bytes"] = storage[s.key]
                entry["payload_bytes"] = thread_payload_bytes(meter_conn, threads[s.key])
            entry["segment_seconds"] = time.perf_counter() - t0
            point["savers"][s.key] = entry
        done = n
        # resume: a new graph object, get_state of the thread (compile not timed)
        reference = None
        point["states_equal"] = True
        for s in specs:
            st = _graph(workload, savers.by_rtt["0"][s.kind], s).get_state(_cfg(threads[s.key]))
            if reference is None:
                reference = st.values
            elif st.values != reference:
                point["states_equal"] = False
        point["resume"] = {}
        for rtt, by_kind in savers.by_rtt.items():
            fns: dict[str, Any] = {}
            for s in specs:
                if s.kind not in by_kind:
                    continue
                fns[s.key] = _resume_fn(workload, by_kind[s.kind], s, threads[s.key])
            iv = Interleaved()
            iv.run(fns, rounds)
            r = {k: iv.stats(k) for k in fns}
            for s in specs:
                if s.kind == "ours" and s.delta:
                    twin = SaverSpec("official", "official", True, s.freq).key
                    if twin in fns:
                        r[f"ratio_official_ours:{s.freq}"] = iv.ratio(twin, s.key)
            point["resume"][rtt] = r
        counts = {}
        for s in specs:
            if s.kind == "inmemory":
                continue
            prepare, call = _resume_fn(workload, savers.count[s.kind], s, threads[s.key])
            graphs_ = [prepare() for _ in range(4)]
            def one_call(g: list[Any] = graphs_, c: Callable[[Any], Any] = call) -> Any:
                return c(g.pop())

            counts[s.key] = count_call(savers.counters[s.kind], savers.meter, one_call)
        point["resume_counts"] = counts
        out["points"].append(point)
        log(_point_line(workload, point))
    return out


def _resume_fn(workload: str, saver: Any, spec: SaverSpec, thread_id: str) -> Any:
    """``(prepare, call)``: compile a new graph (untimed), then ``get_state`` (timed)."""
    return (
        lambda: _graph(workload, saver, spec),
        lambda g: g.get_state(_cfg(thread_id)),
    )


def _point_line(workload: str, point: dict[str, Any]) -> str:
    parts = []
    for k, e in point["savers"].items():
        mb = e.get("storage_bytes", 0) / 1e6
        parts.append(f"{k} {mb:.2f}MB/{e['invoke']['median_ms']:.1f}ms")
    r0 = point["resume"].get("0", {})
    res = ", ".join(f"{k} {v['median_ms']:.1f}" for k, v in r0.items() if "median_ms" in v)
    eq = "" if point["states_equal"] else "  !! STATES DIFFER"
    return f"  {workload} @ {point['turns']} turns: {'; '.join(parts)} | resume ms: {res}{eq}"
