"""The server a connection reaches (``sql/server.sql``) and the client-side deadline of
replica statements (``langgraph_delta_postgres/_deadline.py``), on a real primary and
its real hot standby."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from psycopg_pool import ConnectionPool

from langgraph_delta_postgres import DeltaPostgresSaver, StaleServerError
from langgraph_delta_postgres._deadline import deadline
from langgraph_delta_postgres._local.standby import Standby
from langgraph_delta_postgres._server import ServerIdentity
from langgraph_delta_postgres._sql import Queries
from tests.integration._helpers import cfg, make_checkpoint

IDENTITY = Queries(None)["server.identity"]


def _identity(dsn: str) -> ServerIdentity:
    with psycopg.connect(dsn, autocommit=True) as c:
        row = c.execute(IDENTITY).fetchone()
    assert row is not None
    return ServerIdentity.of(row)


def test_identity_of_a_primary_and_its_standby(dsn: str, replica_dsn: str) -> None:
    p, s = _identity(dsn), _identity(replica_dsn)
    assert not p.in_recovery and s.in_recovery
    assert p.system_identifier == s.system_identifier and p.same_history(s)
    assert p.timeline >= 1


def test_identity_as_a_role_without_privileges(dsn: str, standby: Standby,
                                               replica_dsn: str) -> None:
    """pg_control_system() and the WAL file name are readable by any role; on a standby
    the WAL receiver's timeline is hidden from it, and the restartpoint's is used."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("DROP ROLE IF EXISTS lgdp_plain")
        c.execute("CREATE ROLE lgdp_plain LOGIN")
    try:
        standby.catch_up()
        plain = psycopg.conninfo.make_conninfo(dsn, user="lgdp_plain")
        plain_sb = psycopg.conninfo.make_conninfo(replica_dsn, user="lgdp_plain")
        assert _identity(plain) == _identity(dsn)
        assert _identity(plain_sb).same_history(_identity(dsn))
    finally:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("DROP ROLE lgdp_plain")


def test_deadline_ends_a_query_that_never_answers(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError), deadline(conn, 0.3) as d:
            conn.execute("SELECT pg_sleep(20)")
        assert d.expired
        assert time.monotonic() - started < 3
    with psycopg.connect(dsn, autocommit=True) as conn, deadline(conn, 5) as d:
        assert conn.execute("SELECT 1").fetchone() == (1,)  # disarmed before it fires
    assert not d.expired


def test_deadline_async(dsn: str) -> None:
    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            started = time.monotonic()
            with pytest.raises(psycopg.OperationalError), deadline(conn, 0.3) as d:
                await conn.execute("SELECT pg_sleep(20)")
            assert d.expired
            assert time.monotonic() - started < 3

    asyncio.run(main())


@pytest.fixture
def pooled(dsn: str) -> Iterator[DeltaPostgresSaver]:
    with ConnectionPool(dsn, min_size=1, max_size=2, kwargs={"autocommit": True},
                        open=True) as pool:
        yield DeltaPostgresSaver(pool)


def _fill(saver: DeltaPostgresSaver, thread: str, n: int) -> RunnableConfig:
    conf: RunnableConfig = cfg(thread)
    versions: dict[str, Any] = {}
    for i in range(n):
        versions["obj"] = saver.get_next_version(versions.get("obj"), None)
        conf = saver.put(conf, make_checkpoint({"obj": i}, dict(versions)), {"step": i},
                         {"obj": versions["obj"]})
        saver.put_writes(conf, [("log", f"w{i}")], f"task-{i}")
    return conf


def test_a_saver_drops_its_cache_when_its_server_changes(
    pooled: DeltaPostgresSaver,
) -> None:
    """What a failover looks like to a saver: a new connection reaches a server of
    another timeline. The cache is dropped (a call planned before keeps nothing), and a
    pooled connection to the old server is closed instead of lent. (The real promotion:
    tests/integration/test_failover.py.)"""
    saver = pooled
    head = _fill(saver, "s1", 4)
    saver.get_delta_channel_history(config=head, channels=["log"])
    saver.get_delta_channel_history(config=head, channels=["log"])
    cache = saver.history_cache
    assert cache is not None and len(cache) == 1
    old = saver._server.current
    assert old is not None
    # the pool's connections were checked against `old`; pretend the next one reaches
    # the promoted standby: timeline + 1
    assert isinstance(saver.conn, ConnectionPool)
    with saver.conn.connection() as conn:
        saver._server_seen(conn, (old.system_identifier, False, old.timeline + 1))
    assert len(cache) == 0 and saver._server.changes == 1
    # a connection known to reach `old` is now stale: closed, not lent
    pool = saver.conn
    assert isinstance(pool, ConnectionPool)
    for conn in list(saver._server._seen.keys()):  # every pooled connection: the old one
        saver._server._seen[conn] = old
    with pytest.raises(StaleServerError):
        saver.get_tuple(head)
    # the pool replaced it; the next connection is checked anew
    saver._server.reset()
    assert saver.get_tuple(head) is not None
