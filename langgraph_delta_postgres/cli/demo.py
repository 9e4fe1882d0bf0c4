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
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from langgraph_delta_postgres._local.install import install_hint
from langgraph_delta_postgres._sql import Queries
from langgraph_delta_postgres.cli import postgres as _embedded
from langgraph_delta_postgres.cli._util import CliError, connect, db_error, resolve_dsn
from langgraph_delta_postgres.cli.inspect import human_bytes, thread_bytes, walk_depths

WORKLOAD = "coding_b"
DEFAULT_TURNS = 80
#: The workload's state fields (both DeltaChannel in the delta variants).
FIELDS = ["files", "messages"]
RESUME_REPEATS = 5
PAGE_SIZE = 10
PAGE_REPEATS = 3
SAMPLE_REPEATS = 3
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


# ---------------------------------------------------------------------- progress


@contextlib.contextmanager
def progress(total: int, desc: str, unit: str, stream: TextIO | None = None) -> Iterator[Any]:
    """A tqdm bar with rate and ETA on stderr; on a pipe or log, a refresh every 10 s."""
    from tqdm import tqdm

    out = stream if stream is not None else sys.stderr
    try:
        tty = bool(out.isatty())
    except (AttributeError, ValueError, OSError):
        tty = False
    bar = tqdm(
        total=total,
        desc=f"{desc:<38}",
        unit=unit,
        file=out,
        dynamic_ncols=tty,
        ncols=None if tty else 100,
        mininterval=0.2 if tty else 10.0,
        ascii=not tty,
        leave=True,
    )
    try:
        yield bar
    finally:
        bar.close()


# ---------------------------------------------------------------------- measuring


def counting_cursor_factory(counter: list[int]) -> type[psycopg.Cursor[Any]]:
    """A cursor class that adds every statement it sends to ``counter[0]``."""

    class CountingCursor(psycopg.Cursor[Any]):
        def execute(self, *args: Any, **kwargs: Any) -> Any:
            counter[0] += 1
            return super().execute(*args, **kwargs)

        def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> None:
            params_seq = list(params_seq)
            counter[0] += len(params_seq)
            super().executemany(query, params_seq, **kwargs)

        def stream(self, *args: Any, **kwargs: Any) -> Any:
            counter[0] += 1
            return super().stream(*args, **kwargs)

    return CountingCursor


@dataclass
class Variant:
    key: str
    label: str
    delta: bool
    thread_id: str
    saver: Any
    counter: list[int]
    run_seconds: float = 0.0
    bytes: int = 0
    checkpoints: int = 0
    timings: dict[str, float] = field(default_factory=dict)  # latest / deep / page, ms
    ratios: dict[str, float] = field(default_factory=dict)  # official / ours, per pair
    deep_checkpoint_id: str | None = None
    statements_resume: int = 0
    statements_page: int = 0
    depths: dict[str, int] = field(default_factory=dict)
    samples: list[tuple[int, int, float]] = field(default_factory=list)  # turn, bytes, ms

    def config(self, checkpoint_id: str | None = None) -> dict[str, Any]:
        conf: dict[str, Any] = {"thread_id": self.thread_id}
        if checkpoint_id:
            conf["checkpoint_id"] = checkpoint_id
        return {"configurable": conf}

    def graph(self) -> Any:
        from langgraph_delta_postgres._local.workloads import build_graph

        return build_graph(WORKLOAD, self.saver, delta=self.delta)


