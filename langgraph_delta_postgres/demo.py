"""``langgraph-delta-pg demo``: one long coding-agent session, DeltaChannel vs full snapshots.

Runs the ``coding_b`` workload of :mod:`._workloads` (a real compiled LangGraph graph with a
deterministic fake model: two 8 KB file writes, a 5 KB search result and a ~200-token
answer per turn, a 100 KB result every 5 turns) for ``--turns`` user turns, twice, on
:class:`DeltaPostgresSaver`: once with the state fields declared as ``DeltaChannel`` and
once as classic full-snapshot fields (``add_messages`` / a dict merge), each in its own
thread of a throwaway schema. Then it prints, for each:

* stored bytes: the per-thread sum of ``pg_column_size`` over the three tables
  (``inspect.storage`` in ``sql/inspect.sql``: the payload as stored, after TOAST
  compression; keys and indexes not counted). Both threads share the tables, so per-thread
  sums are the clean comparison; ``pg_total_relation_size`` deltas would also count page
  slack, which dominates short runs;
* resume latency: ``get_state`` on a freshly compiled graph object, median of 5;
* statements per load: executes counted at the psycopg cursor (a ``cursor_factory`` on the
  saver's connection) during one ``get_state``;
* depth walked: the ancestors ``get_delta_channel_history`` visits from the latest
  checkpoint to each channel's seed (``inspect.walk_depth``).

Where: with ``--dsn`` / ``DATABASE_URL``, a fresh schema of that database, dropped
afterwards unless ``--keep``; otherwise the embedded Postgres of the ``embedded`` extra,
which is removed with its temporary directory on exit, error or Ctrl-C.

Measured with ``langgraph-delta-pg demo --turns 200`` on 2 cores: about 2 minutes, nearly
all of it the full-snapshot baseline (O(N^2) bytes: ~0.5 GB compressed at 200 turns,
which Postgres compresses with pglz on every put).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

import psycopg
from psycopg.rows import dict_row

from langgraph_delta_postgres import _embedded
from langgraph_delta_postgres._cliutil import CliError, connect, db_error, resolve_dsn
from langgraph_delta_postgres._sql import Queries
from langgraph_delta_postgres.inspect import human_bytes, thread_bytes, walk_depths

WORKLOAD = "coding_b"
#: The workload's state fields (both DeltaChannel in the delta variant).
FIELDS = ["files", "messages"]
RESUME_REPEATS = 5
SAMPLE_REPEATS = 3
PLOT_HINT = "pip install 'langgraph-delta-postgres[bench]'"


# ---------------------------------------------------------------------- progress bar


class ProgressBar:
    """A one-line progress bar on a TTY; a line per ~10% otherwise (logs, CI, pipes).

    Never raises: a closed or broken stream only silences it.
    """

    def __init__(self, total: int, stream: TextIO | None = None, width: int = 30) -> None:
        self.stream = stream if stream is not None else sys.stderr
        try:
            self.tty = bool(self.stream.isatty())
        except (AttributeError, ValueError, OSError):
            self.tty = False
        self.total = max(1, total)
        self.width = width
        self.done = 0
        self.label = ""
        self.started = time.monotonic()
        self._drawn_at = 0.0
        self._decile = -1
        self._closed = False

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def update(self, done: int, label: str | None = None) -> None:
        self.done = min(done, self.total)
        if label is not None:
            self.label = label
        now = time.monotonic()
        frac = self.done / self.total
        if self.tty:
            if now - self._drawn_at < 0.1 and self.done < self.total:
                return
            self._drawn_at = now
            filled = int(frac * self.width)
            bar = "#" * filled + "." * (self.width - filled)
            self._write(
                f"\r{self.label:<28.28} [{bar}] {frac:4.0%} {now - self.started:6.1f}s\x1b[K"
            )
        else:
            decile = int(frac * 10)
            if decile > self._decile:
                self._decile = decile
                self._write(f"{self.label}: {frac:.0%} ({now - self.started:.1f}s)\n")

    def close(self) -> None:
        if self.tty and not self._closed:
            self._write("\r\x1b[K")
        self._closed = True


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
    run_seconds: float = 0.0
    bytes: int = 0
    checkpoints: int = 0
    resume_latest_ms: float = 0.0
    resume_deep_ms: float = 0.0
    deep_checkpoint_id: str | None = None
    statements: int = 0
    depths: dict[str, int] = field(default_factory=dict)
    samples: list[tuple[int, int, float]] = field(default_factory=list)  # turn, bytes, ms

    def config(self, checkpoint_id: str | None = None) -> dict[str, Any]:
        conf: dict[str, Any] = {"thread_id": self.thread_id}
        if checkpoint_id:
            conf["checkpoint_id"] = checkpoint_id
        return {"configurable": conf}


def resume_ms(
    saver: Any, variant: Variant, repeats: int, checkpoint_id: str | None = None
) -> float:
    """Median wall time of ``get_state`` on a freshly compiled graph, in ms."""
    from langgraph_delta_postgres._workloads import build_graph

    times = []
    for _ in range(repeats):
        graph = build_graph(WORKLOAD, saver, delta=variant.delta)
        t0 = time.perf_counter()
        graph.get_state(variant.config(checkpoint_id))
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def _one(conn: psycopg.Connection[Any], schema: str, key: str, **params: Any) -> Any:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(Queries(schema)[key], params)
        return cur.fetchall()


def run_session(
    conn: psycopg.Connection[Any],
    schema: str,
    turns: int,
    *,
    sample: bool,
    progress: ProgressBar,
) -> tuple[list[Variant], int | None]:
    """Run both threads, then measure; returns the variants and the step of the
    "deepest" checkpoint both are also measured at."""
    from langgraph_delta_postgres._workloads import build_graph, user_input
    from langgraph_delta_postgres.saver import DeltaPostgresSaver

    counter = [0]
    conn.cursor_factory = counting_cursor_factory(counter)
    saver = DeltaPostgresSaver(conn, schema=schema)
    saver.setup()
    variants = [
        Variant("delta", "DeltaChannel", True, "demo-delta"),
        Variant("full", "full snapshot", False, "demo-full"),
    ]
    every = max(1, turns // 10)
    sample_at = set(range(every, turns + 1, every)) | {turns}
    for i, v in enumerate(variants):
        graph = build_graph(WORKLOAD, saver, delta=v.delta)
        for t in range(turns):
            progress.update(i * turns + t, f"{v.label} turn {t + 1}/{turns}")
            t0 = time.perf_counter()
            graph.invoke(user_input(WORKLOAD, t), v.config())
            v.run_seconds += time.perf_counter() - t0
            if sample and t + 1 in sample_at:
                v.samples.append(
                    (
                        t + 1,
                        thread_bytes(conn, schema, v.thread_id),
                        resume_ms(saver, v, SAMPLE_REPEATS),
                    )
                )
    progress.update(2 * turns, "measuring")
    # The latest checkpoint may itself hold a snapshot (with the default frequency of 100,
    # 200 turns end on one), so both threads are also measured at the checkpoint whose
    # load walks furthest in the delta thread, and at the same step of the full thread.
    deep = _one(conn, schema, "inspect.deepest", thread_id=variants[0].thread_id, checkpoint_ns="")
    deep_step = deep[0]["step"] if deep and deep[0]["supersteps"] is not None else None
    for v in variants:
        v.bytes = thread_bytes(conn, schema, v.thread_id)
        v.checkpoints = sum(
            int(r["checkpoints"])
            for r in _one(conn, schema, "inspect.namespaces", thread_id=v.thread_id)
        )
        if deep_step is not None:
            at = _one(
                conn,
                schema,
                "inspect.at_step",
                thread_id=v.thread_id,
                checkpoint_ns="",
                step=deep_step,
            )
            v.deep_checkpoint_id = at[0]["checkpoint_id"] if at else None
        v.resume_latest_ms = resume_ms(saver, v, RESUME_REPEATS)
        v.resume_deep_ms = resume_ms(saver, v, RESUME_REPEATS, v.deep_checkpoint_id)
        fresh = build_graph(WORKLOAD, saver, delta=v.delta)
        counter[0] = 0
        fresh.get_state(v.config(v.deep_checkpoint_id))
        v.statements = counter[0]
        v.depths = {
            r["channel"]: int(r["depth"])
            for r in walk_depths(
                conn, schema, v.thread_id, FIELDS, checkpoint_id=v.deep_checkpoint_id
            )
        }
    return variants, deep_step


# ---------------------------------------------------------------------- output


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}x" if b else "-"


def render_table(
    variants: list[Variant], turns: int, where: str, deep_step: int | None
) -> str:
    from langgraph_delta_postgres._workloads import WORKLOADS

    d, f = variants
    at = "deepest" if deep_step is not None else "latest"
    rows: list[tuple[str, str, str, str]] = [
        ("", d.label, f.label, "full / delta"),
        ("stored bytes", human_bytes(d.bytes), human_bytes(f.bytes), _ratio(f.bytes, d.bytes)),
        (
            "resume, latest",
            f"{d.resume_latest_ms:.1f} ms",
            f"{f.resume_latest_ms:.1f} ms",
            _ratio(f.resume_latest_ms, d.resume_latest_ms),
        ),
    ]
    if deep_step is not None:
        rows.append(
            (
                "resume, deepest",
                f"{d.resume_deep_ms:.1f} ms",
                f"{f.resume_deep_ms:.1f} ms",
                _ratio(f.resume_deep_ms, d.resume_deep_ms),
            )
        )
    rows += [
        (f"statements per load ({at})", str(d.statements), str(f.statements), ""),
        (
            f"depth walked ({at})",
            str(max(d.depths.values(), default=0)),
            str(max(f.depths.values(), default=0)),
            "",
        ),
        ("checkpoints", str(d.checkpoints), str(f.checkpoints), ""),
        (
            "run time",
            f"{d.run_seconds:.1f} s",
            f"{f.run_seconds:.1f} s",
            _ratio(f.run_seconds, d.run_seconds),
        ),
    ]
    out = [
        f"{WORKLOAD}: {WORKLOADS[WORKLOAD].description}",
        f"{turns} turns, one thread each, on {where}",
        "",
    ]
    for name, a, b, r in rows:
        out.append(f"  {name:<30}{a:>14}{b:>15}{r:>14}")
    per_channel = ", ".join(f"{ch} {n}" for ch, n in sorted(d.depths.items()))
    out += [
        "",
        "stored bytes: per-thread sum of pg_column_size over checkpoints, checkpoint_blobs",
        "  and checkpoint_writes (as stored, after TOAST compression; indexes not counted)",
        f"resume: median of {RESUME_REPEATS} get_state calls, each on a freshly compiled graph,",
    ]
    if deep_step is None:
        out.append("  at the latest checkpoint")
    else:
        out += [
            f"  at the latest checkpoint and at the deepest one (step {deep_step}): the most",
            "  supersteps since a snapshot, where a load walks furthest",
        ]
    out += [
        "statements: executes counted at the psycopg cursor during one get_state",
        "depth walked: ancestors the history query visits to reach each channel's seed",
        f"  ({per_channel or 'none'}); 0: the checkpoint stores the values itself",
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
    fig.suptitle(f"{WORKLOAD}: DeltaChannel vs full-snapshot fields on DeltaPostgresSaver")
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

    p.add_argument("--turns", type=positive, default=200, help="user turns (default 200)")
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


def _demo(args: argparse.Namespace) -> int:
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
    progress = ProgressBar(2 * args.turns)
    if progress.tty:  # a log gets its first line once the session runs
        progress.update(0, "starting Postgres" if embedded else "connecting")
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
            with connect(dsn, unreachable_hint=hint) as conn:
                version = conn.execute(Queries(schema)["inspect.server_version"]).fetchone()
                created = True
                variants, deep_step = run_session(
                    conn, schema, args.turns, sample=plotter is not None, progress=progress
                )
        except psycopg.Error as e:
            raise db_error(e) from None
        finally:
            progress.close()
            if created and not embedded and not args.keep:
                _drop_schema(dsn, schema, sys.stderr)
        where = where.format(version=version[0] if version else "?")
        print(render_table(variants, args.turns, where, deep_step))
        if not embedded:
            if args.keep:
                print(
                    f'\nkept schema "{schema}": langgraph-delta-pg inspect --schema {schema} '
                    "--thread demo-delta (and --dsn)"
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
