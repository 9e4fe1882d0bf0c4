"""What one put / put_writes costs each saver, replayed one by one (no agent running).

    python scripts/replay_agent_writes.py [--dsn DSN] [--turns 40] [--rounds 5]

Records the ``put`` and ``put_writes`` calls LangGraph makes during ``--turns`` turns of
the bench's deepagents session (``langgraph_delta_postgres.bench.agent``, on an
InMemorySaver), then replays them in order on ours (``DeltaPostgresSaver``) and the
official ``PostgresSaver``, each round on a new thread of each saver, the savers' order
alternating by round (without --dsn on the embedded Postgres; a scratch database,
dropped afterwards). Prints per call kind the median wall time and the median CPU time
of the calling thread (the client's share: serialization, parameter dumping, psycopg).
"""

from __future__ import annotations

import argparse
import copy
import gc
import statistics
import time
import uuid
from collections import defaultdict
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres.bench.agent.session import SCALES, _cfg, _turn_inputs, build_agent
from langgraph_delta_postgres.bench.databases import scratch_pair


def _plain(config: Any) -> dict[str, Any]:
    """The config's own keys (LangGraph adds runtime objects under ``__`` names)."""
    return {"configurable": {
        k: v for k, v in config["configurable"].items() if not k.startswith("__")
    }}


def record(turns: int) -> list[tuple[str, tuple[Any, ...]]]:
    calls: list[tuple[str, tuple[Any, ...]]] = []
    mem = InMemorySaver()
    put, put_writes = mem.put, mem.put_writes

    def rec_put(config: Any, checkpoint: Any, metadata: Any, versions: Any) -> Any:
        calls.append(("put", copy.deepcopy((_plain(config), checkpoint, metadata, versions))))
        return put(config, checkpoint, metadata, versions)

    def rec_writes(config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        calls.append(("put_writes", copy.deepcopy((_plain(config), writes, task_id, task_path))))
        put_writes(config, writes, task_id, task_path)

    mem.put, mem.put_writes = rec_put, rec_writes  # type: ignore[method-assign]
    graph, _ = build_agent(mem, SCALES["full"].max_input_tokens)
    for i in range(turns):
        graph.invoke(_turn_inputs(i), _cfg("recorded"))
    return calls


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn")
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    calls = record(args.turns)
    wall: dict[tuple[str, str], list[float]] = defaultdict(list)
    cpu: dict[tuple[str, str], list[float]] = defaultdict(list)
    with scratch_pair(args.dsn, f"replay_{uuid.uuid4().hex[:8]}") as (ours_conn, off_conn):
        savers = [("ours", DeltaPostgresSaver(ours_conn)), ("official", PostgresSaver(off_conn))]
        for r in range(args.rounds):
            for name, saver in savers if r % 2 == 0 else savers[::-1]:
                gc.collect()
                for kind, recorded in calls:
                    config, *rest = copy.deepcopy(recorded)
                    config["configurable"]["thread_id"] = f"{name}-{r}"
                    t0, c0 = time.perf_counter(), time.thread_time()
                    getattr(saver, kind)(config, *rest)
                    wall[(name, kind)].append(time.perf_counter() - t0)
                    cpu[(name, kind)].append(time.thread_time() - c0)
    print(f"{len(calls)} calls of {args.turns} turns, replayed {args.rounds} times per saver "
          "(medians, ms)\n")
    print("| saver | call | wall | thread CPU |")
    print("|---|---|---|---|")
    for key in sorted(wall):
        print(f"| {key[0]} | {key[1]} | {statistics.median(wall[key]) * 1000:.3f} | "
              f"{statistics.median(cpu[key]) * 1000:.3f} |")


if __name__ == "__main__":
    main()
