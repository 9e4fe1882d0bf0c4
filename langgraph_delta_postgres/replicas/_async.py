# The source of _sync.py (scripts/async_to_sync.py writes it from this file).  # async-only
# <async-only>
"""The async routing saver (:class:`AsyncRoutingSaver`): the driver of the routing
operations (:mod:`._ops`), awaited; the rules are in :mod:`._rules`.
"""
# </async-only>
# <sync-only>
# """The sync routing saver (:class:`RoutingSaver`): the driver of the routing operations
# (:mod:`._ops`); the rules are in :mod:`._rules`.
# """
# </sync-only>

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
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
from psycopg_pool import AsyncConnectionPool

from .._acompat import AMETHOD_PREFIX, APOOL_OPEN_AT_INIT
from .._bridge import SyncBridge  # async-only
from .._connect import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_PREPARE_THRESHOLD,
    acheck_if_idle,
    may_retry,
    retrying,
)
from .._driver_async import aexecute_stmt
from .._ops.retention import PruneStats
from ..aio import AsyncDeltaPostgresSaver
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
from ._replica_savers import AsyncReplicaSaver
from ._rules import (
    DEFAULT_QUERY_TIMEOUT,
    DEFAULT_REPLICA_TIMEOUT,
    DEFAULT_REPLICA_WAIT,
    DEFAULT_RETRY_AFTER,
    R,
    _RoutingCore,
)


