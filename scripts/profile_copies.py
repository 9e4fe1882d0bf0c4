"""What a copy of a decoded value costs: ``pickle`` as is vs ``_cache/copies.py``.

    python scripts/profile_copies.py [--dsn DSN] [--turns 150] [--rounds 50] [--ab 5]
    python scripts/profile_copies.py --dsn DSN --db NAME [--turns 150] --times-only

Runs the bench's deepagents session (``langgraph_delta_postgres.bench.agent``: scripted
model, no network) for ``--turns`` turns on ``DeltaPostgresSaver`` (without --dsn on the
embedded Postgres, in a scratch database dropped afterwards), takes the head's
``messages`` (720 at 150 turns) and times, interleaved, a copy made with ``pickle.dumps``
/ ``pickle.loads`` and one made with ``copies.dumps`` / ``copies.loads`` (the collector
off, as the saver's answers are made). Checks that both copies equal the value, with the
same classes and the same attributes, and that ``copies.dumps`` takes every message (the
fast path: no value kept as its blob). Then, in ``--ab`` interleaved rounds, the saver's
``get_state`` of the head (warm: 31 calls a round; a new saver's first call) and a whole
``get_state_history`` pass, with proven models pickled as one ``_model`` call
("copies") and by pickle's own reduction, ``BUILD`` + ``__setstate__`` ("pickle": the
proven-types check the same). Prints medians (ms) and medians of pair-by-pair ratios. A
diagnostic: the speed claims are the bench's. Every timing goes through the bench's
harness (``Interleaved``: rounds in rotating order, ratios round by round; a copy is timed
as ``PER_SAMPLE`` calls, the collector off).

``--db NAME``: the session in database NAME of the server at --dsn (made on the first
run, kept). With ``--times-only``, only the saver's timings with the
``langgraph_delta_postgres`` that is imported, one JSON line: run it in turn with
PYTHONPATH set to two checkouts to compare them. ``--against PATH``: also time, in this
process and interleaved, the copies of the head's messages made by another checkout's
``_cache/copies.py`` (PATH) against this one's (median of pair-by-pair ratios: the load
of a shared machine moves both alike).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import pickle
import statistics
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from psycopg import sql

import langgraph_delta_postgres
from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._cache import copies
from langgraph_delta_postgres.bench.agent.session import SCALES, _cfg, build_agent, session_graphs
from langgraph_delta_postgres.bench.databases import _dsn_with, scratch_pair
from langgraph_delta_postgres.bench.savers import connect_ours
from langgraph_delta_postgres.bench.timing import Interleaved

THREAD = _cfg("agent-ours")  # session_graphs' thread of the saver named "ours"


#: calls of a copy per timed sample (one takes about 2 ms)
PER_SAMPLE = 5


def calls(fn: Any, arg: Any) -> Callable[[], None]:
    """A timed sample of ``fn(arg)``: PER_SAMPLE calls."""

    def run() -> None:
        for _ in range(PER_SAMPLE):
            fn(arg)

    return run


def per_call_ms(iv: Interleaved, name: str) -> float:
    return iv.stats(name)["median_ms"] / PER_SAMPLE


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--ab", type=int, default=5)
    ap.add_argument("--dsn")
    ap.add_argument("--db", help="keep the session in this database (made if missing)")
    ap.add_argument("--times-only", action="store_true")
    ap.add_argument("--against", help="another checkout's _cache/copies.py")
    args = ap.parse_args()
    if args.db:
        with kept_session(args.dsn, args.db, args.turns) as (conn, graph):
            if args.times_only:
                times_only(conn, graph, args.rounds)
                return
            run(conn, graph, args)
        return
    with scratch_pair(args.dsn, "copies") as (conn, _):
        graph = session_graphs({"ours": DeltaPostgresSaver(conn)}, args.turns)["ours"]
        run(conn, graph, args)


def run(conn: Any, graph: Any, args: Any) -> None:
    value = graph.get_state(THREAD).values["messages"]
    micro(value, args.rounds)
    if args.against:
        against(value, args.against, args.rounds)
    ab(lambda: graph.copy({"checkpointer": DeltaPostgresSaver(conn)}), args.ab)


def against(value: Any, path: str, rounds: int) -> None:
    """This checkout's copies vs the ones of ``path``, interleaved in this process."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("other_copies", path)
    assert spec is not None and spec.loader is not None
    other = sys.modules["other_copies"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)  # (its pickles name its _model by this module name)

    def other_loads(data: bytes) -> Any:
        if other.loads is pickle.loads:
            return pickle.loads(data)
        return other.loads(data, _no_decode)

    theirs, ours = other.dumps(value), copies.dumps(value)
    assert other_loads(theirs) == _copy_loads(ours) == value
    iv = Interleaved()
    gc.disable()
    try:
        iv.run({"ours dumps": calls(copies.dumps, value),
                "ours loads": calls(_copy_loads, ours),
                "other dumps": calls(other.dumps, value),
                "other loads": calls(other_loads, theirs)}, rounds, warmup=0)
    finally:
        gc.enable()
    for k in ("dumps", "loads"):
        r = iv.ratio(f"ours {k}", f"other {k}")
        # the quartiles of the same pair-by-pair ratios (_cache/copies.py quotes them)
        pairs = [x / y for x, y in zip(iv.samples[f"ours {k}"], iv.samples[f"other {k}"],
                                        strict=True)]
        q = statistics.quantiles(pairs, n=4) if len(pairs) > 1 else [r["median"]] * 3
        print(f"{k}: this checkout / {path}, median of pairs: {r['median']:.3f}x "
              f"(quartiles {q[0]:.3f}-{q[2]:.3f}; {r['min']:.3f}-{r['max']:.3f})")


