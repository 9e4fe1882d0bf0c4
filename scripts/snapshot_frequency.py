"""Storage and load latency of one DeltaChannel thread per ``snapshot_frequency``.

    python scripts/snapshot_frequency.py [--dsn DSN] [--workload coding_a] [--turns 200]
                                         [--frequencies 1,10,50,100,500] [--rounds 7]

For each frequency K: a fresh thread of ``--turns`` user turns of a ``_local.workloads`` graph
whose two fields are ``DeltaChannel(..., snapshot_frequency=K)``, on
``DeltaPostgresSaver`` (in a fresh schema, dropped afterwards; without --dsn the embedded
Postgres). Then per thread: the stored bytes (``inspect.storage``: pg_column_size of the
thread's rows), the longest walk a load makes (the checkpoint with the most supersteps
since a snapshot, ``inspect.deepest``, and its depth from ``inspect.walk_depth``), and
``get_state`` on a freshly compiled graph at the latest and at that deepest checkpoint,
three ways, each labelled in the table:

- *cold*: a new saver object for every timed call, so its history cache starts empty
  (what a new process, or the first load of a thread, pays);
- *cache_bytes=0*: a new saver with the cache turned off;
- *warm*: one saver per K kept across rounds and loaded once before the first (untimed),
  so the cache answers (a server that served the thread before).

Median of ``--rounds`` rounds (7), timed by ``langgraph-delta-pg bench``'s harness
(``Interleaved``): in each round the frequencies, checkpoints and ways are interleaved
(the order rotates every round) and every timed call starts right after ``gc.collect()``
(not timed). A second table gives each
K's time over the default K's (100, or the first K listed) in the same round, the median
of those round-by-round ratios: on a shared machine it moves less than the times do. A
third gives cold and warm over cache_bytes=0 at the same K and checkpoint, the same way.
Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import contextlib
import uuid
from typing import Any

import psycopg
from psycopg.rows import dict_row

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._local.embedded import embedded_postgres
from langgraph_delta_postgres._local.workloads import WORKLOADS, build_graph, run_turns
from langgraph_delta_postgres.bench.timing import Interleaved
from langgraph_delta_postgres.cli.inspect import thread_bytes, walk_depths
from langgraph_delta_postgres.cli.inspect_text import human_bytes

REPEATS = 7
FIELDS = ["files", "messages"]
POINTS = ("latest", "deepest")
WAYS = ("cold", "nocache", "warm")
LABELS = {"cold": "cold", "nocache": "cache_bytes=0", "warm": "warm"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn")
    ap.add_argument("--workload", default="coding_a", choices=sorted(WORKLOADS))
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--frequencies", default="1,10,50,100,500")
    ap.add_argument("--rounds", type=int, default=REPEATS)
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
                       "deep": deep["checkpoint_id"]}
        warm = {k: DeltaPostgresSaver(conn, schema=schema) for k in ks}

        def case(k: int, point: str, way: str) -> tuple[Any, Any]:
            def prepare() -> Any:  # a freshly compiled graph (not timed)
                if way == "warm":
                    saver_k = warm[k]
                else:
                    # a new saver: its cache starts empty (cold) or is off (nocache)
                    kw = {"cache_bytes": 0} if way == "nocache" else {}
                    saver_k = DeltaPostgresSaver(conn, schema=schema, **kw)
                return build_graph(args.workload, saver_k, snapshot_frequency=k)

            conf: dict[str, Any] = {"thread_id": f"k{k}"}
            if point == "deepest":
                conf["checkpoint_id"] = rows[k]["deep"]
            return prepare, lambda graph: graph.get_state({"configurable": conf})

        iv = Interleaved()  # one untimed call each first: it fills the warm savers' caches
        iv.run({_name(k, point, way): case(k, point, way)
                for k in ks for point in POINTS for way in WAYS}, args.rounds)
    print(f"{args.workload}, {args.turns} turns, DeltaPostgresSaver, get_state on a freshly "
          f"compiled graph, median of {args.rounds} interleaved rounds (ms). cold: a new saver "
          "per call (empty cache); cache_bytes=0: a new saver without cache; warm: one "
          "saver per K across rounds, its cache filled before the first.\n")
    print("| snapshot_frequency | stored | longest walk (ancestors) "
          + "".join(f"| {point}, {LABELS[way]} " for point in POINTS for way in WAYS) + "|")
    print("|---|---|---|" + "---|" * (len(POINTS) * len(WAYS)))
    for k in ks:
        r = rows[k]
        print(f"| {k} | {human_bytes(r['bytes'])} | {r['depth']} "
              + "".join(f"| {iv.stats(_name(k, point, way))['median_ms']:.1f} "
                        for point in POINTS for way in WAYS) + "|")
    ref = 100 if 100 in ks else ks[0]
    print(f"\nTime over K={ref}'s, median of the round-by-round ratios:\n")
    print("| snapshot_frequency "
          + "".join(f"| {point}, {LABELS[way]} " for point in POINTS for way in WAYS) + "|")
    print("|---|" + "---|" * (len(POINTS) * len(WAYS)))
    keys = [(point, way) for point in POINTS for way in WAYS]
    for k in ks:
        print(f"| {k} " + "".join(
            f"| {iv.ratio(_name(k, *key), _name(ref, *key))['median']:.2f}x " for key in keys)
            + "|")
    print("\nEach way over cache_bytes=0 at the same K and checkpoint, median of the "
          "round-by-round ratios:\n")
    others = [way for way in WAYS if way != "nocache"]
    print("| snapshot_frequency " + "".join(f"| {point}, {LABELS[way]} / cache_bytes=0 "
                                            for point in POINTS for way in others) + "|")
    print("|---|" + "---|" * (len(POINTS) * len(others)))
    for k in ks:
        print(f"| {k} " + "".join(
            f"| {iv.ratio(_name(k, point, way), _name(k, point, 'nocache'))['median']:.2f}x "
            for point in POINTS for way in others) + "|")


def _name(k: int, point: str, way: str) -> str:
    """The name of a timed call in the rounds."""
    return f"K={k} {point} {way}"


if __name__ == "__main__":
    main()
