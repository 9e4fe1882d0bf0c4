"""Two versions of this package side by side on the benchmark's loads, in one run.

    python scripts/ab_versions.py --base PATH [--new PATH] [--scale quick|full] [--rounds 15]
                                  [--only messages:resume_loop:warm,...]

``--base`` / ``--new``: checkouts of the package (e.g. ``git worktree add /tmp/base REF``;
``--new`` defaults to this checkout). The threads of the benchmark's loads section
(langgraph_delta_postgres/bench/loads.py: written by the official saver, adopted by the
new checkout's migrations) are loaded by one worker process per checkout, each importing
its own package; the coordinator asks them in turn (A B, then B A, round by round: the
bench's ``Interleaved``, the workers timing each call with its ``timed`` and reporting the
seconds) for the same timed call and prints, per case, the median of the pair-by-pair
ratios new/base (above 1: the new version is slower). Cases: the resume loop (saver
calls, and get_state through the graph) and a history page, each cold (a new saver per
call), warm (one saver kept) and with ``cache_bytes=0``. Without ``--dsn``, an embedded Postgres.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import subprocess
import sys
from pathlib import Path

CASES = ("resume_loop", "resume_loop_graph", "history_page")
MODES = ("cold", "warm", "nocache")


def worker(dsn: str, scale: str) -> None:
    from langgraph_delta_postgres import DeltaPostgresSaver
    from langgraph_delta_postgres.bench import loads

    try:
        from langgraph_delta_postgres.bench.savers import connect_ours
        from langgraph_delta_postgres.bench.timing import timed
    except ImportError:  # a checkout from before bench/common.py was split (issue 39)
        from langgraph_delta_postgres.bench.common import (  # type: ignore[no-redef]
            connect_ours,
            timed,
        )

    conn = connect_ours(dsn)
    specs = {t.key: t for t in loads.threads_for(scale)}
    tails = {k: loads._chain_tail(conn, k, loads.RESUME_LOOP) for k in specs}
    warm = DeltaPostgresSaver(conn)
    makers = {
        "cold": lambda: DeltaPostgresSaver(conn),
        "warm": lambda: warm,
        "nocache": lambda: DeltaPostgresSaver(conn, cache_bytes=0),
    }
    fns = {
        "resume_loop": loads._saver_loop,
        "resume_loop_graph": loads._loop,
        "history_page": loads._page,
    }
    print(json.dumps({"ready": str(Path(loads.__file__).resolve())}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        t = specs[req["thread"]]
        prep, call = fns[req["case"]](t, tails[t.key], makers[req["mode"]])
        arg = prep()
        gc.collect()
        print(json.dumps({"t": timed(lambda call=call, arg=arg: call(arg))}), flush=True)


class Worker:
    def __init__(self, checkout: str, dsn: str, scale: str) -> None:
        env = {**os.environ, "PYTHONPATH": checkout}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", "--dsn", dsn, "--scale", scale],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )
        ready = json.loads(self._read())
        assert ready["ready"].startswith(str(Path(checkout).resolve())), (checkout, ready)

    def _read(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("worker died")
        return line

    def time(self, **req: str) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return float(json.loads(self._read())["t"])

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def build(dsn: str, scale: str) -> None:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver

    from langgraph_delta_postgres._local.workloads import build_graph, run_turns
    from langgraph_delta_postgres.bench import loads
    from langgraph_delta_postgres.bench.savers import connect_official
    from langgraph_delta_postgres.migrate import migrate

    with connect_official(dsn) as off_conn:
        writer = PostgresSaver(off_conn)
        writer.setup()
        for t in loads.threads_for(scale):
            print(f"writing {t.key} with the official saver", file=sys.stderr)
            g = build_graph(t.workload, writer, snapshot_frequency=t.freq)
            run_turns(g, t.workload, t.key, t.turns)
    with psycopg.connect(dsn, autocommit=True) as admin:
        migrate(admin)
        admin.execute("ANALYZE")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base")
    ap.add_argument("--new", default=str(Path(__file__).resolve().parent.parent))
    ap.add_argument("--dsn")
    ap.add_argument("--scale", default="quick", choices=("quick", "full", "tiny"))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--only", help="comma-separated THREAD_PREFIX:CASE:MODE filters, e.g. "
                    "messages:resume_loop:warm (a part left empty matches all)")
    args = ap.parse_args()
    if args.worker:
        worker(args.dsn, args.scale)
        return
    if not args.base:
        ap.error("--base is required")
    from langgraph_delta_postgres._local.embedded import embedded_postgres
    from langgraph_delta_postgres.bench import loads
    from langgraph_delta_postgres.bench.timing import Interleaved

    with contextlib.ExitStack() as stack:
        dsn = args.dsn or stack.enter_context(embedded_postgres())
        build(dsn, args.scale)
        a, b = Worker(args.base, dsn, args.scale), Worker(args.new, dsn, args.scale)
        try:
            print(f"new/base, median of {args.rounds} pair-by-pair ratios "
                  f"(above 1: new slower); medians in ms")
            for t in loads.threads_for(args.scale):
                for case in CASES:
                    for mode in MODES:
                        if args.only and not any(
                            t.key.startswith(f[0]) and f[1] in ("", case) and f[2] in ("", mode)
                            for f in (x.split(":") for x in args.only.split(","))
                        ):
                            continue
                        req = {"thread": t.key, "case": case, "mode": mode}
                        iv = Interleaved()  # one warm-up call each (plans, caches)
                        iv.run({"base": lambda req=req: a.time(**req),
                                "new": lambda req=req: b.time(**req)},
                               args.rounds, reported=True)
                        print(f"{t.key:22s} {case:18s} {mode:8s} "
                              f"{iv.ratio('new', 'base')['median']:.3f}x  "
                              f"(base {iv.stats('base')['median_ms']:.1f}, "
                              f"new {iv.stats('new')['median_ms']:.1f})", flush=True)
        finally:
            a.close()
            b.close()


if __name__ == "__main__":
    main()
