"""Migrations: replay == official schema + ours, idempotence, concurrency, drift, lint,
schema placement and per-file atomicity, on real Postgres."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row

import langgraph_delta_postgres.migrate as migrate_mod
from langgraph_delta_postgres import MigrationError
from langgraph_delta_postgres._sql import data_dir
from langgraph_delta_postgres.migrate import amigrate, discover, migrate, status

MIGRATIONS_DIR = Path(str(data_dir("migrations")))
FILES = sorted(p.name for p in MIGRATIONS_DIR.iterdir() if p.name.endswith(".sql"))


def describe(dsn: str, schema: str = "public") -> dict[str, Any]:
    """Columns (type, default, nullability, position), indexes with definitions and
    constraints of every table in ``schema``; definitions have the schema name removed."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cols = conn.execute(
            """SELECT table_name, ordinal_position, column_name, data_type, udt_name,
                      column_default, is_nullable
               FROM information_schema.columns WHERE table_schema = %s
               ORDER BY 1, 2""",
            (schema,),
        ).fetchall()
        idx = conn.execute(
            "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = %s "
            "ORDER BY 1, 2",
            (schema,),
        ).fetchall()
        cons = conn.execute(
            """SELECT t.relname, c.conname, c.contype, pg_get_constraintdef(c.oid)
               FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid
               JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = %s
               ORDER BY 1, 2""",
            (schema,),
        ).fetchall()
        triggers = conn.execute(
            """SELECT t.relname, g.tgname, g.tgenabled, p.proname
               FROM pg_trigger g JOIN pg_class t ON t.oid = g.tgrelid
               JOIN pg_namespace n ON n.oid = t.relnamespace
               JOIN pg_proc p ON p.oid = g.tgfoid
               JOIN pg_namespace pn ON pn.oid = p.pronamespace
               WHERE n.nspname = %s AND pn.nspname = %s AND NOT g.tgisinternal
               ORDER BY 1, 2""",
            (schema, schema),
        ).fetchall()
        mig = conn.execute(
            psycopg.sql.SQL("SELECT v FROM {}.checkpoint_migrations ORDER BY v").format(
                psycopg.sql.Identifier(schema)
            )
        ).fetchall()
    strip = re.compile(rf'(\b{re.escape(schema)}\.|"{re.escape(schema)}"\.)')
    return {
        "columns": cols,
        "indexes": [(t, n, strip.sub("", d)) for t, n, d in idx],
        "constraints": cons,
        "triggers": triggers,
        "checkpoint_migrations": mig,
    }


def ledger(dsn: str, schema: str | None = None) -> list[tuple[Any, ...]]:
    table = f'"{schema}".langgraph_delta_migrations' if schema else "langgraph_delta_migrations"
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            f"SELECT version, name, checksum, applied_at FROM {table} ORDER BY version"
        ).fetchall()


# --------------------------------------------------------------------------- lint


def test_migration_file_names_are_linted() -> None:
    assert FILES, "no migration files found"
    versions = []
    for name in FILES:
        m = re.fullmatch(r"(\d{4})_([a-z0-9_]+)\.sql", name)
        assert m, f"{name}: must be NNNN_lowercase_name.sql"
        versions.append(int(m.group(1)))
        text = (MIGRATIONS_DIR / name).read_text(encoding="utf-8")
        first = text.splitlines()[0]
        assert first.startswith(f"-- {name.removesuffix('.sql')}"), (
            f"{name}: first line must be a header comment naming the file, got {first!r}"
        )
        assert "\r" not in text
    assert versions == list(range(1, len(FILES) + 1)), f"versions not contiguous: {versions}"
    assert [m.name for m in discover()] == FILES
    assert [m.version for m in discover()] == versions
    others = [p.name for p in MIGRATIONS_DIR.iterdir() if not p.name.endswith(".sql")]
    assert others == [], f"stray files in migrations/: {others}"


# --------------------------------------------------------------------------- schema


def test_replay_equals_official_setup_plus_ours(pg_server: Any) -> None:
    ours_db = pg_server.create_db(template="template0")
    both_db = pg_server.create_db(template="template0")
    try:
        ours, both = pg_server.dsn_for(ours_db), pg_server.dsn_for(both_db)
        with psycopg.connect(ours, autocommit=True) as conn:
            assert [m.name for m in migrate(conn)] == FILES
        with psycopg.connect(both, autocommit=True, row_factory=dict_row) as conn:
            PostgresSaver(conn).setup()
        with psycopg.connect(both, autocommit=True) as conn:
            assert [m.name for m in migrate(conn)] == FILES
        a, b = describe(ours), describe(both)
        for key in a:
            assert a[key] == b[key], key
        tables = {c[0] for c in a["columns"]}
        assert tables == {"checkpoints", "checkpoint_blobs", "checkpoint_writes",
                          "checkpoint_migrations", "langgraph_delta_migrations",
                          "checkpoint_epochs"}
        assert [r[:3] for r in ledger(ours)] == [r[:3] for r in ledger(both)]
        # 0007: the database keeps checkpoint_epochs for every writer
        assert [(r[0], r[1]) for r in a["triggers"]] == [
            ("checkpoint_writes", "lgdp_epochs_write"),
            ("checkpoints", "lgdp_epochs_put"),
        ]
        # the official setup() after ours is a no-op
        with psycopg.connect(ours, autocommit=True, row_factory=dict_row) as conn:
            PostgresSaver(conn).setup()
        assert describe(ours) == a
    finally:
        pg_server.drop_db(ours_db)
        pg_server.drop_db(both_db)


