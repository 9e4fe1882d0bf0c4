"""Command line: ``langgraph-delta-pg`` (also ``python -m langgraph_delta_postgres``)."""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from .. import __version__
from .. import migrate as _migrate
from .._sql import check_schema
from . import postgres as _embedded
from ._util import CliError, connect_to, db_error

#: Exit code of ``status`` when migrations are pending (0: up to date; 1: drift or an
#: error; 2: bad arguments).
EXIT_PENDING = 3


def _with_conn(args: argparse.Namespace, body: Callable[[psycopg.Connection[Any]], int]) -> int:
    try:
        with connect_to(args, unreachable_hint="is the server running, and the DSN right?") as conn:
            return body(conn)
    except _migrate.MigrationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except psycopg.Error as e:
        err = db_error(e)
        print(f"error: {err}", file=sys.stderr)
        return err.code
    except CliError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code


def cmd_migrate(args: argparse.Namespace) -> int:
    def body(conn: psycopg.Connection[Any]) -> int:
        applied = _migrate.migrate(conn, schema=args.schema)
        for m in applied:
            print(f"applied {m.name}")
        if not applied:
            print("up to date: no pending migrations")
        return 0

    return _with_conn(args, body)


def cmd_status(args: argparse.Namespace) -> int:
    def body(conn: psycopg.Connection[Any]) -> int:
        st = _migrate.status(conn, schema=args.schema)
        drifted = {a.version for a, _ in st.drifted}
        for a in st.applied:
            mark = "DRIFT  " if a.version in drifted else "applied"
            when = a.applied_at.isoformat(timespec="seconds") if a.applied_at else "?"
            print(f"{mark} {a.name:<40} sha256:{a.checksum[:12]}  {when}  {a.duration_ms} ms")
        for m in st.pending:
            print(f"pending {m.name:<40} sha256:{m.checksum[:12]}")
        if st.drifted:
            print("\ndrift:\n" + _migrate.describe_drift(st), file=sys.stderr)
            return 1
        print(f"\n{len(st.applied)} applied, {len(st.pending)} pending")
        if st.schema_missing:
            print(
                f"schema {args.schema!r} does not exist: `langgraph-delta-pg migrate "
                f"--schema {shlex.quote(args.schema)}` creates it",
                file=sys.stderr,
            )
        return EXIT_PENDING if st.pending else 0

    return _with_conn(args, body)


def cmd_postgres(args: argparse.Namespace) -> int:
    """Serve the embedded Postgres until Ctrl-C / SIGTERM: the DSN is stdout's first line."""
    where = f"data kept in {args.dir}" if args.dir else "a temporary directory, removed on exit"
    try:
        with _embedded.started(args.dir, fallback="use a Postgres you run instead") as dsn:
            try:  # a stop as soon as the DSN is out (a service manager's) is a stop too
                print(dsn, flush=True)
                print(
                    f"Postgres is running ({where}); Ctrl-C or SIGTERM stops it.\n"
                    f"  export LANGGRAPH_DELTA_PG_DSN='{dsn}'   # Agent Server checkpointer\n"
                    f"  export DATABASE_URL='{dsn}'   # langgraph-delta-pg migrate / inspect / "
                    "demo",
                    file=sys.stderr,
                    flush=True,
                )
                threading.Event().wait()
            except KeyboardInterrupt:
                pass
            print("stopping Postgres", file=sys.stderr, flush=True)
    except CliError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse's parser, but its own output (``--help``, ``--version``, usage errors) on
    a closed pipe ends as every other command's output does (exit 141, see :func:`main`):
    argparse drops an OSError of that write, which made ``--version | true`` exit 0 when
    the write is unbuffered (``PYTHONUNBUFFERED``) and 141 when it is not. Subcommand
    parsers are of this class too (``add_subparsers`` uses the parent's class)."""

    def _print_message(self, message: str, file: Any = None) -> None:
        if message:
            (file or sys.stderr).write(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="langgraph-delta-pg",
        description="Postgres checkpointer for LangGraph with SQL-side DeltaChannel history",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    for name, func, helptext, description in (
        ("migrate", cmd_migrate, "apply pending migrations", None),
        (
            "status",
            cmd_status,
            "applied / pending migrations, checksums, drift",
            "Exit codes: 0 up to date; 1 drift or an error; 2 bad arguments; "
            f"{EXIT_PENDING} migrations pending (run `langgraph-delta-pg migrate`).",
        ),
    ):
        sp = sub.add_parser(name, help=helptext, description=description)
        sp.add_argument("--dsn", help="Postgres connection string (default: $DATABASE_URL)")
        sp.add_argument("--schema", default=None, help="Postgres schema (default: search_path)")
        sp.set_defaults(func=func)
    sp = sub.add_parser(
        "postgres",
        help="run a local Postgres (embedded extra); prints its DSN, serves until Ctrl-C",
        description="Start the embedded Postgres of the 'embedded' extra and print its DSN "
        "as the first line of stdout; serve until Ctrl-C or SIGTERM, then stop it and remove "
        "everything it made (with --dir: keep the data directory for the next start).",
    )
    sp.add_argument(
        "--dir",
        metavar="PATH",
        help="keep the data in this directory (created if missing, reused if it holds data)",
    )
    sp.set_defaults(func=cmd_postgres)
    for name, module, helptext in (
        ("bench", "..bench.main", "benchmark against the official saver"),
        ("demo", ".demo", "run a long agent session on the embedded Postgres"),
        ("inspect", ".inspect", "show one thread's checkpoints and delta state"),
        ("prune", ".prune", "delete old checkpoints, keeping what DeltaChannel state needs"),
    ):
        try:
            mod = importlib.import_module(module, __package__)  # relative to cli/
        except ImportError:
            continue
        sp = sub.add_parser(name, help=helptext)
        mod.add_arguments(sp)
        sp.set_defaults(func=mod.run)
    return p


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM ends the command like Ctrl-C does: through the finally blocks that stop
    # an embedded Postgres and remove its directory.
    raise KeyboardInterrupt


#: The exit code of a command whose output's reader went away (``| head``): that of a
#: Unix tool killed by SIGPIPE (128 + 13).
EXIT_BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the one place where a closed output pipe ends every command
    (``inspect ... | head``, ``status | true``, ``prune ... | head -c1``): exit 141, no
    traceback, nothing more written."""
    try:
        try:
            code = _main(argv)
        except SystemExit as e:  # --help, --version, a usage error: printed, then exit
            if isinstance(e.__context__, BrokenPipeError):
                # rich's Console (prune's table) answers a closed pipe with SystemExit(1)
                raise e.__context__ from None
            sys.stdout.flush()
            raise
        sys.stdout.flush()  # a closed pipe shows here, not as exit 120 at interpreter exit
        return code
    except BrokenPipeError:
        # no traceback, and nothing more written (Python's own flush of stdout at exit
        # would fail again: exit 120)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:  # every command's --schema: refused before anything connects
        check_schema(getattr(args, "schema", None))
    except ValueError as e:
        parser.error(f"--schema: {e}")
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
