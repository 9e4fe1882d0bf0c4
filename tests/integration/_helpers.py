"""Small helpers shared by the integration tests (no fixtures, no database mocks).

``Uniform`` gives one awaitable API over a sync or an async saver, so a behaviour test
written once runs against all six saver kinds of ``saver_factory``. ``CountingSerde``
counts what a saver decodes.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Callable, Hashable, Iterable, Sequence
from typing import Any

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointTuple,
    empty_checkpoint,
)
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver
from tests._config import cfg as cfg  # the suite's one cfg(), re-exported
from tests.plugins.savers import SaverFactory

TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


class Uniform:
    """``await u.put(...)`` etc. on either saver flavour."""

    def __init__(self, saver: DeltaPostgresSaver | AsyncDeltaPostgresSaver) -> None:
        self.saver = saver
        self.is_async = isinstance(saver, AsyncDeltaPostgresSaver)

    async def _call(self, name: str, *args: Any, **kw: Any) -> Any:
        if self.is_async:
            return await getattr(self.saver, "a" + name)(*args, **kw)
        return getattr(self.saver, name)(*args, **kw)

    async def setup(self) -> None:
        if self.is_async:
            await self.saver.setup()  # type: ignore[misc]
        else:
            self.saver.setup()

    async def put(self, config: Any, cp: Checkpoint, md: Any, nv: Any) -> Any:
        return await self._call("put", config, cp, md, nv)

    async def put_writes(
        self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await self._call("put_writes", config, writes, task_id, task_path)

    async def get_tuple(self, config: Any) -> CheckpointTuple | None:
        return await self._call("get_tuple", config)  # type: ignore[no-any-return]

    async def list(self, config: Any, **kw: Any) -> list[CheckpointTuple]:
        if self.is_async:
            return [t async for t in self.saver.alist(config, **kw)]
        return list(self.saver.list(config, **kw))

    async def delete_thread(self, thread_id: str) -> None:
        await self._call("delete_thread", thread_id)

    async def delete_for_runs(self, run_ids: Any) -> None:
        await self._call("delete_for_runs", run_ids)

    async def copy_thread(self, source: str, target: str) -> None:
        await self._call("copy_thread", source, target)

    async def prune(self, thread_ids: Any, **kw: Any) -> Any:
        return await self._call("prune", thread_ids, **kw)

    async def keepset(self, config: Any, channels: Sequence[str]) -> set[str]:
        return await self._call(  # type: ignore[no-any-return]
            "get_delta_channel_keepset", config=config, channels=channels
        )

    async def history(self, config: Any, channels: Sequence[str]) -> Any:
        if self.is_async:
            return await self.saver.aget_delta_channel_history(
                config=config, channels=channels
            )
        return self.saver.get_delta_channel_history(config=config, channels=channels)


@contextlib.asynccontextmanager
async def open_saver(factory: SaverFactory, dsn: str, **kw: Any) -> AsyncIterator[Uniform]:
    if factory.is_async:
        async with factory.aio(dsn, **kw) as s:
            yield Uniform(s)
    else:
        with factory.sync(dsn, **kw) as s:
            yield Uniform(s)


def make_checkpoint(
    values: dict[str, Any], versions: dict[str, Any] | None = None
) -> Checkpoint:
    """A checkpoint with a fresh time-ordered id holding ``values``."""
    cp = empty_checkpoint()
    cp["channel_values"] = dict(values)
    cp["channel_versions"] = dict(versions if versions is not None else {k: 1 for k in values})
    return cp


async def put_chain(
    u: Uniform,
    thread_id: str,
    n: int,
    *,
    ns: str = "",
    metadata: Any = None,
    values: Any = None,
) -> list[RunnableConfig]:
    """``n`` checkpoints, each the child of the previous one; returns their configs.

    ``metadata(i)`` / ``values(i)`` give each checkpoint's metadata and channel values
    (default: step ``i`` and a blob channel ``obj`` plus an inline ``num``).
    """
    parent = cfg(thread_id, ns)
    out = []
    versions: dict[str, Any] = {}
    for i in range(n):
        vals = values(i) if values else {"num": i, "obj": {"i": i, "xs": list(range(i))}}
        new_versions = {}
        for k in vals:
            versions[k] = u.saver.get_next_version(versions.get(k), None)
            new_versions[k] = versions[k]
        cp = make_checkpoint(vals, dict(versions))
        md = metadata(i) if metadata else {"source": "loop", "step": i}
        parent = await u.put(parent, cp, md, new_versions)
        out.append(parent)
    return out


def table_counts(
    dsn: str, thread_id: str | None = None, schema: str | None = None
) -> dict[str, int]:
    prefix = f'"{schema}".' if schema else ""
    out = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for t in TABLES:
            if thread_id is None:
                row = conn.execute(f"SELECT count(*) FROM {prefix}{t}").fetchone()
            else:
                row = conn.execute(
                    f"SELECT count(*) FROM {prefix}{t} WHERE thread_id = %s", (thread_id,)
                ).fetchone()
            assert row is not None
            out[t] = int(row[0])
    return out


def table_snapshot(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the three tables, sorted: to prove an operation changed nothing."""
    out = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for t in TABLES:
            rows = conn.execute(f"SELECT * FROM {t}").fetchall()
            out[t] = sorted(rows, key=repr)
    return out


def strip_thread(t: CheckpointTuple) -> tuple[Any, ...]:
    """A tuple's content without its thread id (to compare a copy with its source)."""
    conf = dict(t.config["configurable"])
    conf.pop("thread_id")
    parent = None
    if t.parent_config:
        parent = dict(t.parent_config["configurable"])
        parent.pop("thread_id")
    return (conf, t.checkpoint, t.metadata, parent, t.pending_writes)


class CountingSerde(JsonPlusSerializer):
    """The default serializer, counting what ``loads_typed`` decodes: each key that
    ``kinds(value)`` gives for a decoded value adds one to ``decoded[key]``."""

    def __init__(self, kinds: Callable[[Any], Iterable[Hashable]]) -> None:
        super().__init__()
        self.kinds = kinds
        self.decoded: Counter[Any] = Counter()

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        value = super().loads_typed(data)
        self.decoded.update(self.kinds(value))
        return value