class AsyncRoutingSaver(SyncBridge, _RoutingCore):
    # <async-only>
    """The async twin of :class:`RoutingSaver` (``AsyncConnectionPool`` or DSNs)."""
    # </async-only>
    # <sync-only>
    # """A checkpointer that writes to a primary and reads from its streaming replicas
    # when that gives the primary's answer (see the module docstring and
    # docs/replicas.md).
    #
    # Args:
    #     primary: the saver on the primary.
    #     replicas: one ``ConnectionPool`` (or DSN) per hot standby of the primary.
    #     retry_after: seconds a replica that could not be reached is left alone.
    #     replica_timeout: seconds a read waits for a replica connection (a DSN's pool).
    #     replica_query_timeout: seconds any statement on a replica may take (server-side
    #         statement_timeout, a client-side deadline, TCP keepalives); past it the
    #         primary answers and the replica is left alone for ``retry_after``.
    #     replica_wait: seconds a replica behind a read's floor is waited for (inside the
    #         guard statement) before the primary answers instead.
    #     cache_bytes: history cache budget of each replica's saver.
    #
    # Raises:
    #     ReplicaMismatchError: a reachable replica is not a hot standby of the primary's
    #         cluster on its timeline.
    # """
    # </sync-only>

    primary: AsyncDeltaPostgresSaver
    replicas: list[AsyncReplicaSaver]
    _own_pools: list[AsyncConnectionPool[Any]]
    _primary_type = AsyncDeltaPostgresSaver
    _pool_type = AsyncConnectionPool
    _replica_type = AsyncReplicaSaver
    _pool_check = staticmethod(acheck_if_idle)
    _open_pools_at_once = APOOL_OPEN_AT_INIT  # async: in open(), on the event loop

    def __init__(
        self,
        primary: AsyncDeltaPostgresSaver,
        replicas: Sequence[AsyncConnectionPool[Any] | str],
        *,
        retry_after: float = DEFAULT_RETRY_AFTER,
        replica_timeout: float = DEFAULT_REPLICA_TIMEOUT,
        replica_query_timeout: float = DEFAULT_QUERY_TIMEOUT,
        replica_wait: float = DEFAULT_REPLICA_WAIT,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        pool_size: int = 4,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
    ) -> None:
        # <async-only>
        #: open() was called (it opens the pools this saver made; the first call does
        #: it otherwise)
        self._opened = False
        # </async-only>
        self._init_savers(primary, replicas, retry_after=retry_after,
                          replica_timeout=replica_timeout,
                          replica_query_timeout=replica_query_timeout,
                        replica_wait=replica_wait,
                          cache_bytes=cache_bytes, pool_size=pool_size,
                          prepare_threshold=prepare_threshold)
        # <sync-only>
        # try:
        #     self._drive(op_verify(self))
        # except BaseException:
        #     self.close()
        #     raise
        # </sync-only>

    # <async-only>
    async def open(self) -> None:
        """Open the pools this saver made for replica DSNs and check every replica
        against the primary (``ReplicaMismatchError``; from_conn_string does this).
        Without it, the check runs before the first routed read."""
        self._opened = True
        for p in self._own_pools:
            await p.open()
        await self._drive(op_verify(self))

    # </async-only>
    async def close(self) -> None:
        """Close the pools this saver opened for replica DSNs."""
        for p in self._own_pools:
            await p.close()

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(
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
    ) -> AsyncIterator[AsyncRoutingSaver]:
        """A routing saver on ``conn_string`` (the primary) and ``replicas`` (DSNs of its
        hot standbys); every connection and pool is closed on exit."""
        async with AsyncDeltaPostgresSaver.from_conn_string(
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
                await saver.open()  # async-only
                yield saver
            finally:
                await saver.close()

    def with_allowlist(self, extra_allowlist: Any) -> AsyncRoutingSaver:
        return cast(AsyncRoutingSaver, self._with_allowlist(extra_allowlist))

    # ------------------------------------------------------------------ the driver

    async def _drive(self, op: Route[R]) -> R:
        """Run a routing operation of :mod:`._ops`: each step on its saver."""
        # <async-only>
        if not self._opened:  # made without from_conn_string and never opened
            await self.open()
        # </async-only>
        run = Run(op)
        while (step := run.next()) is not None:
            with run.call(step):
                run.answer = await self._do(step)
        return run.result

    async def _do(self, step: Step) -> Any:
        saver = self._saver(step.saver)
        if isinstance(step, Query):
            broken: list[bool] = []
            try:
                return await self._query(saver, step, broken)
            except psycopg.OperationalError:
                # the primary's statements are reads: once more on a checked connection
                # when the connection broke (as the savers' own, _connect.may_retry)
                if saver is not self.primary or not may_retry(
                    isinstance(saver.conn, AsyncConnectionPool), False, bool(broken), True
                ):
                    raise
            with retrying():
                return await self._query(saver, step, [])
        if step.method == "list":
            return [x async for x in saver.alist(*step.args, **step.kwargs)]
        return await getattr(saver, AMETHOD_PREFIX + step.method)(*step.args, **step.kwargs)

    async def _query(
        self, saver: AsyncDeltaPostgresSaver, step: Query, broken: list[bool]
    ) -> Any:
        async with saver._connection() as conn, conn.cursor() as cur:
            try:
                return await aexecute_stmt(cur, step.stmt)
            except psycopg.OperationalError:
                if conn.broken or conn.closed:
                    broken.append(True)
                raise

    # ------------------------------------------------------------------ tokens

    async def atoken(self) -> str:
        """A read token: the primary's WAL position now, at or past every write that has
        committed on it (this saver's and every other process's). A reader that passes
        it (:meth:`read_after`, or ``configurable["lgdp_read_after"]``) sees them all.
        It also fixes the floors of this saver's writes so far (see docs/replicas.md)."""
        return await self._drive(op_token(self))

    @contextlib.contextmanager
    def read_after(self, token: str | None) -> Iterator[None]:
        """Reads in this block (this thread or task) see at least what ``token`` covers."""
        with self._reading_after(token):
            yield

    # ------------------------------------------------------------------ routed reads

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._drive(op_get_tuple(self, config))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await self._drive(op_history(self, config, channels))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for tup in await self._drive(op_list(self, config, filter, before, limit)):
            yield tup

    # ------------------------------------------------------------------ primary only

    async def setup(self) -> None:
        await self.primary.setup()

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return cast(RunnableConfig, await self._drive(
            op_write(self, "put", config, checkpoint, metadata, new_versions)
        ))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self._drive(op_write(self, "put_writes", config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._drive(op_write(self, "delete_thread", thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._drive(op_write(self, "delete_for_runs", run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._drive(op_write(self, "copy_thread", source_thread_id, target_thread_id))

    async def aprune(  # type: ignore[override]  # returns what it deleted instead of None
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
        before: datetime | None = None,
        dry_run: bool = False,
        graph: Any = None,
    ) -> PruneStats:
        return cast(PruneStats, await self._drive(op_write(
            self, "prune", thread_ids, strategy=strategy, keep_last=keep_last,
            before=before, dry_run=dry_run, graph=graph,
        )))

    async def aget_delta_channel_keepset(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> set[str]:
        return await self.primary.aget_delta_channel_keepset(config=config, channels=channels)

    # <async-only>
    # sync calls from another thread, as the async savers allow (SyncBridge), run on the
    # primary saver's loop

    def _from_thread(self, coro: Any) -> Any:
        return self.primary._from_thread(coro)
    # </async-only>
