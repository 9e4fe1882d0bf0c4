"""`langgraph-delta-pg demo` and `inspect`, end to end on real Postgres (no mocks).

The CLI runs as a subprocess (``python -m langgraph_delta_postgres``) wherever what is
checked is what a user sees: the exit code, the table, one-line errors without a
traceback, and that the embedded server leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._local.workloads import build_graph, user_input

TIMEOUT = 600


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    base.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "langgraph_delta_postgres", *args],
        capture_output=True,
        text=True,
        env=base,
        timeout=TIMEOUT,
        check=False,
    )


def python_c(code: str) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in a new interpreter (this one's), its output captured."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


def cli_without(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI's ``main(args)`` in a new interpreter where ``module`` cannot be imported,
    as when the extra that brings it is not installed."""
    return python_c(
        f"import sys; sys.modules[{module!r}] = None\n"
        "from langgraph_delta_postgres.cli import main\n"
        f"sys.exit(main({list(args)!r}))\n"
    )


def one_line_error(p: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in p.stderr, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


def postgres_processes_under(path: Path) -> list[str]:
    p = subprocess.run(
        ["pgrep", "-af", f"{path}/lgdp-pg-"], capture_output=True, text=True, check=False
    )
    return [ln for ln in p.stdout.splitlines() if "pgrep" not in ln]


# ---------------------------------------------------------------------- demo


def test_demo_embedded_prints_table_and_leaves_nothing(tmp_path: Path) -> None:
    # TMPDIR makes this run's server directory (tempfile.mkdtemp, prefix lgdp-pg-) land
    # in tmp_path, so a demo or benchmark running concurrently elsewhere on the machine
    # cannot be mistaken for a leftover of this one.
    tmp = tmp_path / "t"
    tmp.mkdir()
    p = cli("demo", "--turns", "8", env={"TMPDIR": str(tmp)})
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    out = p.stdout
    lines = out.splitlines()
    # The comparison with the official saver: its header names the installed version.
    from importlib.metadata import version

    header = next(ln for ln in lines if "this package" in ln and "official" in ln)
    assert f"official {version('langgraph-checkpoint-postgres')}" in header, header
    assert header.split()[-3:] == ["official", "/", "ours"], header

    def row(name: str) -> list[str]:
        return next(ln for ln in lines if ln.strip().startswith(name)).split()

    for name in ("resume, latest", "resume, deepest", "history page (10 states)"):
        r = row(name)
        assert r[-4] == "ms" and r[-2] == "ms" and r[-1].endswith("x"), r
        assert float(r[-5]) > 0 and float(r[-3]) > 0, r
    # ours: get_tuple + one history statement (a resume of the deepest checkpoint, by
    # id: get_tuple of the latest reads both in one); the official saver: get_tuple +
    # its walk
    ours, official = (int(x) for x in row("statements: resume")[-2:])
    label = next(ln for ln in lines if ln.strip().startswith("statements: resume"))
    assert ours == (2 if "deepest" in label else 1) and official > ours, (ours, official)
    ours, official = (int(x) for x in row("statements: history page")[-2:])
    assert ours <= 11 and official > ours, (ours, official)
    stored = row("stored bytes")
    assert stored[-1].endswith("x"), stored
    baseline = next(ln for ln in lines if "on this package:" in ln)
    assert "the DeltaChannel thread's bytes" in baseline
    assert float(baseline.split(",")[-1].split("x")[0]) > 1.0, baseline
    assert "embedded Postgres" in out
    # a real progress bar, per session, with a rate (tqdm)
    for label in ("this package, DeltaChannel", "official PostgresSaver", "full-snapshot"):
        assert label in p.stderr, p.stderr
    assert "turn/s" in p.stderr
    assert list(tmp.glob("lgdp-pg-*")) == []
    assert postgres_processes_under(tmp) == []


def test_demo_without_its_extra_says_what_to_install() -> None:
    # tqdm missing, simulated: the demo extra is what brings it
    p = cli_without("tqdm", "demo", "--turns", "1")
    assert p.returncode == 2
    from langgraph_delta_postgres._local.install import install_hint

    # the command that works from this clone, then the published form
    assert one_line_error(p) == f"error: the demo needs tqdm: {install_hint('demo')}"


def _demo_schemas(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'lgdp_demo_%'"
        ).fetchall()
    return [r[0] for r in rows]


def test_demo_with_dsn_drops_its_schema(dsn: str) -> None:
    p = cli("demo", "--turns", "3", "--dsn", dsn)
    assert p.returncode == 0, p.stderr
    assert "stored bytes" in p.stdout
    assert "dropped" in p.stdout
    assert _demo_schemas(dsn) == []


def test_demo_keep_then_inspect_the_kept_schema(dsn: str) -> None:
    p = cli("demo", "--turns", "3", "--keep", env={"DATABASE_URL": dsn})
    assert p.returncode == 0, p.stderr
    [schema] = _demo_schemas(dsn)
    assert f'kept schema "{schema}"' in p.stdout
    q = cli("inspect", "--thread", "demo-delta", "--schema", schema, "--json", "--dsn", dsn)
    assert q.returncode == 0, q.stderr
    rep = json.loads(q.stdout)
    assert rep["schema"] == schema
    assert [c["channel"] for c in rep["delta_channels"]] == ["files", "messages"]
    full = cli("inspect", "--thread", "demo-full", "--schema", schema, "--json", "--dsn", dsn)
    assert full.returncode == 0, full.stderr
    rep_full = json.loads(full.stdout)
    assert rep_full["delta_channels"] == []
    assert rep_full["bytes"]["blobs"] > rep["bytes"]["blobs"]
    official = cli(
        "inspect", "--thread", "demo-official", "--schema", schema, "--json", "--dsn", dsn
    )
    assert official.returncode == 0, official.stderr
    assert [c["channel"] for c in json.loads(official.stdout)["delta_channels"]] == [
        "files",
        "messages",
    ]


# ---------------------------------------------------------------------- inspect


def _make_thread(dsn: str, thread_id: str) -> dict[str, Any]:
    """A DeltaChannel thread (snapshot_frequency 3) with a fork, in the default schema;
    returns what the saver's own API says about it.

    Two turns, a turn run again from an older checkpoint (its second child), then three
    turns on that branch: at the end ``messages`` was just snapshotted and ``files`` is
    a few checkpoints past its stored value, so both report shapes are exercised."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        saver = DeltaPostgresSaver(conn)
        graph = build_graph("coding_a", saver, delta=True, snapshot_frequency=3)
        cfg: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        for t in range(2):
            graph.invoke(user_input("coding_a", t), cfg)
        older = list(saver.list(cfg))[3].config
        graph.invoke(user_input("coding_a", 99), older)
        for t in range(2, 5):
            graph.invoke(user_input("coding_a", t), cfg)
        tuples = list(saver.list(cfg))
    return {"tuples": tuples}


def _expected_walk(tuples: list[Any], channel: str) -> tuple[int, int]:
    """(depth, replayed writes) of the latest checkpoint, from the saver's public API:
    follow parent_config until a checkpoint whose channel_values hold the channel."""
    by_id = {t.config["configurable"]["checkpoint_id"]: t for t in tuples}
    cur = tuples[0]  # newest first
    if channel in cur.checkpoint["channel_values"]:
        return 0, 0
    depth = writes = 0
    while cur.parent_config is not None:
        cur = by_id[cur.parent_config["configurable"]["checkpoint_id"]]
        depth += 1
        writes += sum(1 for w in cur.pending_writes or [] if w[1] == channel)
        if channel in cur.checkpoint["channel_values"]:
            break
    return depth, writes


def test_inspect_json_reports_the_thread(dsn: str) -> None:
    made = _make_thread(dsn, "t-inspect")
    tuples = made["tuples"]
    p = cli("inspect", "--thread", "t-inspect", "--json", "--dsn", dsn)
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)

    assert rep["thread_id"] == "t-inspect"
    assert rep["schema"] is None
    [ns] = rep["namespaces"]
    assert ns["checkpoint_ns"] == ""
    assert ns["checkpoints"] == len(tuples)
    assert ns["latest_checkpoint_id"] == tuples[0].config["configurable"]["checkpoint_id"]
    assert ns["roots"] == 1

    children: dict[str, int] = {}
    for t in tuples:
        if t.parent_config:
            pid = t.parent_config["configurable"]["checkpoint_id"]
            children[pid] = children.get(pid, 0) + 1
    forks = sorted(k for k, n in children.items() if n > 1)
    assert [f["checkpoint_id"] for f in rep["forks"]] == forks
    assert len(forks) == 1

    counters = tuples[0].metadata.get("counters_since_delta_snapshot") or {}
    chans = {c["channel"]: c for c in rep["delta_channels"]}
    assert set(chans) == {"files", "messages"}
    latest_values = tuples[0].checkpoint["channel_values"]
    for ch, c in chans.items():
        if ch in counters:
            assert c["counters_from"] == "columns"
            assert [c["updates_since_snapshot"], c["supersteps_since_snapshot"]] == list(
                counters[ch]
            )
        else:  # snapshotted at the latest checkpoint: LangGraph dropped its counters
            assert c["counters_from"] == "snapshot at latest"
            assert type(latest_values[ch]).__name__ == "_DeltaSnapshot"
            assert (c["updates_since_snapshot"], c["walk_depth"]) == (0, 0)
        depth, writes = _expected_walk(tuples, ch)
        assert c["walk_depth"] == depth, (ch, c)
        assert c["replay_writes"] == writes, (ch, c)
    assert chans["messages"]["counters_from"] == "snapshot at latest"
    assert chans["files"]["walk_depth"] > 1 and chans["files"]["seed_checkpoint_id"], chans

    assert rep["rows"]["checkpoints"] == len(tuples)
    assert rep["rows"]["writes"] == sum(len(t.pending_writes or []) for t in tuples)
    with psycopg.connect(dsn) as conn:
        (blob_rows,) = conn.execute(
            "SELECT count(*) FROM checkpoint_blobs WHERE thread_id = 't-inspect'"
        ).fetchone()  # type: ignore[misc]
    assert rep["rows"]["blobs"] == blob_rows
    assert rep["bytes"]["blobs"] > 0 and rep["bytes"]["writes"] > 0

    text = cli("inspect", "--thread", "t-inspect", "--dsn", dsn)
    assert text.returncode == 0, text.stderr
    assert "delta channel" in text.stdout and "forks: 1 checkpoint" in text.stdout


def test_inspect_falls_back_to_metadata_counters(dsn: str) -> None:
    tuples = _make_thread(dsn, "t-meta")["tuples"]
    latest = tuples[0].config["configurable"]["checkpoint_id"]
    counters = tuples[0].metadata.get("counters_since_delta_snapshot")
    assert counters, "the latest checkpoint should carry delta counters"
    with psycopg.connect(dsn, autocommit=True) as conn:
        # as on a row another saver wrote: no typed columns
        conn.execute(
            "UPDATE checkpoints SET delta_channels = NULL, delta_updates = NULL, "
            "delta_supersteps = NULL, stored_channels = NULL "
            "WHERE thread_id = 't-meta' AND checkpoint_id = %s",
            (latest,),
        )
    p = cli("inspect", "--thread", "t-meta", "--json", "--dsn", dsn)
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    for c in rep["delta_channels"]:
        if c["channel"] in counters:
            assert c["counters_from"] == "metadata"
            assert [c["updates_since_snapshot"], c["supersteps_since_snapshot"]] == list(
                counters[c["channel"]]
            )
        assert c["walk_depth"] == _expected_walk(tuples, c["channel"])[0]


def test_inspect_unknown_thread_exits_1(dsn: str) -> None:
    p = cli("inspect", "--thread", "no-such-thread", "--dsn", dsn)
    assert p.returncode == 1
    assert "no-such-thread" in one_line_error(p)
    assert p.stdout == ""


def test_inspect_unknown_namespace_exits_1(dsn: str) -> None:
    _make_thread(dsn, "t-ns")
    p = cli("inspect", "--thread", "t-ns", "--ns", "sub:1", "--dsn", dsn)
    assert p.returncode == 1
    assert "namespace" in one_line_error(p)


def test_inspect_unmigrated_database_says_run_migrate(empty_dsn: str) -> None:
    p = cli("inspect", "--thread", "x", "--dsn", empty_dsn)
    assert p.returncode == 1
    assert "langgraph-delta-pg migrate" in one_line_error(p)


# ---------------------------------------------------------------------- bad DSNs


@pytest.mark.parametrize("command", ["demo", "inspect"])
@pytest.mark.parametrize(
    "bad, expect",
    [
        ("postgresql://postgres@127.0.0.1:1/postgres", "cannot reach Postgres"),
        ("not a dsn at all", "connection string is not valid"),
    ],
)
def test_bad_dsn_is_one_line(command: str, bad: str, expect: str) -> None:
    extra = ["--thread", "x"] if command == "inspect" else ["--turns", "1"]
    p = cli(command, *extra, "--dsn", bad)
    assert p.returncode == 1
    assert expect in one_line_error(p)


def test_unknown_database_is_one_line(pg_server: Any) -> None:
    bad = pg_server.dsn_for("lgdp_no_such_database")
    p = cli("demo", "--turns", "1", "--dsn", bad)
    assert p.returncode == 1
    assert "does not exist" in one_line_error(p)


def test_inspect_load_shows_the_saver_counters(dsn: str) -> None:
    """--load: the latest checkpoint loaded cold then warm on one saver; the figures are
    the saver's counters (saver.stats()) for those calls."""
    made = _make_thread(dsn, "t-load")
    p = cli("inspect", "--thread", "t-load", "--json", "--load", "--dsn", dsn)
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    load = rep["load"]
    # messages was just snapshotted: its value is in the checkpoint, no history asked
    assert load["channels"] == ["files"]
    first, cold, warm = load["loads"]
    # get_tuple reads the history with the checkpoint; the history call takes it
    for d in (first, cold, warm):
        assert (d["load"], d["walk_statements"]) == (d["load"], 1)
        assert (d["walk_history_calls"], d["walk_prefetch_hits"]) == (1, 1)
    # a thread's first load gets no cache bucket: answered as without a cache
    assert first["walk_uncached"] == 1 and first["cache_misses"] == 0
    files = next(c for c in rep["delta_channels"] if c["channel"] == "files")
    # second load (builds the bucket): the walk reached back to the deepest seed
    assert cold["walk_checkpoints"] >= files["walk_depth"] > 1
    assert cold["cache_hits"] == 0 and cold["cache_misses"] == 1
    # warm: the cache held the chain; the walk stopped at once
    assert warm["cache_hits"] == 1 and warm["walk_checkpoints"] <= 1
    assert warm["walk_rows"] < cold["walk_rows"]
    assert load["stats"]["cache_buckets"] == 1 and load["stats"]["cache_bytes"] > 0
    assert len(made["tuples"]) > 0
    assert "load" not in json.loads(cli("inspect", "--thread", "t-load", "--json",
                                        "--dsn", dsn).stdout)

    text = cli("inspect", "--thread", "t-load", "--load", "--dsn", dsn)
    assert text.returncode == 0, text.stderr
    assert "load of the latest checkpoint" in text.stdout
    assert "  cold  1 statement(s)" in text.stdout and "cache after: 1 bucket(s)" in text.stdout
    print(text.stdout)
