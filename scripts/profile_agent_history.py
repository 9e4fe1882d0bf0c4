"""Where a whole ``get_state_history`` pass of the agent session spends its time: the
cyclic garbage collector vs the rest.

    python scripts/profile_agent_history.py [--dsn DSN] [--turns 150] [--rounds 2]
        [--ahead-rows N]

Runs the bench's deepagents session (``langgraph_delta_postgres.bench.agent``: scripted
model, no network) for ``--turns`` turns on ours (``DeltaPostgresSaver``), the official
``PostgresSaver`` and ``InMemorySaver`` (without --dsn on the embedded Postgres; ours
and the official saver in one scratch database, dropped afterwards). Then, per round and
saver (interleaved, as the bench's ``history_all``): one whole pass keeping every
entry's values (as the bench does), timed with the collector on, the collections each
generation ran and their time (``gc.callbacks``); and the same pass with the collector
off. Prints medians (s). ``--ahead-rows``: how many rows the listing answers ahead
(``_ops/listed.py``, ``AHEAD_ROWS``; 0: one answer at a time, as before the read-ahead).
A diagnostic: the speed claim is the bench's.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import uuid
from collections import defaultdict
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._ops import listed
from langgraph_delta_postgres.bench.agent.session import _cfg, session_graphs
from langgraph_delta_postgres.bench.databases import scratch_pair


class GcClock:
    """Collections per generation, and the time they took, while ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.count: dict[int, int] = defaultdict(int)
        self.seconds: dict[int, float] = defaultdict(float)
        self._t0 = 0.0
        gc.callbacks.append(self._cb)

    def _cb(self, phase: str, info: dict[str, Any]) -> None:
        if not self.on:
            return
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.count[info["generation"]] += 1
            self.seconds[info["generation"]] += time.perf_counter() - self._t0

    def reset(self) -> None:
        self.count.clear()
        self.seconds.clear()


def whole_pass(graph: Any, thread: str) -> int:
    return len([s.values for s in graph.get_state_history(_cfg(thread))])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn")
    ap.add_argument("--turns", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ahead-rows", type=int, default=listed.AHEAD_ROWS)
    args = ap.parse_args()
    listed.AHEAD_ROWS = args.ahead_rows
    clock = GcClock()
    rows: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    with scratch_pair(args.dsn, f"hist_{uuid.uuid4().hex[:8]}") as (ours_conn, off_conn):
        savers: dict[str, Any] = {
            "ours": DeltaPostgresSaver(ours_conn), "official": PostgresSaver(off_conn),
            "inmemory": InMemorySaver(),
        }
        graphs = session_graphs(savers, args.turns)
        names = list(savers)
        entries = {k: whole_pass(graphs[k], f"agent-{k}") for k in names}  # warm-up
        for r in range(args.rounds):
            for k in names[r % 3:] + names[: r % 3]:
                for collector in ("on", "off"):
                    gc.collect()
                    clock.reset()
                    clock.on = True
                    if collector == "off":
                        gc.disable()
                    t0 = time.perf_counter()
                    whole_pass(graphs[k], f"agent-{k}")
                    took = time.perf_counter() - t0
                    gc.enable()
                    clock.on = False
                    rows[k][f"pass_{collector}"].append(took)
                    if collector == "on":
                        rows[k]["gc"].append(sum(clock.seconds.values()))
                        for gen, name in enumerate(("young", "middle", "full")):
                            rows[k][name].append(clock.count.get(gen, 0))
    print(f"whole get_state_history pass, {args.turns}-turn deepagents session, warm "
          f"savers, median of {args.rounds} interleaved rounds, ours answering "
          f"{args.ahead_rows} rows ahead\n")
    print("| saver | entries | pass (s) | in collections (s) | collections young / middle / "
          "full | pass, collector off (s) |")
    print("|---|---|---|---|---|---|")
    for k in names:
        m = {what: statistics.median(v) for what, v in rows[k].items()}
        print(f"| {k} | {entries[k]} | {m['pass_on']:.2f} | {m['gc']:.2f} | "
              f"{m['young']:.0f} / {m['middle']:.0f} / {m['full']:.0f} | "
              f"{m['pass_off']:.2f} |")


if __name__ == "__main__":
    main()
