# Generated from _migrate_async.py by scripts/async_to_sync.py: do not edit.
# Edit the source, then run: python scripts/async_to_sync.py
"""The migration runner, sync: :func:`.migrate.migrate`. It runs the plan of
:mod:`.migrate` (``_plan``, statements), whose names it reads at each call, with the
savers' driver (:func:`._driver_sync.drive`)."""

from __future__ import annotations

from typing import Any

from psycopg import Connection
from psycopg.rows import dict_row

from . import migrate as _m
from ._acompat import sleep
from ._driver_sync import drive
from ._sql import Queries
from .migrate import Migration


def migrate(conn: Connection[Any], *, schema: str | None = None) -> list[Migration]:
    """Apply pending migrations on ``conn``; returns those applied (empty: up to date)."""
    _m._check_idle(conn)
    migrations = _m.discover()
    key = {"key": _m.lock_key(schema)}
    q = Queries(schema)
    was_autocommit = conn.autocommit
    conn.set_autocommit(True)
    try:
        with conn.cursor(row_factory=dict_row) as cur:
            pid = cur.execute(q["migrate.backend_pid"], prepare=False).fetchone()
            if pid is not None and _m._pooled(conn, pid):
                ledger = {"ledger": _m._ledger_name(schema).as_string(conn)}
                found = (
                    cur.execute(q["migrate.ledger_exists"], ledger, prepare=False)
                ).fetchone()
                rows = []
                if found and found["found"]:
                    rows = (
                        cur.execute(q["migrate.select_ledger"], prepare=False)
                    ).fetchall()
                return _m._pooled_verdict(conn, pid, migrations, rows)
            while not _m._locked(
                cur.execute(q["migrate.try_lock"], key, prepare=False).fetchone()
            ):
                sleep(_m.LOCK_POLL_SECONDS)
            saved = (
                cur.execute(q["migrate.planner_settings"], prepare=False)
            ).fetchone()
            cur.execute(q["migrate.set_planner_settings"], _m.PLANNER_DEFAULTS, prepare=False)
            try:
                return drive(cur, _m._plan(schema, migrations))
            except BaseException:
                if conn.info.transaction_status != 0:
                    conn.rollback()
                raise
            finally:
                cur.execute(q["migrate.set_planner_settings"], saved, prepare=False)
                cur.execute(q["migrate.unlock"], key, prepare=False)
    finally:
        conn.set_autocommit(was_autocommit)
