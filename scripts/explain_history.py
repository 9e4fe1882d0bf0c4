"""Print EXPLAIN (ANALYZE, BUFFERS) of the history statement on a deep DeltaChannel thread.

    python scripts/explain_history.py [--dsn DSN] [--depth 2000] [--channels 2] [--fork]

Builds (in a fresh schema, dropped afterwards) one thread of ``--depth`` checkpoints written
the way DeltaChannel writes them: the channels absent from channel_values, one write per
channel per step, a ``_DeltaSnapshot`` only at the root. Then runs the statement of
``sql/delta_history.sql`` for the latest checkpoint six times (so the plan is warm) and
prints the plan of the last run. Without --dsn it uses the embedded Postgres.
``--fork``: one extra checkpoint forks from the middle of the chain while it is written, so
its id sits inside the chain's id range: the statement cannot read the chain as one
stretch and walks it step by step (the plan of the fallback).
"""

from __future__ import annotations

import argparse
import contextlib
import uuid

import psycopg
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from psycopg import sql

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._cache import NO_PLAN
from langgraph_delta_postgres._local.embedded import embedded_postgres


def build(saver: DeltaPostgresSaver, depth: int, channels: list[str], fork: bool) -> dict:
    cfg: dict = {"configurable": {"thread_id": "deep", "checkpoint_ns": ""}}
    for step in range(depth):
        if fork and step == depth // 2:
            side = empty_checkpoint()
            side["channel_versions"] = {ch: saver.get_next_version(None, None) for ch in channels}
            saver.put(cfg, side, {"source": "fork", "step": step}, {})  # type: ignore[arg-type]
        cp = empty_checkpoint()
        if step == 0:
            cp["channel_values"] = {ch: _DeltaSnapshot([]) for ch in channels}
        cp["channel_versions"] = {ch: saver.get_next_version(None, None) for ch in channels}
        new_versions = cp["channel_versions"] if step == 0 else {}
        md = {"source": "loop", "step": step,
              "counters_since_delta_snapshot": {ch: [step, step] for ch in channels}}
        cfg = saver.put(cfg, cp, md, new_versions)  # type: ignore[arg-type]
        saver.put_writes(cfg, [(ch, [f"{ch}-{step}"]) for ch in channels], str(uuid.uuid4()))
    return cfg


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn")
    ap.add_argument("--depth", type=int, default=2000)
    ap.add_argument("--channels", type=int, default=2)
    ap.add_argument("--fork", action="store_true")
    args = ap.parse_args()
    channels = [f"ch{i}" for i in range(args.channels)]
    schema = f"explain_{uuid.uuid4().hex[:8]}"
    with contextlib.ExitStack() as stack:
        dsn = args.dsn or stack.enter_context(embedded_postgres())
        with psycopg.connect(dsn, autocommit=True) as conn:
            saver = DeltaPostgresSaver(conn, schema=schema)
            saver.setup()
            try:
                build(saver, args.depth, channels, args.fork)
                params = {"thread_id": "deep", "checkpoint_ns": "", "checkpoint_id": None,
                          "channels": channels, "max_depth": saver.max_history_depth,
                          **NO_PLAN.params()}
                q = saver.history_query()
                for _ in range(5):
                    conn.execute(q, params).fetchall()
                plan = conn.execute(sql.SQL("EXPLAIN (ANALYZE, BUFFERS) ") + q, params)
                print(f"-- server {conn.info.server_version}, depth {args.depth}, "
                      f"{args.channels} channels{', a fork inside the range' if args.fork else ''}")
                for (line,) in plan.fetchall():
                    print(line)
            finally:
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    main()
