"""``langgraph-delta-pg prune`` as a user runs it: a subprocess on a real DSN."""

from __future__ import annotations

import re

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres.cli.prune import parse_age
from tests.graph.test_delta_graphs import fanout_builder
from tests.unit.test_cli import run


def T(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


def write_threads(dsn: str, n: int, turns: int = 4) -> dict[str, object]:
    """``n`` threads of a DeltaChannel graph (snapshot_frequency=5); their states."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        g = fanout_builder(5).compile(checkpointer=DeltaPostgresSaver(conn))
        for t in range(n):
            for i in range(turns):
                g.invoke({"items": [f"{t}-{i}"]}, T(f"t{t:03}"))
        return {f"t{t:03}": g.get_state(T(f"t{t:03}")).values for t in range(n)}


def states(dsn: str, threads: list[str]) -> dict[str, object]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        g = fanout_builder(5).compile(checkpointer=DeltaPostgresSaver(conn))
        return {t: g.get_state(T(t)).values for t in threads}


def count(dsn: str, thread: str | None = None) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        if thread is None:
            row = conn.execute("SELECT count(*) FROM checkpoints").fetchone()
        else:
            row = conn.execute(
                "SELECT count(*) FROM checkpoints WHERE thread_id = %s", (thread,)
            ).fetchone()
        assert row is not None
        return int(row[0])


def test_prune_threads_dry_run_then_for_real(dsn: str) -> None:
    before = write_threads(dsn, 3)
    n = count(dsn)
    res = run("prune", "--dsn", dsn, "--thread", "t000", "t001", "--dry-run")
    assert res.returncode == 0, res.stderr
    assert "dry run" in res.stdout and "checkpoints would free" in res.stdout
    assert count(dsn) == n
    res = run("prune", "--dsn", dsn, "--thread", "t000", "t001")
    assert res.returncode == 0, res.stderr
    assert "threads pruned" in res.stdout
    assert count(dsn) < n and count(dsn, "t002") == n // 3
    assert states(dsn, list(before)) == before


def test_prune_older_than_pages_through_every_thread(dsn: str) -> None:
    before = write_threads(dsn, 7, turns=2)
    n = count(dsn)
    res = run("prune", "--dsn", dsn, "--older-than", "1d")  # nothing is a day old
    assert res.returncode == 0, res.stderr
    assert count(dsn) == n
    assert re.search(r"threads scanned\s*\S\s*7\b", res.stdout), res.stdout
    assert re.search(r"threads pruned\s*\S\s*0\b", res.stdout), res.stdout
    res = run("prune", "--dsn", dsn, "--older-than", "0s", "--batch", "3", "--keep-last", "2")
    assert res.returncode == 0, res.stderr
    left = count(dsn)
    assert left < n
    for t in before:
        assert count(dsn, t) >= 2
    assert states(dsn, list(before)) == before
    res = run("prune", "--dsn", dsn, "--older-than", "0s", "--delete")
    assert res.returncode == 0, res.stderr
    assert count(dsn) == 0


def test_prune_usage_errors(dsn: str) -> None:
    res = run("prune", "--dsn", dsn)
    assert res.returncode == 2 and "--thread" in res.stderr
    res = run("prune", "--dsn", dsn, "--older-than", "soon")
    assert res.returncode == 2 and "not an age" in res.stderr
    res = run("prune", "--dsn", dsn, "--thread", "x", "--keep-last", "0")
    assert res.returncode == 2
    res = run("prune", "--dsn", dsn, "--thread", "x", "--keep-last", "2", "--delete")
    assert res.returncode == 2 and "exclude" in res.stderr
    res = run("prune", "--thread", "x")
    assert res.returncode == 1 and "DATABASE_URL" in res.stderr


def test_prune_reports_a_corrupt_thread_and_goes_on(dsn: str) -> None:
    write_threads(dsn, 2, turns=2)
    with psycopg.connect(dsn, autocommit=True) as conn:
        # a cycle at t000's head: latest -> its parent -> latest
        latest, parent = conn.execute(
            "SELECT checkpoint_id, parent_checkpoint_id FROM checkpoints "
            "WHERE thread_id = 't000' AND checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1"
        ).fetchone()  # type: ignore[misc]
        conn.execute(
            "UPDATE checkpoints SET parent_checkpoint_id = %s "
            "WHERE thread_id = 't000' AND checkpoint_id = %s",
            (latest, parent),
        )
    n0, n1 = count(dsn, "t000"), count(dsn, "t001")
    res = run("prune", "--dsn", dsn, "--thread", "t000", "t001", "--keep-last", "50")
    assert res.returncode == 1
    assert "t000" in res.stderr and "corrupt" in res.stderr
    assert count(dsn, "t000") == n0  # left untouched
    assert count(dsn, "t001") == n1  # its chain is shorter than 50: nothing goes
    assert re.search(r"threads scanned\s*\S\s*2\b", res.stdout), res.stdout
    assert re.search(r"threads pruned\s*\S\s*1\b", res.stdout), res.stdout


@pytest.mark.parametrize(
    ("text", "seconds"), [("30d", 30 * 86400), ("12h", 43200), ("90m", 5400), ("2w", 1209600)]
)
def test_parse_age(text: str, seconds: int) -> None:
    assert parse_age(text).total_seconds() == seconds


def test_prune_age_beyond_any_date_is_a_usage_error(dsn: str) -> None:
    """Issue 21: ``--older-than 99999999999999d`` printed an OverflowError traceback."""
    for age in ("99999999999999d", "999999999d", "9" * 5000 + "s"):
        res = run("prune", "--dsn", dsn, "--older-than", age)
        assert res.returncode == 2, res.stderr
        assert "Traceback" not in res.stderr and "OverflowError" not in res.stderr
        errors = [ln for ln in res.stderr.splitlines() if "error:" in ln]
        assert len(errors) == 1 and "too long ago" in errors[0], res.stderr
    for n in ("99999999999999", "2147483648"):
        res = run("prune", "--dsn", dsn, "--thread", "x", "--keep-last", n)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        res = run("prune", "--dsn", dsn, "--older-than", "1d", "--batch", n)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr


@pytest.mark.parametrize(
    "how", [["--thread", "t1"], ["--older-than", "1d"], ["--thread", "t1", "--delete"]]
)
def test_prune_of_a_never_migrated_database_says_to_migrate(empty_dsn: str, how: list[str]) -> None:
    res = run("prune", "--dsn", empty_dsn, *how)
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    lines = res.stderr.splitlines()  # no empty line before the error (issue 23)
    assert len(lines) == 1, repr(res.stderr)
    assert lines[0].startswith("error: the checkpoint tables are missing or not migrated")
    assert "run `langgraph-delta-pg migrate`" in lines[0]
    assert "setup()" not in lines[0] and "LINE" not in lines[0]
    res = run("prune", "--dsn", empty_dsn, "--schema", "lgdp x", *how)
    assert res.returncode == 1
    assert "langgraph-delta-pg migrate --schema 'lgdp x'" in res.stderr


def test_prune_with_a_graph_compacts(dsn: str, tmp_path: pytest.TempPathFactory) -> None:
    """--graph path.py:attr (a StateGraph, compiled by the command): keep_last=2 leaves
    two checkpoints per thread in the table, each reading as before; a spec that names
    nothing loadable is a usage error."""
    from pathlib import Path

    before = write_threads(dsn, 2, turns=6)
    with psycopg.connect(dsn, autocommit=True) as conn:
        saver = DeltaPostgresSaver(conn)
        g = fanout_builder(5).compile(checkpointer=saver)
        kept = [t.config for t in saver.list(T("t000"), limit=2)]
        values = [g.get_state(c).values for c in kept]
    root = Path(__file__).resolve().parents[2]
    spec = Path(str(tmp_path)) / "my_graph.py"
    spec.write_text(
        f"import sys\nsys.path.insert(0, {str(root)!r})\n"
        "from tests.graph.test_delta_graphs import fanout_builder\n"
        "builder = fanout_builder(5)\n"
    )
    res = run("prune", "--dsn", dsn, "--thread", "t000", "--keep-last", "2",
              "--graph", f"{spec}:builder")
    assert res.returncode == 0, res.stderr
    assert re.search(r"checkpoints kept as seeds only\s+│?\s*0\b", res.stdout), res.stdout
    assert count(dsn, "t000") == 2
    with psycopg.connect(dsn, autocommit=True) as conn:
        saver = DeltaPostgresSaver(conn)
        g = fanout_builder(5).compile(checkpointer=saver)
        assert [g.get_state(c).values for c in kept] == values
    assert states(dsn, list(before)) == before
    for bad in (f"{spec}:nothing", "no_such_module_x:graph", f"{spec}", f"{spec}:sys"):
        res = run("prune", "--dsn", dsn, "--thread", "t001", "--graph", bad)
        assert res.returncode == 2 and "--graph" in res.stderr, (bad, res.stderr)
