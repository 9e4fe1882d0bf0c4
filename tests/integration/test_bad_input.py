"""Every option of the savers' public calls is type-checked before any statement runs
(issue 21, item 4): a wrong type is a TypeError, a bad value a ValueError, and the
database is left as it was. ``prune(dry_run="no")`` once reached SQL, where 'no' is a
valid false, and deleted."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver
from tests.integration._helpers import cfg, open_saver, put_chain, table_snapshot
from tests.plugins.savers import SaverFactory

REFUSED: list[tuple[str, tuple[Any, ...], dict[str, Any], type[Exception], str]] = [
    # (call, args, kwargs, error, match)
    ("prune", (["t"],), {"dry_run": "no"}, TypeError, "dry_run must be True or False"),
    ("prune", (["t"],), {"dry_run": None}, TypeError, "dry_run must be True or False"),
    ("prune", (["t"],), {"dry_run": 0}, TypeError, "dry_run"),
    ("prune", (["t"],), {"dry_run": "no", "strategy": "delete"}, TypeError, "dry_run"),
    ("prune", (["t"],), {"keep_last": "2"}, TypeError, "keep_last must be an int"),
    ("prune", (["t"],), {"keep_last": 2.0}, TypeError, "keep_last"),
    ("prune", (["t"],), {"keep_last": True}, TypeError, "keep_last"),
    ("prune", (["t"],), {"keep_last": 0}, ValueError, "keep_last"),
    ("prune", (["t"],), {"keep_last": 2**40}, ValueError, "keep_last"),
    ("prune", (["t"],), {"strategy": None}, TypeError, "strategy must be a str"),
    ("prune", (["t"],), {"before": "2020-01-01"}, TypeError, "before must be"),
    ("prune", (["t"],), {"before": 0}, TypeError, "before must be"),
    ("prune", ("t",), {}, TypeError, "thread_ids must be a sequence"),
    ("prune", (["t", None],), {}, TypeError, r"thread_ids\[1\] must be a str"),
    ("prune", ([b"t"],), {}, TypeError, r"thread_ids\[0\]"),
    ("prune", (7,), {}, TypeError, "thread_ids must be a sequence"),
    ("delete_for_runs", ("r1",), {}, TypeError, "run_ids must be a sequence"),
    ("delete_for_runs", ([None],), {}, TypeError, r"run_ids\[0\] must be a str"),
    ("delete_for_runs", (None,), {}, TypeError, "run_ids"),
    ("copy_thread", (None, "t2"), {}, TypeError, "source_thread_id must be a str"),
    ("copy_thread", ("t", 2.5), {}, TypeError, "target_thread_id must be a str"),
    ("delete_thread", (None,), {}, TypeError, "thread_id must be a str"),
    ("delete_thread", (["t"],), {}, TypeError, "thread_id must be a str"),
    # put with what is not a config / checkpoint / metadata (issue 38: AttributeError)
    ("put", (None, {"id": "x"}, {}, {}), {}, ValueError, "config must be a dict .* not NoneType"),
    ("put", ("t", {"id": "x"}, {}, {}), {}, ValueError, "config must be a dict .* not str"),
    # a config whose 'configurable' is not a dict (an AttributeError before; issue 38)
    ("put", ({"configurable": None}, {"id": "x"}, {}, {}), {}, ValueError,
     "its 'configurable' is NoneType"),
    ("put_writes", ({"configurable": "t"}, [("a", 1)], "task"), {}, ValueError,
     "its 'configurable' is str"),
    ("get_tuple", ({"configurable": None},), {}, ValueError, "its 'configurable' is NoneType"),
    ("get_tuple", (None,), {}, ValueError, "config must be a dict"),
    ("put", ({"configurable": {}}, {"id": "x"}, {}, {}), {}, ValueError, "thread_id"),
    ("put", (cfg("t"), None, {}, {}), {}, TypeError, "checkpoint must be a dict"),
    ("put", (cfg("t"), {"id": "x"}, {}, {}), {}, ValueError, "channel_values"),
    ("put", (cfg("t"), {"id": "x", "channel_values": {}, "channel_versions": []}, {}, {}), {},
     TypeError, r"checkpoint\['channel_versions'\] must be a dict"),
    ("put", (cfg("t"), {"id": 7, "channel_values": {}, "channel_versions": {}}, {}, {}), {},
     TypeError, r"checkpoint\['id'\] must be a str"),
    ("put", (cfg("t"), {"id": "x", "channel_values": {}, "channel_versions": {}}, None, {}),
     {}, TypeError, "metadata must be a dict"),
    ("put", (cfg("t"), {"id": "x", "channel_values": {}, "channel_versions": {}}, {}, None),
     {}, TypeError, "new_versions must be a dict"),
    ("put_writes", (None, [("a", 1)], "task"), {}, ValueError, "thread_id"),
]


async def call(u: Any, name: str, *args: Any, **kw: Any) -> Any:
    return await u._call(name, *args, **kw)


async def test_refused_options_run_no_statement(dsn: str, saver_factory: SaverFactory) -> None:
    async with open_saver(saver_factory, dsn) as u:
        chain = await put_chain(u, "t", 5)
        await u.put_writes(chain[-2], [("obj", {"w": 1})], "task")
        before = table_snapshot(dsn)
        for name, args, kw, error, match in REFUSED:
            with pytest.raises(error, match=match):
                await call(u, name, *args, **kw)
            assert table_snapshot(dsn) == before, (name, args, kw)
        c = chain[-1]
        for channels, match in ((["obj", 1], r"channels\[1\] must be a str"),
                                ("obj", "channels must be a sequence"), (None, "channels")):
            with pytest.raises(TypeError, match=match):
                await u.history(c, channels)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match=match):
                await u.keepset(c, channels)  # type: ignore[arg-type]
        for kw, match in (
            ({"limit": "5"}, "limit must be an int or None"),
            ({"limit": True}, "limit"),
            ({"limit": 2.5}, "limit"),
            ({"filter": "source"}, "filter must be a dict"),
            ({"filter": [("source", "loop")]}, "filter"),
            ({"before": "cp-id"}, "before must be a dict"),
        ):
            with pytest.raises(TypeError, match=match):
                await u.list(cfg("t"), **kw)
        with pytest.raises(TypeError, match="config must be a dict"):
            await u.list("t")
        for bad in ({"configurable": None}, {"configurable": ["t"]}):
            with pytest.raises(ValueError, match="its 'configurable' is"):
                await u.list(bad)
            with pytest.raises(ValueError, match="before must be a checkpoint's config"):
                await u.list(cfg("t"), before=bad)
        with pytest.raises(ValueError, match="before must be a checkpoint's config"):
            await u.list(cfg("t"), before={})
        with pytest.raises(TypeError, match="task_id must be a str"):
            await u.put_writes(c, [("obj", 1)], None)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="writes must be a sequence"):
            await u.put_writes(c, "obj", "task")  # type: ignore[arg-type]
        assert table_snapshot(dsn) == before
        # valid input behaves as before: a real dry run deletes nothing, the real prune
        # does; a limit beyond int8 is no limit; a UUID id is its text
        dry = await u.prune(["t"], dry_run=True)
        assert dry.checkpoints == 4
        assert table_snapshot(dsn) == before
        assert len(await u.list(cfg("t"), limit=10**30)) == 5
        assert (await u.prune(["t"], dry_run=False)).checkpoints == 4
        assert len(await u.list(cfg("t"))) == 1
        tid = uuid.uuid4()
        await put_chain(u, str(tid), 2)
        assert (await u.prune([tid], strategy="delete")).checkpoints == 2
        await put_chain(u, str(tid), 1)
        await u.delete_thread(tid)  # type: ignore[arg-type]
        assert await u.list(cfg(str(tid))) == []


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_dry_run_no_and_none_delete_nothing(dsn: str, is_async: bool) -> None:
    """The issue's case as a user meets it: ``prune(dry_run="no")`` and
    ``prune(dry_run=None)`` raise TypeError and every checkpoint is still there."""
    factory = SaverFactory("async-conn" if is_async else "sync-conn")
    async with open_saver(factory, dsn) as u:
        for t in ("a", "b"):
            await put_chain(u, t, 6)
        before = table_snapshot(dsn)
        for bad in ("no", None, "false", 1):
            with pytest.raises(TypeError, match="dry_run"):
                await u.prune(["a", "b"], dry_run=bad)
            with pytest.raises(TypeError, match="dry_run"):
                await u.prune(["a", "b"], strategy="delete", dry_run=bad)
        assert table_snapshot(dsn) == before
        assert len(await u.list(cfg("a"))) == 6 and len(await u.list(cfg("b"))) == 6


async def test_constructor_options_are_checked_before_connecting(dsn: str) -> None:
    nowhere = "postgresql://nobody@127.0.0.1:1/nowhere?connect_timeout=3"
    for kw, error, match in (
        ({"cache_bytes": "10"}, TypeError, "cache_bytes must be an int"),
        ({"cache_bytes": -1}, ValueError, "cache_bytes"),
        ({"pipeline": "yes"}, TypeError, "pipeline must be True or False"),
        ({"pool_size": 0}, ValueError, "pool_size"),
        ({"pool_size": "4"}, TypeError, "pool_size"),
        ({"prepare_threshold": "5"}, TypeError, "prepare_threshold"),
    ):
        with pytest.raises(error, match=match):
            with DeltaPostgresSaver.from_conn_string(nowhere, **kw):
                pass
        with pytest.raises(error, match=match):
            async with AsyncDeltaPostgresSaver.from_conn_string(nowhere, **kw):
                pass
    with pytest.raises(TypeError, match="conn_string must be a str"):
        with DeltaPostgresSaver.from_conn_string(None):  # type: ignore[arg-type]
            pass
    with psycopg.connect(dsn) as conn:
        with pytest.raises(TypeError, match="cache_bytes"):
            DeltaPostgresSaver(conn, cache_bytes=1.5)  # type: ignore[arg-type]
        assert DeltaPostgresSaver(conn, cache_bytes=0).history_cache is None


@pytest.mark.parametrize("schema", ["information_schema", "INFORMATION_SCHEMA", "pg_catalog",
                                    "pg_toast", "pg_mine"])
async def test_system_schemas_are_refused(dsn: str, schema: str) -> None:
    """schema="information_schema" was accepted and the tables made in that system
    schema (issue 38); pg_* names the server refuses itself, later. Refused by every
    way in, sync and async, before anything is created: the constructors,
    from_conn_string (pool or not), setup()'s migrate()/amigrate()."""
    from langgraph_delta_postgres.migrate import amigrate, migrate

    def ours_in_system_schemas() -> list[str]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT n.nspname || '.' || c.relname FROM pg_class c"
                " JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE c.relname IN ('checkpoints', 'langgraph_delta_migrations')"
                " AND (n.nspname IN ('information_schema', 'pg_catalog', 'pg_toast')"
                " OR lower(n.nspname) LIKE 'pg\\_%' OR lower(n.nspname) = 'information_schema')"
            ).fetchall()
        return [r[0] for r in rows]

    refused = pytest.raises(ValueError, match="system schema")
    with psycopg.connect(dsn, autocommit=True) as conn:
        with refused:
            DeltaPostgresSaver(conn, schema=schema)
        with refused:
            migrate(conn, schema=schema)
    for pool_size in (None, 2):
        with refused, DeltaPostgresSaver.from_conn_string(
            dsn, schema=schema, pool_size=pool_size
        ):
            pass
        with refused:
            async with AsyncDeltaPostgresSaver.from_conn_string(
                dsn, schema=schema, pool_size=pool_size
            ):
                pass
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        with refused:
            AsyncDeltaPostgresSaver(aconn, schema=schema)
        with refused:
            await amigrate(aconn, schema=schema)
    assert ours_in_system_schemas() == []


