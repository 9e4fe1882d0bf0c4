"""``langgraph-delta-pg demo``: one agent session on this package and on the official saver.

Runs the ``coding_b`` workload of :mod:`.._local.workloads` (a real compiled LangGraph graph with
a deterministic fake model: two 8 KB file writes, a 5 KB search result and a ~200-token
answer per turn, a 100 KB result every 5 turns) for ``--turns`` user turns with its state
fields declared as ``DeltaChannel``, three times in the same tables of one database:

* on :class:`DeltaPostgresSaver` (this package),
* on the official ``PostgresSaver`` of ``langgraph-checkpoint-postgres`` (its connection's
  ``search_path`` points at the demo schema; our migrations made those tables and the
  official saver reads and writes them as its own),
* and, for storage only, on this package with classic full-snapshot fields
  (``add_messages`` / a dict merge): the O(N^2) baseline DeltaChannel avoids on either saver.

Then, for this package and the official saver side by side:

* resume: ``get_state`` on a freshly compiled graph, median of 5, at the latest checkpoint
  and at the deepest one (the most supersteps since a snapshot: where a load walks
  furthest; the latest may itself hold a snapshot);
* a history page: ``get_state_history(limit=10)`` on a fresh graph, median of 3;
* statements: executes counted at each saver's psycopg cursor during one deepest resume
  and one history page;
* the session's run time and the stored bytes: the per-thread sum of ``pg_column_size``
  over the three tables (``inspect.storage`` in ``sql/inspect.sql``: the payload as
  stored, after TOAST compression; keys and indexes not counted).

Each connection is opened as the saver's ``from_conn_string`` opens it (ours: prepared
statements with generic plans; the official: ``prepare_threshold=0``, ``dict_row``).

Where: with ``--dsn`` / ``DATABASE_URL``, a fresh schema of that database, dropped
afterwards unless ``--keep``; otherwise the embedded Postgres of the ``embedded`` extra,
removed with its temporary directory on exit, error or Ctrl-C.

Measured with ``langgraph-delta-pg demo`` (80 turns) on a 2-core machine shared with
other work: 45 to 70 s, most of it the full-snapshot baseline (its time grows with the
square of the turns and with the machine's load).

The session and its measurements are in :mod:`.demo_session`, the table and the chart in
:mod:`.demo_report`.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import uuid
from collections.abc import Callable
from typing import TextIO

import psycopg

from langgraph_delta_postgres._local.install import install_hint
from langgraph_delta_postgres._sql import Queries
from langgraph_delta_postgres.cli import postgres as _embedded
from langgraph_delta_postgres.cli._util import CliError, connect, db_error, resolve_dsn
from langgraph_delta_postgres.cli.demo_report import render_table, write_plot
from langgraph_delta_postgres.cli.demo_session import Variant, open_savers, run_session

DEFAULT_TURNS = 80
DEMO_HINT = install_hint("demo")
PLOT_HINT = install_hint("bench")


def missing_deps() -> list[str]:
    """The demo's packages (the ``demo`` extra) that are not installed."""
    missing = []
    for module, package in (
        ("langgraph.checkpoint.postgres", "langgraph-checkpoint-postgres"),
        ("tqdm", "tqdm"),
    ):
        try:
            __import__(module)
        except ImportError:
            missing.append(package)
    return missing


# ---------------------------------------------------------------------- command


def add_arguments(p: argparse.ArgumentParser) -> None:
    def positive(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if n < 1:
            raise argparse.ArgumentTypeError("must be at least 1")
        return n

    p.add_argument(
        "--turns",
        type=positive,
        default=DEFAULT_TURNS,
        help=f"user turns (default {DEFAULT_TURNS}: about a minute on 2 cores)",
    )
    p.add_argument(
        "--dsn",
        help="run in a fresh schema of this database (default: $DATABASE_URL; "
        "with neither, an embedded Postgres that is removed on exit)",
    )
    p.add_argument("--keep", action="store_true", help="with --dsn: keep the demo's schema")
    p.add_argument("--plot", metavar="FILE.png", help="chart storage and resume vs turns")


def _drop_schema(dsn: str, schema: str, err: TextIO) -> None:
    try:
        with connect(dsn, unreachable_hint="the server went away") as conn:
            conn.execute(Queries(schema)["inspect.drop_schema"])
    except (CliError, psycopg.Error) as e:
        print(
            f"warning: could not drop the demo schema {schema!r} ({e}): "
            f'drop it by hand: DROP SCHEMA "{schema}" CASCADE',
            file=err,
        )


def _official_version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("langgraph-checkpoint-postgres")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - checked earlier
        return "?"


def _demo(args: argparse.Namespace) -> int:
    missing = missing_deps()
    if missing:
        print(f"error: the demo needs {' and '.join(missing)}: {DEMO_HINT}", file=sys.stderr)
        return 2
    plotter: Callable[[str, list[Variant], int], None] | None = None
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print(f"error: --plot needs matplotlib: {PLOT_HINT}", file=sys.stderr)
            return 2
        plotter = write_plot
    dsn = resolve_dsn(args)
    embedded = dsn is None
    if embedded and args.keep:
        print(
            "note: --keep has no effect on the embedded Postgres, which is removed on exit; "
            "pass --dsn to keep the data",
            file=sys.stderr,
        )
    schema = f"lgdp_demo_{uuid.uuid4().hex[:10]}"
    with contextlib.ExitStack() as stack:
        if dsn is None:
            dsn = stack.enter_context(
                _embedded.started(fallback="pass --dsn / set DATABASE_URL to a Postgres you run")
            )
            where = "the embedded Postgres {version} (removed on exit)"
            hint = "the embedded server stopped unexpectedly"
        else:
            where = f'Postgres {{version}}, schema "{schema}"'
            hint = "is Postgres running there? check host and port in --dsn / DATABASE_URL"
        created = False
        try:
            with connect(dsn, unreachable_hint=hint) as probe:
                version = probe.execute(Queries(schema)["inspect.server_version"]).fetchone()
            with contextlib.ExitStack() as conns:
                created = True
                conn, variants = open_savers(conns, dsn, schema)
                deep_step = run_session(
                    conn, schema, variants, args.turns, sample=plotter is not None
                )
        except psycopg.Error as e:
            raise db_error(e) from None
        finally:
            if created and not embedded and not args.keep:
                _drop_schema(dsn, schema, sys.stderr)
        where = where.format(version=version[0] if version else "?")
        print(render_table(variants, args.turns, where, deep_step, _official_version()))
        if not embedded:
            if args.keep:
                print(
                    f'\nkept schema "{schema}": langgraph-delta-pg inspect --schema {schema} '
                    "--thread demo-delta (and --dsn); threads demo-official, demo-full"
                )
            else:
                print(f'\nschema "{schema}" dropped (--keep keeps it)')
        if plotter is not None:
            plotter(args.plot, variants, args.turns)
            print(f"chart written to {args.plot}")
    return 0


def run(args: argparse.Namespace) -> int:
    from langgraph_delta_postgres.migrate import MigrationError

    try:
        return _demo(args)
    except CliError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code
    except MigrationError as e:
        print(f"error: cannot set up the demo schema: {e}", file=sys.stderr)
        return 1