def test_second_run_is_noop(empty_dsn: str) -> None:
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert len(migrate(conn)) == len(FILES)
        before, led = describe(empty_dsn), ledger(empty_dsn)
        assert migrate(conn) == []
        st = status(conn)
        assert st.ok and st.pending == [] and len(st.applied) == len(FILES)
    assert describe(empty_dsn) == before
    assert ledger(empty_dsn) == led
    assert [r[1] for r in led] == FILES
    assert [r[2] for r in led] == [m.checksum for m in discover()]


async def test_async_runner_same_result(empty_dsn: str, dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(empty_dsn) as conn:
        applied = await amigrate(conn)
        assert [m.name for m in applied] == FILES
        assert await amigrate(conn) == []
        assert conn.autocommit is False  # restored
    assert describe(empty_dsn) == describe(dsn)


def test_runner_connection_handling(empty_dsn: str) -> None:
    with psycopg.connect(empty_dsn) as conn:  # not autocommit, idle
        conn.execute("SELECT 1")
        with pytest.raises(MigrationError, match="transaction"):
            migrate(conn)
        conn.rollback()
        assert len(migrate(conn)) == len(FILES)
        assert conn.autocommit is False


def test_runner_on_prepare_threshold_zero_connection(empty_dsn: str) -> None:
    """The connection the official saver's from_conn_string makes (and PgBouncer users
    make): every statement prepared. The runner must still work on it."""
    with psycopg.connect(
        empty_dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row
    ) as conn:
        assert [m.name for m in migrate(conn)] == FILES
        assert migrate(conn) == []


def test_schema_option_puts_everything_in_the_schema(empty_dsn: str, dsn: str) -> None:
    schema = "Mig Schema"
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert len(migrate(conn, schema=schema)) == len(FILES)
        assert migrate(conn, schema=schema) == []
        st = status(conn, schema=schema)
        assert st.ok and not st.pending and len(st.applied) == len(FILES)
        # the default schema knows nothing about it
        assert len(status(conn).pending) == len(FILES)
        public = conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public'"
        ).fetchall()
        assert public == []
        functions = conn.execute(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'public' AND p.proname LIKE 'lgdp%'"
        ).fetchall()
        assert functions == []
    assert describe(empty_dsn, schema) == describe(dsn)
    assert [r[1] for r in ledger(empty_dsn, schema)] == FILES


# --------------------------------------------------------------------------- concurrency


def test_concurrent_processes(pg_server: Any) -> None:
    """4 CLI processes migrate one empty database at once."""
    name = pg_server.create_db(template="template0")
    try:
        target = pg_server.dsn_for(name)
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "langgraph_delta_postgres", "migrate", "--dsn", target],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            for _ in range(4)
        ]
        outs = [p.communicate(timeout=120) for p in procs]
        for p, (_out, err) in zip(procs, outs, strict=True):
            assert p.returncode == 0, err
        applied_lines = [ln for out, _ in outs for ln in out.splitlines()
                         if ln.startswith("applied")]
        assert sorted(applied_lines) == sorted(f"applied {f}" for f in FILES)
        assert sum("up to date" in out for out, _ in outs) >= 1
        led = ledger(target)
        assert [r[1] for r in led] == FILES
    finally:
        pg_server.drop_db(name)


def test_concurrent_threads(pg_server: Any) -> None:
    """4 sessions call migrate at the same instant (a barrier): all succeed."""
    name = pg_server.create_db(template="template0")
    try:
        target = pg_server.dsn_for(name)
        results: list[Any] = []
        errors: list[BaseException] = []
        barrier = threading.Barrier(4)

        def worker() -> None:
            try:
                with psycopg.connect(target) as conn:
                    barrier.wait()
                    results.append(migrate(conn))
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert errors == []
        assert sorted(m.name for r in results for m in r) == FILES
        assert [r[1] for r in ledger(target)] == FILES
    finally:
        pg_server.drop_db(name)


# --------------------------------------------------------------------------- drift


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "langgraph_delta_postgres", *args],
        capture_output=True, text=True, timeout=60,
    )


