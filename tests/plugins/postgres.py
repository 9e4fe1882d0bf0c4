"""Real Postgres for the test suite.

Resolution order (the first that is available wins):

1. ``LGDP_TEST_DSN``: a DSN of a server where the tests may create and drop databases
   (a superuser, or a role with CREATEDB).
2. A Docker engine, through testcontainers (``postgres:16-alpine``).
3. The embedded Postgres of the ``embedded`` extra (``pgserver``), in a temp directory,
   started as ``langgraph-delta-pg postgres`` starts it: a watchdog process stops it and
   removes the directory if the test run is killed (SIGKILL) before it can.

With none available the Postgres tests are skipped, except when ``CI`` is set, where
that is an error: CI never counts a skipped Postgres test as passing.

One server per run: the process that runs pytest starts it before any test (its header
line names it: where it came from, its version, its host), and with pytest-xdist
(``-n``) every worker uses that same server.

Isolation: one template database, named for the session, is migrated once per session
and dropped at its end; every test that asks
for ``dsn`` gets its own ``CREATE DATABASE ... TEMPLATE`` clone, dropped afterwards.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ENV_DSN = "LGDP_TEST_DSN"
#: the embedded server's temporary data directory: $TMPDIR/lgdp-test-pg-...
EMBEDDED_PREFIX = "lgdp-test-pg-"
#: this session's template database: named per session, so two sessions (or parallel
#: workers) on one server never drop or clone each other's
TEMPLATE = f"lgdp_template_{os.getpid()}_{uuid.uuid4().hex[:8]}"


def skip_or_fail(msg: str, what: str = "these tests") -> None:
    """Skip the test with ``msg``; under ``CI``, fail it instead: CI never counts a
    skipped test as passing."""
    if os.environ.get("CI"):
        pytest.fail(f"{msg} (CI is set: {what} may not be skipped)")
    pytest.skip(msg)


@dataclass
class PgServer:
    admin_dsn: str
    source: str
    version: str

    def dsn_for(self, dbname: str) -> str:
        params = conninfo_to_dict(self.admin_dsn)
        params["dbname"] = dbname
        return make_conninfo(**params)  # type: ignore[arg-type]

    def admin(self) -> psycopg.Connection:
        return psycopg.connect(self.admin_dsn, autocommit=True)

    def create_db(self, template: str | None = None, **opts: str) -> str:
        name = f"lgdp_{uuid.uuid4().hex[:12]}"
        sql = f'CREATE DATABASE "{name}"'
        if template:
            sql += f' TEMPLATE "{template}"'
        for k, v in opts.items():
            sql += f" {k} {v}"
        with self.admin() as conn:
            conn.execute(sql)
        return name

    def drop_db(self, name: str) -> None:
        with self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _docker_available() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=3)
        client.ping()
        return True
    except Exception:
        return False


@contextlib.contextmanager
def _start_server() -> Iterator[PgServer | str]:
    """Yield a PgServer, or a string saying why none could be had."""
    dsn = os.environ.get(ENV_DSN)
    if dsn:
        yield _describe(dsn, f"${ENV_DSN}")
        return
    if _docker_available():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16-alpine", driver=None) as pg:
            yield _describe(pg.get_connection_url(), "docker (testcontainers)")
        return
    # as `langgraph-delta-pg postgres` starts it: with the watchdog process that stops the
    # server and removes its directory if this process dies without doing it (a SIGKILL of
    # the test run, the OOM killer)
    from langgraph_delta_postgres._local.embedded import (
        EmbeddedPostgresUnavailable,
        embedded_postgres,
    )

    with contextlib.ExitStack() as stack:
        try:
            dsn = stack.enter_context(embedded_postgres(prefix=EMBEDDED_PREFIX))
        except EmbeddedPostgresUnavailable as e:
            yield f"no Postgres for the tests: set {ENV_DSN}, run a Docker engine, or ({e})"
            return
        yield _describe(dsn, "embedded (pgserver)")


def _describe(dsn: str, source: str) -> PgServer:
    with psycopg.connect(dsn, autocommit=True) as conn:
        version = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
    return PgServer(admin_dsn=dsn, source=source, version=version)


class _Shared:
    """The one server of this run: started by the controlling process (pytest itself, or
    pytest-xdist's controller) before any worker starts, named in pytest's header, and
    handed to every xdist worker through ``workerinput``; stopped at the end of the run."""

    def __init__(self) -> None:
        self.stack = contextlib.ExitStack()
        self.server: PgServer | str | None = None

    def start(self) -> PgServer | str:
        if self.server is None:
            self.server = self.stack.enter_context(_start_server())
        return self.server

    def stop(self) -> None:
        self.stack.close()


_WORKER_KEY = "lgdp_pg_server"
_shared_key = pytest.StashKey[_Shared]()


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _needs_postgres(config: pytest.Config) -> bool:
    opt = config.option
    return not (getattr(opt, "help", False) or getattr(opt, "collectonly", False)
                or getattr(opt, "version", False))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if _is_worker(config) or not _needs_postgres(config):
        return
    shared = _Shared()
    config.stash[_shared_key] = shared
    shared.start()  # before xdist starts its workers (its sessionstart is trylast)


def pytest_unconfigure(config: pytest.Config) -> None:
    shared = config.stash.get(_shared_key, None)
    if shared is not None:
        shared.stop()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist: every worker uses the controller's server."""
    shared = node.config.stash.get(_shared_key, None)
    srv = shared.start() if shared is not None else "the controller started no Postgres"
    node.workerinput[_WORKER_KEY] = (
        srv if isinstance(srv, str) else {
            "admin_dsn": srv.admin_dsn, "source": srv.source, "version": srv.version
        }
    )


@pytest.fixture(scope="session")
def pg_server(pytestconfig: pytest.Config) -> Iterator[PgServer]:
    if _is_worker(pytestconfig):
        given = pytestconfig.workerinput[_WORKER_KEY]  # type: ignore[attr-defined]
        srv: PgServer | str = given if isinstance(given, str) else PgServer(**given)
    else:
        shared = pytestconfig.stash.get(_shared_key, None)
        if shared is None:  # e.g. a plugin-less embedding of the suite
            shared = pytestconfig.stash[_shared_key] = _Shared()
        srv = shared.start()
    if isinstance(srv, str):
        if os.environ.get("CI"):
            pytest.fail(srv + " (CI is set: Postgres tests may not be skipped)")
        pytest.skip(srv)
    yield srv


def pytest_report_header(config: pytest.Config) -> str:
    shared = config.stash.get(_shared_key, None)
    srv = shared.server if shared is not None else None
    if isinstance(srv, PgServer):
        where = conninfo_to_dict(srv.admin_dsn)
        at = str(where.get("host") or "localhost")
        if where.get("port"):
            at += f":{where['port']}"
        return f"postgres: {srv.source}, PostgreSQL {srv.version}, at {at}"
    if isinstance(srv, str):
        return f"postgres: none ({srv})"
    return f"postgres: not started ({ENV_DSN}={'set' if os.environ.get(ENV_DSN) else 'unset'})"


@pytest.fixture(scope="session")
def template_db(pg_server: PgServer) -> Iterator[str]:
    """A database with every migration applied; tests clone it."""
    from langgraph_delta_postgres.migrate import migrate

    with pg_server.admin() as conn:
        conn.execute(f'CREATE DATABASE "{TEMPLATE}"')
    try:
        with psycopg.connect(pg_server.dsn_for(TEMPLATE), autocommit=True) as conn:
            migrate(conn)
        yield TEMPLATE
    finally:
        pg_server.drop_db(TEMPLATE)


@pytest.fixture
def dsn(pg_server: PgServer, template_db: str) -> Iterator[str]:
    """DSN of a fresh, fully migrated database of this test's own."""
    name = pg_server.create_db(template=template_db)
    try:
        yield pg_server.dsn_for(name)
    finally:
        pg_server.drop_db(name)


@pytest.fixture
def empty_dsn(pg_server: PgServer) -> Iterator[str]:
    """DSN of a fresh database with no tables at all."""
    name = pg_server.create_db(template="template0")
    try:
        yield pg_server.dsn_for(name)
    finally:
        pg_server.drop_db(name)


@pytest.fixture
def password_role(pg_server: PgServer) -> Iterator[tuple[str, str]]:
    """A login role with a password, and a pg_hba.conf that asks for it: the embedded
    Postgres (pgserver) is initdb'd with trust only, so when the test can write the
    server's pg_hba.conf (the embedded one: same OS user) it puts lines for this role
    first and reloads; a server it cannot change (Docker, $LGDP_TEST_DSN) is used as it
    is, and the test is skipped if that server lets a wrong password in. (Used by
    tests/unit/test_cli.py and tests/integration/test_bad_input.py.)"""
    role = f"lgdp_pw_{uuid.uuid4().hex[:8]}"
    ours = f"local all {role} scram-sha-256\nhost all {role} all scram-sha-256\n"
    with pg_server.admin() as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'right-password'")
        hba = str(conn.execute("SHOW hba_file").fetchone()[0])  # type: ignore[index]
        edits = os.access(hba, os.W_OK)
        if edits:  # other sessions on this server may edit it too: add only our lines
            _edit_hba(hba, lambda text: ours + text)
            conn.execute("SELECT pg_reload_conf()")
    try:
        yield role, "right-password"
    finally:
        with pg_server.admin() as conn:
            if edits:
                _edit_hba(hba, lambda text: text.replace(ours, ""))
                conn.execute("SELECT pg_reload_conf()")
            conn.execute(f"DROP ROLE IF EXISTS {role}")


def _edit_hba(path: str, change: Callable[[str], str]) -> None:
    """Rewrite pg_hba.conf under an exclusive lock (sessions running at once each add
    and remove their own lines)."""
    import fcntl

    with open(path, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        text = change(f.read())
        f.seek(0)
        f.write(text)
        f.truncate()
