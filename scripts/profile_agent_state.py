"""Where get_state's time goes on the agent session: LangGraph's own work vs the saver's.

    python scripts/profile_agent_state.py [--dsn DSN] [--turns 150] [--rounds 21] [--cprofile]

Runs the bench's deepagents session (``langgraph_delta_postgres.bench.agent``: scripted
model, no network) for ``--turns`` turns on ours (``DeltaPostgresSaver``), the official
``PostgresSaver`` and ``InMemorySaver`` (each on its own thread; without --dsn on the
embedded Postgres, in a scratch schema for ours and the official saver's tables in a
scratch database... both in one scratch database, dropped afterwards), then times
``graph.get_state`` of the head, warm (the saver that ran the session), in interleaved
rounds (the bench's ``Interleaved``). Each saver's methods that LangGraph calls during
``get_state`` (``get_tuple``, ``get_delta_channel_history``) are wrapped with a timer:
"saver" is the time inside them, "langgraph" the rest of the call (building the
channels, replaying the delta writes with the reducer, preparing the next tasks, the
snapshot). Prints medians (ms)
and the ceiling each saver's LangGraph part puts on official/ours.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
import uuid
from collections.abc import Callable
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres.bench.agent.session import _cfg, session_graphs
from langgraph_delta_postgres.bench.databases import scratch_pair
from langgraph_delta_postgres.bench.timing import Interleaved, summary

TIMED = ("get_tuple", "get_delta_channel_history")


class SaverClock:
    """Time spent inside the wrapped methods of one saver object."""

    def __init__(self, saver: Any) -> None:
        self.seconds = 0.0
        for name in TIMED:
            inner = getattr(saver, name)
            setattr(saver, name, self._wrap(inner))

    def _wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.seconds += time.perf_counter() - t0

        return timed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn")
    ap.add_argument("--turns", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--cprofile", action="store_true",
                    help="also print cProfile's top functions of ours' timed calls")
    args = ap.parse_args()
    prof = cProfile.Profile() if args.cprofile else None
    with scratch_pair(args.dsn, f"state_{uuid.uuid4().hex[:8]}") as (ours_conn, off_conn):
        savers: dict[str, Any] = {
            "ours": DeltaPostgresSaver(ours_conn), "official": PostgresSaver(off_conn),
            "inmemory": InMemorySaver(),
        }
        graphs = session_graphs(savers, args.turns)
        clocks = {k: SaverClock(s) for k, s in savers.items()}
        inside: dict[str, list[float]] = {k: [] for k in savers}
        names = list(savers)
        for k in names:  # warm-up, untimed
            graphs[k].get_state(_cfg(f"agent-{k}"))

        def case(k: str) -> tuple[Any, Any, Any]:
            def prepare() -> None:
                clocks[k].seconds = 0.0

            def call(_: None) -> None:
                if prof is not None and k == "ours":
                    prof.enable()
                graphs[k].get_state(_cfg(f"agent-{k}"))
                if prof is not None and k == "ours":
                    prof.disable()

            def finish(_: None) -> None:
                inside[k].append(clocks[k].seconds)

            return prepare, call, finish

        iv = Interleaved()
        iv.run({k: case(k) for k in names}, args.rounds, warmup=0)
        total = iv.samples
    print(f"get_state of the head, warm, {args.turns}-turn deepagents session, median of "
          f"{args.rounds} interleaved rounds (ms)\n")
    print("| saver | get_state | inside the saver | LangGraph's own |")
    print("|---|---|---|---|")
    med = {}
    for k in names:
        t = iv.stats(k)["median_ms"] / 1000
        s = summary(inside[k])["median_ms"] / 1000
        lg = summary([a - b for a, b in zip(total[k], inside[k], strict=True)])["median_ms"] / 1000
        med[k] = (t, s, lg)
        print(f"| {k} | {t * 1000:.2f} | {s * 1000:.2f} | {lg * 1000:.2f} |")
    t_off, _, _ = med["official"]
    _, s_ours, lg_ours = med["ours"]
    print(f"\nofficial/ours {t_off / med['ours'][0]:.2f}x; ours/InMemorySaver "
          f"{med['ours'][0] / med['inmemory'][0]:.2f}x; ceiling (ours' saver part at 0): "
          f"official/ours {t_off / lg_ours:.2f}x")
    print(f"round-by-round official/ours: {iv.ratio('official', 'ours')['median']:.2f}x")
    if prof is not None:
        print("\nours, cProfile of the timed calls (all rounds), by internal time:")
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
