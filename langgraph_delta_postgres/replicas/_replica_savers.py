"""The replica savers (:class:`ReplicaSaver`, :class:`AsyncReplicaSaver`): a saver on a
replica's pool whose connections are checked against the primary's server and bounded in
time, and that runs the guard before a read that needs one; and the pools a routing saver
makes for a replica DSN (docs/replicas.md)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import tuple_row

from .._connect import connect_kwargs
from .._deadline import deadline
from .._ops.write import resume
from ..aio import AsyncDeltaPostgresSaver
from ..saver import DeltaPostgresSaver
from ._guard import _NEED, DEADLINE_MARGIN_S, ReplicaBounds, Unsafe, _timed_out


def _page_gate(saver: Any, params: dict[str, Any], filter: dict[str, Any] | None,
               limit: int | None) -> Any:
    """The replica savers' ``_list_gate``: the page gate when this context's need asks
    for it, for exactly the page it was made for; any other list under such a need is
    refused (it would run unchecked)."""
    need = _NEED.get()
    if need is None or not need.gate:
        return None
    if (filter or limit != need.page or params.get("thread_id") != need.thread_id
            or params.get("checkpoint_ns") != need.checkpoint_ns
            or params.get("before") != need.checkpoint_id):
        raise Unsafe("error", "a gated need for another list")
    return saver.queries["replicas.page_gate"]


class ReplicaSaver(DeltaPostgresSaver):
    """A DeltaPostgresSaver on a replica's pool: each connection is checked at its first
    use (a hot standby of the primary, on its timeline) and bounded (statement and lock
    timeouts); each use is bounded from the client side too; the guard statement runs
    first when a read in this context needs one (see :class:`Need`)."""

    bounds: ReplicaBounds

    def _run(
        self, op: Any, *, atomic: bool = False, retried: bool = False,
        changes: int | None = None,
    ) -> Any:
        # an answer made without a statement (the prefetch of a page's histories, the
        # cache) needs no connection, and no guard; a replica's broken connection is not
        # tried again here: the routing saver has the primary answer
        try:
            first = next(op)
        except StopIteration as stop:
            return stop.value
        return super()._run(resume(first, op), atomic=atomic, retried=True, changes=changes)

    def _list_gate(self, params: dict[str, Any], filter: dict[str, Any] | None,
                   limit: int | None) -> Any:
        return _page_gate(self, params, filter, limit)

    def _check_server(self, conn: psycopg.Connection[Any]) -> None:
        with deadline(conn, self.bounds.deadline) as d, _timed_out(d):
            super()._check_server(conn)

    def _new_connection(self, conn: psycopg.Connection[Any]) -> None:
        # autocommit: every statement its own snapshot (a guard and the read after it in
        # one transaction would share the guard's snapshot, taken before its wait, under
        # repeatable read), and the session's bounds are not rolled back with it
        if not conn.autocommit:
            conn.autocommit = True
        with conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(self.queries["replicas.bound_session"], self.bounds.session)

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        with super()._connection() as conn:
            self.bounds.verify(self._server.known(conn))
            need = _NEED.get()
            with deadline(conn, self.bounds.deadline) as d, _timed_out(d):
                if need is not None and not (need.gate and need.floor is None):
                    # the guard, then the read: two round trips. (Sent in one pipeline
                    # they still cost two: psycopg ends a pipeline with a Sync it waits
                    # for. A scratch A/B of the bench's routed page read, 400 pairs on
                    # loopback: 1.27x a direct standby read pipelined, 1.30x not.)
                    with conn.cursor(row_factory=tuple_row) as cur:
                        cur.execute(self.queries["replicas.guard"],
                                    need.params(self.bounds.max_wait))
                        row = cur.fetchone()
                    assert row is not None
                    need.check(row)
                yield conn
            if d.expired:  # ended after its last statement (decoding ran long): not lent
                conn.close()


class AsyncReplicaSaver(AsyncDeltaPostgresSaver):
    """The async twin of :class:`ReplicaSaver`."""

    bounds: ReplicaBounds

    async def _run(
        self, op: Any, *, atomic: bool = False, retried: bool = False,
        changes: int | None = None,
    ) -> Any:
        try:  # see ReplicaSaver._run
            first = next(op)
        except StopIteration as stop:
            return stop.value
        return await super()._run(resume(first, op), atomic=atomic, retried=True,
                                  changes=changes)

    def _list_gate(self, params: dict[str, Any], filter: dict[str, Any] | None,
                   limit: int | None) -> Any:
        return _page_gate(self, params, filter, limit)

    async def _check_server(self, conn: psycopg.AsyncConnection[Any]) -> None:
        with deadline(conn, self.bounds.deadline) as d, _timed_out(d):
            await super()._check_server(conn)

    async def _new_connection(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if not conn.autocommit:  # see ReplicaSaver._new_connection
            await conn.set_autocommit(True)
        async with conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(self.queries["replicas.bound_session"], self.bounds.session)

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with super()._connection() as conn:
            self.bounds.verify(self._server.known(conn))
            need = _NEED.get()
            with deadline(conn, self.bounds.deadline) as d, _timed_out(d):
                if need is not None and not (need.gate and need.floor is None):
                    # see ReplicaSaver._connection: the guard, then the read
                    async with conn.cursor(row_factory=tuple_row) as cur:
                        await cur.execute(self.queries["replicas.guard"],
                                          need.params(self.bounds.max_wait))
                        row = await cur.fetchone()
                    assert row is not None
                    need.check(row)
                yield conn
            if d.expired:  # see ReplicaSaver._connection
                await conn.close()


def _describe(replica: Any) -> str:
    """A replica for messages: host, port and database of its DSN (no password)."""
    conninfo = replica if isinstance(replica, str) else getattr(replica, "conninfo", "")
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.Error:
        return "<replica>"
    return "{}:{}/{}".format(params.get("host", ""), params.get("port", ""),
                             params.get("dbname", ""))


def _replica_pool_kwargs(conn_string: str, prepare_threshold: int | None,
                         replica_timeout: float, query_timeout: float) -> dict[str, Any]:
    """A replica pool's connect arguments: the saver's, a connect timeout of
    ``replica_timeout``, and TCP keepalives and ``tcp_user_timeout`` so that a host that
    vanished (its packets lost) ends the connection within about ``query_timeout``
    (unix sockets ignore them; a peer that acknowledges and never answers is ended by the
    client-side deadline, see .._deadline)."""
    kwargs = connect_kwargs(conn_string, prepare_threshold)
    kwargs["connect_timeout"] = max(1, int(replica_timeout + 0.999))
    params = conninfo_to_dict(conn_string)
    probe = max(1, int(query_timeout))
    for key, value in (("keepalives", 1), ("keepalives_idle", probe),
                       ("keepalives_interval", probe), ("keepalives_count", 3),
                       ("tcp_user_timeout", int((query_timeout + DEADLINE_MARGIN_S) * 1000))):
        if key not in params:
            kwargs[key] = value
    return kwargs
