"""`langgraph-delta-pg postgres` end to end: the DSN on stdout serves a real graph, and
SIGTERM leaves no server process and no directory (``--dir`` keeps its data instead); a
SIGKILL leaves none either, and does not keep a later ``--dir`` start from stopping its
server."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import START, StateGraph

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._local import watchdog as _watchdog
from tests.unit.test_demo_inspect import cli_without, one_line_error, postgres_processes_under

START_TIMEOUT = 120


def _append(state: list[str], writes: list[Any]) -> list[str]:
    return state + [m for w in writes for m in (w if isinstance(w, list) else [w])]


class State(TypedDict):
    log: Annotated[list[str], DeltaChannel(_append, snapshot_frequency=3)]


def _graph(saver: DeltaPostgresSaver) -> Any:
    g: StateGraph[Any] = StateGraph(State)
    g.add_node("echo", lambda s: {"log": [f"echo {s['log'][-1]}"]})
    g.add_edge(START, "echo")
    return g.compile(checkpointer=saver)


class Served:
    def __init__(self, proc: subprocess.Popen[str], dsn: str) -> None:
        self.proc = proc
        self.dsn = dsn

    def stop(self) -> tuple[int, str]:
        """SIGTERM, as a service manager sends; returns (exit code, stderr)."""
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=START_TIMEOUT)
        return self.proc.returncode, err


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def serve(tmp: Path, *args: str) -> Served:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["TMPDIR"] = str(tmp)  # the temporary data directory lands in this test's tmp
    # pgserver's inter-process lock file lives in the user runtime directory, shared by
    # every pgserver on the machine: kept apart here so `tmp` holds only this server.
    env["XDG_RUNTIME_DIR"] = str(tmp.parent / "runtime")
    proc = subprocess.Popen(
        [sys.executable, "-m", "langgraph_delta_postgres", "postgres", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # Ctrl-C as a terminal sends it: an xdist worker ignores SIGINT, and an ignored
        # signal stays ignored across exec, so the command would never see the SIGINT
        preexec_fn=_default_sigint,
    )
    watchdog = threading.Timer(START_TIMEOUT, proc.kill)
    watchdog.start()
    try:
        first = proc.stdout.readline() if proc.stdout else ""
    finally:
        watchdog.cancel()
    if not first:
        _, err = proc.communicate(timeout=START_TIMEOUT)
        pytest.fail(f"no DSN on stdout (exit {proc.returncode}): {err}")
    return Served(proc, first.strip())


@pytest.fixture
def tmp(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "t"
    d.mkdir()
    (tmp_path / "runtime").mkdir(mode=0o700)  # XDG requires an owned 0700 runtime dir
    yield d


def _turns(dsn: str, thread: str, words: list[str]) -> list[str]:
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        graph = _graph(saver)
        cfg = {"configurable": {"thread_id": thread}}
        for w in words:
            graph.invoke({"log": [w]}, cfg)
        return list(graph.get_state(cfg).values["log"])


def test_dsn_serves_a_graph_and_sigterm_leaves_nothing(tmp: Path) -> None:
    served = serve(tmp)
    assert served.dsn.startswith("postgresql://"), served.dsn
    assert list(tmp.glob("lgdp-pg-*")), "the server runs in a directory under TMPDIR"
    assert _turns(served.dsn, "t1", ["a", "b"]) == ["a", "echo a", "b", "echo b"]
    code, err = served.stop()
    assert code == 0, err
    assert "Traceback" not in err
    assert "LANGGRAPH_DELTA_PG_DSN" in err  # the hints are on stderr, not stdout
    assert list(tmp.iterdir()) == []
    assert postgres_processes_under(tmp) == []
    runtime = tmp.parent / "runtime"
    assert [p.name for p in runtime.rglob("*") if p.name != ".lockfile"] == [
        "python_PostgresServer"
    ]


def test_dir_keeps_the_data_for_the_next_start(tmp: Path) -> None:
    data = tmp / "pgdata"
    served = serve(tmp, "--dir", str(data))
    assert _turns(served.dsn, "kept", ["a"]) == ["a", "echo a"]
    code, err = served.stop()
    assert code == 0, err
    assert (data / "PG_VERSION").exists()
    assert not (data / "postmaster.pid").exists()  # stopped, not just abandoned

    served = serve(tmp, "--dir", str(data))
    try:
        assert _turns(served.dsn, "kept", ["b"]) == ["a", "echo a", "b", "echo b"]
    finally:
        code, err = served.stop()
    assert code == 0, err
    assert sorted(p.name for p in tmp.iterdir()) == ["pgdata"]
    assert not (data / "postmaster.pid").exists()


def test_dir_that_is_not_a_data_directory_is_refused(tmp: Path) -> None:
    other = tmp / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("keep me")
    p = subprocess.run(
        [sys.executable, "-m", "langgraph_delta_postgres", "postgres", "--dir", str(other)],
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        check=False,
    )
    assert p.returncode == 1
    assert p.stdout == ""
    assert "not a Postgres data directory" in one_line_error(p)
    assert (other / "todo.txt").read_text() == "keep me"


def test_sigkill_leaves_no_server_and_no_directory(tmp: Path) -> None:
    # SIGKILL runs no handler in the command: its watchdog process stops the server and
    # removes the directory once the command is gone (issue 23)
    served = serve(tmp)
    assert _turns(served.dsn, "t1", ["a"]) == ["a", "echo a"]
    assert postgres_processes_under(tmp) != []
    served.proc.kill()
    served.proc.communicate(timeout=START_TIMEOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if postgres_processes_under(tmp) == [] and list(tmp.iterdir()) == []:
            break
        time.sleep(0.2)
    assert postgres_processes_under(tmp) == []
    assert list(tmp.iterdir()) == []


def postmaster_pid(data: Path) -> int:
    """The running server's pid, from the first line of ``DATA/postmaster.pid``."""
    pid = int((data / "postmaster.pid").read_text().splitlines()[0])
    assert _watchdog._alive(pid), f"postmaster {pid} of {data} is not running"
    return pid


