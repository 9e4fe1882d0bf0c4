"""A replica that is not a hot standby of the primary's cluster is refused when the
routing saver is made: :class:`langgraph_delta_postgres.errors.ReplicaMismatchError`.

The routing rules compare WAL positions of the replica with the primary's (floors,
tokens). Those only mean something between a primary and a standby of the same cluster
on the same timeline. A replica DSN that points elsewhere would be trusted with
positions that say nothing, so a reachable replica must be:

* of the primary's cluster (its system identifier): here, a hot standby of a cluster of
  our own (tests/plugins/cluster.py: initdb of its own, the same binaries) whose
  database has the same name and tables as the primary's -- a plausible mistake;
* in recovery: here, the primary itself given as its own replica;
* on the primary's timeline: here, a standby of a promoted standby of a cluster of our
  own (timeline 2), given as a replica of that cluster's old primary (timeline 1).

Each is refused by every way of making the saver: the sync constructor and
``from_conn_string``; the async ``from_conn_string`` and the constructor followed by
``await open()``. A replica of the right cluster is accepted, and so is one that cannot
be reached when the saver is made (it is not known to be wrong; reads go to the primary).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver, errors
from langgraph_delta_postgres._local.standby import Standby, standby_of
from langgraph_delta_postgres._local.standby_plan import _Plan
from langgraph_delta_postgres.replicas import AsyncRoutingSaver, RoutingSaver
from tests.integration._helpers import cfg
from tests.plugins.cluster import Cluster, own_cluster


class _NotDefined(Exception):  # noqa: N818
    """Stands in for ReplicaMismatchError where the package does not have it yet, so that
    the tests below fail with "DID NOT RAISE" (what the saver does with such a replica)
    rather than at import."""


ReplicaMismatchError: type[Exception] = getattr(errors, "ReplicaMismatchError", _NotDefined)

HOW = ["constructor", "from_conn_string", "async_from_conn_string", "async_open"]

pytestmark = pytest.mark.timeout(180)


def test_replica_mismatch_error_is_a_value_error() -> None:
    assert hasattr(errors, "ReplicaMismatchError"), "errors.ReplicaMismatchError is missing"
    assert issubclass(errors.ReplicaMismatchError, ValueError)


def _make(how: str, primary_dsn: str, replicas: list[str]) -> None:
    """Make a routing saver on ``primary_dsn`` and ``replicas`` in the way ``how``, read a
    thread through it, and close it; raises what making it raises."""
    if how == "constructor":
        with DeltaPostgresSaver.from_conn_string(primary_dsn, pool_size=2) as p:
            r = RoutingSaver(p, replicas, pool_size=2)
            try:
                r.get_tuple(cfg("nobody"))
            finally:
                r.close()
    elif how == "from_conn_string":
        with RoutingSaver.from_conn_string(primary_dsn, replicas=replicas, pool_size=2) as r:
            r.get_tuple(cfg("nobody"))
    elif how == "async_from_conn_string":
        async def main() -> None:
            async with AsyncRoutingSaver.from_conn_string(
                primary_dsn, replicas=replicas, pool_size=2
            ) as r:
                await r.aget_tuple(cfg("nobody"))

        asyncio.run(main())
    else:
        assert how == "async_open"

        async def main() -> None:
            async with AsyncDeltaPostgresSaver.from_conn_string(primary_dsn, pool_size=2) as p:
                r = AsyncRoutingSaver(p, replicas, pool_size=2)
                try:
                    await r.open()
                    await r.aget_tuple(cfg("nobody"))
                finally:
                    await r.close()

        asyncio.run(main())


def _nudge(dsn: str) -> None:
    """A commit record on a primary: its insert position is then past a record's end (a
    standby's catch_up on an idle primary whose last record ended a page would wait for
    the next background record, ~15 s)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pg_current_xact_id()")


# ------------------------------------------------------------ a standby of another cluster


@pytest.fixture(scope="module")
def foreign(cluster_plan: _Plan) -> Iterator[tuple[Cluster, Standby]]:
    """A cluster of our own and a hot standby of it."""
    with own_cluster(cluster_plan) as c, standby_of(c.admin_dsn) as sb:
        yield c, sb


@pytest.fixture
def foreign_replica_dsn(dsn: str, foreign: tuple[Cluster, Standby]) -> str:
    """The foreign standby's DSN of a database named as the primary's test database, with
    the same tables: everything but the cluster is right."""
    cluster, sb = foreign
    name = str(conninfo_to_dict(dsn)["dbname"])
    cluster.create_db(name)
    _nudge(cluster.admin_dsn)
    sb.catch_up()
    with psycopg.connect(sb.dsn_for(name), autocommit=True) as c:  # reachable, a standby
        assert c.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
    return sb.dsn_for(name)


@pytest.mark.parametrize("how", HOW)
def test_standby_of_another_cluster_is_refused(
    how: str, dsn: str, foreign_replica_dsn: str
) -> None:
    with pytest.raises(ReplicaMismatchError, match="(?i)system identifier"):
        _make(how, dsn, [foreign_replica_dsn])


@pytest.mark.parametrize("how", HOW)
def test_server_not_in_recovery_is_refused(how: str, dsn: str) -> None:
    """The primary given as its own replica: the same cluster, not a standby."""
    with pytest.raises(ReplicaMismatchError, match="(?i)not in recovery"):
        _make(how, dsn, [dsn])


# ------------------------------------------------------------ a standby of another timeline


def test_standby_on_another_timeline_is_refused(cluster_plan: _Plan) -> None:
    """P (timeline 1), S a standby of P, promoted (timeline 2), S2 a standby of S: S2 is
    of P's cluster and in recovery, but on another timeline than P."""
    with contextlib.ExitStack() as stack:
        p = stack.enter_context(own_cluster(cluster_plan))
        db = p.create_db()
        s = stack.enter_context(standby_of(p.admin_dsn))
        _nudge(p.admin_dsn)
        s.catch_up()
        with s.admin() as c:
            assert c.execute("SELECT pg_promote()").fetchone() == (True,)
        s2 = stack.enter_context(standby_of(s.dsn))
        _nudge(s.dsn)
        s2.catch_up()
        with psycopg.connect(s2.dsn_for(db), autocommit=True) as c:
            row = c.execute(
                "SELECT pg_is_in_recovery(), received_tli FROM pg_stat_wal_receiver"
            ).fetchone()
        assert row == (True, 2), row
        for how in ("from_conn_string", "async_from_conn_string"):
            with pytest.raises(ReplicaMismatchError, match="(?i)timeline"):
                _make(how, p.dsn_for(db), [s2.dsn_for(db)])


# ------------------------------------------------------------ what is accepted


@pytest.mark.parametrize("how", HOW)
def test_standby_and_unreachable_replica_are_accepted(
    how: str, dsn: str, replica_dsn: str, tmp_path: Path
) -> None:
    """The session's standby of the primary, and a replica nobody listens for (no
    server at that socket: not known to be wrong), are accepted."""
    nowhere = f"host={tmp_path} port=5432 dbname=postgres connect_timeout=2"
    _make(how, dsn, [replica_dsn, nowhere])
