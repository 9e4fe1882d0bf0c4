"""``langgraph-delta-pg bench``: this saver against the official ``PostgresSaver`` 3.2.

What runs (one database, one thread per saver and workload):

* real compiled graphs (:mod:`.workloads`): ``messages`` (snapshot_frequency swept),
  ``coding_a``, ``coding_b`` on four savers -- ours with ``DeltaChannel`` fields, the
  official saver with the same fields, ours with classic full-snapshot fields (the
  O(N^2) baseline) and ``InMemorySaver`` (latency reference). Storage is the growth of
  ``pg_total_relation_size`` of the three tables (TOAST and indexes included) while
  that saver's thread grew; resume is ``get_state`` on a newly compiled graph.
* micro-benchmarks of ``get_delta_channel_history`` on the same rows for both savers:
  depth, channel count, forks, rows written by the official saver, 10,000 other threads,
  with statements (counted at the driver), wire round trips and bytes (counted by a
  loopback proxy), and the floor: deserializing the returned values + one ``SELECT 1``.
* every history / resume figure at 0 ms (direct) and 0.5 / 2 ms RTT (a loopback proxy
  that delays each direction by RTT/2).

Timings are medians of repeated, interleaved rounds (the order rotates every round)
with min/max; ratios are computed round by round.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

from .._local.install import install_hint

BENCH_INSTALL_HINT = install_hint("bench")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Benchmark DeltaPostgresSaver against the official PostgresSaver 3.2 (same database, "
        "same rows). Needs the 'bench' extra: " + BENCH_INSTALL_HINT
    )
    p.add_argument(
        "--dsn",
        help="a Postgres where a scratch database (or, without CREATEDB, a schema) is "
        "created for the run and dropped afterwards (default: an embedded Postgres)",
    )
    p.add_argument(
        "--quick", action="store_true", help="smoke run: a few minutes (2-10 on 2 cores, by load)"
    )
    p.add_argument("--json", metavar="PATH", help="write machine-readable results here")
    p.add_argument("--out", metavar="DIR",
                   help="write DIR/benchmarks.md (summary), DIR/design/benchmarks-detail.md "
                   "(per-section detail) and DIR/img/*.png (plots)")
    p.add_argument("--scale", choices=("full", "quick", "tiny"), help=argparse.SUPPRESS)
    p.add_argument(
        "--only", choices=("retention", "load", "agent", "replicas", "writes"),
        help="run only this part of the benchmark (agent: a deepagents session, needs the "
        "'bench' extra's deepagents; replicas: starts a hot standby of the "
        "server, see docs/replicas.md; writes: a Send fan-out and concurrent runs on one "
        "thread)",
    )


def _missing_deps() -> list[str]:
    missing = []
    try:
        import langgraph.checkpoint.postgres  # noqa: F401
    except ImportError:
        missing.append("langgraph-checkpoint-postgres")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        missing.append("matplotlib")
    return missing


@contextlib.contextmanager
def _server(dsn: str | None) -> Iterator[tuple[str, str]]:
    if dsn:
        yield dsn, "--dsn"
        return
    from .._local.embedded import embedded_postgres

    with embedded_postgres() as d:
        yield d, "embedded (pgserver)"


def _command_line(args: argparse.Namespace) -> str:
    parts = ["langgraph-delta-pg", "bench"]
    if args.dsn:
        parts += ["--dsn", "<DSN>"]
    if args.quick:
        parts.append("--quick")
    if getattr(args, "scale", None):
        parts += ["--scale", args.scale]
    if getattr(args, "only", None):
        parts += ["--only", args.only]
    if args.json:
        parts += ["--json", args.json]
    if args.out:
        parts += ["--out", args.out]
    return shlex.join(parts)


def run(args: argparse.Namespace) -> int:
    missing = _missing_deps()
    if getattr(args, "only", None) == "agent":
        from .agent.session import available

        if not available():
            missing.append("deepagents")
    if missing:
        print(
            f"error: the benchmark needs {' and '.join(missing)}: {BENCH_INSTALL_HINT}",
            file=sys.stderr,
        )
        return 2
    from .._local.embedded import EmbeddedPostgresUnavailable

    scale_name = getattr(args, "scale", None) or ("quick" if args.quick else "full")
    from .scales import scales

    scale = scales()[scale_name]
    import psycopg

    try:
        if getattr(args, "only", None) == "retention":
            from .retention import run_alone

            results = run_alone(args, scale_name, _server, _command_line(args))
        elif getattr(args, "only", None) == "replicas":
            from .replicas.section import run_alone as run_replicas_alone

            results = run_replicas_alone(args, scale_name, _server, _command_line(args))
        elif getattr(args, "only", None) == "agent":
            from .agent.section import run_alone as run_agent_alone

            results = run_agent_alone(args, scale_name, _server, _command_line(args))
        elif getattr(args, "only", None) == "writes":
            from .writes import run_alone as run_writes_alone

            results = run_writes_alone(args, scale_name, _server, _command_line(args))
        elif getattr(args, "only", None) == "load":
            from .load.section import run_alone as run_load_alone

            results = run_load_alone(args, scale_name, _server, _command_line(args))
        else:
            from .full import run_full

            results = run_full(args, scale, _server, _command_line(args))
    except EmbeddedPostgresUnavailable as e:
        print(f"error: {e}; or pass --dsn to a Postgres you run", file=sys.stderr)
        return e.code
    except psycopg.OperationalError as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
        print(f"error: the database failed during the run: {msg}", file=sys.stderr)
        return 1
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1, default=str) + "\n")
        print(f"wrote {args.json}")
    if "agent" in results and "headline" not in results:  # --only agent
        from .agent.section import headline as agent_headline

        if args.out:
            from .report import write_agent_report

            print(f"wrote {write_agent_report(results, Path(args.out))}")
        for k, v in agent_headline(results).items():
            print(f"  {k}: " + ", ".join(
                f"{a}={b:.2f}" if isinstance(b, float) else f"{a}={b}" for a, b in v.items()))
        return 0
    if "headline" not in results:  # --only: no headline; load writes its own page
        if args.out and "load" in results:
            from .report import write_load_report

            for p in write_load_report(results, Path(args.out)):
                print(f"wrote {p}")
        return 0
    if args.out:
        from .report import write_report

        paths = write_report(results, Path(args.out))
        for p in paths:
            print(f"wrote {p}")
    from .full import print_headline

    print_headline(results)
    return 0
