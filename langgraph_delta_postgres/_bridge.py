"""The synchronous methods of the async savers (:class:`.AsyncDeltaPostgresSaver`,
:class:`.AsyncRoutingSaver`), written once: for code that calls a checkpointer
synchronously from another thread (LangGraph does for get_state on a sync graph API),
each runs the async method on the saver's event loop and waits for it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)

from ._ops.retention import PruneStats


class SyncBridge(BaseCheckpointSaver[str]):
    """The sync methods of an async saver: each runs its async twin on the loop the saver
    is bound to (``_bound_loop``: the loop of its first call, or of its construction),
    from another thread; from that loop itself it is an error (it would wait for itself).
    """

    _bound_loop: asyncio.AbstractEventLoop | None

    def _from_thread(self, coro: Any) -> Any:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None and loop is self._loop:
            raise asyncio.InvalidStateError(
                "synchronous calls to AsyncDeltaPostgresSaver are only allowed from a "
                "different thread; from the event loop use the async methods (aget_tuple, ...)"
            )
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    @property
    def _loop(self) -> asyncio.AbstractEventLoop:
        loop = self._bound_loop
        if loop is None:
            raise asyncio.InvalidStateError(
                "AsyncDeltaPostgresSaver has not been used on an event loop yet; "
                "use the async methods"
            )
        return loop

    def _listed(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Awaitable[list[CheckpointTuple]]:
        """What the sync ``list`` waits for: ``alist``'s tuples, collected on the loop."""

        async def collect() -> list[CheckpointTuple]:
            return [x async for x in self.alist(config, filter=filter, before=before,
                                                limit=limit)]

        return collect()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._from_thread(self.aget_tuple(config))  # type: ignore[no-any-return]

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        yield from self._from_thread(self._listed(config, filter, before, limit))

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

    def delete_thread(self, thread_id: str) -> None:
        self._from_thread(self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._from_thread(self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._from_thread(self.acopy_thread(source_thread_id, target_thread_id))

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
        return self._from_thread(  # type: ignore[no-any-return]
            cast(Any, self).aprune(
                thread_ids, strategy=strategy, keep_last=keep_last, before=before,
                dry_run=dry_run, graph=graph,
            )
        )

    def get_delta_channel_keepset(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> set[str]:
        return self._from_thread(  # type: ignore[no-any-return]
            cast(Any, self).aget_delta_channel_keepset(config=config, channels=channels)
        )

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self._from_thread(  # type: ignore[no-any-return]
            self.aget_delta_channel_history(config=config, channels=channels)
        )
