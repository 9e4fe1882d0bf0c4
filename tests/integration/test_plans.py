"""Connections opened by from_conn_string plan prepared statements generically, so the
history statement, put and get_tuple are not re-planned on every call."""

from __future__ import annotations

from typing import Any

import psycopg
from langgraph.checkpoint.base import empty_checkpoint
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver


def _show(conn: psycopg.Connection[Any], name: str) -> str:
    row = conn.execute(f"SHOW {name}").fetchone()
    assert row is not None
    return str(row[0])


def test_generic_plans_and_dsn_options_kept(dsn: str) -> None:
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        assert isinstance(saver.conn, psycopg.Connection)
        assert _show(saver.conn, "plan_cache_mode") == "force_generic_plan"
    params = conninfo_to_dict(dsn)
    params["options"] = "-c application_name=lgdp_plans"
    with DeltaPostgresSaver.from_conn_string(make_conninfo(**params)) as saver:  # type: ignore[arg-type]
        assert isinstance(saver.conn, psycopg.Connection)
        assert _show(saver.conn, "plan_cache_mode") == "force_generic_plan"
        assert _show(saver.conn, "application_name") == "lgdp_plans"
    # No prepared statements (PgBouncer): no startup option at all.
    with DeltaPostgresSaver.from_conn_string(dsn, prepare_threshold=None) as saver:
        assert isinstance(saver.conn, psycopg.Connection)
        assert _show(saver.conn, "plan_cache_mode") == "auto"


async def test_async_pool_generic_plans(dsn: str) -> None:
    async with AsyncDeltaPostgresSaver.from_conn_string(dsn, pool_size=2) as saver:
        async with saver._connection() as conn:
            cur = await conn.execute("SHOW plan_cache_mode")
            assert (await cur.fetchone()) == ("force_generic_plan",)


def test_statements_are_not_replanned(dsn: str) -> None:
    with DeltaPostgresSaver.from_conn_string(dsn, prepare_threshold=0) as saver:
        assert isinstance(saver.conn, psycopg.Connection)
        cfg: Any = {"configurable": {"thread_id": "rare-thread", "checkpoint_ns": ""}}
        for step in range(8):
            cp = empty_checkpoint()
            cp["channel_values"] = {"n": step, "blob": [step]}
            versions = {ch: saver.get_next_version(None, None) for ch in ("n", "blob")}
            cp["channel_versions"] = versions
            cfg = saver.put(cfg, cp, {"source": "loop", "step": step}, versions)
            saver.put_writes(cfg, [("blob", [step])], f"task-{step}")
            assert saver.get_tuple(cfg) is not None
            saver.get_delta_channel_history(config=cfg, channels=["blob"])
        rows = saver.conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
        ).fetchall()
        assert rows, "nothing was prepared"
        assert all(custom == 0 and generic >= 1 for generic, custom in rows), rows