def assert_gone(pid: int, what: str) -> None:
    """``pid`` ends within 30 s (a zombie counts as gone): checked in /proc, not by a
    file the server may or may not have removed."""
    deadline = time.monotonic() + 30
    while _watchdog._alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _watchdog._alive(pid), f"{what}: process {pid} is still running"


@pytest.fixture
def no_server_left(tmp: Path) -> Iterator[Path]:
    """``tmp/pgdata``, and afterwards no server left in it whatever the test found: the
    watchdogs of this test's commands and the postmaster of the directory are stopped."""
    data = tmp / "pgdata"
    yield data
    for line in pgrep(data):
        pid = int(line.split()[0])
        if "watchdog.py" in line:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    _watchdog.stop_server(data)


def test_sigkill_with_dir_stops_the_server_and_keeps_the_data(no_server_left: Path) -> None:
    # issue 38: after one SIGKILL, pgserver still listed the killed command as using the
    # server (.handle_pids.json), so every later `postgres --dir` start left its server
    # running on exit (not the last one using it) while saying it stopped it
    data = no_server_left
    tmp = data.parent
    served = serve(tmp, "--dir", str(data))
    assert _turns(served.dsn, "kept", ["a"]) == ["a", "echo a"]
    first = postmaster_pid(data)
    served.proc.kill()
    served.proc.communicate(timeout=START_TIMEOUT)
    assert_gone(first, "the server of a command killed with SIGKILL (its watchdog stops it)")
    assert_no_process(data)
    assert (data / "PG_VERSION").exists()
    # the next starts find the thread, and their stop (SIGTERM, then Ctrl-C) stops the server
    for sig, word in ((signal.SIGTERM, "b"), (signal.SIGINT, "c")):
        served = serve(tmp, "--dir", str(data))
        pid = postmaster_pid(data)
        assert pid != first
        try:
            assert _turns(served.dsn, "kept", [word])[-2:] == [word, f"echo {word}"]
        finally:
            served.proc.send_signal(sig)
            _, err = served.proc.communicate(timeout=START_TIMEOUT)
        assert served.proc.returncode == 0, err
        assert "stopping Postgres" in err
        assert_gone(pid, f"the server after a {sig.name} of `postgres --dir` (after a SIGKILL)")
        assert not (data / "postmaster.pid").exists()
        assert_no_process(data)
    served = serve(tmp, "--dir", str(data))
    try:
        assert _turns(served.dsn, "kept", ["d"]) == [
            x for w in "abcd" for x in (w, f"echo {w}")
        ]
    finally:
        served.stop()


def test_dir_start_after_its_command_and_watchdog_died_stops_its_server(
    no_server_left: Path,
) -> None:
    # the command and its watchdog both killed (the OOM killer taking both, a reboot): the
    # next start drops the dead command from pgserver's list itself, uses the server that
    # was left, and stops it on exit
    data = no_server_left
    tmp = data.parent
    served = serve(tmp, "--dir", str(data))
    left = postmaster_pid(data)
    watchdogs = [int(ln.split()[0]) for ln in pgrep(data) if "watchdog.py" in ln]
    assert len(watchdogs) == 1, pgrep(data)
    os.kill(watchdogs[0], signal.SIGKILL)
    assert_gone(watchdogs[0], "the watchdog killed with SIGKILL")
    served.proc.kill()
    served.proc.communicate(timeout=START_TIMEOUT)
    assert _watchdog._alive(left)  # nothing was left to stop it
    served = serve(tmp, "--dir", str(data))
    assert postmaster_pid(data) == left  # pgserver uses the running server
    code, err = served.stop()
    assert code == 0, err
    assert_gone(left, "the server after a SIGTERM of the next `postgres --dir`")
    assert_no_process(data)


def assert_no_process(data: Path) -> None:
    """No process names ``data`` within 30 s: a watchdog finishing its cleanup after the
    server is gone (it releases pgserver's lock and exits just after) is waited for."""
    deadline = time.monotonic() + 30
    while pgrep(data) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pgrep(data) == []


def pgrep(data: Path) -> list[str]:
    p = subprocess.run(["pgrep", "-af", str(data)], capture_output=True, text=True, check=False)
    return [ln for ln in p.stdout.splitlines() if "pgrep" not in ln]


def test_without_the_embedded_extra_exit_2_and_say_what_to_install() -> None:
    p = cli_without("pgserver", "postgres")
    assert p.returncode == 2, p.stderr  # a missing extra, as for demo, bench and prune
    assert p.stdout == ""
    err = one_line_error(p)
    assert "the embedded Postgres is not installed: pip install" in err
    assert "[embedded]" in err and "once published" in err
    assert "--dsn" not in err  # the postgres command takes none
    assert err.endswith("use a Postgres you run instead"), err


def test_version() -> None:
    from langgraph_delta_postgres import __version__

    p = subprocess.run(
        [sys.executable, "-m", "langgraph_delta_postgres", "--version"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"langgraph-delta-pg {__version__}"
