"""Fast synthetic DeltaChannel threads for the history micro-benchmarks.

Rows are written with a saver's own ``put`` / ``put_writes`` (so the format is exactly
what that saver writes), shaped like a ``DeltaChannel`` graph between snapshots: every
checkpoint bumps each channel's version, leaves the channel out of ``channel_values``,
and carries one task's writes to every channel (a one-message list, ~200 characters).
No snapshot is ever written, so a walk from depth ``d`` visits ``d`` ancestors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg
from langchain_core.messages import AIMessage
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from psycopg import sql

from .._local.workloads import text

TASK_PATH = "~__pregel_pull, agent"


@dataclass
class Branch:
    """Where a chain continues from: the parent config and the channel versions there."""

    config: dict[str, Any]
    versions: dict[str, int] = field(default_factory=dict)
    step: int = -1


@dataclass
class Chain:
    ids: list[str]  # checkpoint ids, oldest first; ids[d] has d ancestors on a root chain
    branches: list[Branch]  # the state after each checkpoint, to fork from


def _version(n: int) -> str:
    return f"{n:032}.{0.5:016}"


def write_chain(
    saver: BaseCheckpointSaver[Any],
    thread_id: str,
    n: int,
    channels: Sequence[str],
    *,
    start: Branch | None = None,
    seed: int = 0,
) -> Chain:
    """Append ``n`` checkpoints (each with its writes) after ``start`` (a new root
    chain when None)."""
    br = start or Branch({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    ids: list[str] = []
    branches: list[Branch] = []
    for i in range(n):
        step = br.step + 1
        versions = {ch: br.versions.get(ch, 0) + 1 for ch in channels}
        cp = empty_checkpoint()
        cp["id"] = str(uuid6(clock_seq=step))
        cp["ts"] = datetime.now(UTC).isoformat()
        cp["channel_versions"] = {ch: _version(v) for ch, v in versions.items()}
        cp["versions_seen"] = {"agent": {ch: _version(v - 1) for ch, v in versions.items()}}
        md: dict[str, Any] = {
            "source": "loop",
            "step": step,
            "parents": {},
            "counters_since_delta_snapshot": {ch: [versions[ch], step + 1] for ch in channels},
        }
        cfg = saver.put(br.config, cp, md, dict(cp["channel_versions"]))  # type: ignore[arg-type]
        tag = f"{thread_id}-{seed}-{i}"
        saver.put_writes(
            cfg,
            [
                (ch, [AIMessage(content=text(seed * 100_003 + i * 7 + j, 200), id=f"{tag}-{j}")])
                for j, ch in enumerate(channels)
            ],
            task_id=f"task-{tag}",
            task_path=TASK_PATH,
        )
        br = Branch(dict(cfg), versions, step)
        ids.append(cp["id"])
        branches.append(br)
    return Chain(ids, branches)


def copy_threads(conn: psycopg.Connection[Any], template: str, count: int, prefix: str) -> None:
    """Clone ``template``'s rows into ``count`` other threads, in SQL."""
    for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
        cols = [
            r[0] if not isinstance(r, dict) else r["attname"]
            for r in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass "
                "AND attnum > 0 AND NOT attisdropped AND attgenerated = '' ORDER BY attnum",
                (table,),
            ).fetchall()
        ]
        others = [c for c in cols if c != "thread_id"]
        conn.execute(
            sql.SQL(
                "INSERT INTO {t} (thread_id, {cols}) "
                "SELECT {prefix} || g::text, {tcols} FROM {t} AS t "
                "CROSS JOIN generate_series(1, {n}) AS g WHERE t.thread_id = {tpl}"
            ).format(
                t=sql.Identifier(table),
                cols=sql.SQL(", ").join(map(sql.Identifier, others)),
                tcols=sql.SQL(", ").join(sql.Identifier("t", c) for c in others),
                prefix=sql.Literal(prefix),
                n=sql.Literal(count),
                tpl=sql.Literal(template),
            )
        )
    conn.execute("ANALYZE checkpoints, checkpoint_blobs, checkpoint_writes")
