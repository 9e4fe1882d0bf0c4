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
off. The rounds are the bench's ``Interleaved`` (a ``gc.collect()`` before each pass),
without its ``gc.freeze``: the collections' cost over all the process holds is what is
measured. Prints medians (s). ``--ahead-rows``: how many rows the listing answers ahead
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
from langgraph_delta_postgres.bench.timing import Interleaved, summary


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
    iv = Interleaved()
    with scratch_pair(args.dsn, f"hist_{uuid.uuid4().hex[:8]}") as (ours_conn, off_conn):
        savers: dict[str, Any] = {
            "ours": DeltaPostgresSaver(ours_conn), "official": PostgresSaver(off_conn),
            "inmemory": InMemorySaver(),
        }
        graphs = session_graphs(savers, args.turns)
        names = list(savers)
        entries = {k: whole_pass(graphs[k], f"agent-{k}") for k in names}  # warm-up

        def case(k: str, collector: str) -> tuple[Any, Any, Any]:
            def prepare() -> None:
                if collector == "off":
                    gc.disable()

            def call(_: None) -> None:
                clock.reset()
                clock.on = True
                whole_pass(graphs[k], f"agent-{k}")

            def finish(_: None) -> None:
                gc.enable()
                clock.on = False
                if collector == "on":
                    rows[k]["gc"].append(sum(clock.seconds.values()))
                    for gen, name in enumerate(("young", "middle", "full")):
                        rows[k][name].append(clock.count.get(gen, 0))

            return prepare, call, finish

        iv.run({f"{k} {c}": case(k, c) for k in names for c in ("on", "off")}, args.rounds,
               warmup=0, freeze=False)
    print(f"whole get_state_history pass, {args.turns}-turn deepagents session, warm "
          f"savers, median of {args.rounds} interleaved rounds, ours answering "
          f"{args.ahead_rows} rows ahead\n")
    print("| saver | entries | pass (s) | in collections (s) | collections young / middle / "
          "full | pass, collector off (s) |")
    print("|---|---|---|---|---|---|")
    for k in names:
        n = {what: statistics.median(v) for what, v in rows[k].items()}  # counts
        print(f"| {k} | {entries[k]} | {iv.stats(f'{k} on')['median_ms'] / 1000:.2f} | "
              f"{summary(rows[k]['gc'])['median_ms'] / 1000:.2f} | "
              f"{n['young']:.0f} / {n['middle']:.0f} / {n['full']:.0f} | "
              f"{iv.stats(f'{k} off')['median_ms'] / 1000:.2f} |")


if __name__ == "__main__":
    main()
