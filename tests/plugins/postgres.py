"""Real Postgres for the test suite.

Resolution order (the first that is available wins):

1. ``LGDP_TEST_DSN``: a DSN of a server where the tests may create and drop databases
   (a superuser, or a role with CREATEDB).
2. A Docker engine, through testcontainers (``postgres:16-alpine``).
3. The embedded Postgres of the ``embedded`` extra (``pgserver``), in a temp directory.

With none available the Postgres tests are skipped, except when ``CI`` is set, where
that is an error: CI never counts a skipped Postgres test as passing.

Isolation: one template database, named for the session, is migrated once per session
and dropped at its end; every test that asks
for ``dsn`` gets its own ``CREATE DATABASE ... TEMPLATE`` clone, dropped afterwards.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ENV_DSN = "LGDP_TEST_DSN"
#: this session's template database: named per session, so two sessions (or parallel
#: workers) on one server never drop or clone each other's
TEMPLATE = f"lgdp_template_{os.getpid()}_{uuid.uuid4().hex[:8]}"


@dataclass
class PgServer:
    admin_dsn: str
    source: str
    version: str

    def dsn_for(self, dbname: str) -> str:
        params = conninfo_to_dict(self.admin_dsn)
        params["dbname"] = dbname
        return make_conninfo(**params)  # type: ignore[arg-type]

    def admin(self) -> psycopg.Connection:  # type: ignore[type-arg]
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
        import docker  # type: ignore[import-untyped]

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
        from testcontainers.postgres import PostgresContainer  # type: ignore[import-untyped]

        with PostgresContainer("postgres:16-alpine", driver=None) as pg:
            yield _describe(pg.get_connection_url(), "docker (testcontainers)")
        return
    try:
        import pgserver  # type: ignore[import-untyped]
    except ImportError:
        yield (
            f"no Postgres for the tests: set {ENV_DSN}, run a Docker engine, or "
            "pip install 'langgraph-delta-postgres[embedded]'"
        )
        return
    tmp = tempfile.mkdtemp(prefix="lgdp-test-pg-")
    srv = pgserver.get_server(tmp, cleanup_mode="delete")
    try:
        yield _describe(srv.get_uri(), "embedded (pgserver)")
    finally:
        srv.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def _describe(dsn: str, source: str) -> PgServer:
    with psycopg.connect(dsn, autocommit=True) as conn:
        version = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
    return PgServer(admin_dsn=dsn, source=source, version=version)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    with _start_server() as srv:
        if isinstance(srv, str):
            if os.environ.get("CI"):
                pytest.fail(srv + " (CI is set: Postgres tests may not be skipped)")
            pytest.skip(srv)
        yield srv


def pytest_report_header(config: pytest.Config) -> str:
    return f"postgres: {ENV_DSN}={'set' if os.environ.get(ENV_DSN) else 'unset'}"


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
