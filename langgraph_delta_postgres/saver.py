# Generated from aio.py by scripts/async_to_sync.py: do not edit.
# Edit the source, then run: python scripts/async_to_sync.py
"""DeltaPostgresSaver: the synchronous checkpointer."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg import Connection, Pipeline
from psycopg.errors import UndefinedColumn, UndefinedTable
from psycopg_pool import ConnectionPool

from . import migrate as _migrate
from ._acompat import POOL_OPEN_AT_INIT, Event, Lock
from ._connect import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_PREPARE_THRESHOLD,
    check_if_idle,
    explained_connect,
    from_conn_string_kwargs,
)
from ._driver_sync import SyncConn, SyncDriver
from ._driver_sync import drive as drive  # where it was (docs name it here)
from ._ops.checkpoints import _op_get_tuple, _op_list
from ._ops.history import _op_delta_history, wanted_channels
from ._ops.maintenance import _op_copy_thread, _op_delete_thread
from ._ops.retention import PruneStats, _op_delete_for_runs, _op_delta_keepset, prune_ops
from ._ops.write import WriteBatch, _op_put, _op_put_writes, resume
from ._order import PUT, WRITES, Turns, hold, put_keys, writes_keys


class DeltaPostgresSaver(SyncDriver):
    """Postgres checkpointer whose ``get_delta_channel_history`` is one SQL statement.

    Args:
        conn: a psycopg ``Connection`` (autocommit or not, any row factory) or a
            ``ConnectionPool``. Calls on one connection are serialized by a lock;
            a pool serves calls in parallel.
        pipe: a ``Pipeline`` of ``conn`` to run in pipeline mode (a connection only).
        serde: serializer (default ``JsonPlusSerializer``).
        schema: the Postgres schema holding the tables (default: ``search_path``).
        cache_bytes: budget of the decoded-value cache that lets history calls on the
            same chain skip what earlier calls fetched (0 turns it off); one cache per
            saver object. Answers are copies: mutating one never changes another.
    """

    def __init__(
        self,
        conn: SyncConn,
        pipe: Pipeline | None = None,
        serde: SerializerProtocol | None = None,
        *,
        schema: str | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        super().__init__(serde=serde)
        if not isinstance(conn, Connection | ConnectionPool):
            raise TypeError(
                "conn must be a psycopg Connection or ConnectionPool, "
                f"not {type(conn).__name__}"
            )
        if pipe is not None and not isinstance(conn, Connection):
            raise ValueError("pipe can only be used with a single Connection, not a pool")
        self.conn = conn
        self.pipe = pipe
        self.lock = Lock()
        self._turns = Turns(Event)  # the order of its writes (see _order)
        self._init_core(schema, cache_bytes)
        #: put_writes queued for the single connection, run as one statement (WriteBatch)
        self._batch = (
            WriteBatch(self.queries)
            if isinstance(conn, Connection) and pipe is None else None
        )

    @classmethod
    @contextmanager
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        pipeline: bool = False,
        pool_size: int | None = None,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
        schema: str | None = None,
        serde: SerializerProtocol | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> Iterator[DeltaPostgresSaver]:
        """A saver on a new connection (or a pool of ``pool_size``), closed on exit.

        ``prepare_threshold=None`` disables server-side prepared statements, as PgBouncer
        and other poolers in transaction mode require. Otherwise the connections plan
        prepared statements generically (see :func:`._connect.connect_kwargs`).
        """
        kwargs = from_conn_string_kwargs(
            conn_string, pipeline=pipeline, pool_size=pool_size,
            prepare_threshold=prepare_threshold, cache_bytes=cache_bytes,
        )
        if pool_size is not None:
            # one connection first: a wrong password, a missing database or a closed port
            # is its error, at once (a pool retries in the background and the first call
            # got a PoolTimeout after 30 s, without the cause)
            with explained_connect(prepare_threshold):
                Connection.connect(conn_string, **kwargs).close()
            with ConnectionPool(
                conn_string,
                min_size=1,
                max_size=pool_size,
                kwargs=kwargs,
                # a connection idle a while is checked before it is lent; one that broke
                # sooner fails its statement, which runs again (check_if_idle, _run)
                check=check_if_idle,
                open=POOL_OPEN_AT_INIT,
            ) as pool:
                yield cls(pool, serde=serde, schema=schema, cache_bytes=cache_bytes)
            return
        with explained_connect(prepare_threshold):
            conn = Connection.connect(conn_string, **kwargs)
        with conn:
            if pipeline:
                with conn.pipeline() as pipe:
                    yield cls(conn, pipe, serde=serde, schema=schema, cache_bytes=cache_bytes)
            else:
                yield cls(conn, serde=serde, schema=schema, cache_bytes=cache_bytes)

    # ---------------------------------------------------------------- API

    def setup(self) -> None:
        """Apply pending migrations (safe to call from many processes at once)."""
        with self._connection() as conn:
            if self.pipe is None and conn.pgconn.pipeline_status == 0:
                _migrate.migrate(conn, schema=self.schema)
                return
            conninfo = _migrate.conninfo_of(conn)
        with Connection.connect(conninfo, autocommit=True) as own:
            _migrate.migrate(own, schema=self.schema)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._run(_op_get_tuple(self, config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        yield from self._run(_op_list(self, config, filter, before, limit))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        with hold(self._turns, put_keys(config, checkpoint), PUT):
            return self._run(_op_put(self, config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        with hold(self._turns, writes_keys(config), WRITES):
            op = _op_put_writes(self, config, writes, task_id, task_path)
            if self._batch is None or not self.conn.autocommit:  # type: ignore[union-attr]
                self._run(op)
                return
            try:
                first = next(op)
            except StopIteration:
                return
            if not self._batch.batchable(first):
                self._run(resume(first, op))
                return
            entry = self._batch.add(first)
            try:
                with self._connection() as conn, conn.cursor() as cur:
                    todo = self._batch.take()  # WriteBatch: ours and whoever queued
                    try:
                        if todo:
                            stmt = self._batch.statement(todo)
                            cur.execute(stmt.query, stmt.params)
                    except Exception as error:
                        for e in self._batch.failed(todo, error):
                            try:
                                cur.execute(e.stmt.query, e.stmt.params)
                            except Exception as own:
                                e.error = own
            except (UndefinedTable, UndefinedColumn) as e:
                raise self.setup_required(e) from e
            self._batch.finish(entry, op, self.setup_required)

    def delete_thread(self, thread_id: str) -> None:
        self._run(_op_delete_thread(self, thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._run(_op_delete_for_runs(self, run_ids), atomic=True)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._run(_op_copy_thread(self, source_thread_id, target_thread_id), atomic=True)

    def prune(  # type: ignore[override]  # returns what it deleted instead of None
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
        before: datetime | None = None,
        dry_run: bool = False,
        graph: Any = None,
    ) -> PruneStats:
        """Delete old checkpoints of ``thread_ids``; DeltaChannel-safe: every checkpoint
        a read path returns afterwards reads what it read before (values, pending
        writes, metadata, parent), and any other answers as deleted.

        ``strategy="keep_latest"``: per thread and namespace, leave the latest checkpoint
        (``keep_last=N``: the N latest of its parent chain) listed; keep the older
        checkpoints their DeltaChannel state is rebuilt from (the keep-set, see
        :meth:`get_delta_channel_keepset`) as seeds only, which no read path returns
        (``PruneStats.hidden``); delete every other checkpoint, write and blob. One
        transaction per thread. ``graph`` (the compiled graph that wrote the threads):
        first store each DeltaChannel's full value at the oldest checkpoint left listed
        (a snapshot in the official saver's format, folded by the graph's reducers), so
        no seed is kept: ``keep_last=N`` leaves N checkpoints per namespace.
        ``strategy="delete"`` (or ``"delete_all"``): every row of the threads, in one
        transaction. ``before``: only threads whose latest checkpoint is older
        (timezone-aware). ``dry_run``: change nothing, count what would go.

        Every argument is checked before any statement runs.

        Raises:
            TypeError: an argument of the wrong type: ``thread_ids`` a str (or not a
                sequence of str / UUID ids), ``strategy`` not a str, ``keep_last`` not an
                int, ``before`` not a datetime, ``dry_run`` not a bool (``"no"``,
                ``None``, ``0`` are refused: only ``True`` / ``False``), ``graph`` not a
                compiled graph.
            ValueError: unknown strategy, ``keep_last`` < 1 (or given with
                ``"delete"``), ``before`` a naive datetime.
            HistoryError: a thread's parent chain has a cycle (or is deeper than
                ``max_history_depth``); that thread is left untouched, those before it
                in ``thread_ids`` are pruned.
        """
        total = PruneStats()
        for op in prune_ops(self, thread_ids, strategy, keep_last, before, dry_run, graph):
            total += self._run(op, atomic=True)
        return total

    def get_delta_channel_keepset(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> set[str]:
        """The checkpoint ids that loading ``channels`` at ``config``'s checkpoint
        needs: the target, plus per channel every ancestor back to and including the
        nearest checkpoint that stores a value for it (the target itself counts).
        ``channels=[]``: ``{target}``; no such checkpoint: ``set()``.

        Raises:
            HistoryError: the parent chain has a cycle or is deeper than
                ``max_history_depth``.
        """
        return self._run(_op_delta_keepset(self, config, wanted_channels(channels)))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        if not (wanted := wanted_channels(channels)):
            return {}
        return self._run(_op_delta_history(self, config, wanted))