def _median_ms(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def resume_ms(v: Variant, repeats: int) -> float:
    """Median wall time of ``get_state`` on a freshly compiled graph, in ms."""
    graphs = [v.graph() for _ in range(repeats)]
    return _median_ms(lambda: graphs.pop().get_state(v.config()), repeats)


def history_page(v: Variant) -> list[Any]:
    return list(v.graph().get_state_history(v.config(), limit=PAGE_SIZE))


def _rows(conn: psycopg.Connection[Any], schema: str, key: str, **params: Any) -> Any:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(Queries(schema)[key], params)
        return cur.fetchall()


def open_savers(
    stack: contextlib.ExitStack, dsn: str, schema: str
) -> tuple[psycopg.Connection[Any], list[Variant]]:
    """Our saver and the official one, each on a connection opened as its
    ``from_conn_string`` does, counting statements; the tables made by our migrations."""
    from langgraph.checkpoint.postgres import PostgresSaver

    from langgraph_delta_postgres._connect import DEFAULT_PREPARE_THRESHOLD, connect_kwargs
    from langgraph_delta_postgres.saver import DeltaPostgresSaver

    ours_count, official_count = [0], [0]
    conn = stack.enter_context(
        psycopg.connect(
            dsn,
            cursor_factory=counting_cursor_factory(ours_count),
            **connect_kwargs(dsn, DEFAULT_PREPARE_THRESHOLD),
        )
    )
    ours = DeltaPostgresSaver(conn, schema=schema)
    ours.setup()
    options = conninfo_to_dict(dsn).get("options")
    search_path = f"-c search_path={schema}"
    official_conn = stack.enter_context(
        psycopg.connect(
            dsn,
            autocommit=True,
            prepare_threshold=0,
            row_factory=dict_row,
            options=f"{options} {search_path}" if options else search_path,
            cursor_factory=counting_cursor_factory(official_count),
        )
    )
    official = PostgresSaver(official_conn)
    return conn, [
        Variant("ours", "this package", True, "demo-delta", ours, ours_count),
        Variant(
            "official", "official PostgresSaver", True, "demo-official", official, official_count
        ),
        Variant("full", "full-snapshot fields", False, "demo-full", ours, ours_count),
    ]


def run_session(
    conn: psycopg.Connection[Any],
    schema: str,
    variants: list[Variant],
    turns: int,
    *,
    sample: bool,
    stream: TextIO | None = None,
) -> int | None:
    """Run the session on each variant, then measure; returns the step of the "deepest"
    checkpoint (see the module docstring), or None without DeltaChannel counters."""
    from langgraph_delta_postgres._local.workloads import user_input

    every = max(1, turns // 10)
    sample_at = set(range(every, turns + 1, every)) | {turns}
    for v in variants:
        graph = v.graph()
        desc = f"{v.label}" + (" (baseline)" if not v.delta else ", DeltaChannel")
        with progress(turns, desc, "turn", stream) as bar:
            for t in range(turns):
                t0 = time.perf_counter()
                graph.invoke(user_input(WORKLOAD, t), v.config())
                v.run_seconds += time.perf_counter() - t0
                if sample and t + 1 in sample_at:
                    v.samples.append(
                        (
                            t + 1,
                            thread_bytes(conn, schema, v.thread_id),
                            resume_ms(v, SAMPLE_REPEATS),
                        )
                    )
                bar.update(1)
    ours = variants[0]
    deep = _rows(conn, schema, "inspect.deepest", thread_id=ours.thread_id, checkpoint_ns="")
    deep_step = deep[0]["step"] if deep and deep[0]["supersteps"] is not None else None
    ours, off = variants[0], variants[1]
    steps = len(variants) + 2 * RESUME_REPEATS + PAGE_REPEATS + 2
    with progress(steps, "measuring", "step", stream) as bar:
        for v in variants:
            v.bytes = thread_bytes(conn, schema, v.thread_id)
            v.checkpoints = sum(
                int(r["checkpoints"])
                for r in _rows(conn, schema, "inspect.namespaces", thread_id=v.thread_id)
            )
            bar.update(1)
        for v in (ours, off):
            if deep_step is not None:
                at = _rows(
                    conn,
                    schema,
                    "inspect.at_step",
                    thread_id=v.thread_id,
                    checkpoint_ns="",
                    step=deep_step,
                )
                v.deep_checkpoint_id = at[0]["checkpoint_id"] if at else None
        # Timings pair by pair (ours, then the official, alternating which goes first), so
        # a noisy neighbour slows both of a pair alike; the ratio is the median of the pairs'.
        # Each call on a freshly compiled graph (compiled outside the timing).
        calls: list[tuple[str, int, Callable[[Variant, Any], Any]]] = [
            ("latest", RESUME_REPEATS, lambda v, g: g.get_state(v.config())),
            ("deep", RESUME_REPEATS, lambda v, g: g.get_state(v.config(v.deep_checkpoint_id))),
            (
                "page",
                PAGE_REPEATS,
                lambda v, g: list(g.get_state_history(v.config(), limit=PAGE_SIZE)),
            ),
        ]
        for key, repeats, call in calls:
            pairs: list[tuple[float, float]] = []
            for i in range(repeats):
                ms: dict[str, float] = {}
                for v in (ours, off) if i % 2 == 0 else (off, ours):
                    g = v.graph()
                    t0 = time.perf_counter()
                    call(v, g)
                    ms[v.key] = (time.perf_counter() - t0) * 1000
                pairs.append((ms["ours"], ms["official"]))
                bar.update(1)
            ours.timings[key] = statistics.median(a for a, _ in pairs)
            off.timings[key] = statistics.median(b for _, b in pairs)
            ours.ratios[key] = statistics.median(b / a for a, b in pairs if a)
        for v in (ours, off):
            v.counter[0] = 0
            v.graph().get_state(v.config(v.deep_checkpoint_id))
            v.statements_resume = v.counter[0]
            v.counter[0] = 0
            history_page(v)
            v.statements_page = v.counter[0]
            bar.update(1)
        ours.depths = {
            r["channel"]: int(r["depth"])
            for r in walk_depths(
                conn, schema, ours.thread_id, FIELDS, checkpoint_id=ours.deep_checkpoint_id
            )
        }
    return deep_step


# ---------------------------------------------------------------------- output


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}x" if b else "-"


def render_table(
    variants: list[Variant], turns: int, where: str, deep_step: int | None, official: str
) -> str:
    from langgraph_delta_postgres._local.workloads import WORKLOADS

    ours, off, full = variants

    def ms_row(name: str, key: str) -> tuple[str, str, str, str]:
        a, b = ours.timings[key], off.timings[key]
        return (name, f"{a:.1f} ms", f"{b:.1f} ms", f"{ours.ratios[key]:.1f}x")

    at = f"deepest, step {deep_step}" if deep_step is not None else "latest"
    rows: list[tuple[str, str, str, str]] = [
        ("", "this package", f"official {official}", "official / ours"),
        ms_row("resume, latest", "latest"),
    ]
    if deep_step is not None:
        rows.append(ms_row(f"resume, {at}", "deep"))
    rows += [
        ms_row(f"history page ({PAGE_SIZE} states)", "page"),
        (
            f"statements: resume ({'deepest' if deep_step is not None else 'latest'})",
            str(ours.statements_resume),
            str(off.statements_resume),
            "",
        ),
        ("statements: history page", str(ours.statements_page), str(off.statements_page), ""),
        (
            f"session run time ({turns} turns)",
            f"{ours.run_seconds:.1f} s",
            f"{off.run_seconds:.1f} s",
            _ratio(off.run_seconds, ours.run_seconds),
        ),
        (
            "stored bytes",
            human_bytes(ours.bytes),
            human_bytes(off.bytes),
            _ratio(off.bytes, ours.bytes),
        ),
    ]
    out = [
        f"{WORKLOAD}: {WORKLOADS[WORKLOAD].description}",
        f"{turns} turns of one agent session per saver, DeltaChannel fields "
        f"({', '.join(FIELDS)}), on {where}",
        "",
    ]
    for name, a, b, r in rows:
        out.append(f"  {name:<32}{a:>14}{b:>26}{r:>17}")
    per_channel = ", ".join(f"{ch} {n}" for ch, n in sorted(ours.depths.items()))
    out += [
        "",
        "storage baseline: the same session with classic full-snapshot fields (add_messages,",
        f"  a dict merge) on this package: {human_bytes(full.bytes)} in {full.run_seconds:.1f} s,"
        f" {_ratio(full.bytes, ours.bytes)} the DeltaChannel thread's bytes",
        "  (DeltaChannel's storage saving is the same on either saver: same tables, same format)",
        "",
        f"resume: median of {RESUME_REPEATS} get_state calls, each on a freshly compiled graph;",
        "  timed pair by pair (ours, official); official / ours is the median of the pairs'",
        "  ratios. This package's saver keeps its history cache (cache_bytes) across the",
        "  calls, as a server does: a repeated load fetches only what changed and copies",
        "  the values it holds, where the official saver decodes them again. A busy machine",
        "  moves these timings between runs; the statement counts do not move, and each",
        "  statement saved is a round trip saved over a network (langgraph-delta-pg bench",
        "  measures cold and warm loads, and added round-trip time)",
    ]
    if deep_step is not None:
        out += [
            f"  deepest: the checkpoint with the most supersteps since a snapshot (step "
            f"{deep_step});",
            f"  a load there walks back {per_channel or 'none'} ancestors",
        ]
    out += [
        f"history page: get_state_history(limit={PAGE_SIZE}) on a fresh graph, "
        f"median of {PAGE_REPEATS}",
        "statements: executes counted at each saver's psycopg cursor",
        "stored bytes: per-thread sum of pg_column_size over checkpoints, checkpoint_blobs",
        "  and checkpoint_writes (as stored, after TOAST compression; indexes not counted)",
    ]
    return "\n".join(out)


def write_plot(path: str, variants: list[Variant], turns: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_bytes, ax_ms) = plt.subplots(1, 2, figsize=(11, 4.2))
    for v in variants:
        xs = [s[0] for s in v.samples]
        ax_bytes.plot(xs, [s[1] / 2**20 for s in v.samples], marker="o", label=v.label)
        ax_ms.plot(xs, [s[2] for s in v.samples], marker="o", label=v.label)
    ax_bytes.set_title("stored bytes (pg_column_size, per thread)")
    ax_bytes.set_xlabel("turns")
    ax_bytes.set_ylabel("MiB")
    ax_ms.set_title(f"resume latency (get_state, median of {SAMPLE_REPEATS})")
    ax_ms.set_xlabel("turns")
    ax_ms.set_ylabel("ms")
    for ax in (ax_bytes, ax_ms):
        ax.grid(alpha=0.3)
        ax.legend()
        ax.set_xlim(0, turns)
        ax.set_ylim(bottom=0)
    fig.suptitle(f"{WORKLOAD}: this package vs the official PostgresSaver")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
