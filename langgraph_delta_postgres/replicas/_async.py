"""The async routing saver (:class:`AsyncRoutingSaver`); the rules are in :mod:`._rules`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool

from .._connect import DEFAULT_CACHE_BYTES, DEFAULT_PREPARE_THRESHOLD
from .._ops.retention import PruneStats
from ..aio import AsyncDeltaPostgresSaver
from ._rules import (
    _LAST_TUPLE,
    _NEED,
    _TOKEN,
    DEFAULT_REPLICA_TIMEOUT,
    DEFAULT_RETRY_AFTER,
    AsyncReplicaSaver,
    Need,
    Unsafe,
    _ids,
    _replica_pool_kwargs,
    _RoutingCore,
    lsn_to_int,
    make_token,
    parse_token,
)


class AsyncRoutingSaver(_RoutingCore):
    """The async twin of :class:`RoutingSaver` (``AsyncConnectionPool`` or DSNs)."""

    primary: AsyncDeltaPostgresSaver
    replicas: list[AsyncReplicaSaver]

    def __init__(
        self,
        primary: AsyncDeltaPostgresSaver,
        replicas: Sequence[AsyncConnectionPool[Any] | str],
        *,
        retry_after: float = DEFAULT_RETRY_AFTER,
        replica_timeout: float = DEFAULT_REPLICA_TIMEOUT,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        pool_size: int = 4,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
    ) -> None:
        if not isinstance(primary, AsyncDeltaPostgresSaver):
            raise TypeError(
                f"primary must be an AsyncDeltaPostgresSaver, not {type(primary).__name__}"
            )
        if isinstance(replicas, str):
            raise TypeError("replicas must be a list of DSNs or pools, not a str")
        super().__init__(serde=primary.serde)
        self.primary = primary
        self._own_pools: list[AsyncConnectionPool[Any]] = []
        savers: list[AsyncReplicaSaver] = []
        for r in replicas:
            if isinstance(r, str):
                pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                    r, min_size=1, max_size=pool_size, timeout=replica_timeout,
                    kwargs=_replica_pool_kwargs(r, prepare_threshold, replica_timeout),
                    check=AsyncConnectionPool.check_connection, open=False,
                )
                self._own_pools.append(pool)
            elif isinstance(r, AsyncConnectionPool):
                pool = r
            else:
                raise TypeError(
                    f"a replica must be a DSN or an AsyncConnectionPool, not {type(r).__name__}"
                )
            savers.append(AsyncReplicaSaver(pool, serde=primary.serde, schema=primary.schema,
                                            cache_bytes=cache_bytes))
        self.replicas = savers
        self._init_routing(retry_after)

    async def open(self) -> None:
        """Open the pools this saver made for replica DSNs (from_conn_string does)."""
        for p in self._own_pools:
            await p.open()

    async def close(self) -> None:
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
    ) -> AsyncIterator[AsyncRoutingSaver]:
        """See :meth:`RoutingSaver.from_conn_string`."""
        async with AsyncDeltaPostgresSaver.from_conn_string(
            conn_string, pool_size=pool_size, serde=serde, schema=schema,
            cache_bytes=cache_bytes, prepare_threshold=prepare_threshold,
        ) as primary:
            saver = cls(primary, list(replicas), retry_after=retry_after,
                        replica_timeout=replica_timeout, cache_bytes=cache_bytes,
                        pool_size=pool_size or 4, prepare_threshold=prepare_threshold)
            await saver.open()
            try:
                yield saver
            finally:
                await saver.close()

    def with_allowlist(self, extra_allowlist: Any) -> AsyncRoutingSaver:
        clone = super().with_allowlist(extra_allowlist)
        if clone is self:
            return self
        assert isinstance(clone, AsyncRoutingSaver)
        clone.primary = cast(AsyncDeltaPostgresSaver,
                             self.primary.with_allowlist(extra_allowlist))
        clone.replicas = [cast(AsyncReplicaSaver, r.with_allowlist(extra_allowlist))
                          for r in self.replicas]
        return clone

    # ------------------------------------------------------------------ floors, tokens

    async def _fetch_lsn(self) -> int:
        self._counts["lsn_fetches"] += 1
        async with self.primary._connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(self.queries["replicas.primary_lsn"])
            row = await cur.fetchone()
        assert row is not None
        return lsn_to_int(row[0])

    async def _resolve(self, thread_id: str) -> None:
        seq = self._pending(thread_id)
        if seq is not None:
            self._resolved(seq, await self._fetch_lsn())

    async def atoken(self) -> str:
        """See :meth:`RoutingSaver.token`."""
        with self._lock:
            seq = self._seq
        lsn = await self._fetch_lsn()
        self._resolved(seq, lsn)
        return make_token(lsn)

    @contextlib.contextmanager
    def read_after(self, token: str | None) -> Iterator[None]:
        """See :meth:`RoutingSaver.read_after` (a context variable: per task)."""
        lsn = parse_token(token) if token is not None else None
        cur = _TOKEN.get()
        reset = _TOKEN.set(lsn if cur is None or lsn is None else max(cur, lsn))
        try:
            yield
        finally:
            _TOKEN.reset(reset)

    # ------------------------------------------------------------------ routing

    async def _route(self, need: Need | str, call: Callable[[Any], Any],
                     after: Callable[[Any, Any], Any] | None = None) -> tuple[Any, int]:
        if isinstance(need, Need):
            for i in self._order():
                replica = self.replicas[i]
                reset = _NEED.set(need)
                try:
                    got = await call(replica)
                    if after is not None:
                        _NEED.set(None)
                        await after(replica, got)
                except Exception as e:
                    self._failed(i, e)
                    continue
                finally:
                    _NEED.reset(reset)
                self._counts["replica"] += 1
                return got, i
            reason = "down" if not self._order() else "replica_miss"
        else:
            reason = need
        self._counts[f"primary_{reason}"] += 1
        return await call(self.primary), -1

    def _thread_of(self, config: RunnableConfig | None) -> str | None:
        conf = (config or {}).get("configurable") or {}
        t = conf.get("thread_id")
        return None if t is None else str(t)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        if (t := self._thread_of(config)) is not None:
            await self._resolve(t)
        need = self._need("tuple", config) if t is not None else "not_routable"
        got, i = await self._route(need, lambda s: s.aget_tuple(config))
        if got is not None and get_checkpoint_id(config) is None and t is not None:
            c = got.config["configurable"]
            _LAST_TUPLE.set((id(self), (t, c["checkpoint_ns"], c["checkpoint_id"]), i))
        return got  # type: ignore[no-any-return]

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        t = self._thread_of(config)
        last = _LAST_TUPLE.get()
        _LAST_TUPLE.set(None)
        if t is None:
            return await self.primary.aget_delta_channel_history(config=config, channels=channels)
        await self._resolve(t)
        need = self._need("history", config)
        cid = get_checkpoint_id(config)
        key = (t, str((config.get("configurable") or {}).get("checkpoint_ns") or ""), cid)
        if last is not None and last[0] == id(self) and last[1] == key:
            if last[2] < 0:
                self._counts["primary_same_as_tuple"] += 1
                return await self.primary.aget_delta_channel_history(
                    config=config, channels=channels
                )
            need = Need(None if isinstance(need, str) else need.floor, t, key[1], cid,
                        True, False)
            for_one = self.replicas[last[2]]
            reset = _NEED.set(need)
            try:
                got = await for_one.aget_delta_channel_history(config=config, channels=channels)
                self._counts["replica"] += 1
                return got
            except Exception as e:
                self._failed(last[2], e)
            finally:
                _NEED.reset(reset)
        got2, _ = await self._route(
            need, lambda s: s.aget_delta_channel_history(config=config, channels=channels)
        )
        return got2  # type: ignore[no-any-return]

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        if (t := self._thread_of(config)) is not None:
            await self._resolve(t)
        got = self._list_need(config, filter, before)

        async def call(s: Any) -> list[CheckpointTuple]:
            return [x async for x in s.alist(config, filter=filter, before=before, limit=limit)]

        if isinstance(got, str):
            page, _ = await self._route(got, call)
        else:
            need, must_seal = got

            async def check(replica: AsyncReplicaSaver, page: list[CheckpointTuple]) -> None:
                if not must_seal or not page:
                    return
                assert t is not None
                async with replica._connection() as conn, conn.cursor(
                    row_factory=tuple_row
                ) as cur:
                    await cur.execute(
                        self.queries["replicas.sealed_ids"], self._sealed_params(t, page)
                    )
                    if len(await cur.fetchall()) != len(page):
                        raise Unsafe("unsealed_page")

            page, _ = await self._route(need, call, check)
        for tup in page:
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
        try:
            return await self.primary.aput(config, checkpoint, metadata, new_versions)
        finally:
            self._wrote([str(config["configurable"]["thread_id"])])

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        try:
            await self.primary.aput_writes(config, writes, task_id, task_path)
        finally:
            self._wrote([str(config["configurable"]["thread_id"])])

    async def adelete_thread(self, thread_id: str) -> None:
        try:
            await self.primary.adelete_thread(thread_id)
        finally:
            self._wrote([str(thread_id)])

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        try:
            await self.primary.adelete_for_runs(run_ids)
        finally:
            self._wrote(None)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        try:
            await self.primary.acopy_thread(source_thread_id, target_thread_id)
        finally:
            self._wrote([str(target_thread_id)])

    async def aprune(  # type: ignore[override]  # returns what it deleted instead of None
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
        before: datetime | None = None,
        dry_run: bool = False,
    ) -> PruneStats:
        try:
            return await self.primary.aprune(thread_ids, strategy=strategy,
                                             keep_last=keep_last, before=before,
                                             dry_run=dry_run)
        finally:
            if not dry_run:
                self._wrote(_ids(thread_ids))

    async def aget_delta_channel_keepset(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> set[str]:
        return await self.primary.aget_delta_channel_keepset(config=config, channels=channels)

    # sync calls from another thread, as the async savers allow (run on the loop)

    def _from_thread(self, coro: Any) -> Any:
        return self.primary._from_thread(coro)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._from_thread(self.aget_tuple(config))  # type: ignore[no-any-return]

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self._from_thread(  # type: ignore[no-any-return]
            self.aget_delta_channel_history(config=config, channels=channels)
        )

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        async def collect() -> list[CheckpointTuple]:
            return [x async for x in self.alist(config, filter=filter, before=before,
                                                limit=limit)]

        yield from self._from_thread(collect())

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._from_thread(  # type: ignore[no-any-return]
            self.aput(config, checkpoint, metadata, new_versions)
        )

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._from_thread(self.aput_writes(config, writes, task_id, task_path))


_ = asyncio  # the async twin's loop is the primary saver's (see _from_thread)
