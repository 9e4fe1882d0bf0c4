"""docs/replicas.md, "Get a standby" (issue 38, item 3): the page's shell blocks, run as
written (with this test's values for the variables the page sets first), make a hot
standby of a primary whose settings were given on its command line, higher than
initdb's, and the standby serves a RoutingSaver's reads; without the page's step 2, the
standby does not start and its log names the setting (the trap of issue 38); the removal
block leaves no slot and no directory.

The primary is a cluster of our own (tests/plugins/cluster.py), from the run server's
binaries: the embedded Postgres by default, Postgres 15 in .ci/run's stage."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.channels import DeltaChannel
from langgraph.graph import START, StateGraph
from psycopg.conninfo import make_conninfo

from langgraph_delta_postgres._local.standby import lsn_int
from langgraph_delta_postgres._local.standby_plan import _Plan
from langgraph_delta_postgres.replicas import RoutingSaver
from tests.plugins.cluster import SUPERUSER, Cluster, own_cluster

PAGE = Path(__file__).resolve().parents[2] / "docs" / "replicas.md"

#: the primary's settings, on its command line only (as `postgres -c` in a compose file),
#: each higher than initdb's default: a standby without the page's step 2 gets the defaults
PRIMARY_SETTINGS = {
    "max_connections": "150",
    "max_worker_processes": "12",
    "max_wal_senders": "12",
    "max_prepared_transactions": "4",
    "max_locks_per_transaction": "96",
}

VARIABLES = ["PRIMARY_DSN", "STANDBY_DATA", "STANDBY_PORT", "STANDBY_DSN", "PATH"]


def section_blocks() -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index("\n## Get a standby\n") :]
    section = section[: section.index("\n## ", 5)]
    return re.findall(r"```bash\n(.*?)```", section, re.S)


def variables_block() -> str:
    return section_blocks()[0]


def steps(block: str) -> dict[int, str]:
    """The commands block cut at its ``# N.`` comments."""
    parts = re.split(r"(?m)^(?=# \d+\. )", block)
    return {int(p[2 : p.index(".")]): p for p in parts if p.startswith("# ")}


def test_the_page_sets_the_variables_its_commands_use() -> None:
    blocks = section_blocks()
    assert len(blocks) == 3, "variables, commands, removal"
    names = re.findall(r"(?m)^([A-Z_]+)=", variables_block())
    assert names == VARIABLES
    used = set(re.findall(r"\$([A-Z_]+)", blocks[1] + blocks[2]))
    assert used <= set(VARIABLES), used - set(VARIABLES)
    assert sorted(steps(blocks[1])) == [1, 2, 3]
    # the settings step names every setting a standby needs at least as high
    from langgraph_delta_postgres._local.standby_plan import _AT_LEAST_PRIMARY

    for name in _AT_LEAST_PRIMARY:
        assert f"'{name}'" in steps(blocks[1])[2]
        assert name in PRIMARY_SETTINGS


def start_primary(cluster: Cluster) -> None:
    """Restart the cluster with its socket in its postgresql.conf (so the standby's copy
    listens in the same private directory, no TCP) and PRIMARY_SETTINGS on the command
    line only."""
    cluster.stop("fast")
    with open(cluster.data / "postgresql.conf", "a", encoding="utf-8") as f:
        f.write(f"\nlisten_addresses = ''\nunix_socket_directories = '{cluster.directory}'\n"
                f"fsync = off\nshared_buffers = 16MB\n")
    opts = [f"-c port={cluster.port}", "-c wal_level=replica", "-c max_replication_slots=10",
            *(f"-c {k}={v}" for k, v in PRIMARY_SETTINGS.items())]
    cluster.cmd("pg_ctl", "-D", str(cluster.data), "-l", str(cluster.log), "-w", "-t", "120",
                "-o", " ".join(opts), "start")


@pytest.fixture
def primary(cluster_plan: _Plan) -> Iterator[Cluster]:
    with own_cluster(cluster_plan) as cluster:
        start_primary(cluster)
        yield cluster