def test_edited_checksum_is_drift(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE langgraph_delta_migrations SET checksum = 'deadbeef' WHERE version = 2"
        )
        conn.execute("DELETE FROM langgraph_delta_migrations WHERE version = 4")
        with pytest.raises(MigrationError, match="0002"):
            migrate(conn)
        # nothing was applied: version 4 is still pending
        assert [r[0] for r in ledger(dsn)] == [m.version for m in discover() if m.version != 4]
        st = status(conn)
        assert not st.ok
        assert [(a.version, m.name if m else None) for a, m in st.drifted] == [(2, FILES[1])]
        assert [m.name for m in st.pending] == [FILES[3]]
    res = cli("status", "--dsn", dsn)
    assert res.returncode == 1
    assert "DRIFT" in res.stdout and FILES[1] in res.stdout
    assert "edited" in res.stderr
    res = cli("migrate", "--dsn", dsn)
    assert res.returncode == 1 and "drift" in res.stderr and "Traceback" not in res.stderr


def test_ledger_row_of_missing_file_is_drift(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO langgraph_delta_migrations (version, name, checksum) "
            "VALUES (99, '0099_gone.sql', 'abc')"
        )
        with pytest.raises(MigrationError, match="0099_gone"):
            migrate(conn)
        st = status(conn)
        assert not st.ok and [(a.name, m) for a, m in st.drifted] == [("0099_gone.sql", None)]
    res = cli("status", "--dsn", dsn)
    assert res.returncode == 1 and "gone" in res.stderr


# --------------------------------------------------------------------------- atomicity


def _patched_dir(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
    original = data_dir  # what migrate imported from _sql, and calls

    def fake(name: str) -> Any:
        return tmp if name == "migrations" else original(name)

    monkeypatch.setattr(migrate_mod, "data_dir", fake)


def test_failing_transactional_migration_is_atomic(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for f in FILES:
        shutil.copy(MIGRATIONS_DIR / f, tmp_path / f)
    n = len(FILES) + 1
    bad = tmp_path / f"{n:04d}_broken.sql"
    bad.write_text(
        f"-- {n:04d}_broken: creates a table, then fails\n"
        "CREATE TABLE {s}half_done (x int);\n"
        "INSERT INTO {s}half_done VALUES (1);\n"
        "SELECT 1 / 0;\n"
    )
    _patched_dir(monkeypatch, tmp_path)
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            migrate(conn)
        assert conn.execute("SELECT to_regclass('half_done')").fetchone() == (None,)
        assert [r[0] for r in ledger(dsn)] == list(range(1, n))
        assert [m.name for m in status(conn).pending] == [bad.name]
        # the lock was released: another session can take it
        key = migrate_mod.lock_key(None)
        with psycopg.connect(dsn, autocommit=True) as other:
            assert other.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone() == (
                True,
            )
        # fixed file: applied, in its own transaction, and recorded
        bad.write_text(
            f"-- {n:04d}_broken: fixed\nCREATE TABLE {{s}}half_done (x int);\n"
        )
        assert [m.name for m in migrate(conn)] == [bad.name]
        assert conn.execute("SELECT to_regclass('half_done')").fetchone() != (None,)
    assert [r[0] for r in ledger(dsn)] == list(range(1, n + 1))


def test_bad_file_name_is_refused(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for f in FILES:
        shutil.copy(MIGRATIONS_DIR / f, tmp_path / f)
    (tmp_path / "5_Oops.sql").write_text("-- 5_Oops\nSELECT 1;\n")
    _patched_dir(monkeypatch, tmp_path)
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(MigrationError, match="5_Oops"):
            migrate(conn)


# --------------------------------------------------------------------------- 0009


def test_epochs_row_is_not_compressed_at_each_put(dsn: str) -> None:
    """0009: a namespace's checkpoint_epochs row past the 2 kB at which Postgres would
    compress it (32 ids in recent and in parents) stays as it is, put after put."""
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_delta_postgres import DeltaPostgresSaver

    with psycopg.connect(dsn, autocommit=True) as conn:
        saver = DeltaPostgresSaver(conn)
        cfg: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        for i in range(40):
            cp = empty_checkpoint()
            cp["id"] = f"00000000-0000-6000-8000-{i:012d}"
            cfg = saver.put(cfg, cp, {}, {})
        row = conn.execute(
            "SELECT pg_column_size(e.*), pg_column_compression(recent),"
            " pg_column_compression(parents), cardinality(recent)"
            " FROM checkpoint_epochs AS e WHERE thread_id = 't'"
        ).fetchone()
        assert row is not None
        size, recent_compressed, parents_compressed, n = row
        assert n == 32 and size > 2032  # over the threshold: compressed without 0009
        assert (recent_compressed, parents_compressed) == (None, None)
        assert conn.execute(
            "SELECT reloptions FROM pg_class WHERE oid = 'checkpoint_epochs'::regclass"
        ).fetchone() == (["toast_tuple_target=8160"],)
