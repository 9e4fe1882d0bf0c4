"""Connections opened by from_conn_string plan prepared statements generically, so the
history statement, put and get_tuple are not re-planned on every call."""

from __future__ import annotations

import os
import re
from typing import Any

import psycopg
from langgraph.checkpoint.base import ChannelVersions, empty_checkpoint
from psycopg import sql
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
            versions: ChannelVersions = {
                ch: saver.get_next_version(None, None) for ch in ("n", "blob")
            }
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


def _grow(saver: DeltaPostgresSaver, thread_id: str, counters: bool, prime: Any) -> Any:
    """300 checkpoints of one channel "ch" with a write each; ``prime(cfg)`` runs at step
    2, so the statement it runs is prepared (and its plan cached) on 3 rows. ``counters``:
    the metadata names "ch" as a DeltaChannel (get_tuple then walks its history)."""
    cfg: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    for step in range(300):
        cp = empty_checkpoint()
        cp["channel_versions"] = {"ch": saver.get_next_version(None, None)}
        md: Any = {"source": "loop", "step": step}
        if counters:
            md["counters_since_delta_snapshot"] = {"ch": [step + 1, step + 1]}
        cfg = saver.put(cfg, cp, md, {})
        saver.put_writes(cfg, [("ch", step)], f"task-{step}")
        if step == 2:
            prime(cfg)
    return cfg


def _cached_plan(
    saver: DeltaPostgresSaver, tuple_statement: bool, args: sql.Composable, analyze: bool = False
) -> str:
    """EXPLAIN of the prepared history statement (or get_tuple's, which holds the same
    walk) with these parameters: the generic plan cached when it was prepared (with
    ``analyze``: executed, ``EXPLAIN (ANALYZE, COSTS OFF)``)."""
    assert isinstance(saver.conn, psycopg.Connection)
    row = saver.conn.execute(
        "SELECT name FROM pg_prepared_statements WHERE statement LIKE 'WITH RECURSIVE%' "
        f"AND statement {'' if tuple_statement else 'NOT '}LIKE '%AS tu ON%'"
    ).fetchone()
    assert row is not None
    explain = sql.SQL(
        "EXPLAIN (ANALYZE, COSTS OFF) EXECUTE {}({})" if analyze else "EXPLAIN EXECUTE {}({})"
    ).format(sql.Identifier(row[0]), args)
    return "\n".join(r[0] for r in saver.conn.execute(explain))


def _positional(query: sql.Composed, conn: Any, values: dict[str, str]) -> sql.Composable:
    """EXECUTE arguments of a prepared statement: psycopg numbers the named parameters in
    the order they first appear in the statement's text."""
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)[sb]", query.as_string(conn))))
    return sql.SQL(", ").join(sql.SQL(values[n]) for n in names)


#: SQL literals of the history walk's parameters (checkpoint_id added per test)
WALK_ARGS = {
    "held_ids": "'{}'", "held_tokens": "'{}'", "seed_tokens": "'{}'", "max_depth": "1000000",
    "held_values": "'{}'", "nodes": "true", "checkpoint_ns": "''", "tasks": "'__pregel_tasks'",
}


def _assert_key_lookups(plan: str) -> None:
    assert "Seq Scan" not in plan and "thread_id_idx" not in plan, plan
    assert "checkpoints_pkey" in plan and "checkpoint_writes_pkey" in plan, plan
    # writes are looked up per visited checkpoint: no join whose method the planner
    # picks from statistics (a nested loop over the whole walk per write row was
    # chosen on never-analyzed tables: 1.93 s instead of 16 ms at depth 2,000)
    assert "(checkpoint_id = w.checkpoint_id)" in plan, plan
    # the range walk: the stretch and its writes are index range scans of the primary
    # keys, bounded by the stretch's ends (delta_history.sql, "Range walk"), and the
    # writes are kept only for the stretch's checkpoints by a hashed subplan (an id range
    # also holds orphan writes: contract rule 13), never a per-write scan of the stretch
    lines = plan.splitlines()
    for index, bound in (("checkpoints_pkey", "sp.hi"), ("checkpoint_writes_pkey", "f.hi")):
        at = [i for i, line in enumerate(lines) if f"using {index}" in line]
        assert any(
            f"(checkpoint_id <= {bound})" in lines[i + 1] and "Index Cond" in lines[i + 1]
            for i in at
        ), plan
    assert "hashed SubPlan" in plan, plan
    assert "Hash Join" not in plan and "Merge Join" not in plan, plan


