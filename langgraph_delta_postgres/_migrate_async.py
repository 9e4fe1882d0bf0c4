# <async-only>
"""The migration runner, async: :func:`.migrate.amigrate`, the source of
``_migrate_sync.py`` (:func:`.migrate.migrate`, written by scripts/async_to_sync.py). It
runs the plan of :mod:`.migrate` (``_plan``, statements), whose names it reads at each
call, with the savers' driver (:func:`._driver_async.adrive`)."""
# </async-only>
# <sync-only>
# """The migration runner, sync: :func:`.migrate.migrate`. It runs the plan of
# :mod:`.migrate` (``_plan``, statements), whose names it reads at each call, with the
# savers' driver (:func:`._driver_sync.drive`)."""
# </sync-only>

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from . import migrate as _m
from ._acompat import asleep
from ._driver_async import adrive
from ._sql import Queries
from .migrate import Migration


async def amigrate(conn: AsyncConnection[Any], *, schema: str | None = None) -> list[Migration]:
    """Apply pending migrations on ``conn``; returns those applied (empty: up to date)."""
    _m._check_idle(conn)
    migrations = _m.discover()
    key = {"key": _m.lock_key(schema)}
    q = Queries(schema)
    was_autocommit = conn.autocommit
    await conn.set_autocommit(True)
    try:
        async with conn.cursor(row_factory=dict_row) as cur:
            pid = await (await cur.execute(q["migrate.backend_pid"], prepare=False)).fetchone()
            if pid is not None and _m._pooled(conn, pid):
                ledger = {"ledger": _m._ledger_name(schema).as_string(conn)}
                found = await (
                    await cur.execute(q["migrate.ledger_exists"], ledger, prepare=False)
                ).fetchone()
                rows = []
                if found and found["found"]:
                    rows = await (
                        await cur.execute(q["migrate.select_ledger"], prepare=False)
                    ).fetchall()
                return _m._pooled_verdict(conn, pid, migrations, rows)
            while not _m._locked(
                await (await cur.execute(q["migrate.try_lock"], key, prepare=False)).fetchone()
            ):
                await asleep(_m.LOCK_POLL_SECONDS)
            saved = await (
                await cur.execute(q["migrate.planner_settings"], prepare=False)
            ).fetchone()
            await cur.execute(q["migrate.set_planner_settings"], _m.PLANNER_DEFAULTS, prepare=False)
            try:
                return await adrive(cur, _m._plan(schema, migrations))
            except BaseException:
                if conn.info.transaction_status != 0:
                    await conn.rollback()
                raise
            finally:
                await cur.execute(q["migrate.set_planner_settings"], saved, prepare=False)
                await cur.execute(q["migrate.unlock"], key, prepare=False)
    finally:
        await conn.set_autocommit(was_autocommit)
