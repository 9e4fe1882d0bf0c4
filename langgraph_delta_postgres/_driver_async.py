# The source of _driver_sync.py (scripts/async_to_sync.py writes it from this file).  # async-only
# <async-only>
"""How the async saver runs an operation on a connection (:class:`AsyncDriver`, the base
of :class:`.AsyncDeltaPostgresSaver`): :func:`adrive` feeds a cursor an operation's
statements; a call takes a pooled connection (checked against the saver's server at its
first use) or the single one, in a transaction when it needs one, and runs a statement
whose pooled connection broke once more on another. The public methods are in
:mod:`.aio`."""
# </async-only>
# <sync-only>
# """How the sync saver runs an operation on a connection (:class:`SyncDriver`, the base
# of :class:`.DeltaPostgresSaver`): :func:`drive` feeds a cursor an operation's
# statements; a call takes a pooled connection (checked against the saver's server at its
# first use) or the single one, in a transaction when it needs one, and runs a statement
# whose pooled connection broke once more on another. The public methods are in
# :mod:`.saver`."""
# </sync-only>

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, nullcontext
from typing import Any

import psycopg
from psycopg import AsyncConnection, AsyncCursor, AsyncPipeline
from psycopg.errors import UndefinedColumn, UndefinedTable
from psycopg.rows import dict_row, tuple_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ._acompat import ALock
from ._connect import SHUT_DOWN, mark_returned, may_retry, retrying
from ._ops.base import Op, Stmt, T, debug_statements, log_statement
from ._ops.context import SaverCore
from ._ops.write import resume
from ._rawsql import long_raw_form, raw_cursor_class
from ._server import unchanged_since
from .errors import StaleServerError

AsyncConn = AsyncConnection[Any] | AsyncConnectionPool[Any]


async def aexecute_stmt(cur: AsyncCursor[Any], stmt: Stmt) -> list[Any]:
    """Execute one statement on ``cur``; its rows, in the form ``stmt`` asks for (none
    when it fetches nothing). Every statement of the package that a ``Stmt`` carries
    runs here: the savers' operations and the migration plan through :func:`adrive`,
    the routing savers' queries directly. A long statement (see :mod:`._rawsql`) goes
    through a raw cursor of the same connection, converted once."""
    row_factory = tuple_row if stmt.by_position else dict_row
    conn = cur.connection
    form = long_raw_form(stmt.query, conn) if isinstance(stmt.params, Mapping) else None
    raw_class = raw_cursor_class(conn.cursor_factory) if form is not None else None
    if form is None or raw_class is None:
        cur.row_factory = row_factory
        await cur.execute(stmt.query, stmt.params, prepare=stmt.prepare, binary=stmt.binary)
        return await cur.fetchall() if stmt.fetch else []
    async with raw_class(conn, row_factory=row_factory) as raw:
        await raw.execute(
            form.query, form.params(stmt.params), prepare=stmt.prepare, binary=stmt.binary
        )
        return await raw.fetchall() if stmt.fetch else []


async def adrive(cur: AsyncCursor[Any], op: Op[T], at: list[Stmt] | None = None) -> T:
    """Run an operation's statements on ``cur``, feeding each one's rows back; ``at``
    gets each statement before it runs (the one to run again if the connection broke)."""
    debug = debug_statements()
    try:
        stmt = next(op)
        while True:
            if at is not None:
                at.append(stmt)
            started = time.perf_counter() if debug else 0.0
            rows = await aexecute_stmt(cur, stmt)
            if debug:
                log_statement(op, stmt, started, rows)
            stmt = op.send(rows)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


class AsyncDriver(SaverCore):
    """The plumbing of :class:`.AsyncDeltaPostgresSaver` (its ``__init__`` sets these)."""

    conn: AsyncConn
    pipe: AsyncPipeline | None
    lock: ALock
    _bound_loop: asyncio.AbstractEventLoop | None  # async-only

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        if isinstance(self.conn, AsyncConnectionPool):
            async with self.conn.connection() as conn:
                await self._check_server(conn)
                try:
                    yield conn
                finally:
                    # when it goes back (check_if_idle reads it): here, not as the pool's
                    # reset callback, which psycopg_pool runs on a worker (a thread / a
                    # task) for every return, so a return costs a wake-up and, under a busy
                    # main thread, a wait for the GIL before the connection is free again
                    mark_returned(conn)
        else:
            async with self.lock:  # one connection: it never reaches another server
                yield self.conn

    async def _check_server(self, conn: AsyncConnection[Any]) -> None:
        """A pooled connection's first use runs ``server.identity`` (see :mod:`._server`):
        a pool may reach another server after a failover, a single connection never does
        (it ends with its server). A connection to a server this saver no longer uses
        (before a failover) is closed."""
        ident = self._server.known(conn)  # one lookup per checkout
        if ident is None:
            tx = nullcontext() if conn.autocommit else conn.transaction()
            async with tx, conn.cursor(row_factory=tuple_row) as cur:
                await cur.execute(self.queries["server.identity"])
                row = await cur.fetchone()
            if self.pipe is not None:
                await self.pipe.sync()  # end the pipeline's implicit transaction: no snapshot held
            assert row is not None
            self._server_seen(conn, row)
            await self._new_connection(conn)
        elif not self._server.current_for(ident):
            await conn.close()
            raise StaleServerError(
                "this pooled connection reaches the server used before a failover; "
                "it was closed (try again: the pool opens a new one)"
            )

    async def _new_connection(self, conn: AsyncConnection[Any]) -> None:
        """Hook: a connection's first use, after its identity was checked."""

    async def _run(
        self, op: Op[T], *, atomic: bool = False, retried: bool = False,
        changes: int | None = None,
    ) -> T:
        """Run ``op`` on one connection; ``atomic``: several statements that must commit
        together (every other operation is a single statement). A statement whose pooled
        connection broke runs once more on a checked one (``_connect.may_retry``), unless
        the server changed meanwhile (a failover: the statement was planned with what the
        saver held of the old one; ``changes``: the count when the call began)."""
        # <async-only>
        if self._bound_loop is None:
            self._bound_loop = asyncio.get_running_loop()
        # </async-only>
        at: list[Stmt] = []
        broken = False
        began = changes
        try:
            async with self._connection() as conn:
                if changes is not None:  # a second try: planned before this checkout
                    unchanged_since(self._server, changes)
                else:  # after this checkout's own server check
                    began = self._server.changes
                tx_cm = conn.transaction() if atomic or not conn.autocommit else nullcontext()
                try:
                    async with tx_cm, conn.cursor(binary=True) as cur:  # adrive: row factory
                        return await adrive(cur, op, at)
                except psycopg.OperationalError as e:
                    broken = conn.broken or conn.closed or isinstance(e, SHUT_DOWN)
                    raise
                finally:
                    if self.pipe is not None:
                        await self.pipe.sync()
        except (UndefinedTable, UndefinedColumn) as e:
            raise self.setup_required(e) from e
        except psycopg.OperationalError as e:
            pooled = isinstance(self.conn, AsyncConnectionPool)
            if retried or isinstance(e, PoolTimeout) or not may_retry(
                pooled, atomic, broken, bool(at)
            ):
                raise
        with retrying():
            again = resume(at[-1], op) if at else op  # the statement that failed, or all
            return await self._run(again, atomic=atomic, retried=True, changes=began)
