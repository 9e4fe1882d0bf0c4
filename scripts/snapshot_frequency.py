"""Storage and load latency of one DeltaChannel thread per ``snapshot_frequency``.

    python scripts/snapshot_frequency.py [--dsn DSN] [--workload coding_a] [--turns 200]
                                         [--frequencies 1,10,50,100,500]

For each frequency K: a fresh thread of ``--turns`` user turns of a ``_workloads`` graph
whose two fields are ``DeltaChannel(..., snapshot_frequency=K)``, on
``DeltaPostgresSaver`` (in a fresh schema, dropped afterwards; without --dsn the embedded
Postgres). Then per thread: the stored bytes (``inspect.storage``: pg_column_size of the
thread's rows), the longest walk a load makes (the checkpoint with the most supersteps
since a snapshot, ``inspect.deepest``, and its depth from ``inspect.walk_depth``), and
``get_state`` on a fresh graph at the latest and at that deepest checkpoint (median of
7, the frequencies interleaved round by round). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
import uuid
from typing import Any

import psycopg
from psycopg.rows import dict_row

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._embedded import embedded_postgres
from langgraph_delta_postgres._workloads import WORKLOADS, build_graph, run_turns
from langgraph_delta_postgres.inspect import human_bytes, thread_bytes, walk_depths

REPEATS = 7
FIELDS = ["files", "messages"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn")
    ap.add_argument("--workload", default="coding_a", choices=sorted(WORKLOADS))
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--frequencies", default="1,10,50,100,500")
    args = ap.parse_args()
    ks = [int(k) for k in args.frequencies.split(",")]
    schema = f"snapfreq_{uuid.uuid4().hex[:8]}"
    with contextlib.ExitStack() as stack:
        dsn = args.dsn or stack.enter_context(embedded_postgres())
        conn = stack.enter_context(psycopg.connect(dsn, autocommit=True))
        saver = DeltaPostgresSaver(conn, schema=schema)
        saver.setup()
        stack.callback(conn.execute, f'DROP SCHEMA "{schema}" CASCADE')
        rows: dict[int, dict[str, Any]] = {}
        for k in ks:
            graph = build_graph(args.workload, saver, snapshot_frequency=k)
            run_turns(graph, args.workload, f"k{k}", args.turns)
            with conn.cursor(row_factory=dict_row) as cur:
                cur.execute(saver.queries["inspect.deepest"], {"thread_id": f"k{k}",
                                                               "checkpoint_ns": ""})
                deep = cur.fetchone()
            assert deep is not None
            depth = max(
                int(r["depth"])
                for r in walk_depths(conn, schema, f"k{k}", FIELDS,
                                     checkpoint_id=deep["checkpoint_id"])
            )
            rows[k] = {"bytes": thread_bytes(conn, schema, f"k{k}"), "depth": depth,
                       "deep": deep["checkpoint_id"], "latest_ms": [], "deep_ms": []}
        for _ in range(REPEATS):
            for k in ks:
                for key, cid in (("latest_ms", None), ("deep_ms", rows[k]["deep"])):
                    conf: dict[str, Any] = {"thread_id": f"k{k}"}
                    if cid:
                        conf["checkpoint_id"] = cid
                    graph = build_graph(args.workload, saver, snapshot_frequency=k)
                    t0 = time.perf_counter()
                    graph.get_state({"configurable": conf})
                    rows[k][key].append((time.perf_counter() - t0) * 1000)
    print(f"{args.workload}, {args.turns} turns, DeltaPostgresSaver "
          f"(median of {REPEATS} get_state calls):\n")
    print("| snapshot_frequency | stored | longest walk (ancestors) "
          "| get_state, latest | get_state, deepest |")
    print("|---|---|---|---|---|")
    for k in ks:
        r = rows[k]
        print(f"| {k} | {human_bytes(r['bytes'])} | {r['depth']} "
              f"| {statistics.median(r['latest_ms']):.1f} ms "
              f"| {statistics.median(r['deep_ms']):.1f} ms |")


if __name__ == "__main__":
    main()
