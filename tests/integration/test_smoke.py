from __future__ import annotations

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

from tests.plugins.savers import SaverFactory


async def test_put_get_roundtrip(dsn: str, saver_factory: SaverFactory) -> None:
    cfg: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    cp = empty_checkpoint()
    cp["channel_values"] = {"a": 1, "b": {"x": [1, 2]}, "c": None}
    cp["channel_versions"] = {"a": "1", "b": "1", "c": "1"}
    if saver_factory.is_async:
        async with saver_factory.aio(dsn) as s:
            saved = await s.aput(cfg, cp, {"source": "input", "step": -1}, {"a": "1", "b": "1"})
            await s.aput_writes(saved, [("a", 2), ("b", {"y": 1})], "task1")
            got = await s.aget_tuple(saved)
    else:
        with saver_factory.sync(dsn) as s:
            saved = s.put(cfg, cp, {"source": "input", "step": -1}, {"a": "1", "b": "1"})
            s.put_writes(saved, [("a", 2), ("b", {"y": 1})], "task1")
            got = s.get_tuple(saved)
    assert got is not None
    assert got.checkpoint["channel_values"] == {"a": 1, "b": {"x": [1, 2]}, "c": None}
    assert got.pending_writes == [("task1", "a", 2), ("task1", "b", {"y": 1})]
    assert got.metadata == {"source": "input", "step": -1}
