"""``langgraph-delta-pg migrate/status`` as a user runs it: a subprocess on a real DSN."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres.cli import EXIT_PENDING
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
    assert res.returncode == EXIT_PENDING, res.stderr  # pending migrations: not 0
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
    assert res.returncode == EXIT_PENDING and f"0 applied, {len(FILES)} pending" in res.stdout
    assert "does not exist" not in res.stderr


def test_status_of_a_schema_that_does_not_exist(empty_dsn: str) -> None:
    res = run("status", "--schema", "no_such_schema", "--dsn", empty_dsn)
    assert res.returncode == EXIT_PENDING
    assert "schema 'no_such_schema' does not exist" in res.stderr
    assert "migrate --schema no_such_schema" in res.stderr
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA no_such_schema")
    res = run("status", "--schema", "no_such_schema", "--dsn", empty_dsn)
    assert res.returncode == EXIT_PENDING and "does not exist" not in res.stderr


def test_migrate_into_a_system_schema_is_refused(empty_dsn: str) -> None:
    """``migrate --schema information_schema`` made the tables in that system schema
    (issue 38): a usage error now (exit 2, no traceback), nothing created."""
    for schema in ("information_schema", "pg_catalog"):
        res = run("migrate", "--schema", schema, "--dsn", empty_dsn)
        assert res.returncode == 2, res.stderr
        assert "is a Postgres system schema" in res.stderr and "Traceback" not in res.stderr
    with psycopg.connect(empty_dsn) as conn:
        found = conn.execute("SELECT to_regclass('information_schema.checkpoints')").fetchone()
        assert found == (None,)


QUOTED = 'we"ird sch\u00e9ma'


def test_schema_with_a_double_quote_everywhere(empty_dsn: str) -> None:
    res = run("migrate", "--schema", QUOTED, "--dsn", empty_dsn)
    assert res.returncode == 0, res.stderr
    res = run("status", "--schema", QUOTED, "--dsn", empty_dsn)
    assert res.returncode == 0, res.stderr
    assert f"{len(FILES)} applied, 0 pending" in res.stdout
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        DeltaPostgresSaver(conn, schema=QUOTED).put(
            {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
            empty_checkpoint(), {"source": "input", "step": -1}, {},
        )
    res = run("inspect", "--thread", "t", "--schema", QUOTED, "--dsn", empty_dsn)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr


def test_schema_longer_than_63_bytes_is_refused(empty_dsn: str) -> None:
    long_name = "s" * 62 + "\u00e9"  # 64 bytes in UTF-8, 63 characters
    for cmd in (["migrate"], ["status"], ["inspect", "--thread", "t"]):
        res = run(*cmd, "--schema", long_name, "--dsn", empty_dsn)
        assert res.returncode == 2, (cmd, res.stderr)
        assert "63 bytes" in res.stderr and "Traceback" not in res.stderr
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        n = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'sss%'").fetchone()
        assert n == (0,)


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


# ---------------------------------------------------------------- refused logins


def _with(dsn: str, **params: str) -> str:
    p = conninfo_to_dict(dsn)
    p.update(params)
    return make_conninfo(**p)  # type: ignore[arg-type]


def test_a_role_postgres_refuses_is_reported_with_its_words(dsn: str) -> None:
    """Issue 21: a role Postgres refuses was reported as "cannot reach Postgres"."""
    bad = _with(dsn, user=f"lgdp_nobody_{uuid.uuid4().hex[:8]}")
    for cmd in (["migrate"], ["status"], ["prune", "--thread", "t"]):
        res = run(*cmd, "--dsn", bad)
        assert res.returncode == 1, res.stderr
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
        assert "cannot reach" not in lines[0]
        assert "Postgres refused the connection: role" in lines[0]
        assert "does not exist" in lines[0] and "check the user name" in lines[0]


def test_a_wrong_password_is_reported_with_postgres_words(
    dsn: str, password_role: tuple[str, str]
) -> None:
    role, password = password_role
    wrong = _with(dsn, user=role, password="wrong-password")
    try:
        psycopg.connect(wrong).close()
    except psycopg.OperationalError:
        pass
    else:
        pytest.skip("this test server lets a wrong password in (trust): cannot test it")
    for cmd in (["status"], ["prune", "--thread", "t"]):
        res = run(*cmd, "--dsn", wrong)
        assert res.returncode == 1, res.stderr
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
        assert "cannot reach" not in lines[0]
        assert f'password authentication failed for user "{role}"' in lines[0]
        assert "Postgres refused the connection" in lines[0]
        assert "wrong-password" not in lines[0]


#: Every command that prints to stdout, as a user runs it (``{dsn}``: a migrated database
#: holding one thread, "t"): the argparse ones too, and prune's rich table.
PRINTING = {
    "--version": ["--version"],
    "--help": ["--help"],
    "status": ["status", "--dsn", "{dsn}"],
    "migrate": ["migrate", "--dsn", "{dsn}"],
    "inspect": ["inspect", "--thread", "t", "--dsn", "{dsn}"],
    "inspect-json": ["inspect", "--thread", "t", "--json", "--dsn", "{dsn}"],
    "prune": ["prune", "--thread", "t", "--dry-run", "--dsn", "{dsn}"],
    "demo": ["demo", "--turns", "2", "--dsn", "{dsn}"],
    "bench": ["bench", "--scale", "tiny", "--only", "retention", "--dsn", "{dsn}"],
    "postgres": ["postgres"],
}


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("command", list(PRINTING))
def test_a_closed_pipe_is_no_traceback(dsn: str, command: str, buffered: bool) -> None:
    """``langgraph-delta-pg COMMAND | true``: the reader has gone before the command
    writes (a real pipe whose read end is closed). Every printing command ends the same
    way, from one place (cli.main): no traceback, nothing on stderr about it, the exit
    code of a tool killed by SIGPIPE (docs/api.md). It was a BrokenPipeError traceback
    or exit 120 (issue 38); then prune exited 1 (rich's Console exits so on a broken
    pipe), and --version / --help 0 when Python writes unbuffered (argparse drops the
    error). Both ways of writing: buffered, and PYTHONUNBUFFERED=1."""
    if command in ("demo", "bench"):
        pytest.importorskip("langgraph.checkpoint.postgres")  # their extras
    if command == "bench":
        pytest.importorskip("matplotlib")
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
                  empty_checkpoint(), {"step": 0}, {})
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "PYTHONUNBUFFERED")}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    # `postgres`: its server's directory (and socket) lands in TMPDIR, so a short one: a
    # Unix socket path has at most 107 bytes, which pytest's tmp_path under xdist, on a
    # machine that ran pytest many times (/tmp/pytest-of-USER/pytest-NNN/popen-gwN/...),
    # can exceed
    short = Path(tempfile.mkdtemp(prefix="lgdp-pipe-"))
    tmp = short / "tmp"
    tmp.mkdir()
    (short / "run").mkdir(mode=0o700)
    env.update(TMPDIR=str(tmp), XDG_RUNTIME_DIR=str(short / "run"))
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "langgraph_delta_postgres",
             *(a.format(dsn=dsn) for a in PRINTING[command])],
            stdout=write, stderr=subprocess.PIPE, text=True, timeout=300, env=env,
        )
        left = list(tmp.iterdir())
    finally:
        os.close(write)
        shutil.rmtree(short, ignore_errors=True)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert "error" not in done.stderr.lower(), done.stderr
    assert done.returncode == 141, (done.returncode, done.stderr)
    if command == "postgres":  # and it stopped the server it had started
        assert left == []


@pytest.mark.parametrize("fmt", [[], ["--json"]], ids=["text", "json"])
def test_inspect_piped_into_head(dsn: str, fmt: list[str]) -> None:
    """``langgraph-delta-pg inspect --thread T | head -1`` as a shell runs it: a real
    ``head`` reads the first line and exits while inspect is still writing (a thread of
    1,000 namespaces prints ~100 kB, more than a pipe holds), so inspect's next write
    meets a closed pipe. head prints the line; inspect ends without a traceback, with
    exit 141 (docs/api.md); it was a BrokenPipeError traceback, or exit 120 (issue 38)."""
    head = shutil.which("head")
    if head is None:
        pytest.skip("no head(1) here")
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        for i in range(1000):
            ns = f"ns{i:05}" if i else ""
            saver.put({"configurable": {"thread_id": "big", "checkpoint_ns": ns}},
                      empty_checkpoint(), {"step": 0}, {})
    cmd = subprocess.Popen(
        [sys.executable, "-m", "langgraph_delta_postgres", "inspect", "--thread", "big",
         "--dsn", dsn, *fmt],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert cmd.stdout is not None and cmd.stderr is not None
    first = subprocess.run([head, "-1"], stdin=cmd.stdout, capture_output=True, timeout=120)
    cmd.stdout.close()  # head has exited: inspect's pipe has no reader left
    err = cmd.stderr.read().decode()
    cmd.stderr.close()
    assert cmd.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err and err == "", err
    assert first.stdout.decode() == ("{\n" if fmt else "thread 'big'\n")
