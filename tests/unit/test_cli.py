"""``langgraph-delta-pg migrate/status`` as a user runs it: a subprocess on a real DSN."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg

from langgraph_delta_postgres.migrate import discover

FILES = [m.name for m in discover()]
SCRIPT = shutil.which("langgraph-delta-pg") or str(
    Path(sys.executable).parent / "langgraph-delta-pg"
)
UNREACHABLE = "postgresql://nobody@127.0.0.1:1/nowhere?connect_timeout=3"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    full_env.update(env or {})
    return subprocess.run(
        [SCRIPT, *args], capture_output=True, text=True, timeout=120, env=full_env
    )


def test_migrate_then_noop_then_status(empty_dsn: str) -> None:
    res = run("status", "--dsn", empty_dsn)
    assert res.returncode == 0, res.stderr
    assert [ln.split()[1] for ln in res.stdout.splitlines() if ln.startswith("pending")] == FILES
    assert f"0 applied, {len(FILES)} pending" in res.stdout

    res = run("migrate", "--dsn", empty_dsn)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [f"applied {f}" for f in FILES]

    res = run("migrate", "--dsn", empty_dsn)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "up to date: no pending migrations"

    res = run("status", "--dsn", empty_dsn)
    assert res.returncode == 0, res.stderr
    applied = [ln.split()[1] for ln in res.stdout.splitlines() if ln.startswith("applied")]
    assert applied == FILES
    assert f"{len(FILES)} applied, 0 pending" in res.stdout
    assert res.stderr == ""


def test_database_url_and_schema(empty_dsn: str) -> None:
    res = run("migrate", "--schema", "cli_schema", env={"DATABASE_URL": empty_dsn})
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.splitlines()) == len(FILES)
    with psycopg.connect(empty_dsn) as conn:
        rows = conn.execute("SELECT name FROM cli_schema.langgraph_delta_migrations").fetchall()
        assert sorted(r[0] for r in rows) == FILES
    res = run("status", "--schema", "cli_schema", "--dsn", empty_dsn)
    assert res.returncode == 0 and f"{len(FILES)} applied, 0 pending" in res.stdout
    # the default schema has nothing applied
    res = run("status", "--dsn", empty_dsn)
    assert res.returncode == 0 and f"0 applied, {len(FILES)} pending" in res.stdout


def test_drift_exit_codes(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE langgraph_delta_migrations SET checksum = 'x' WHERE version = 1")
    res = run("status", "--dsn", dsn)
    assert res.returncode == 1
    assert "DRIFT" in res.stdout and "Traceback" not in res.stderr
    res = run("migrate", "--dsn", dsn)
    assert res.returncode == 1
    assert res.stderr.startswith("error:") and "Traceback" not in res.stderr


def test_unreachable_dsn_is_one_line_error() -> None:
    for cmd in ("migrate", "status"):
        res = run(cmd, "--dsn", UNREACHABLE)
        assert res.returncode != 0
        assert "Traceback" not in res.stderr
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1, res.stderr
        assert lines[0].startswith("error:") and "connect" in lines[0]
        assert res.stdout == ""


def test_no_database_given() -> None:
    res = run("migrate")
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    assert "DATABASE_URL" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_usage_errors() -> None:
    res = run()
    assert res.returncode == 2 and "usage" in res.stderr
    res = run("frobnicate")
    assert res.returncode == 2 and "usage" in res.stderr
    res = subprocess.run(
        [sys.executable, "-m", "langgraph_delta_postgres", "--help"],
        capture_output=True, text=True, timeout=60,
    )
    assert res.returncode == 0 and "migrate" in res.stdout and "status" in res.stdout