class Shell:
    """Runs the page's blocks in bash (``-e``: the first failing command ends it) as the
    server's OS user, after the page's variables block with this test's values."""

    def __init__(self, primary: Cluster, dbname: str) -> None:
        self.primary = primary
        self.data = primary.directory / "standby"
        self.port = str(int(primary.port) + 1)
        self.dsn = make_conninfo(host=str(primary.directory), port=self.port,
                                 user=SUPERUSER, dbname=dbname)
        ours = {
            "PRIMARY_DSN": primary.admin_dsn,
            "STANDBY_DATA": str(self.data),
            "STANDBY_PORT": self.port,
            "STANDBY_DSN": self.dsn,
            "PATH": f"{primary.plan.bindir}:{os.environ['PATH']}",
        }
        lines = []
        for line in variables_block().splitlines():
            name = line.split("=", 1)[0]
            lines.append(f"{name}={_sh(ours[name])}")
        self.prelude = "\n".join(lines) + "\n"

    def run(self, script: str) -> subprocess.CompletedProcess[str]:
        argv = ["bash", "-e", "-c", self.prelude + script]
        if self.primary.plan.os_user is not None:
            argv = ["runuser", "-u", self.primary.plan.os_user, "--", *argv]
        return subprocess.run(argv, capture_output=True, text=True, timeout=300,
                              cwd=self.primary.directory)

    def stop_quietly(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError):
            self.run('[ -f "$STANDBY_DATA/postmaster.pid" ] && pg_ctl -D "$STANDBY_DATA" '
                     "-m immediate -w stop || true")


def _sh(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def slots(primary: Cluster) -> list[str]:
    with primary.admin() as c:
        return [r[0] for r in c.execute("SELECT slot_name FROM pg_replication_slots")]


def wait_replayed(primary: Cluster, standby_dsn: str, timeout: float = 60) -> None:
    with primary.admin() as c:
        row = c.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    target = lsn_int(row[0])
    deadline = time.monotonic() + timeout
    with psycopg.connect(standby_dsn, autocommit=True) as s:
        while True:
            got = s.execute("SELECT pg_last_wal_replay_lsn()::text").fetchone()
            if got is not None and got[0] is not None and lsn_int(got[0]) >= target:
                return
            assert time.monotonic() < deadline, "the standby did not catch up"
            time.sleep(0.05)


def _append(state: list[str], writes: list[Any]) -> list[str]:
    return state + [m for w in writes for m in (w if isinstance(w, list) else [w])]


class State(TypedDict):
    log: Annotated[list[str], DeltaChannel(_append)]


def test_the_commands_make_a_standby_the_routing_saver_reads(primary: Cluster) -> None:
    db = primary.create_db()
    shell = Shell(primary, db)
    _, commands, removal = section_blocks()
    removed = False
    try:
        done = shell.run(commands)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().splitlines()[-1] == "t"  # pg_is_in_recovery()
        with psycopg.connect(shell.dsn, autocommit=True) as s:
            for name, value in PRIMARY_SETTINGS.items():
                assert s.execute(f"SHOW {name}").fetchone() == (value,)
        g = StateGraph(State)
        g.add_node("echo", lambda s: {"log": [f"echo {s['log'][-1]}"]})
        g.add_edge(START, "echo")
        cfg: RunnableConfig = {"configurable": {"thread_id": "t"}}
        with RoutingSaver.from_conn_string(primary.dsn_for(db), replicas=[shell.dsn]) as saver:
            graph = g.compile(checkpointer=saver)
            graph.invoke({"log": ["hello"]}, cfg)
            wait_replayed(primary, shell.dsn)
            assert graph.get_state(cfg).values["log"] == ["hello", "echo hello"]
            assert saver.routing_stats().replica_reads >= 1, saver.routing_stats()
        assert "standby1" in slots(primary)
        done = shell.run(removal)
        assert done.returncode == 0, done.stderr
        removed = True
    finally:
        if not removed:
            shell.stop_quietly()
    assert not shell.data.exists()
    assert "standby1" not in slots(primary)


def test_without_step_2_the_standby_does_not_start(primary: Cluster) -> None:
    shell = Shell(primary, "postgres")
    _, commands, removal = section_blocks()
    cut = steps(commands)
    port_line = next(ln for ln in cut[2].splitlines() if ln.startswith("echo \"port = "))
    try:
        # step 2 without the settings (the port only: the standby must not take the
        # primary's socket)
        done = shell.run(cut[1] + port_line + "\n" + cut[3])
        assert done.returncode != 0, done.stdout
        log = (shell.data / "log").read_text(encoding="utf-8")
        assert "insufficient parameter settings" in log, log[-2000:]
        # the first setting checked that is lower than the primary's
        assert re.search(r"max_\w+ = \d+ is a lower setting than on the primary", log), log
    finally:
        shell.stop_quietly()
        done = shell.run(removal.replace("-m fast -w stop", "-m fast -w stop || true"))
        assert done.returncode == 0, done.stderr
    assert "standby1" not in slots(primary)