def test_plan_cached_on_tiny_tables_stays_a_key_lookup(dsn: str) -> None:
    """The history statement is prepared while the thread is tiny; after the thread grows,
    its cached plan must still be one primary-key lookup per step (no seq scan, no
    thread-only index: those made a walk cost the square of its depth)."""
    with DeltaPostgresSaver.from_conn_string(dsn, prepare_threshold=0) as saver:
        assert isinstance(saver.conn, psycopg.Connection)
        idx = {r[0] for r in saver.conn.execute("SELECT indexname FROM pg_indexes")}
        assert not any(i.endswith("_thread_id_idx") for i in idx), idx
        cfg = _grow(
            saver, "grow", False,
            lambda c: saver.get_delta_channel_history(config=c, channels=["ch"]),
        )
        got = saver.get_delta_channel_history(config=cfg, channels=["ch"])
        assert [w[2] for w in got["ch"]["writes"]] == list(range(299))
        target = sql.Literal(cfg["configurable"]["checkpoint_id"]).as_string(saver.conn)
        args = _positional(saver.history_query(), saver.conn, {
            **WALK_ARGS, "channels": "ARRAY['ch']", "thread_id": "'grow'",
            "checkpoint_id": target,
        })
        _assert_key_lookups(_cached_plan(saver, False, args))


def test_get_tuple_with_history_plan_stays_a_key_lookup(dsn: str) -> None:
    """get_tuple of the latest checkpoint runs the history walk in its own statement
    (delta_history.tuple_history): prepared while the thread is tiny, its cached plan
    must stay one primary-key lookup per step as the thread grows, like the history
    statement's."""
    with DeltaPostgresSaver.from_conn_string(dsn, prepare_threshold=0) as saver:
        latest: Any = {"configurable": {"thread_id": "grow-t", "checkpoint_ns": ""}}
        _grow(saver, "grow-t", True, lambda c: saver.get_tuple(latest))
        tup = saver.get_tuple(latest)
        assert tup is not None
        got = saver.get_delta_channel_history(config=tup.config, channels=["ch"])
        assert [w[2] for w in got["ch"]["writes"]] == list(range(299))
        args = _positional(saver.tuple_history_query(), saver.conn, {
            **WALK_ARGS, "channels": "NULL", "thread_id": "'grow-t'", "checkpoint_id": "NULL",
        })
        _assert_key_lookups(_cached_plan(saver, True, args))


def test_get_tuple_sorts_the_history_rows_not_the_tuple(dsn: str) -> None:
    """The tuple get_tuple sends with its history (its blobs, aggregated: megabytes for a
    large snapshot) is joined after the history rows are sorted: no sort or
    materialization above that join, so a large snapshot never goes through a sort (it
    went, past work_mem, to disk: get_state was slower than the official saver's)."""
    with DeltaPostgresSaver.from_conn_string(dsn, prepare_threshold=0) as saver:
        latest: Any = {"configurable": {"thread_id": "wide-t", "checkpoint_ns": ""}}
        _grow(saver, "wide-t", True, lambda c: saver.get_tuple(latest))
        # the latest checkpoint stores a 6 MB value (work_mem is 4 MB by default)
        cfg = saver.get_tuple(latest)
        assert cfg is not None
        cp = empty_checkpoint()
        big = [os.urandom(64).hex() for _ in range(50_000)]
        cp["channel_values"] = {"big": big}
        cp["channel_versions"] = {"big": saver.get_next_version(None, None),
                                  "ch": saver.get_next_version(None, None)}
        md: Any = {"source": "loop", "step": 300, "counters_since_delta_snapshot": {"ch": [1, 1]}}
        saver.put(cfg.config, cp, md, {"big": cp["channel_versions"]["big"]})
        tup = saver.get_tuple(latest)
        assert tup is not None and tup.checkpoint["channel_values"]["big"] == big
        assert isinstance(saver.conn, psycopg.Connection)
        args = _positional(saver.tuple_history_query(), saver.conn, {
            **WALK_ARGS, "channels": "NULL", "thread_id": "'wide-t'", "checkpoint_id": "NULL",
        })
        plan = _cached_plan(saver, True, args)
        top = plan.splitlines()[0]
        assert top.startswith("Nested Loop Left Join"), plan
        assert "Materialize" not in plan, plan
        # executed: every sort in it is in memory (only the narrow rows are sorted)
        ran = _cached_plan(saver, True, args, analyze=True)
        assert "Sort Method" in ran and "Disk:" not in ran and "external" not in ran, ran
