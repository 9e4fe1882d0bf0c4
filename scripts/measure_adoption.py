"""Measure adoption of a langgraph-checkpoint-postgres database: migration 0004's backfill
in batches (this package) against the one-UPDATE backfill it replaced.

    python scripts/measure_adoption.py --dsn postgresql://postgres@/postgres?host=... \
        [--threads 10000] [--per-thread 100]

Creates a database of the official saver (``PostgresSaver.setup()``) with threads x
per-thread checkpoints made by generate_series (one 'messages' blob per checkpoint, two
inline values), clones it, and on each clone applies migrations 0001-0003 first, then
either the batched 0004 (the runner, as setup() runs it) or the first text of 0004 (one
UPDATE, read from git). Prints time, WAL bytes (pg_current_wal_lsn difference), the
checkpoints table's size before/after, and the longest transaction (the longest time any
row lock of the backfill was held; the median batch too). Drops its databases at the end.
Timed with the bench's ``timed`` / ``summary`` (the batches where the runner executes
them).
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import langgraph_delta_postgres.migrate as migrate_mod
from langgraph_delta_postgres.bench.timing import summary, timed

REPO = Path(__file__).resolve().parent.parent
OLD_0004 = ("fbf7a88", "migrations/0004_backfill_delta_columns.sql")

GENERATE = """
INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
                         checkpoint, metadata)
SELECT 'thread-' || t, '', lpad(s::text, 8, '0'),
       CASE WHEN s > 1 THEN lpad((s - 1)::text, 8, '0') END,
       jsonb_build_object(
           'v', 4, 'id', lpad(s::text, 8, '0'), 'ts', '2026-01-01T00:00:00+00:00',
           'channel_values', jsonb_build_object('step', s, 'note', 'turn ' || s),
           'channel_versions', jsonb_build_object(
               'messages', lpad(s::text, 32, '0') || '.0.5',
               'step', lpad(s::text, 32, '0') || '.0.6',
               'note', lpad(s::text, 32, '0') || '.0.7'),
           'versions_seen', jsonb_build_object(
               'agent', jsonb_build_object('messages', lpad((s - 1)::text, 32, '0') || '.0.5')),
           'updated_channels', jsonb_build_array('messages', 'step', 'note')),
       jsonb_build_object('source', 'loop', 'step', s, 'parents', '{}'::jsonb,
                          'run_id', 'run-' || t || '-' || (s / 10))
FROM generate_series(1, %(threads)s) AS t, generate_series(1, %(per_thread)s) AS s
;;
INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
SELECT 'thread-' || t, '', 'messages', lpad(s::text, 32, '0') || '.0.5', 'msgpack',
       convert_to(repeat('m', 200) || s, 'UTF8')
FROM generate_series(1, %(threads)s) AS t, generate_series(1, %(per_thread)s) AS s
"""


def dsn_for(admin: str, db: str) -> str:
    params = conninfo_to_dict(admin)
    params["dbname"] = db
    return make_conninfo(**params)  # type: ignore[arg-type]


def sizes(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    row = conn.execute(
        "SELECT pg_relation_size('checkpoints'), pg_total_relation_size('checkpoints')"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def lsn(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def wal_bytes(conn: psycopg.Connection[Any], start: str) -> int:
    row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)", (start,))
    return int(row.fetchone()[0])  # type: ignore[index]


def up_to_0003(conn: psycopg.Connection[Any]) -> None:
    real = migrate_mod.discover
    migrate_mod.discover = lambda: [m for m in real() if m.version <= 3]  # type: ignore[assignment]
    try:
        migrate_mod.migrate(conn)
    finally:
        migrate_mod.discover = real  # type: ignore[assignment]


@contextlib.contextmanager
def at_0003(
    dsn: str,
) -> Iterator[tuple[psycopg.Connection[Any], psycopg.Connection[Any], dict[str, Any]]]:
    """The database of ``dsn`` migrated up to 0003, and what the block then does to it:
    ``(conn, probe, measured)``, ``conn`` for the block's work, ``probe`` for its readings;
    after the block ``measured`` holds the WAL it wrote (``wal_bytes``) and the
    checkpoints table's sizes before and after it (``size_before``, ``size_after``)."""
    with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(
        dsn, autocommit=True
    ) as probe:
        up_to_0003(conn)
        measured: dict[str, Any] = {"size_before": sizes(probe)}
        start = lsn(probe)
        yield conn, probe, measured
        measured["wal_bytes"] = wal_bytes(probe, start)
        measured["size_after"] = sizes(probe)


