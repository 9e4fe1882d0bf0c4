"""Do ``gc_paused()`` and the one-call model pickling of ``_cache/copies.py`` pay for
themselves, counted as a whole process? (issue 37: keep each only where a whole-process
measurement shows it a net win.)

    python scripts/gc_copies_whole_process.py --dsn DSN --db NAME --prepare [--turns 150]
    python scripts/gc_copies_whole_process.py --dsn DSN --db NAME --ab 8 [--work history]

``--prepare`` writes the bench's deepagents session (``langgraph_delta_postgres.bench.
agent``: scripted model, no network) for ``--turns`` turns on thread ``base`` of database
NAME (made, migrated and kept). ``--ab N`` then starts N rounds of child processes, one per
variant in each round, each a new Python
process that opens the saver the way the README tells users to
(``DeltaPostgresSaver.from_conn_string(dsn, pool_size=4)``) and does one piece of work:

* ``history``: a whole ``get_state_history`` pass of ``base`` on that new saver, then a
  second pass and 10 warm ``get_state`` (what a server answering a thread does);
* ``turns``: ``base`` copied to a new thread (``copy_thread``, untimed), then 10 more turns.

Variants: ``as-is`` (the package as shipped), ``no-pause`` (``gc_paused`` replaced by a
context that does nothing), ``plain-pickle`` (a proven model pickled by pickle's own
reduction, ``BUILD`` + ``__setstate__``, instead of one ``_model`` call; the proven-types
check unchanged). Each child times its work with the bench's ``timed`` from before the
work to after a final ``gc.collect()`` (so a collection the pause moved is counted
wherever it lands) and reports its process CPU time; the parent runs the children in the
bench's ``Interleaved`` rounds (the variants' order rotating round by round), which
time each child as a whole process. Printed: per variant the medians, and per pair the
median of pair-by-pair ratios B/A (above 1: the variant B is slower, so what it removes
was a win).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any

import psycopg
from psycopg import sql

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres.bench.agent.session import SCALES, _cfg, _turn_inputs, build_agent
from langgraph_delta_postgres.bench.databases import _dsn_with
from langgraph_delta_postgres.bench.timing import Interleaved, timed

VARIANTS = ("as-is", "no-pause", "plain-pickle")
MORE_TURNS = 10


def _apply(variant: str) -> None:
    if variant == "no-pause":
        from langgraph_delta_postgres._ops import checkpoints, history

        for mod in (history, checkpoints):
            mod.gc_paused = contextlib.nullcontext  # type: ignore[attr-defined]
    elif variant == "plain-pickle":
        from langgraph_delta_postgres._cache import copies

        one_call = copies._Pickler.reducer_override

        def build(self: Any, obj: Any) -> Any:
            got = one_call(self, obj)
            return NotImplemented if type(got) is tuple and got[0] is copies._model else got

        copies._Pickler.reducer_override = build  # type: ignore[method-assign]
    elif variant != "as-is":
        raise SystemExit(f"unknown variant {variant!r}")


def child(dsn: str, variant: str, work: str) -> None:
    _apply(variant)
    cpu0 = time.process_time()
    with DeltaPostgresSaver.from_conn_string(dsn, pool_size=4) as saver:
        graph = build_agent(saver, SCALES["full"].max_input_tokens)[0]
        if work == "turns":
            thread = f"t-{uuid.uuid4().hex[:8]}"
            saver.copy_thread("base", thread)
            start = len(graph.get_state(_cfg(thread)).values["messages"])

            def run() -> None:
                for i in range(MORE_TURNS):
                    graph.invoke(_turn_inputs(1000 + start + i), _cfg(thread))
                gc.collect()
        else:

            def run() -> None:
                for _ in range(2):
                    n = sum(1 for _ in graph.get_state_history(_cfg("base")))
                for _ in range(10):
                    graph.get_state(_cfg("base"))
                assert n > 0
                gc.collect()

        c0 = time.process_time()
        work_s = timed(run)
        work_cpu = time.process_time() - c0
        if work == "turns":
            saver.delete_thread(thread)
    print(json.dumps({"work_s": work_s, "work_cpu_s": work_cpu,
                      "process_cpu_s": time.process_time() - cpu0}))


def prepare(dsn: str, db: str, turns: int) -> str:
    from langgraph_delta_postgres.migrate import migrate

    with psycopg.connect(dsn, autocommit=True) as admin:
        if admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,)).fetchone():
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(db)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
    scratch = _dsn_with(dsn, dbname=db)
    with psycopg.connect(scratch, autocommit=True) as conn:
        migrate(conn)
    with DeltaPostgresSaver.from_conn_string(scratch) as saver:
        graph = build_agent(saver, SCALES["full"].max_input_tokens)[0]
        for i in range(turns):
            graph.invoke(_turn_inputs(i), _cfg("base"))
    return scratch


def ab(dsn: str, pairs: int, work: str, variants: list[str]) -> None:
    base, others = variants[0], variants[1:]
    iv = Interleaved()  # the whole child processes' times; the children's own, beside

    def run_child(v: str) -> None:
        out = subprocess.run(
            [sys.executable, __file__, "--child", "--dsn", dsn, "--variant", v,
             "--work", work],
            capture_output=True, text=True, check=True, env=os.environ,
        )
        got = json.loads(out.stdout.strip().splitlines()[-1])
        for key in ("work_s", "work_cpu_s"):
            iv.samples.setdefault(f"{v} {key}", []).append(got[key])
        done = [len(iv.samples.get(f"{x} work_s", [])) for x in variants]
        if min(done) == max(done):  # a round complete
            print(f"pair {done[0]}/{pairs}: " + ", ".join(
                f"{x} {iv.samples[f'{x} work_s'][-1] * 1000:.0f} ms" for x in variants),
                flush=True)

    iv.run({v: (lambda v=v: run_child(v)) for v in variants}, pairs, warmup=0)
    print(f"\n{work}: medians over {pairs} runs (load average {os.getloadavg()[0]:.2f} at the end)")
    for v in variants:
        print(f"  {v}: work {iv.stats(f'{v} work_s')['median_ms']:.0f} ms, "
              f"work CPU {iv.stats(f'{v} work_cpu_s')['median_ms']:.0f} ms, "
              f"whole process {iv.stats(v)['median_ms'] / 1000:.2f} s")
    for v in others:
        for key, a, b in (("work_s", f"{base} work_s", f"{v} work_s"),
                          ("work_cpu_s", f"{base} work_cpu_s", f"{v} work_cpu_s"),
                          ("process_s", base, v)):
            ratio = iv.ratio(b, a)["median"]
            print(f"  {v}/{base} {key}: {ratio:.3f}x (median of pair-by-pair ratios)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dsn", required=True)
    p.add_argument("--db", help="the database of the session (with --prepare / --ab)")
    p.add_argument("--prepare", action="store_true")
    p.add_argument("--turns", type=int, default=150)
    p.add_argument("--ab", type=int, metavar="PAIRS")
    p.add_argument("--work", choices=("history", "turns"), default="history")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--variant", help=argparse.SUPPRESS)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.dsn, args.variant, args.work)
        return
    if not args.db:
        p.error("--db NAME is required")
    dsn = _dsn_with(args.dsn, dbname=args.db)
    if args.prepare:
        prepare(args.dsn, args.db, args.turns)
        print(f"session of {args.turns} turns written to {args.db}")
    if args.ab:
        ab(dsn, args.ab, args.work, args.variants.split(","))


if __name__ == "__main__":
    main()
