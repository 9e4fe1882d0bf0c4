"""``langgraph-delta-pg prune``: DeltaChannel-safe retention from the command line.

Threads come from ``--thread`` or, with ``--older-than`` alone, from the whole table, read
in pages of ``--batch`` thread ids (keyset pagination). Each thread is pruned in its own
transaction (``DeltaPostgresSaver.prune``), so a database of 100,000 threads is never one
huge transaction, and a thread's rows are locked only while that thread is pruned.
A thread whose parent chain is corrupt is reported and skipped; the exit code is then 1.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from .._checks import INT4_MAX
from .._ops.retention import PruneStats
from ..errors import HistoryError
from ..saver import DeltaPostgresSaver
from ._util import CliError, connect_to, db_error, setup_required

_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_AGE = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")


def parse_age(text: str) -> timedelta:
    """``30d`` -> 30 days (units s, m, h, d, w); refused (a usage error) when it reaches
    back before year 1, which no date can say."""
    m = _AGE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an age: use a number and a unit, e.g. 90m, 12h, 30d, 2w"
        )
    try:
        age = timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
        datetime.now(UTC) - age  # noqa: B018  # the cut-off run() computes must exist
    except (OverflowError, ValueError):  # ValueError: more digits than int() reads
        raise argparse.ArgumentTypeError(
            f"{text!r} is too long ago: an age must stay after year 1 "
            f"(at most {(datetime.now(UTC) - datetime.min.replace(tzinfo=UTC)).days}d)"
        ) from None
    return age


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= INT4_MAX:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to {INT4_MAX}")
    return n


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--thread", nargs="+", metavar="ID", default=None, help="thread ids to prune"
    )
    p.add_argument(
        "--older-than", type=parse_age, metavar="AGE", default=None,
        help="only threads whose latest checkpoint is older than AGE (e.g. 30d, 12h); "
        "without --thread: every such thread of the database",
    )
    p.add_argument(
        "--keep-last", type=_positive, metavar="N", default=None,
        help="keep the N latest checkpoints of each namespace's chain (default 1), plus "
        "what their DeltaChannel state needs",
    )
    p.add_argument(
        "--graph", metavar="SPEC", default=None,
        help="compact with this graph (as langgraph.json names one: ./path/to/file.py:attr "
        "or package.module:attr; a StateGraph is compiled): each DeltaChannel's value is "
        "stored at the oldest checkpoint kept, so only the kept ones stay",
    )
    p.add_argument(
        "--delete", action="store_true",
        help="delete the selected threads entirely (strategy 'delete') instead",
    )
    p.add_argument("--dry-run", action="store_true", help="count what would go; delete nothing")
    p.add_argument(
        "--batch", type=_positive, default=500, metavar="N",
        help="thread ids read per page with --older-than (default 500)",
    )
    p.add_argument("--dsn", help="Postgres connection string (default: $DATABASE_URL)")
    p.add_argument("--schema", default=None, help="Postgres schema (default: search_path)")


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _thread_pages(saver: DeltaPostgresSaver, batch: int) -> Iterator[list[str]]:
    after = ""
    first = True
    while True:
        with saver._connection() as conn, conn.cursor() as cur:
            cur.execute(
                saver.queries["retention.thread_page"],
                {"after": after, "first": first, "limit": batch},
            )
            ids = [r[0] for r in cur.fetchall()]
        if not ids:
            return
        yield ids
        after, first = ids[-1], False


def _count_threads(saver: DeltaPostgresSaver) -> int:
    with saver._connection() as conn, conn.cursor() as cur:
        cur.execute(saver.queries["retention.count_threads"])
        row = cur.fetchone()
    return int(row[0]) if row else 0


def load_graph(spec: str) -> Any:
    """The compiled graph ``spec`` names: ``path/to/file.py:attr`` (relative to the
    current directory) or ``package.module:attr``; a ``StateGraph`` is compiled."""
    import importlib
    import importlib.util
    from pathlib import Path

    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr:
        raise CliError(f"--graph {spec!r}: use path/to/file.py:attr or package.module:attr", 2)
    try:
        if where.endswith(".py"):
            path = Path(where).resolve()
            mod_spec = importlib.util.spec_from_file_location(path.stem, path)
            if mod_spec is None or mod_spec.loader is None or not path.is_file():
                raise CliError(f"--graph {spec!r}: no such file {str(path)!r}", 2)
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules.setdefault(path.stem, module)
            mod_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
        graph = getattr(module, attr)
    except CliError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever the user's module raises, said as usage
        why = f"{type(e).__name__}: {e}"
        raise CliError(f"--graph {spec!r} could not be loaded: {why}", 2) from None
    if callable(getattr(graph, "compile", None)) and not hasattr(graph, "get_subgraphs"):
        graph = graph.compile()
    from .._ops.compaction import check_graph

    try:
        check_graph(graph)
    except TypeError as e:
        raise CliError(f"--graph {spec!r}: {e}", 2) from None
    return graph


def run(args: argparse.Namespace) -> int:
    if not args.thread and args.older_than is None:
        print("error: say which threads: --thread ID... and/or --older-than AGE", file=sys.stderr)
        return 2
    if args.delete and args.keep_last is not None:
        print("error: --keep-last and --delete exclude each other", file=sys.stderr)
        return 2
    from rich.console import Console  # a dependency of the package (a plain install prunes)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
    from rich.table import Table

    before = datetime.now(UTC) - args.older_than if args.older_than is not None else None
    strategy = "delete" if args.delete else "keep_latest"
    try:
        graph = load_graph(args.graph) if args.graph else None
        with connect_to(args) as conn:
            try:
                saver = DeltaPostgresSaver(conn, schema=args.schema)
            except ValueError as e:
                raise CliError(str(e)) from None
            total = PruneStats()
            scanned = 0
            failed: list[tuple[str, str]] = []
            t0 = time.monotonic()
            try:
                if args.thread:
                    pages: Iterator[list[str]] = iter([list(dict.fromkeys(args.thread))])
                    n_threads: int | None = len(set(args.thread))
                else:
                    n_threads = _count_threads(saver)
                    pages = _thread_pages(saver, args.batch)
                err_console = Console(stderr=True)
                progress = Progress(
                    "[progress.description]{task.description}",
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    console=err_console,
                    transient=True,
                    # off a terminal the bar draws nothing but its closing newline, which
                    # came before an error as an empty stderr line
                    disable=not err_console.is_terminal,
                )
                with progress:
                    bar = progress.add_task("pruning threads", total=n_threads)
                    for page in pages:
                        for thread_id in page:
                            try:
                                total += saver.prune(
                                    [thread_id], strategy=strategy, keep_last=args.keep_last,
                                    before=before, dry_run=args.dry_run, graph=graph,
                                )
                            except HistoryError as e:
                                failed.append((thread_id, str(e)))
                            scanned += 1
                            progress.advance(bar)
            except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn) as e:
                raise setup_required(e, args.schema) from None  # a SetupRequiredError too
            except psycopg.Error as e:
                raise db_error(e) from None
            elapsed = time.monotonic() - t0
    except CliError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code
    _print_summary(Table, Console(), total, scanned, elapsed, args.dry_run)
    for thread_id, msg in failed:
        print(f"error: thread {thread_id!r} skipped: {msg}", file=sys.stderr)
    return 1 if failed else 0


def _print_summary(
    table_cls: Any, console: Any, total: PruneStats, scanned: int, elapsed: float, dry: bool
) -> None:
    verb = "would free" if dry else "freed"
    table = table_cls(title="prune (dry run: nothing deleted)" if dry else "prune")
    table.add_column("")
    table.add_column("count", justify="right")
    table.add_row("threads scanned", f"{scanned:,}")
    table.add_row("threads pruned" if not dry else "threads to prune", f"{total.threads:,}")
    table.add_row(f"checkpoints {verb}", f"{total.checkpoints:,}")
    table.add_row(f"writes {verb}", f"{total.writes:,}")
    table.add_row(f"blobs {verb}", f"{total.blobs:,}")
    table.add_row(f"bytes {verb}", _human(total.bytes))
    hid = "checkpoints to keep as seeds only" if dry else "checkpoints kept as seeds only"
    table.add_row(hid, f"{total.hidden:,}")
    table.add_row("time", f"{elapsed:.1f} s ({scanned / elapsed if elapsed else 0:,.0f} threads/s)")
    console.print(table)