def measure_batched(dsn: str) -> dict[str, Any]:
    """The runner applies 0004 (batched) and 0005; each batch is timed where it runs."""
    batches: list[float] = []
    wal_0004: list[str] = []  # LSN before the first batch, after the last
    real = migrate_mod._plan

    def timed_plan(schema: str | None, migrations: list[Any]) -> Generator[Any, Any, Any]:
        inner = real(schema, migrations)
        rows: Any = None
        while True:
            try:
                step = next(inner) if rows is None else inner.send(rows)
            except StopIteration as stop:
                return stop.value
            batch = step[1] is not None and "after" in step[1]
            if batch and not wal_0004:
                wal_0004.append(lsn(probe))
            # the batch runs between this yield and the next send (the runner executes
            # the step): a span no callable holds, so not the harness's timed()
            started = time.perf_counter()
            rows = yield step
            if batch:
                batches.append(time.perf_counter() - started)
                wal_0004[1:] = [lsn(probe)]

    with at_0003(dsn) as (conn, probe, measured):
        migrate_mod._plan = timed_plan  # type: ignore[assignment]
        applied: list[Any] = []
        try:
            took = timed(lambda: applied.extend(migrate_mod.migrate(conn)))
        finally:
            migrate_mod._plan = real  # type: ignore[assignment]
    with psycopg.connect(dsn, autocommit=True) as conn:
        ledger = dict(
            conn.execute("SELECT name, duration_ms FROM langgraph_delta_migrations").fetchall()
        )
    return {
        "applied": [m.name for m in applied],
        "seconds_0004": ledger["0004_backfill_delta_columns.sql"] / 1000,
        "seconds_0005": ledger.get("0005_run_id_index.sql", 0) / 1000,
        "seconds_total": took,
        "batches": len(batches),
        "longest_batch_s": summary(batches)["max_ms"] / 1000,
        "median_batch_s": summary(batches)["median_ms"] / 1000,
        "p95_batch_s": sorted(batches)[int(len(batches) * 0.95)],
        "wal_bytes_total": measured["wal_bytes"],
        "wal_bytes_0004": int(
            probe_diff(dsn, wal_0004[1], wal_0004[0])
        ),
        "size_before": measured["size_before"],
        "size_after": measured["size_after"],
    }


def probe_diff(dsn: str, end: str, start: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", (end, start))
        return int(row.fetchone()[0])  # type: ignore[index]


def measure_one_update(dsn: str) -> dict[str, Any]:
    text = subprocess.run(
        ["git", "show", f"{OLD_0004[0]}:{OLD_0004[1]}"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout
    with at_0003(dsn) as (conn, _probe, measured):
        took = timed(lambda: conn.execute(migrate_mod.render(text, None)))
    return {
        "seconds_0004": took,
        "longest_batch_s": took,
        "wal_bytes_total": measured["wal_bytes"],
        "wal_bytes_0004": measured["wal_bytes"],
        "size_before": measured["size_before"],
        "size_after": measured["size_after"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", required=True, help="a role that may create databases")
    ap.add_argument("--threads", type=int, default=10_000)
    ap.add_argument("--per-thread", type=int, default=100)
    ap.add_argument("--keep-source", action="store_true")
    ap.add_argument("--batch-rows", type=int, default=migrate_mod.BATCH_ROWS)
    ap.add_argument("--vacuum-every", type=int, default=migrate_mod.VACUUM_EVERY_BATCHES)
    ap.add_argument("--only-batched", action="store_true", help="skip the one-UPDATE run")
    args = ap.parse_args()
    migrate_mod.BATCH_ROWS = args.batch_rows
    migrate_mod.VACUUM_EVERY_BATCHES = args.vacuum_every
    print(f"batch_rows={args.batch_rows} vacuum_every={args.vacuum_every}")
    src = "lgdp_adopt_src"
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {src}")
        admin.execute(f"CREATE DATABASE {src}")
    with psycopg.connect(dsn_for(args.dsn, src), autocommit=True) as conn:
        PostgresSaver(conn).setup()

        def generate() -> None:
            for statement in GENERATE.split(";;"):
                conn.execute(statement, {"threads": args.threads,
                                         "per_thread": args.per_thread})
            conn.execute("VACUUM ANALYZE checkpoints")
            conn.execute("VACUUM ANALYZE checkpoint_blobs")

        took = timed(generate)
        n = conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]  # type: ignore[index]
        print(f"generated {n} checkpoints in {took:.1f} s")
    results = {}
    runs = [("batched (0004 now)", measure_batched)]
    if not args.only_batched:
        runs.append(("one UPDATE (0004 before)", measure_one_update))
    for name, fn in runs:
        db = "lgdp_adopt_" + name.split()[0].replace("(", "")
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {db}")
            admin.execute(f"CREATE DATABASE {db} TEMPLATE {src} STRATEGY FILE_COPY")
        try:
            results[name] = fn(dsn_for(args.dsn, db))
        finally:
            with psycopg.connect(args.dsn, autocommit=True) as admin:
                admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        print(name, results[name], flush=True)
    if not args.keep_source:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {src} WITH (FORCE)")
    mb = 1024 * 1024
    print(f"\n{'':26} {'0004 s':>8} {'longest tx s':>13} {'WAL MB':>8} "
          f"{'table MB before':>16} {'after':>8}")
    for name, r in results.items():
        print(f"{name:26} {r['seconds_0004']:8.1f} {r['longest_batch_s']:13.2f} "
              f"{r['wal_bytes_0004'] / mb:8.0f} {r['size_before'][0] / mb:16.0f} "
              f"{r['size_after'][0] / mb:8.0f}")


if __name__ == "__main__":
    main()
