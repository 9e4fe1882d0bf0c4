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
    assert got.pending_writes is not None and expected.pending_writes is not None
    assert sorted(got.pending_writes) == sorted(expected.pending_writes)
    assert len(got.pending_writes) == len(WRITES) + 2


#: Channel names the write statements carry in their jsonb lists: quotes, backslashes,
#: array and JSON punctuation, non-ASCII, a name that reads as NULL.
ODD_NAMES = ['q"uote', "back\\slash", "a,b{c}", "[1]", "ünï ✓", "NULL", " spaced "]


def _odd_round_trip(saver: BaseCheckpointSaver[Any]) -> CheckpointTuple | None:
    cfg: RunnableConfig = {"configurable": {"thread_id": "odd", "checkpoint_ns": ""}}
    cp = empty_checkpoint()
    cp["id"] = "00000000-0000-6000-8000-000000000002"
    values: dict[str, Any] = {}
    for i, name in enumerate(ODD_NAMES):
        values[name] = {"n": i} if i % 2 else i  # blobs and inline values
    cp["channel_values"] = values
    cp["channel_versions"] = {k: f"{i + 1}" for i, k in enumerate(ODD_NAMES)}
    metadata: Any = {"step": 1, "counters_since_delta_snapshot": {
        name: [i + 1, i + 2] for i, name in enumerate(ODD_NAMES)
    }}
    cfg = saver.put(cfg, cp, metadata, dict(cp["channel_versions"]))
    saver.put_writes(cfg, [(name, f"w{i}") for i, name in enumerate(ODD_NAMES)], "task-1")
    return saver.get_tuple(cfg)


def test_odd_channel_names_round_trip(dsn: str) -> None:
    """Every name comes back as written, in values, pending writes, the stored channels
    and the delta counters columns (the statements unpack them from jsonb)."""
    expected = _odd_round_trip(InMemorySaver())
    assert expected is not None
    with psycopg.connect(dsn, autocommit=True) as conn:
        got = _odd_round_trip(DeltaPostgresSaver(conn))
        row = conn.execute(
            "SELECT stored_channels, delta_channels, delta_updates, delta_supersteps "
            "FROM checkpoints WHERE thread_id = 'odd'"
        ).fetchone()
    assert got is not None
    assert got.checkpoint["channel_values"] == expected.checkpoint["channel_values"]
    assert got.pending_writes is not None and expected.pending_writes is not None
    assert sorted(got.pending_writes) == sorted(expected.pending_writes)
    assert [w[1] for w in got.pending_writes] == ODD_NAMES
    assert row is not None
    stored, names, updates, supersteps = row
    assert sorted(stored) == sorted(ODD_NAMES)
    assert names == sorted(ODD_NAMES)
    assert updates == [ODD_NAMES.index(n) + 1 for n in names]
    assert supersteps == [ODD_NAMES.index(n) + 2 for n in names]
