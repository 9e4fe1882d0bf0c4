"""Postgres clusters of a test's own, for the replica-mismatch and failover tests.

A *cluster of our own* is a new, independent Postgres cluster (``initdb`` in a temp
directory, ``pg_ctl start`` on a Unix socket in that directory, no TCP), started from the
same server binaries as the run's server (found, with the OS user to run them as, the way
:func:`langgraph_delta_postgres._local.standby_plan._plan` finds them for a standby: as root, the
server runs as the owner of the run's data directory, or the ``postgres`` OS user). Its
system identifier is its own, so a standby of it
(:func:`langgraph_delta_postgres._local.standby.standby_of` on its :attr:`Cluster.admin_dsn`)
is a hot standby of *another* cluster than the run's server; and it can be stopped or
crashed (``pg_ctl -m immediate stop``) without touching the run's server.

Fixtures:

``cluster_plan`` (session): the binaries and OS user; skips (fails under ``CI``) with the
reason where no cluster can be started here, as the ``standby`` fixture does.

``make_cluster``: a factory; ``make_cluster()`` starts a cluster, stopped and removed
after the test. :func:`own_cluster` is the same as a context manager, for fixtures of
other scopes.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from langgraph_delta_postgres._local import watchdog as _watchdog
from langgraph_delta_postgres._local.standby_plan import StandbyUnavailable, _Plan, _plan
from tests.plugins.postgres import PgServer, skip_or_fail

#: the superuser initdb makes (trust authentication on the Unix socket only)
SUPERUSER = "postgres"


@dataclass
class Cluster:
    """A running cluster of our own: data in ``directory/data``, its socket in
    ``directory``, port ``port`` (Unix socket only)."""

    directory: Path
    plan: _Plan
    port: str

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def log(self) -> Path:
        return self.directory / "log"

    @property
    def admin_dsn(self) -> str:
        return self.dsn_for("postgres")

    def dsn_for(self, dbname: str) -> str:
        return make_conninfo(host=str(self.directory), port=self.port, dbname=dbname,
                             user=SUPERUSER)

    def admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.admin_dsn, autocommit=True, connect_timeout=10)

    def cmd(self, *args: str, timeout: float = 120) -> str:
        """Run a server binary (``bindir/args[0]``) as the server's OS user."""
        argv = [str(self.plan.bindir / args[0]), *args[1:]]
        if self.plan.os_user is not None:
            argv = ["runuser", "-u", self.plan.os_user, "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise StandbyUnavailable(
                f"{args[0]} failed ({done.returncode}): "
                f"{(done.stderr or done.stdout).strip()[-1500:]}"
            )
        return done.stdout

    def start(self) -> None:
        opts = [
            "-c listen_addresses=''", f"-c unix_socket_directories='{self.directory}'",
            f"-c port={self.port}", "-c fsync=off", "-c wal_level=replica",
            "-c max_wal_senders=10", "-c max_replication_slots=10", "-c max_connections=60",
            "-c shared_buffers=16MB",
        ]
        self.cmd("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "120",
                 "-o", " ".join(opts), "start")

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server (``immediate``: as a crash would; ``fast``: cleanly)."""
        self.cmd("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", timeout=60)

    def running(self) -> bool:
        try:
            with self.admin() as c:
                c.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def create_db(self, name: str | None = None, *, migrated: bool = True) -> str:
        """A new database (named ``name``, or a fresh name), with every migration of the
        package applied unless ``migrated=False``; returns its name."""
        from langgraph_delta_postgres.migrate import migrate

        name = name or f"lgdp_{uuid.uuid4().hex[:12]}"
        with self.admin() as c:
            c.execute(f'CREATE DATABASE "{name}"')
        if migrated:
            with psycopg.connect(self.dsn_for(name), autocommit=True) as c:
                migrate(c)
        return name


def plan_for(server_dsn: str) -> _Plan:
    """The binaries (of ``server_dsn``'s major version, with ``initdb``) and the OS user a
    cluster of our own runs with; :class:`StandbyUnavailable` says why there are none."""
    plan = _plan(server_dsn)
    if not (plan.bindir / "initdb").is_file():
        raise StandbyUnavailable(f"no initdb in {plan.bindir}")
    return plan


@contextlib.contextmanager
def own_cluster(plan: _Plan, port: str | None = None) -> Iterator[Cluster]:
    """initdb + start a cluster of our own; stop it (immediate) and remove it on exit.
    A watchdog (:mod:`langgraph_delta_postgres._local.watchdog`) stops and removes it if
    this process dies first."""
    directory = Path(tempfile.mkdtemp(prefix="lgdp-cluster-"))
    if plan.os_user is not None:
        pw = pwd.getpwnam(plan.os_user)
        os.chown(directory, pw.pw_uid, pw.pw_gid)
    directory.chmod(0o700)
    cluster = Cluster(directory, plan, port or plan.port)
    guard = _watchdog.guard(cluster.data, remove=True)
    try:
        cluster.cmd("initdb", "-D", str(cluster.data), "-U", SUPERUSER, "--auth=trust",
                    "-E", "UTF8", "--locale=C", "--no-sync")
        cluster.start()
        yield cluster
    finally:
        # already stopped (a test crashed it) is fine
        with contextlib.suppress(StandbyUnavailable, subprocess.SubprocessError):
            cluster.stop("immediate")
        _watchdog.stop_server(cluster.data)  # if pg_ctl could not
        shutil.rmtree(directory, ignore_errors=True)
        _watchdog.release(guard)


def _unavailable(why: str) -> None:
    skip_or_fail(f"no cluster of our own can be started here: {why}")


@pytest.fixture(scope="session")
def cluster_plan(pg_server: PgServer) -> _Plan:
    try:
        return plan_for(pg_server.admin_dsn)
    except StandbyUnavailable as e:
        _unavailable(str(e))
        raise


@pytest.fixture
def make_cluster(cluster_plan: _Plan) -> Iterator[Callable[[], Cluster]]:
    """``make_cluster()``: a new running cluster of our own, removed after the test."""
    with contextlib.ExitStack() as stack:
        yield lambda: stack.enter_context(own_cluster(cluster_plan))
