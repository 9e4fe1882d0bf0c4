"""What a copy of a decoded value costs: ``pickle`` as is vs ``_cache/copies.py``.

    python scripts/profile_copies.py [--dsn DSN] [--turns 150] [--rounds 50] [--ab 5]

Runs the bench's deepagents session (``langgraph_delta_postgres.bench.agent``: scripted
model, no network) for ``--turns`` turns on ``DeltaPostgresSaver`` (without --dsn on the
embedded Postgres, in a scratch database dropped afterwards), takes the head's
``messages`` (720 at 150 turns) and times, interleaved, a copy made with ``pickle.dumps``
/ ``pickle.loads`` and one made with ``copies.dumps`` / ``copies.loads`` (the collector
off, as the saver's answers are made). Checks that both copies equal the value, with the
same classes and the same attributes. Then, in ``--ab`` interleaved rounds, the saver's
``get_state`` of the head (warm: 31 calls a round; a new saver's first call) and a whole
``get_state_history`` pass, with the saver's pickles made by ``copies.dumps`` and by
``pickle.dumps`` (the modules' ``dumps`` swapped). Prints medians (ms) and medians of
pair-by-pair ratios. A diagnostic: the speed claims are the bench's.
"""

from __future__ import annotations

import argparse
import gc
import pickle
import statistics
import time
from typing import Any

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._cache import copies, store
from langgraph_delta_postgres._ops import listed, values
from langgraph_delta_postgres.bench.agent import _cfg, session_graphs
from langgraph_delta_postgres.bench.common import scratch_pair

THREAD = _cfg("agent-ours")  # session_graphs' thread of the saver named "ours"


def per_call_ms(fn: Any, arg: Any, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn(arg)
    return (time.perf_counter() - t0) / n * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--ab", type=int, default=5)
    ap.add_argument("--dsn")
    args = ap.parse_args()
    with scratch_pair(args.dsn, "copies") as (conn, _):
        graph = session_graphs({"ours": DeltaPostgresSaver(conn)}, args.turns)["ours"]
        value = graph.get_state(THREAD).values["messages"]
        micro(value, args.rounds)
        ab(lambda: graph.copy({"checkpointer": DeltaPostgresSaver(conn)}), args.ab)


def micro(value: Any, rounds: int) -> None:
    plain, ours = pickle.dumps(value, protocol=5), copies.dumps(value)
    for data in (plain, ours):
        got = copies.loads(data)
        assert got == value and [type(m) for m in got] == [type(m) for m in value]
        assert [vars(m) for m in got] == [vars(m) for m in value]
    times: dict[str, list[float]] = {k: [] for k in ("dumps", "copies.dumps", "loads",
                                                     "copies.loads")}
    gc.disable()
    try:
        for _ in range(rounds):
            times["dumps"].append(per_call_ms(lambda v: pickle.dumps(v, protocol=5), value, 5))
            times["copies.dumps"].append(per_call_ms(copies.dumps, value, 5))
            times["loads"].append(per_call_ms(pickle.loads, plain, 5))
            times["copies.loads"].append(per_call_ms(copies.loads, ours, 5))
    finally:
        gc.enable()
    print(f"{len(value)} messages; pickle {len(plain):,} bytes, copies {len(ours):,} bytes")
    for k, v in times.items():
        print(f"{k}: {statistics.median(v):.2f} ms")
    pairs = zip(times["loads"], times["copies.loads"], strict=True)
    ratio = statistics.median(a / b for a, b in pairs)
    print(f"loads / copies.loads, median of pairs: {ratio:.2f}x")


def use(dumps: Any) -> None:
    store.dumps = values.dumps = listed.dumps = dumps  # type: ignore[attr-defined]


def ab(new_graph: Any, rounds: int) -> None:
    variants = {"copies": copies.dumps, "pickle": lambda v: pickle.dumps(v, protocol=5)}
    ops = {
        "get_state warm (31 calls)": lambda g: [g.get_state(THREAD).values for _ in range(31)],
        "get_state, a new saver": lambda g: g.get_state(THREAD).values,
        "whole history pass": lambda g: [s.values for s in g.get_state_history(THREAD)],
    }
    for what, op in ops.items():
        warm = {}
        for name, dumps in variants.items():  # each warm saver's cache made its own way
            use(dumps)
            warm[name] = new_graph()
            op(warm[name])
        times: dict[str, list[float]] = {name: [] for name in variants}
        for r in range(rounds):
            for name in list(variants)[r % 2:] + list(variants)[: r % 2]:
                use(variants[name])
                g = warm[name] if "warm" in what else new_graph()
                gc.collect()
                t0 = time.perf_counter()
                got = op(g)
                times[name].append(time.perf_counter() - t0)
                del got
        use(copies.dumps)
        pairs = zip(times["pickle"], times["copies"], strict=True)
        ratio = statistics.median(a / b for a, b in pairs)
        print(f"{what}: pickle {statistics.median(times['pickle']) * 1000:.1f} ms, copies "
              f"{statistics.median(times['copies']) * 1000:.1f} ms, pickle/copies {ratio:.2f}x")


if __name__ == "__main__":
    main()
