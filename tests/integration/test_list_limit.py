"""``list(limit=n)`` looks up the blobs and writes of the n checkpoints it returns only,
not of every checkpoint that matches (the limit applies to the checkpoint rows first)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._connect import DEFAULT_PREPARE_THRESHOLD, connect_kwargs
from tests.integration._explain import Recorder, explain, nodes

DEPTH = 40


def _lookups(plan: Any) -> dict[str, int]:
    """The most executions of one scan node on checkpoint_blobs / checkpoint_writes
    (each lateral lookup is one node, executed once per checkpoint row it serves)."""
    out: dict[str, int] = {}
    for n in nodes(plan):
        rel = n.get("Relation Name")
        if rel in ("checkpoint_blobs", "checkpoint_writes") and "Operation" not in n:
            out[rel] = max(out.get(rel, 0), int(n.get("Actual Loops", 0)))
    return out


@pytest.mark.parametrize("generic", [True, False], ids=["generic", "custom"])
def test_list_limit_looks_up_only_the_kept_checkpoints(dsn: str, generic: bool) -> None:
    opts = connect_kwargs(dsn, DEFAULT_PREPARE_THRESHOLD)
    with psycopg.connect(dsn, **opts) as conn, psycopg.connect(dsn, **opts) as meter:
        rec = Recorder()
        rec.attach(conn)
        saver = DeltaPostgresSaver(conn)
        for tid in ("deep", "other"):
            cfg: RunnableConfig = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
            for step in range(DEPTH):
                cp = empty_checkpoint()
                cp["channel_values"] = {"blob": [step]}
                cp["channel_versions"] = {"blob": saver.get_next_version(None, None)}
                cfg = saver.put(cfg, cp, {"step": step}, dict(cp["channel_versions"]))
                saver.put_writes(cfg, [("blob", step)], f"task-{step}")
        rec.take()
        for config, limit in (
            ({"configurable": {"thread_id": "deep"}}, 1),
            ({"configurable": {"thread_id": "deep"}}, 3),
            ({"configurable": {"thread_id": "deep", "checkpoint_ns": ""}}, 3),
            (None, 3),
        ):
            got = list(saver.list(config, limit=limit))  # type: ignore[arg-type]
            assert len(got) == limit
            assert [t.checkpoint["channel_values"]["blob"] for t in got] == [
                [DEPTH - 1 - i] for i in range(limit)
            ] or config is None
            (stmt,) = rec.take()
            lookups = _lookups(explain(meter, stmt, generic=generic))
            assert lookups == {"checkpoint_blobs": limit, "checkpoint_writes": limit}, (
                config, limit, lookups)
