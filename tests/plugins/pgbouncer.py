"""A real PgBouncer in transaction mode in front of the test Postgres.

``pgbouncer`` (session) starts Debian's ``pgbouncer`` binary next to the server of
``pg_server`` (whatever it is: embedded, ``LGDP_TEST_DSN``, Docker) and stops it at the
end of the session; ``bouncer_dsn`` is the per-test database of ``dsn`` reached through
it. The ``[databases]`` section has only the ``*`` fallback, so every database the tests
create is reachable by its name with no reload.

* Listens on a unix socket in a directory of its own (no TCP port to collide with);
  clients log in with ``auth_type = trust`` as the server's user, which PgBouncer uses
  (with the password of the server's DSN, if any) for its own server connections.
* PgBouncer refuses to run as root: as root it runs as the owner of the server's socket
  directory (the embedded server's ``pgserver`` user, CI's ``postgres``), or as
  ``postgres`` for a server reached over TCP.
* No binary: the tests are skipped, except when ``CI`` is set, where that is an error
  (``.ci/run`` installs it).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.plugins.postgres import PgServer

PORT = 6432
START_TIMEOUT_S = 15.0


@dataclass
class Bouncer:
    socket_dir: str
    user: str
    version: str
    log: str

    def dsn_for(self, dbname: str) -> str:
        return make_conninfo(host=self.socket_dir, port=str(PORT), user=self.user, dbname=dbname)


def _binary() -> str | None:
    return shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)),
        None,
    )


def _run_as(server_host: str) -> int | None:
    """The uid PgBouncer runs as (None: this process's own)."""
    if os.geteuid() != 0:
        return None
    if server_host.startswith("/") and os.path.isdir(server_host):
        owner = os.stat(server_host).st_uid
        if owner != 0:
            return owner
    return pwd.getpwnam("postgres").pw_uid


def _ini(server: dict[str, str], workdir: str, mode: str, settings: dict[str, str]) -> str:
    target = {
        "host": server.get("host") or "localhost",
        "port": server.get("port") or "5432",
        "user": server["user"],
    }
    if server.get("password"):
        target["password"] = server["password"]
    target_line = " ".join(f"{k}={v}" for k, v in target.items())
    return f"""\
[databases]
* = {target_line}

[pgbouncer]
listen_addr =
listen_port = {PORT}
unix_socket_dir = {workdir}
auth_type = trust
auth_file = {workdir}/users.txt
admin_users = {server["user"]}
pool_mode = {mode}
default_pool_size = 4
max_client_conn = 200
log_connections = 0
log_disconnections = 0
pidfile = {workdir}/pgbouncer.pid
""" + "".join(f"{k} = {v}\n" for k, v in settings.items())


@contextlib.contextmanager
def start_bouncer(
    pg: PgServer, mode: str = "transaction", settings: dict[str, str] | None = None
) -> Iterator[Bouncer | str]:
    """Yield a running PgBouncer in front of ``pg``, or a string saying why none runs.
    ``settings``: more lines of its ``[pgbouncer]`` section."""
    binary = _binary()
    if binary is None:
        yield "no pgbouncer binary (Debian: apt-get install pgbouncer)"
        return
    version = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, check=False
    ).stdout.split("\n", 1)[0]
    server = {k: str(v) for k, v in conninfo_to_dict(pg.admin_dsn).items() if v is not None}
    server.setdefault("user", "postgres")
    uid = _run_as(server.get("host", ""))
    workdir = tempfile.mkdtemp(prefix="lgdp-test-pgbouncer-")
    with open(os.path.join(workdir, "users.txt"), "w") as f:
        f.write(f'"{server["user"]}" ""\n')
    ini = os.path.join(workdir, "pgbouncer.ini")
    with open(ini, "w") as f:
        f.write(_ini(server, workdir, mode, settings or {}))
    if uid is not None:
        for p in (workdir, ini, os.path.join(workdir, "users.txt")):
            os.chown(p, uid, -1)
    # Its log goes to stderr: to a file, since PgBouncer blocks (and all its clients with
    # it) once an unread pipe is full.
    log = stderr_path = os.path.join(workdir, "pgbouncer.log")
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen([binary, ini], user=uid, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        socket = os.path.join(workdir, f".s.PGSQL.{PORT}")
        deadline = time.monotonic() + START_TIMEOUT_S
        while not os.path.exists(socket):
            if proc.poll() is not None or time.monotonic() > deadline:
                with open(stderr_path, errors="replace") as f:
                    err = f.read()
                raise RuntimeError(f"pgbouncer did not start: {err[-2000:]}")
            time.sleep(0.05)
        yield Bouncer(socket_dir=workdir, user=server["user"], version=version, log=log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def pgbouncer(pg_server: PgServer) -> Iterator[Bouncer]:
    """PgBouncer (transaction mode) in front of the test server, for the whole session."""
    with start_bouncer(pg_server) as b:
        if isinstance(b, str):
            if os.environ.get("CI"):
                pytest.fail(b + " (CI is set: the PgBouncer tests may not be skipped)")
            pytest.skip(b)
        yield b


@pytest.fixture
def bouncer_dsn(pgbouncer: Bouncer, dsn: str) -> str:
    """The migrated per-test database of ``dsn``, through PgBouncer (transaction mode)."""
    return pgbouncer.dsn_for(str(conninfo_to_dict(dsn)["dbname"]))


@pytest.fixture
def bouncer_empty_dsn(pgbouncer: Bouncer, empty_dsn: str) -> str:
    """A database with no tables at all (``empty_dsn``), through PgBouncer."""
    return pgbouncer.dsn_for(str(conninfo_to_dict(empty_dsn)["dbname"]))
