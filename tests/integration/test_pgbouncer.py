"""The savers through a real PgBouncer in transaction mode (tests/plugins/pgbouncer.py),
with ``prepare_threshold=None`` as the README says: the behaviour tests of
test_saver_behaviour.py and DeltaChannel graphs compared with InMemorySaver, on a sync
and an async connection and pool (and pipeline); ``setup()`` through it: a no-op when
every migration is applied, an immediate error naming a direct connection when some are
pending; and what psycopg's prepared statements do there (docs/poolers.md)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver
from langgraph_delta_postgres.migrate import MigrationError, amigrate, discover, migrate
from tests.graph import test_delta_graphs as graphs
from tests.graph._graphs import run_both
from tests.integration import test_saver_behaviour as behaviour
from tests.integration._helpers import open_saver, put_chain
from tests.plugins.pgbouncer import Bouncer, start_bouncer
from tests.plugins.postgres import PgServer
from tests.plugins.savers import KINDS, SaverFactory

#: What the README says to pass behind a transaction-mode pooler.
NO_PREPARE: dict[str, Any] = {"prepare_threshold": None}


@pytest.fixture(params=KINDS)
def bouncer_factory(request: pytest.FixtureRequest) -> SaverFactory:
    return SaverFactory(request.param, conn_kw=NO_PREPARE)


def test_connections_really_go_through_pgbouncer(pgbouncer: Bouncer, bouncer_dsn: str) -> None:
    """PgBouncer answers the startup with a cancel key of its own (also what the migration
    runner detects it by), and its admin console lists the test database's pool."""
    with psycopg.connect(bouncer_dsn, autocommit=True, **NO_PREPARE) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None and row[0] != conn.info.backend_pid
        dbname = conn.info.dbname
    with psycopg.connect(pgbouncer.dsn_for("pgbouncer"), autocommit=True, **NO_PREPARE) as adm:
        cur = adm.cursor()
        cur.execute("SHOW CONFIG")
        config = {r[0]: r[1] for r in cur.fetchall()}
        assert config["pool_mode"] == "transaction"
        cur.execute("SHOW POOLS")
        assert cur.description is not None
        cols = [c.name for c in cur.description]
        assert dbname in [dict(zip(cols, r, strict=True))["database"] for r in cur.fetchall()]


# ----------------------------------------------------------------------- saver behaviour

Case = Callable[[str, SaverFactory], Awaitable[None]]
BEHAVIOUR: list[Case] = [
    behaviour.test_list_matches_model,
    behaviour.test_get_tuple_latest_by_id_and_namespaces,
    behaviour.test_put_writes_first_wins_special_last_wins,
    behaviour.test_pending_writes_and_history_in_task_path_order,
    behaviour.test_delete_thread,
    behaviour.test_delete_for_runs,
    behaviour.test_copy_thread,
    behaviour.test_prune_keep_latest_and_delete,
    behaviour.test_prune_keep_latest_keeps_what_delta_threads_need,
]


@pytest.mark.parametrize("case", BEHAVIOUR, ids=lambda f: f.__name__.removeprefix("test_"))
async def test_saver_behaviour(bouncer_dsn: str, bouncer_factory: SaverFactory, case: Case) -> None:
    await case(bouncer_dsn, bouncer_factory)


async def test_async_concurrent_calls(bouncer_dsn: str) -> None:
    """20 threads written and read at once on an async pool of 4, through PgBouncer's pool
    of 4 server connections: statements of one client land on several servers."""
    await behaviour.test_async_concurrent_calls(
        bouncer_dsn, SaverFactory("async-pool", conn_kw=NO_PREPARE)
    )


# ----------------------------------------------------------------------- graphs


async def test_delta_graph_same_as_in_memory(
    bouncer_dsn: str, bouncer_factory: SaverFactory
) -> None:
    """A fan-out DeltaChannel graph over four turns, an update and a replay, then an
    interrupt/resume graph: observed exactly as on InMemorySaver."""
    await run_both(bouncer_dsn, bouncer_factory, graphs.fanout_scenario(3))
    await run_both(bouncer_dsn, bouncer_factory, graphs.interrupt_scenario)


# ----------------------------------------------------------------------- setup / migrate


async def test_setup_when_migrated_is_a_no_op(
    bouncer_dsn: str, bouncer_factory: SaverFactory
) -> None:
    """The database was migrated directly: setup() through PgBouncer returns (the Agent
    Server calls it at every start) and the saver works."""
    async with open_saver(bouncer_factory, bouncer_dsn) as u:
        await u.setup()
        await u.setup()
        assert len(await put_chain(u, "t", 3)) == 3


