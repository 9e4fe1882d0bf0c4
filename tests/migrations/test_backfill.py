"""Adoption's backfill (migration 0004) runs in bounded batches that commit as they go and
resume after an interruption, while the savers keep working; a database that applied the
first, one-UPDATE version of 0004 still counts it as applied (issue 13, item 9)."""

from __future__ import annotations

import threading
from collections.abc import Generator
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row

import langgraph_delta_postgres.migrate as migrate_mod
from langgraph_delta_postgres import DeltaPostgresSaver, SetupRequiredError
from langgraph_delta_postgres.migrate import discover, migrate, status
from tests.integration.test_adoption import (
    GRAPHS,
    actual_columns,
    expected_backfill,
    run,
)

BACKFILL = "0004_backfill_delta_columns.sql"


REAL_PLAN = migrate_mod._plan


class Interrupted(Exception):
    """Stands for Ctrl-C, a killed process or a lost connection between two batches."""


def _official_database(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
        off = PostgresSaver(conn)
        off.setup()
        for i, kind in enumerate(["delta", "mine", "full", "delta", "mine"]):
            run(kind, GRAPHS[kind](off), f"t{i}", 4, 0)


def _before_batch(batches: int, action: Any) -> Any:
    """A stand-in for migrate's plan that calls ``action()`` once ``batches`` runs of a
    batched migration have committed, before the next run is sent."""
    real = REAL_PLAN

    def plan(schema: str | None, migrations: list[Any]) -> Generator[Any, Any, Any]:
        inner = real(schema, migrations)
        seen = 0
        rows = None
        while True:
            step = inner.send(rows) if rows is not None else next(inner)
            params = step.params  # a Stmt
            if params is not None and "after" in params:
                if seen == batches:
                    action()
                seen += 1
            rows = yield step

    return plan


def _interrupted_after(batches: int) -> Any:
    """migrate's plan stopped once ``batches`` runs of a batched migration committed."""

    def stop() -> None:
        raise Interrupted

    return _before_batch(batches, stop)


def _killed_in_batch(batches: int, dsn: str) -> Any:
    """A stand-in for migrate's plan that lets ``batches`` runs of a batched migration
    commit, then has the next one's connection killed while that run's statement is
    executing: every checkpoints row is locked from another connection, so the run waits
    on a lock, and pg_terminate_backend ends its server process there."""

    def kill_when_waiting(blocker: psycopg.Connection[Any]) -> None:
        with psycopg.connect(dsn, autocommit=True) as killer:
            for _ in range(3000):
                row = killer.execute(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND pid <> %s AND query LIKE '%%stored_channels%%'",
                    (blocker.info.backend_pid,),
                ).fetchone()
                if row is not None:
                    killer.execute("SELECT pg_terminate_backend(%s, 10000)", (row[0],))
                    KILLED.append(row[0])
                    break
                threading.Event().wait(0.01)
        blocker.rollback()
        blocker.close()

    def block_and_kill() -> None:
        blocker = psycopg.connect(dsn)
        blocker.execute("SELECT 1 FROM checkpoints FOR UPDATE")
        THREADS.append(threading.Thread(target=kill_when_waiting, args=(blocker,)))
        THREADS[-1].start()

    return _before_batch(batches, block_and_kill)


KILLED: list[int] = []
THREADS: list[threading.Thread] = []


def test_backfill_killed_mid_batch_resumes(
    empty_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection is killed for real inside a batch: that batch's rows roll back, the
    three before stay committed, and the next migrate finishes the rest."""
    _official_database(empty_dsn)
    KILLED.clear()
    THREADS.clear()
    monkeypatch.setattr(migrate_mod, "BATCH_ROWS", 7)
    monkeypatch.setattr(migrate_mod, "_plan", _killed_in_batch(3, empty_dsn))
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=dict_row) as conn:
        pid = conn.info.backend_pid
        with pytest.raises(psycopg.OperationalError):
            migrate(conn)
        for t in THREADS:
            t.join(timeout=60)
            assert not t.is_alive()
    assert KILLED == [pid], "the migrating connection was not the one killed"
    monkeypatch.setattr(migrate_mod, "_plan", REAL_PLAN)
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=dict_row) as conn:
        filled = conn.execute(
            "SELECT count(*) AS n FROM checkpoints WHERE stored_channels IS NOT NULL"
        ).fetchone()["n"]  # type: ignore[index]
        assert filled == 21  # three batches of 7 committed; the killed one rolled back
        st = status(conn)
        assert BACKFILL in [m.name for m in st.pending] and not st.drifted
        applied = migrate(conn)
        assert BACKFILL in [m.name for m in applied]
        assert actual_columns(conn) == expected_backfill(conn)
        assert migrate(conn) == [] and status(conn).ok


def test_backfill_runs_in_committed_batches_and_resumes(
    empty_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _official_database(empty_dsn)
    monkeypatch.setattr(migrate_mod, "BATCH_ROWS", 7)
    monkeypatch.setattr(migrate_mod, "_plan", _interrupted_after(3))
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=dict_row) as conn:
        total = conn.execute("SELECT count(*) AS n FROM checkpoints").fetchone()["n"]  # type: ignore[index]
        assert total > 40
        with pytest.raises(Interrupted):
            migrate(conn)
        # three batches committed: 21 rows filled, the rest still NULL; 0004 not recorded
        filled = conn.execute(
            "SELECT count(*) AS n FROM checkpoints WHERE stored_channels IS NOT NULL"
        ).fetchone()["n"]  # type: ignore[index]
        assert filled == 21
        st = status(conn)
        assert BACKFILL in [m.name for m in st.pending] and not st.drifted
        # the official saver keeps working meanwhile; ours needs every migration (0006,
        # which its reads and writes use, comes after the backfill) and says so
        ours, off = DeltaPostgresSaver(conn), PostgresSaver(conn)
        tuples = list(off.list(None))
        assert tuples
        with pytest.raises(SetupRequiredError, match="migrate"):
            ours.get_tuple({"configurable": {"thread_id": "t0"}})
        run("delta", GRAPHS["delta"](off), "t0", 2, 10)

        monkeypatch.setattr(migrate_mod, "_plan", REAL_PLAN)
        now = conn.execute("SELECT count(*) AS n FROM checkpoints").fetchone()["n"]  # type: ignore[index]
        steps: list[str] = []
        real_execute = psycopg.Cursor.execute

        def spy(cur: Any, query: Any, *args: Any, **kw: Any) -> Any:
            text = query if isinstance(query, str) else query.as_string(conn)
            steps.append("vacuum" if text.startswith("VACUUM") else text[:20])
            return real_execute(cur, query, *args, **kw)

        monkeypatch.setattr(psycopg.Cursor, "execute", spy)
        applied = migrate(conn)
        monkeypatch.setattr(psycopg.Cursor, "execute", real_execute)
        # the walk starts over: every row is visited again, and one run finds no row
        runs = sum(1 for st in steps if st.startswith("WITH batch"))
        assert runs == -(-now // 7) + 1
        assert steps.count("vacuum") == (runs - 1) // migrate_mod.VACUUM_EVERY_BATCHES + 1
        assert BACKFILL in [m.name for m in applied]
        assert conn.execute(
            "SELECT count(*) AS n FROM checkpoints WHERE stored_channels IS NULL"
        ).fetchone()["n"] == 0  # type: ignore[index]
        assert actual_columns(conn) == expected_backfill(conn)
        assert migrate(conn) == [] and status(conn).ok
        # once migrated, ours reads every row the official saver wrote, filled before,
        # during or after the interruption, and goes on writing
        for tup in off.list(None):
            mine = ours.get_tuple(tup.config)
            assert mine is not None and mine.checkpoint == tup.checkpoint
            assert mine.pending_writes == tup.pending_writes
        run("delta", GRAPHS["delta"](ours), "t0", 2, 10)


#: sha256 of the first text of 0004 (one UPDATE), as ledgers that applied it hold it:
#: ``git show fbf7a88:migrations/0004_backfill_delta_columns.sql | sha256sum``, fixed
#: here so the check does not depend on a git clone.
FIRST_0004_SHA256 = "fe63c2a9131a1ee842048bc9ad3a2d4b40fd77932af75f5d448f80d702a74ecc"


def test_the_first_text_of_0004_still_counts_as_applied(dsn: str) -> None:
    """A database that applied the one-UPDATE 0004 (ledger checksum of that text) is not
    drift, and nothing is re-run; any other text still is drift."""
    (m4,) = [m for m in discover() if m.name == BACKFILL]
    assert m4.batched and not m4.transactional
    # the header must name the first text's checksum, whatever the checkout (no git)
    assert FIRST_0004_SHA256 in m4.superseded and FIRST_0004_SHA256 != m4.checksum
    (superseded,) = m4.superseded
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE langgraph_delta_migrations SET checksum = %s WHERE version = 4",
            (superseded,),
        )
        st = status(conn)
        assert st.ok and not st.pending
        assert migrate(conn) == []
        conn.execute(
            "UPDATE langgraph_delta_migrations SET checksum = %s WHERE version = 4",
            ("0" * 64,),
        )
        assert [a.version for a, _ in status(conn).drifted] == [4]
