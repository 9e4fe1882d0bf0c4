"""Where a turn's time goes on the agent session: the saver's calls vs the rest.

    python scripts/profile_agent_turn.py [--dsn DSN] [--turns 150] [--cprofile]

Runs the bench's deepagents session (``langgraph_delta_postgres.bench.agent``: scripted
model, no network) for ``--turns`` turns on ours (``DeltaPostgresSaver``), the official
``PostgresSaver`` and ``InMemorySaver``, turn by turn interleaved, each on its own thread
(without --dsn on the embedded Postgres, in a scratch database dropped afterwards). Every
saver method LangGraph calls during ``invoke`` is wrapped with a timer and a counter.
Prints, per saver, the median turn, the median time inside the saver per turn, and each
method's calls and milliseconds per turn (medians over the second half of the session).
The turns run in the bench's ``Interleaved`` rounds (turn i on every saver before turn
i + 1, a ``gc.collect()`` before each), without its ``gc.freeze``, as the bench's agent
section times its turns.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres.bench.agent.session import SCALES, _cfg, _turn_inputs, build_agent
from langgraph_delta_postgres.bench.databases import scratch_pair
from langgraph_delta_postgres.bench.timing import Interleaved, ratio_summary, summary

TIMED = ("get_tuple", "get_delta_channel_history", "put", "put_writes", "list")


class SaverClock:
    """Time and calls spent inside the wrapped methods of one saver object."""

    def __init__(self, saver: Any, prof: cProfile.Profile | None) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.prof = prof
        for name in TIMED:
            setattr(saver, name, self._wrap(name, getattr(saver, name)))

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*a: Any, **kw: Any) -> Any:
            if self.prof is not None:
                self.prof.enable()
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.seconds[name] += time.perf_counter() - t0
                self.calls[name] += 1
                if self.prof is not None:
                    self.prof.disable()

        return timed


class ExitWait:
    """Time the invoking thread spends in LangGraph's ``BackgroundExecutor.__exit__`` (the
    end of a run: waiting for the puts and writes still running in the background)."""

    def __init__(self) -> None:
        from langgraph.pregel import _executor

        self.seconds = 0.0
        inner = _executor.BackgroundExecutor.__exit__
        main_thread = threading.main_thread()

        def timed_exit(ex: Any, *a: Any) -> Any:
            if threading.current_thread() is not main_thread:
                return inner(ex, *a)
            t0 = time.perf_counter()
            try:
                return inner(ex, *a)
            finally:
                self.seconds += time.perf_counter() - t0

        _executor.BackgroundExecutor.__exit__ = timed_exit  # type: ignore[method-assign]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn")
    ap.add_argument("--turns", type=int, default=150)
    ap.add_argument("--cprofile", action="store_true",
                    help="also print cProfile's top functions of ours' saver calls")
    args = ap.parse_args()
    prof = cProfile.Profile() if args.cprofile else None
    rows: dict[str, list[tuple[dict[str, float], dict[str, int]]]] = defaultdict(list)
    cpu: dict[str, list[float]] = defaultdict(list)
    exit_wait: dict[str, list[float]] = defaultdict(list)
    waits = ExitWait()
    with scratch_pair(args.dsn, f"turn_{uuid.uuid4().hex[:8]}") as (ours_conn, off_conn):
        savers: dict[str, Any] = {
            "ours": DeltaPostgresSaver(ours_conn), "official": PostgresSaver(off_conn),
            "inmemory": InMemorySaver(),
        }
        clocks = {k: SaverClock(s, prof if k == "ours" else None) for k, s in savers.items()}
        tokens = SCALES["full"].max_input_tokens
        graphs = {k: build_agent(s, tokens)[0] for k, s in savers.items()}
        names = list(savers)
        c0: dict[str, float] = {}

        def case(k: str) -> tuple[Any, Any, Any]:
            def prepare() -> int:  # this saver's next turn
                clocks[k].reset()
                waits.seconds = 0.0
                return len(rows[k])

            def call(i: int) -> None:
                c0[k] = time.process_time()
                graphs[k].invoke(_turn_inputs(i), _cfg(f"agent-{k}"))
                cpu[k].append(time.process_time() - c0[k])

            def finish(_: int) -> None:
                rows[k].append((dict(clocks[k].seconds), dict(clocks[k].calls)))
                exit_wait[k].append(waits.seconds)

            return prepare, call, finish

        iv = Interleaved()
        iv.run({k: case(k) for k in names}, args.turns, warmup=0, freeze=False)
    half = args.turns // 2
    print(f"{args.turns}-turn deepagents session, medians over turns {half}-{args.turns} (ms)\n")
    print("| saver | turn | process CPU | waiting at the run's end | inside the saver | rest | "
          + " | ".join(TIMED) + " |")
    print("|---|---|---|---|---|---|" + "---|" * len(TIMED))
    for k in names:
        tail = [(t, s, c) for t, (s, c) in zip(iv.samples[k], rows[k], strict=True)][half:]

        def med_ms(xs: list[float]) -> float:
            return summary(xs)["median_ms"]

        cells = []
        for m in TIMED:
            ms = med_ms([s.get(m, 0.0) for _, s, _ in tail])
            n = statistics.median(c.get(m, 0) for _, _, c in tail)  # calls, not a time
            cells.append(f"{ms:.2f} ({n:g})")
        print(f"| {k} | {med_ms([t for t, _, _ in tail]):.2f} "
              f"| {med_ms(cpu[k][half:]):.2f} | {med_ms(exit_wait[k][half:]):.2f} | "
              f"{med_ms([sum(s.values()) for _, s, _ in tail]):.2f} | "
              f"{med_ms([t - sum(s.values()) for t, s, _ in tail]):.2f} | "
              + " | ".join(cells) + " |")
    ours, official = iv.samples["ours"], iv.samples["official"]
    second = ratio_summary([a / b for a, b in zip(ours[half:], official[half:], strict=True)])
    print(f"\nturn by turn ours/official: {second['median']:.2f}x (second half); all "
          f"turns {round(iv.ratio('ours', 'official')['median'], 2)}x")
    if prof is not None:
        print("\nours, cProfile of the saver calls (all turns), by internal time:")
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