def _tables(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace"
        ).fetchall()
    return [r[0] for r in rows]


async def test_setup_with_pending_migrations_refuses_at_once(
    bouncer_empty_dsn: str, empty_dsn: str, bouncer_factory: SaverFactory
) -> None:
    """An empty database through PgBouncer: setup() fails at once (three reads), before
    creating anything, with an error that says to migrate on a direct connection."""
    async with open_saver(bouncer_factory, bouncer_empty_dsn) as u:
        started = time.monotonic()
        with pytest.raises(MigrationError, match="direct connection") as info:
            await u.setup()
        assert time.monotonic() - started < 5.0  # a lock wait would poll forever
    assert f"{len(discover())} migration(s) pending" in str(info.value)
    assert "connection pooler" in str(info.value)
    assert _tables(empty_dsn) == []
    # run directly, then setup() through PgBouncer has nothing left to do
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert len(migrate(conn)) == len(discover())
    async with open_saver(bouncer_factory, bouncer_empty_dsn) as u:
        await u.setup()


async def test_migrate_functions_and_from_conn_string(
    bouncer_empty_dsn: str, empty_dsn: str
) -> None:
    """migrate() / amigrate() (what the CLI runs) refuse the same way, and so does the
    setup() of from_conn_string(prepare_threshold=None); after a direct run all pass."""
    with psycopg.connect(bouncer_empty_dsn, **NO_PREPARE) as conn:
        with pytest.raises(MigrationError, match="direct connection"):
            migrate(conn)
    aconn = await psycopg.AsyncConnection.connect(bouncer_empty_dsn, **NO_PREPARE)
    async with aconn:
        with pytest.raises(MigrationError, match="direct connection"):
            await amigrate(aconn)
    with DeltaPostgresSaver.from_conn_string(bouncer_empty_dsn, prepare_threshold=None) as s:
        with pytest.raises(MigrationError, match="direct connection"):
            s.setup()
    assert _tables(empty_dsn) == []
    with psycopg.connect(empty_dsn, autocommit=True) as direct:
        migrate(direct)
    with psycopg.connect(bouncer_empty_dsn, **NO_PREPARE) as conn:
        assert migrate(conn) == []
    async with AsyncDeltaPostgresSaver.from_conn_string(
        bouncer_empty_dsn, prepare_threshold=None, pool_size=2
    ) as a:
        await a.setup()


# ----------------------------------------------------------------------- prepared statements