def _open_pool(dsn: str, is_async: bool) -> None:
    """from_conn_string(dsn, pool_size=2) opened and closed, sync or async."""
    import asyncio

    if is_async:
        async def main() -> None:
            async with AsyncDeltaPostgresSaver.from_conn_string(dsn, pool_size=2):
                pass

        asyncio.run(main())
    else:
        with DeltaPostgresSaver.from_conn_string(dsn, pool_size=2):
            pass


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_pool_that_cannot_connect_says_why_at_once(
    dsn: str, is_async: bool, password_role: tuple[str, str]
) -> None:
    """from_conn_string(pool_size=N) on a database that does not exist, a closed port
    and a wrong password: the connection's own error, naming the cause, at once (it was
    a PoolTimeout without the cause after 30 s; issue 38), as without a pool."""
    import socket
    import time

    role, _ = password_role
    wrong_password = psycopg.conninfo.make_conninfo(dsn, user=role, password="wrong")
    try:
        psycopg.connect(wrong_password).close()
        password_case: list[tuple[str, str]] = []  # this server lets it in (trust)
    except psycopg.OperationalError:
        password_case = [(wrong_password, f'password authentication failed for user "{role}"')]
    missing = psycopg.conninfo.make_conninfo(dsn, dbname=f"lgdp_missing_{uuid.uuid4().hex[:8]}")
    with socket.socket() as closed:  # bound, never listening: every connect is refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        closed_port = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        for bad, cause in [(missing, "does not exist"), (closed_port, "Connection refused"),
                           *password_case]:
            started = time.monotonic()
            with pytest.raises(psycopg.OperationalError, match=cause):
                _open_pool(bad, is_async)
            assert time.monotonic() - started < 5, bad
    if not password_case:
        pytest.skip("this server lets a wrong password in (trust): that case was not run")


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_routing_saver_reads_refuse_what_is_not_a_config(dsn: str, is_async: bool) -> None:
    """The routing saver's get_tuple and list looked into a config before the primary's
    checks: a str, or a 'configurable' that is not a dict, was an AttributeError (issue
    38); now such a call goes to the primary, which says what is wrong."""
    import asyncio

    from langgraph_delta_postgres.replicas import AsyncRoutingSaver, RoutingSaver

    bad_configs: list[tuple[Any, type[Exception], str]] = [
        ("t", ValueError, "config must be a dict .* not str"),
        ({"configurable": None}, ValueError, "its 'configurable' is NoneType"),
        ({"configurable": "t"}, ValueError, "its 'configurable' is str"),
    ]
    bad_befores: list[tuple[Any, type[Exception], str]] = [
        ("t", TypeError, "before must be a dict or None"),
        ({"configurable": None}, ValueError, "before must be a checkpoint's config"),
    ]

    async def check(get_tuple: Any, listed: Any) -> None:
        for config, error, match in bad_configs:
            with pytest.raises(error, match=match):
                await get_tuple(config)
            if isinstance(config, dict):  # list(str) is a TypeError, checked above
                with pytest.raises(error, match=match):
                    await listed(config)
        for before, error, match in bad_befores:
            with pytest.raises(error, match=match):
                await listed(cfg("t"), before=before)

    if is_async:
        async def main() -> None:
            async with AsyncRoutingSaver.from_conn_string(dsn, replicas=[]) as a:
                async def listed(config: Any, **kw: Any) -> list[Any]:
                    return [t async for t in a.alist(config, **kw)]

                await check(a.aget_tuple, listed)

        asyncio.run(main())
    else:
        with RoutingSaver.from_conn_string(dsn, replicas=[]) as s:
            async def get_tuple(config: Any) -> Any:
                return s.get_tuple(config)

            async def listed(config: Any, **kw: Any) -> list[Any]:
                return list(s.list(config, **kw))

            asyncio.run(check(get_tuple, listed))
