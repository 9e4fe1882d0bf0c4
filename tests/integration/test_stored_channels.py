"""``stored_channels`` of a checkpoint put again (same id, same versions): the blobs it
names are already stored, so the second put's inserts conflict and return nothing; the
column must still name them, or the history walk passes over the checkpoint's value.
(A ``_DeltaSnapshot`` is covered by its inline ``true`` marker; a plain value is not.)"""

from __future__ import annotations

from typing import Any

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_delta_postgres import DeltaPostgresSaver


def _history(saver: BaseCheckpointSaver[Any], twice: bool) -> tuple[Any, RunnableConfig]:
    cfg: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    versions: dict[str, Any] = {}
    for step, snapshot in enumerate([["a"], None, ["a", "b", "c"], None]):
        cp = empty_checkpoint()
        cp["id"] = f"00000000-0000-6000-8000-00000000000{step}"
        versions["messages"] = f"{step + 1:032}.{0.5:016}"
        cp["channel_versions"] = dict(versions)
        if snapshot is not None:
            cp["channel_values"] = {"messages": snapshot}
        md: Any = {"source": "loop", "step": step, "parents": {}}
        new = {"messages": versions["messages"]}
        parent = cfg
        cfg = saver.put(parent, cp, md, new)
        if twice:
            cfg = saver.put(parent, cp, md, new)
        saver.put_writes(cfg, [("messages", [f"w{step}"])], f"task-{step}")
    got = saver.get_delta_channel_history(config=cfg, channels=["messages"])
    return got, cfg


def test_put_again_keeps_stored_channels(dsn: str) -> None:
    expected, _ = _history(InMemorySaver(), twice=False)
    assert expected["messages"]["seed"] == ["a", "b", "c"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        saver = DeltaPostgresSaver(conn)
        got, _ = _history(saver, twice=True)
        assert got == expected
        rows = conn.execute(
            "SELECT checkpoint_id, stored_channels FROM checkpoints ORDER BY checkpoint_id"
        ).fetchall()
        assert [r[1] for r in rows] == [["messages"], [], ["messages"], []]
