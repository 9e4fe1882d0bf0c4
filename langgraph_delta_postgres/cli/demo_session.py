"""The ``demo`` command's session and its measurements (:mod:`.demo` says what it
runs): the three variants (this package with DeltaChannel fields, the official
``PostgresSaver``, this package with full-snapshot fields) each on a connection opened as
its ``from_conn_string`` opens it, counting statements; the session run on each; then the
timings (pair by pair), statement counts, stored bytes and walk depths."""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from langgraph_delta_postgres._sql import Queries
from langgraph_delta_postgres.cli.inspect import thread_bytes, walk_depths

WORKLOAD = "coding_b"
#: The workload's state fields (both DeltaChannel in the delta variants).
FIELDS = ["files", "messages"]
RESUME_REPEATS = 5
PAGE_SIZE = 10
PAGE_REPEATS = 3
SAMPLE_REPEATS = 3


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
