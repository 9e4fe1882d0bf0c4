"""A test run killed with SIGKILL leaves no Postgres behind (issue 38): the test plugin
(tests/plugins/postgres.py) starts the embedded server with the watchdog that
``langgraph-delta-pg postgres`` uses, so when the controlling pytest process dies, the
server stops and its data directory goes.

Each case runs a real pytest session of its own (a test that waits), with the plugin on
the embedded Postgres, in a TMPDIR of its own, and SIGKILLs its controlling process."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from langgraph_delta_postgres._local import watchdog as _watchdog
from tests.plugins.postgres import EMBEDDED_PREFIX

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 120

INNER_TEST = """
import os, time
from pathlib import Path

def test_waits(dsn):
    import psycopg
    with psycopg.connect(dsn) as conn:  # the server really serves this session
        conn.execute("SELECT 1")
    Path(os.environ["READY"]).write_text(dsn)
    stop = Path(os.environ["STOP"])
    deadline = time.monotonic() + 120  # never outlives the outer test by long
    while not stop.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
"""


@pytest.fixture
def session_dir() -> Iterator[Path]:
    """The inner session's files; afterwards whatever it left is stopped and removed,
    so a failing case (the old plugin) leaves nothing on the machine either. A short
    path under /tmp, not pytest's tmp_path: under xdist that is too long for the server's
    Unix socket (pgserver: "Could not find a suitable socket path")."""
    base = Path(tempfile.mkdtemp(prefix="lgdp-sk-", dir="/tmp"))
    try:
        yield base
    finally:
        (base / "stop").touch()
        for data in (base / "tmp").glob(f"{EMBEDDED_PREFIX}*"):
            _watchdog.stop_server(data)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("workers", [None, "1"], ids=["pytest", "xdist-controller"])
def test_sigkill_of_a_test_run_leaves_no_postgres_and_no_directory(
    session_dir: Path, workers: str | None
) -> None:
    tmpdir = session_dir / "tmp"
    tmpdir.mkdir()
    runtime = session_dir / "runtime"
    runtime.mkdir(mode=0o700)
    (session_dir / "inner").mkdir()
    (session_dir / "inner" / "test_inner.py").write_text(INNER_TEST)
    (session_dir / "inner" / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if k not in ("LGDP_TEST_DSN", "CI")}
    env.update(
        TMPDIR=str(tmpdir),  # the server's data directory lands here
        XDG_RUNTIME_DIR=str(runtime),  # pgserver's lock file, apart from other sessions
        DOCKER_HOST="unix:///nonexistent/docker.sock",  # the embedded server, not Docker
        PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]),
        READY=str(session_dir / "ready"),
        STOP=str(session_dir / "stop"),
    )
    cmd = [
        sys.executable, "-m", "pytest", "-c", str(session_dir / "inner" / "pytest.ini"),
        "-p", "tests.plugins.postgres", "-p", "no:cacheprovider", "-q",
        str(session_dir / "inner" / "test_inner.py"),
    ]
    if workers:
        cmd += ["-n", workers]
    proc = subprocess.Popen(
        cmd, cwd=session_dir / "inner", env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not (session_dir / "ready").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                out, _ = proc.communicate()
                pytest.fail(f"the inner test run did not get to its test: {out}")
            time.sleep(0.1)
        (data,) = tmpdir.glob(f"{EMBEDDED_PREFIX}*")
        pid = int((data / "postmaster.pid").read_text().splitlines()[0])
        assert _watchdog._alive(pid)
        assert f"host={data}" in (session_dir / "ready").read_text()  # that session's server

        proc.send_signal(signal.SIGKILL)  # the controlling process only, as the OOM killer
        proc.communicate(timeout=START_TIMEOUT)
        assert proc.returncode == -signal.SIGKILL

        deadline = time.monotonic() + 30
        while (_watchdog._alive(pid) or data.exists()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _watchdog._alive(pid), f"the test run's Postgres ({pid}) still runs"
        assert not data.exists(), f"the test run's data directory {data} is still there"
        # (pytest's own basetemp, pytest-of-USER, may be there: not the plugin's)
        assert [p.name for p in tmpdir.iterdir() if not p.name.startswith("pytest-of-")] == []
    finally:
        (session_dir / "stop").touch()  # an xdist worker's test ends, and with it the worker
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