@contextlib.contextmanager
def kept_session(dsn: str, db: str, turns: int) -> Iterator[tuple[Any, Any]]:
    """The session's graph on database ``db`` of the server at ``dsn``, written on the
    first run."""
    from langgraph_delta_postgres.migrate import migrate

    with psycopg.connect(dsn, autocommit=True) as admin:
        made = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,)).fetchone()
        if made is None:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
    scratch = _dsn_with(dsn, dbname=db)
    if made is None:
        with psycopg.connect(scratch, autocommit=True) as conn:
            migrate(conn)
    with connect_ours(scratch) as conn:
        if made is None:
            session_graphs({"ours": DeltaPostgresSaver(conn)}, turns)
        yield conn, build_agent(DeltaPostgresSaver(conn), SCALES["full"].max_input_tokens)[0]


def _copy_loads(data: bytes) -> Any:
    """``copies.loads`` of this checkout (one argument before it took ``decode``)."""
    loads: Any = copies.loads
    if loads is pickle.loads:
        return pickle.loads(data)
    return copies.loads(data, _no_decode)


def _no_decode(typed: Any) -> Any:
    raise AssertionError("a message was kept as its blob")


def micro(value: Any, rounds: int) -> None:
    plain, ours = pickle.dumps(value, protocol=5), copies.dumps(value)
    assert type(ours) is bytes  # every message proven: nothing kept as a blob
    for data in (plain, ours):
        got = _copy_loads(data)
        assert got == value and [type(m) for m in got] == [type(m) for m in value]
        assert [vars(m) for m in got] == [vars(m) for m in value]
    iv = Interleaved()
    gc.disable()
    try:
        iv.run({"dumps": calls(lambda v: pickle.dumps(v, protocol=5), value),
                "copies.dumps": calls(copies.dumps, value),
                "loads": calls(pickle.loads, plain),
                "copies.loads": calls(_copy_loads, ours)}, rounds, warmup=0)
    finally:
        gc.enable()
    print(f"{len(value)} messages; pickle {len(plain):,} bytes, copies {len(ours):,} bytes")
    for k in iv.samples:
        print(f"{k}: {per_call_ms(iv, k):.2f} ms")
    for a, b in (("loads", "copies.loads"), ("dumps", "copies.dumps")):
        print(f"{a} / {b}, median of pairs: {iv.ratio(a, b)['median']:.2f}x")


_ONE_CALL = copies._Pickler.reducer_override


def _build(self: Any, obj: Any) -> Any:
    """The "pickle" variant: a proven model as pickle reduces it (``BUILD`` +
    ``__setstate__``), everything else (the check included) as copies does."""
    got = _ONE_CALL(self, obj)
    return NotImplemented if type(got) is tuple and got[0] is copies._model else got


def use(one_call: bool) -> None:
    copies._Pickler.reducer_override = _ONE_CALL if one_call else _build  # type: ignore[method-assign]


OPS: dict[str, Callable[[Any], Any]] = {
    "get_state warm (31 calls)": lambda g: [g.get_state(THREAD).values for _ in range(31)],
    "get_state, a new saver": lambda g: g.get_state(THREAD).values,
    "whole history pass": lambda g: [s.values for s in g.get_state_history(THREAD)],
}


def ab(new_graph: Any, rounds: int) -> None:
    variants = {"copies": True, "pickle": False}
    for what, op in OPS.items():
        warm = {}
        for name, one_call in variants.items():  # each warm saver's cache made its own way
            use(one_call)
            warm[name] = new_graph()
            op(warm[name])

        def case(name: str, op: Callable[[Any], Any] = op, what: str = what,
                 warm: dict[str, Any] = warm) -> Any:
            def prepare() -> Any:
                use(variants[name])
                return warm[name] if "warm" in what else new_graph()

            return prepare, op

        iv = Interleaved()  # the two variants alternate round by round
        iv.run({name: case(name) for name in variants}, rounds, warmup=0)
        use(True)
        print(f"{what}: pickle {iv.stats('pickle')['median_ms']:.1f} ms, copies "
              f"{iv.stats('copies')['median_ms']:.1f} ms, pickle/copies "
              f"{iv.ratio('pickle', 'copies')['median']:.2f}x")


def times_only(conn: Any, graph: Any, rounds: int) -> None:
    """One JSON line: the median ms of each op over ``rounds`` (the warm saver warmed
    first), and of a copy of the head's messages with this checkout's copies."""
    value = graph.get_state(THREAD).values["messages"]
    data = copies.dumps(value)
    iv = Interleaved()
    gc.disable()
    try:
        iv.run({"copies.loads": calls(_copy_loads, data),
                "copies.dumps": calls(copies.dumps, value)}, 50, warmup=0)
    finally:
        gc.enable()
    out: dict[str, Any] = {"package": langgraph_delta_postgres.__file__,
                           "copies.loads": per_call_ms(iv, "copies.loads"),
                           "copies.dumps": per_call_ms(iv, "copies.dumps")}
    warm = graph.copy({"checkpointer": DeltaPostgresSaver(conn)})
    for what, op in OPS.items():
        def make(what: str = what) -> Any:
            if "warm" in what:
                return warm
            return graph.copy({"checkpointer": DeltaPostgresSaver(conn)})

        ops = Interleaved()  # the warm saver warmed by one call first
        ops.run({what: (make, op)}, rounds, warmup=1 if "warm" in what else 0)
        out[what] = ops.stats(what)["median_ms"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
