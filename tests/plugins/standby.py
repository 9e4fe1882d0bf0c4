"""A streaming hot standby of the test Postgres, for the replica tests.

``standby`` (one per session: per xdist worker, since tests pause its replay) is a hot
standby of the run's server, started from the same server binaries by
:func:`langgraph_delta_postgres._local.standby.standby_of` (``pg_basebackup -R -X stream``).
It works when the plugin started the server itself (embedded pgserver, or Docker) or
``LGDP_TEST_DSN`` names one this machine runs with replication allowed (a superuser, a
``replication`` line in pg_hba.conf, wal_level replica: initdb's defaults). Where it
can't be started, the replica tests are skipped with the reason; under ``CI`` they fail
instead: CI never counts a skipped test as passing.

``replica_dsn``: the standby's DSN of this test's database (``dsn``), caught up before
the test; after it, replay is resumed and the standby restarted if the test stopped it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from psycopg.conninfo import conninfo_to_dict

from langgraph_delta_postgres._local.standby import Standby, standby_of
from langgraph_delta_postgres._local.standby_plan import StandbyUnavailable, why_not
from tests.plugins.postgres import PgServer, skip_or_fail


def _unavailable(why: str) -> None:
    skip_or_fail(f"no hot standby of the test Postgres: {why}", "the replica tests")


@pytest.fixture(scope="session")
def standby(pg_server: PgServer) -> Iterator[Standby]:
    if (why := why_not(pg_server.admin_dsn)) is not None:
        _unavailable(why)
    cm = standby_of(pg_server.admin_dsn)
    try:
        sb = cm.__enter__()
    except StandbyUnavailable as e:
        _unavailable(str(e))
        raise
    try:
        yield sb
    finally:
        cm.__exit__(None, None, None)


@pytest.fixture
def replica_dsn(dsn: str, standby: Standby) -> Iterator[str]:
    """The standby's DSN of this test's database, caught up with the primary."""
    standby.catch_up()
    yield standby.dsn_for(str(conninfo_to_dict(dsn)["dbname"]))
    if not standby.running():
        standby.start()
    standby.resume()