def _open_through(dsn: str, is_async: bool, **kw: Any) -> None:
    """from_conn_string(dsn, **kw) opened and closed, sync or async."""
    if is_async:
        async def main() -> None:
            async with AsyncDeltaPostgresSaver.from_conn_string(dsn, **kw):
                pass

        asyncio.run(main())
    else:
        with DeltaPostgresSaver.from_conn_string(dsn, **kw):
            pass


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_from_conn_string_default_prepare_threshold_is_refused(
    bouncer_dsn: str, is_async: bool
) -> None:
    """With the default prepare_threshold, from_conn_string sends generic-plan settings
    as the ``options`` startup parameter, which PgBouncer 1.18 rejects at connect: the
    failure is immediate, names the parameter and says what to do (docs/poolers.md;
    issue 38: it was PgBouncer's message alone), sync and async, pool or not."""
    for pool_size in (None, 2):
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError,
                           match="unsupported startup parameter: options") as e:
            _open_through(bouncer_dsn, is_async, pool_size=pool_size)
        assert time.monotonic() - started < 5.0  # not a pool's PoolTimeout
        msg = str(e.value)
        assert "prepare_threshold=None" in msg
        assert "plan_cache_mode=force_generic_plan" in msg  # what the saver sends
        # what the pooler setting does: PgBouncer drops the parameter, it passes nothing
        assert "ignore_startup_parameters = extra_float_digits,options" in msg
        assert "plan with the server's defaults" in msg


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_options_of_the_dsn_are_named_as_the_cause(
    bouncer_dsn: str, is_async: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With prepare_threshold=None the saver sends no ``options``: when PgBouncer still
    refuses one, it came from the connection string or PGOPTIONS, and the error says so
    instead of advising the prepare_threshold=None already passed (issue 38)."""
    with_options = psycopg.conninfo.make_conninfo(bouncer_dsn, options="-c jit=off")
    cases: list[tuple[str, dict[str, str]]] = [(with_options, {}),
                                               (bouncer_dsn, {"PGOPTIONS": "-c jit=off"})]
    for dsn, env in cases:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        for pool_size in (None, 2):
            with pytest.raises(psycopg.OperationalError,
                               match="unsupported startup parameter: options") as e:
                _open_through(dsn, is_async, pool_size=pool_size, prepare_threshold=None)
            msg = str(e.value)
            assert "the connection string (`options=`) or the PGOPTIONS" in msg, msg
            assert "pass prepare_threshold=None" not in msg
            assert "ignore_startup_parameters" in msg
    # without them, the same DSN passes
    monkeypatch.delenv("PGOPTIONS")
    _open_through(bouncer_dsn, is_async, pool_size=2, prepare_threshold=None)


def test_ignored_options_connect_and_plan_with_server_defaults(
    pgbouncer: Bouncer, pg_server: PgServer, dsn: str
) -> None:
    """What the error's other advice does: a PgBouncer (session mode) with
    ``ignore_startup_parameters = extra_float_digits,options`` lets from_conn_string's
    default connect, and drops the generic-plan settings (the server's defaults plan),
    as the error and docs/poolers.md say; the saver works."""
    settings = {"ignore_startup_parameters": "extra_float_digits,options"}
    with start_bouncer(pg_server, "session", settings) as other:
        assert isinstance(other, Bouncer), other  # the pgbouncer fixture found the binary
        through = other.dsn_for(str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]))
        with DeltaPostgresSaver.from_conn_string(through) as saver:
            assert isinstance(saver.conn, psycopg.Connection)
            row = saver.conn.execute("SHOW plan_cache_mode").fetchone()
            assert row is not None and row[0] == "auto"
            saver.setup()  # migrated: nothing to do
            config = saver.put(
                {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
                empty_checkpoint(), {"step": 0}, {},
            )
            assert saver.get_tuple(config) is not None


def _tracked_prepared_statements(bouncer: Bouncer) -> int:
    """The PgBouncer's ``max_prepared_statements`` (1.21 added it; 0, the default before
    1.24, turns the tracking off; 200 from 1.24), read from its admin console: 0 for a
    PgBouncer without the setting."""
    with psycopg.connect(bouncer.dsn_for("pgbouncer"), autocommit=True, **NO_PREPARE) as adm:
        cur = adm.cursor()
        cur.execute("SHOW CONFIG")
        config = {r[0]: r[1] for r in cur.fetchall()}
    version = tuple(int(x) for x in bouncer.version.split()[1].split(".")[:2])
    if version < (1, 21):
        assert "max_prepared_statements" not in config, (bouncer.version, config)
        return 0
    return int(config["max_prepared_statements"])


def test_default_prepare_threshold_through_transaction_mode(
    pgbouncer: Bouncer, bouncer_dsn: str
) -> None:
    """psycopg's default (prepare after 5 runs, statements named ``_pg3_0``, ``_pg3_1``...)
    through PgBouncer in transaction mode, two clients used in turn sharing one server
    connection. What it does depends on the installed PgBouncer, and each case is
    asserted, never skipped: without prepared-statement tracking (< 1.21, or
    ``max_prepared_statements = 0``, the default of 1.21-1.23) the second to prepare
    finds the first one's ``_pg3_0`` there; with it (1.24's default of 200) PgBouncer
    renames them per server connection and both work. (Alone, one client happens to keep
    its server connection and works: no proof of anything.) With
    ``prepare_threshold=None`` (the README's advice) both work either way."""
    tracked = _tracked_prepared_statements(pgbouncer)
    errors: list[str] = []
    with psycopg.connect(bouncer_dsn, autocommit=True) as a, psycopg.connect(
        bouncer_dsn, autocommit=True
    ) as b:
        for i in range(8):
            for conn in (a, b):
                try:
                    conn.execute("SELECT %s::int + 1", (i,)).fetchone()
                except psycopg.errors.DuplicatePreparedStatement as e:
                    errors.append(str(e))
    if tracked == 0:
        assert errors and 'prepared statement "_pg3_0" already exists' in errors[0]
    else:
        assert errors == [], (pgbouncer.version, f"max_prepared_statements={tracked}", errors)
    with psycopg.connect(bouncer_dsn, autocommit=True, **NO_PREPARE) as a, psycopg.connect(
        bouncer_dsn, autocommit=True, **NO_PREPARE
    ) as b:
        for i in range(8):
            for conn in (a, b):
                conn.execute("SELECT %s::int + 1", (i,)).fetchone()
