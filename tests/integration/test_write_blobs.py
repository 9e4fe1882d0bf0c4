"""Blobs of several sizes in one put / put_writes (they travel concatenated in one
``bytea`` and are cut apart in the statement): each comes back as written, as
InMemorySaver returns it."""

from __future__ import annotations

import os
from typing import Any

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_delta_postgres import DeltaPostgresSaver

VALUES: dict[str, Any] = {
    "empty_list": [],
    "nul_bytes": b"\x00\x01\x00" * 5,
    "big": os.urandom(300_000),
    "text": ["x" * 70_000, "y"],
    "inline": 7,
}
WRITES: list[tuple[str, Any]] = [
    ("a", None), ("b", b""), ("c", os.urandom(100_000)), ("d", {"k": [1, 2]}), ("e", "s"),
]


def _round_trip(saver: BaseCheckpointSaver[Any]) -> CheckpointTuple | None:
    cfg: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    cp = empty_checkpoint()
    cp["id"] = "00000000-0000-6000-8000-000000000001"
    cp["channel_values"] = dict(VALUES)
    cp["channel_versions"] = {k: "1" for k in VALUES}
    cfg = saver.put(cfg, cp, {"step": 1}, dict(cp["channel_versions"]))
    saver.put_writes(cfg, WRITES, "task-1")
    saver.put_writes(cfg, [("__error__", b"\x00boom"), ("__interrupt__", ["x" * 5000])], "task-2")
    return saver.get_tuple(cfg)


def test_blobs_round_trip(dsn: str) -> None:
    expected = _round_trip(InMemorySaver())
    assert expected is not None
    with psycopg.connect(dsn, autocommit=True) as conn:
        got = _round_trip(DeltaPostgresSaver(conn))
    assert got is not None
    assert got.checkpoint["channel_values"] == expected.checkpoint["channel_values"] == VALUES
    assert sorted(got.pending_writes) == sorted(expected.pending_writes)
    assert len(got.pending_writes) == len(WRITES) + 2
