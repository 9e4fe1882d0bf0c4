# Generated from replicas/_async.py by scripts/async_to_sync.py: do not edit.
# Edit the source, then run: python scripts/async_to_sync.py
"""The sync routing saver (:class:`RoutingSaver`): the driver of the routing operations
(:mod:`._ops`); the rules are in :mod:`._rules`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg_pool import ConnectionPool

from .._acompat import METHOD_PREFIX, POOL_OPEN_AT_INIT
from .._connect import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_PREPARE_THRESHOLD,
    check_if_idle,
    may_retry,
    retrying,
)
from .._driver_sync import execute_stmt
from .._ops.retention import PruneStats
from ..saver import DeltaPostgresSaver
from ._ops import (
    Query,
    Route,
    Run,
    Step,
    op_get_tuple,
    op_history,
    op_list,
    op_token,
    op_verify,
    op_write,
)
from ._replica_savers import ReplicaSaver
from ._rules import (
    DEFAULT_QUERY_TIMEOUT,
    DEFAULT_REPLICA_TIMEOUT,
    DEFAULT_REPLICA_WAIT,
    DEFAULT_RETRY_AFTER,
    R,
    _RoutingCore,
)


class RoutingSaver(_RoutingCore):
    """A checkpointer that writes to a primary and reads from its streaming replicas
    when that gives the primary's answer (see the module docstring and
    docs/replicas.md).

    Args:
        primary: the saver on the primary.
        replicas: one ``ConnectionPool`` (or DSN) per hot standby of the primary.
        retry_after: seconds a replica that could not be reached is left alone.
        replica_timeout: seconds a read waits for a replica connection (a DSN's pool).
        replica_query_timeout: seconds any statement on a replica may take (server-side
            statement_timeout, a client-side deadline, TCP keepalives); past it the
            primary answers and the replica is left alone for ``retry_after``.
        replica_wait: seconds a replica behind a read's floor is waited for (inside the
            guard statement) before the primary answers instead.
        cache_bytes: history cache budget of each replica's saver.

    Raises:
        ReplicaMismatchError: a reachable replica is not a hot standby of the primary's
            cluster on its timeline.
    """

    primary: DeltaPostgresSaver
    replicas: list[ReplicaSaver]
    _own_pools: list[ConnectionPool[Any]]
    _primary_type = DeltaPostgresSaver
    _pool_type = ConnectionPool
    _replica_type = ReplicaSaver
    _pool_check = staticmethod(check_if_idle)
    _open_pools_at_once = POOL_OPEN_AT_INIT  # async: in open(), on the event loop

    def __init__(
        self,
        primary: DeltaPostgresSaver,
        replicas: Sequence[ConnectionPool[Any] | str],
        *,
        retry_after: float = DEFAULT_RETRY_AFTER,
        replica_timeout: float = DEFAULT_REPLICA_TIMEOUT,
        replica_query_timeout: float = DEFAULT_QUERY_TIMEOUT,
        replica_wait: float = DEFAULT_REPLICA_WAIT,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        pool_size: int = 4,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
    ) -> None:
        self._init_savers(primary, replicas, retry_after=retry_after,
                          replica_timeout=replica_timeout,
                          replica_query_timeout=replica_query_timeout,
                        replica_wait=replica_wait,
                          cache_bytes=cache_bytes, pool_size=pool_size,
                          prepare_threshold=prepare_threshold)
        try:
            self._drive(op_verify(self))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close the pools this saver opened for replica DSNs."""
        for p in self._own_pools:
            p.close()

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        replicas: Sequence[str],
        pool_size: int | None = None,
        serde: SerializerProtocol | None = None,
        schema: str | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
        retry_after: float = DEFAULT_RETRY_AFTER,
        replica_timeout: float = DEFAULT_REPLICA_TIMEOUT,
        replica_query_timeout: float = DEFAULT_QUERY_TIMEOUT,
        replica_wait: float = DEFAULT_REPLICA_WAIT,
    ) -> Iterator[RoutingSaver]:
        """A routing saver on ``conn_string`` (the primary) and ``replicas`` (DSNs of its
        hot standbys); every connection and pool is closed on exit."""
        with DeltaPostgresSaver.from_conn_string(
            conn_string, pool_size=pool_size, serde=serde, schema=schema,
            cache_bytes=cache_bytes, prepare_threshold=prepare_threshold,
        ) as primary:
            saver = cls(primary, list(replicas), retry_after=retry_after,
                        replica_timeout=replica_timeout,
                        replica_query_timeout=replica_query_timeout,
                        replica_wait=replica_wait,
                        cache_bytes=cache_bytes, pool_size=pool_size or 4,
                        prepare_threshold=prepare_threshold)
            try:
                yield saver
            finally:
                saver.close()

    def with_allowlist(self, extra_allowlist: Any) -> RoutingSaver:
        return cast(RoutingSaver, self._with_allowlist(extra_allowlist))

    # ------------------------------------------------------------------ the driver

    def _drive(self, op: Route[R]) -> R:
        """Run a routing operation of :mod:`._ops`: each step on its saver."""
        run = Run(op)
        while (step := run.next()) is not None:
            with run.call(step):
                run.answer = self._do(step)
        return run.result

    def _do(self, step: Step) -> Any:
        saver = self._saver(step.saver)
        if isinstance(step, Query):
            broken: list[bool] = []
            try:
                return self._query(saver, step, broken)
            except psycopg.OperationalError:
                # the primary's statements are reads: once more on a checked connection
                # when the connection broke (as the savers' own, _connect.may_retry)
                if saver is not self.primary or not may_retry(
                    isinstance(saver.conn, ConnectionPool), False, bool(broken), True
                ):
                    raise
            with retrying():
                return self._query(saver, step, [])
        if step.method == "list":
            return [x for x in saver.list(*step.args, **step.kwargs)]
        return getattr(saver, METHOD_PREFIX + step.method)(*step.args, **step.kwargs)

    def _query(
        self, saver: DeltaPostgresSaver, step: Query, broken: list[bool]
    ) -> Any:
        with saver._connection() as conn, conn.cursor() as cur:
            try:
                return execute_stmt(cur, step.stmt)
            except psycopg.OperationalError:
                if conn.broken or conn.closed:
                    broken.append(True)
                raise

    # ------------------------------------------------------------------ tokens

    def token(self) -> str:
        """A read token: the primary's WAL position now, at or past every write that has
        committed on it (this saver's and every other process's). A reader that passes
        it (:meth:`read_after`, or ``configurable["lgdp_read_after"]``) sees them all.
        It also fixes the floors of this saver's writes so far (see docs/replicas.md)."""
        return self._drive(op_token(self))

    @contextlib.contextmanager
    def read_after(self, token: str | None) -> Iterator[None]:
        """Reads in this block (this thread or task) see at least what ``token`` covers."""
        with self._reading_after(token):
            yield

    # ------------------------------------------------------------------ routed reads

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._drive(op_get_tuple(self, config))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self._drive(op_history(self, config, channels))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        yield from self._drive(op_list(self, config, filter, before, limit))

    # ------------------------------------------------------------------ primary only

    def setup(self) -> None:
        self.primary.setup()

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return cast(RunnableConfig, self._drive(
            op_write(self, "put", config, checkpoint, metadata, new_versions)
        ))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._drive(op_write(self, "put_writes", config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._drive(op_write(self, "delete_thread", thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._drive(op_write(self, "delete_for_runs", run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._drive(op_write(self, "copy_thread", source_thread_id, target_thread_id))

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
        return cast(PruneStats, self._drive(op_write(
            self, "prune", thread_ids, strategy=strategy, keep_last=keep_last,
            before=before, dry_run=dry_run, graph=graph,
        )))

    def get_delta_channel_keepset(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> set[str]:
        return self.primary.get_delta_channel_keepset(config=config, channels=channels)
