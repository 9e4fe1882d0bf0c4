# Generated from _driver_async.py by scripts/async_to_sync.py: do not edit.
# Edit the source, then run: python scripts/async_to_sync.py
"""How the sync saver runs an operation on a connection (:class:`SyncDriver`, the base
of :class:`.DeltaPostgresSaver`): :func:`drive` feeds a cursor an operation's
statements; a call takes a pooled connection (checked against the saver's server at its
first use) or the single one, in a transaction when it needs one, and runs a statement
whose pooled connection broke once more on another. The public methods are in
:mod:`.saver`."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any

import psycopg
from psycopg import Connection, Cursor, Pipeline
from psycopg.errors import UndefinedColumn, UndefinedTable
from psycopg.rows import dict_row, tuple_row
from psycopg_pool import ConnectionPool, PoolTimeout

from ._acompat import Lock
from ._connect import SHUT_DOWN, mark_returned, may_retry, retrying
from ._ops.base import Op, Stmt, T, debug_statements, log_statement
from ._ops.context import SaverCore
from ._ops.write import resume
from ._rawsql import long_raw_form, raw_cursor_class
from ._server import unchanged_since
from .errors import StaleServerError

SyncConn = Connection[Any] | ConnectionPool[Any]


def execute_stmt(cur: Cursor[Any], stmt: Stmt) -> list[Any]:
    """Execute one statement on ``cur``; its rows, in the form ``stmt`` asks for (none
    when it fetches nothing). Every statement of the package that a ``Stmt`` carries
    runs here: the savers' operations and the migration plan through :func:`drive`,
    the routing savers' queries directly. A long statement (see :mod:`._rawsql`) goes
    through a raw cursor of the same connection, converted once."""
    row_factory = tuple_row if stmt.by_position else dict_row
    conn = cur.connection
    form = long_raw_form(stmt.query, conn) if isinstance(stmt.params, Mapping) else None
    raw_class = raw_cursor_class(conn.cursor_factory) if form is not None else None
    if form is None or raw_class is None:
        cur.row_factory = row_factory
        cur.execute(stmt.query, stmt.params, prepare=stmt.prepare, binary=stmt.binary)
        return cur.fetchall() if stmt.fetch else []
    with raw_class(conn, row_factory=row_factory) as raw:
        raw.execute(
            form.query, form.params(stmt.params), prepare=stmt.prepare, binary=stmt.binary
        )
        return raw.fetchall() if stmt.fetch else []


def drive(cur: Cursor[Any], op: Op[T], at: list[Stmt] | None = None) -> T:
    """Run an operation's statements on ``cur``, feeding each one's rows back; ``at``
    gets each statement before it runs (the one to run again if the connection broke)."""
    debug = debug_statements()
    try:
        stmt = next(op)
        while True:
            if at is not None:
                at.append(stmt)
            started = time.perf_counter() if debug else 0.0
            rows = execute_stmt(cur, stmt)
            if debug:
                log_statement(op, stmt, started, rows)
            stmt = op.send(rows)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


class SyncDriver(SaverCore):
    """The plumbing of :class:`.DeltaPostgresSaver` (its ``__init__`` sets these)."""

    conn: SyncConn
    pipe: Pipeline | None
    lock: Lock

    @contextmanager
    def _connection(self) -> Iterator[Connection[Any]]:
        if isinstance(self.conn, ConnectionPool):
            with self.conn.connection() as conn:
                self._check_server(conn)
                try:
                    yield conn
                finally:
                    # when it goes back (check_if_idle reads it): here, not as the pool's
                    # reset callback, which psycopg_pool runs on a worker (a thread / a
                    # task) for every return, so a return costs a wake-up and, under a busy
                    # main thread, a wait for the GIL before the connection is free again
                    mark_returned(conn)
        else:
            with self.lock:  # one connection: it never reaches another server
                yield self.conn

    def _check_server(self, conn: Connection[Any]) -> None:
        """A pooled connection's first use runs ``server.identity`` (see :mod:`._server`):
        a pool may reach another server after a failover, a single connection never does
        (it ends with its server). A connection to a server this saver no longer uses
        (before a failover) is closed."""
        ident = self._server.known(conn)  # one lookup per checkout
        if ident is None:
            tx = nullcontext() if conn.autocommit else conn.transaction()
            with tx, conn.cursor(row_factory=tuple_row) as cur:
                cur.execute(self.queries["server.identity"])
                row = cur.fetchone()
            if self.pipe is not None:
                self.pipe.sync()  # end the pipeline's implicit transaction: no snapshot held
            assert row is not None
            self._server_seen(conn, row)
            self._new_connection(conn)
        elif not self._server.current_for(ident):
            conn.close()
            raise StaleServerError(
                "this pooled connection reaches the server used before a failover; "
                "it was closed (try again: the pool opens a new one)"
            )

    def _new_connection(self, conn: Connection[Any]) -> None:
        """Hook: a connection's first use, after its identity was checked."""

    def _run(
        self, op: Op[T], *, atomic: bool = False, retried: bool = False,
        changes: int | None = None,
    ) -> T:
        """Run ``op`` on one connection; ``atomic``: several statements that must commit
        together (every other operation is a single statement). A statement whose pooled
        connection broke runs once more on a checked one (``_connect.may_retry``), unless
        the server changed meanwhile (a failover: the statement was planned with what the
        saver held of the old one; ``changes``: the count when the call began)."""
        at: list[Stmt] = []
        broken = False
        began = changes
        try:
            with self._connection() as conn:
                if changes is not None:  # a second try: planned before this checkout
                    unchanged_since(self._server, changes)
                else:  # after this checkout's own server check
                    began = self._server.changes
                tx_cm = conn.transaction() if atomic or not conn.autocommit else nullcontext()
                try:
                    with tx_cm, conn.cursor(binary=True) as cur:  # drive: row factory
                        return drive(cur, op, at)
                except psycopg.OperationalError as e:
                    broken = conn.broken or conn.closed or isinstance(e, SHUT_DOWN)
                    raise
                finally:
                    if self.pipe is not None:
                        self.pipe.sync()
        except (UndefinedTable, UndefinedColumn) as e:
            raise self.setup_required(e) from e
        except psycopg.OperationalError as e:
            pooled = isinstance(self.conn, ConnectionPool)
            if retried or isinstance(e, PoolTimeout) or not may_retry(
                pooled, atomic, broken, bool(at)
            ):
                raise
        with retrying():
            again = resume(at[-1], op) if at else op  # the statement that failed, or all
            return self._run(again, atomic=atomic, retried=True, changes=began)
