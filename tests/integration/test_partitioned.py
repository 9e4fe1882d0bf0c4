"""The hot statements stay routable: on tables hash-partitioned by ``thread_id`` each one
reads a single partition (the thread's), with the generic plans the package's
connections use and with custom plans alike.

The tables are the migrated ones (``LIKE ... INCLUDING ALL``), re-created partitioned in
a schema of the test's own database, and the saver runs with ``schema=``. The statements
are recorded as the saver sends them (put, put_writes, get_tuple, list with a thread, the
history statement, whatever ``sql/`` holds), then run again under
``EXPLAIN (ANALYZE, FORMAT JSON)``; a partition counts as touched when a scan node on it
was executed at least once (runtime pruning shows the others as removed subplans or as
never executed).
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from psycopg import sql

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._connect import DEFAULT_PREPARE_THRESHOLD, connect_kwargs
from tests.integration._explain import Recorded, Recorder, explain, scanned, subplans_removed

SCHEMA = "part"
TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "checkpoint_epochs")
MODULUS = 4


def _partition(conn: psycopg.Connection[Any]) -> None:
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(SCHEMA)))
    for t in TABLES:
        conn.execute(
            sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL) PARTITION BY HASH (thread_id)").format(
                sql.Identifier(SCHEMA, t), sql.Identifier("public", t)
            )
        )
        for r in range(MODULUS):
            conn.execute(
                sql.SQL(
                    "CREATE TABLE {} PARTITION OF {} FOR VALUES WITH (MODULUS {}, REMAINDER {})"
                ).format(
                    sql.Identifier(SCHEMA, f"{t}_p{r}"),
                    sql.Identifier(SCHEMA, t),
                    sql.Literal(MODULUS),
                    sql.Literal(r),
                )
            )


def _write_thread(saver: DeltaPostgresSaver, thread_id: str, steps: int) -> RunnableConfig:
    """A DeltaChannel-shaped thread: a snapshot, then writes and carried-over versions."""
    cfg: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    versions: dict[str, str] = {}
    for step in range(steps):
        cp = empty_checkpoint()
        new: dict[str, str | int | float] = {
            "messages": saver.get_next_version(versions.get("messages"), None)
        }
        if step == 0:
            cp["channel_values"] = {"messages": _DeltaSnapshot(["hello"]), "n": step}
            new["n"] = saver.get_next_version(None, None)
        else:
            cp["channel_values"] = {"n": step}
        versions.update({k: str(v) for k, v in new.items()})
        cp["channel_versions"] = dict(versions)
        md: Any = {"source": "loop", "step": step, "parents": {},
                   "counters_since_delta_snapshot": {"messages": [step, step]}}
        cfg = saver.put(cfg, cp, md, new)
        saver.put_writes(cfg, [("messages", [f"m{step}"])], f"task-{step}")
    return cfg


def _thread_partition(conn: psycopg.Connection[Any], thread_id: str) -> int:
    row = conn.execute(
        sql.SQL("SELECT DISTINCT tableoid::regclass::text FROM {} WHERE thread_id = %s").format(
            sql.Identifier(SCHEMA, "checkpoints")
        ),
        (thread_id,),
    ).fetchall()
    assert len(row) == 1, row
    return int(str(row[0][0]).rsplit("_p", 1)[1])


def _remainders(touched: set[str]) -> set[int]:
    return {int(name.rsplit("_p", 1)[1]) for name in touched}


@pytest.fixture
def partitioned(dsn: str) -> Any:
    with psycopg.connect(dsn, autocommit=True) as admin:
        _partition(admin)
        # The package's own connection settings: generic plans, no sequential scans.
        opts = connect_kwargs(dsn, DEFAULT_PREPARE_THRESHOLD)
        with psycopg.connect(dsn, **opts) as conn, psycopg.connect(dsn, **opts) as meter:
            rec = Recorder()
            rec.attach(conn)
            saver = DeltaPostgresSaver(conn, schema=SCHEMA)
            # Other threads in every partition, so that reading one would show.
            for i in range(12):
                _write_thread(saver, f"other-{i}", 3)
            assert conn.execute(
                sql.SQL("SELECT count(DISTINCT tableoid) FROM {}").format(
                    sql.Identifier(SCHEMA, "checkpoints")
                )
            ).fetchone() == (MODULUS,)
            rec.take()
            yield saver, rec, meter


def _hot_statements(saver: DeltaPostgresSaver, rec: Recorder) -> dict[str, Recorded]:
    tid = "the-thread"
    cfg = _write_thread(saver, tid, 6)
    out: dict[str, Recorded] = {}

    def one(name: str) -> None:
        got = rec.take()
        assert got, f"{name}: no statement recorded"
        for i, stmt in enumerate(got):
            out[name if len(got) == 1 else f"{name}#{i}"] = stmt

    rec.take()
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": _DeltaSnapshot(["a", "b"]), "n": 9}
    cp["channel_versions"] = {"messages": saver.get_next_version("7", None), "n": "1"}
    cfg2 = saver.put(cfg, cp, {"source": "loop", "step": 9, "parents": {}},
                     {"messages": cp["channel_versions"]["messages"]})
    one("put")
    saver.put_writes(cfg2, [("messages", ["c"]), ("n", 3)], "task-x", "path")
    one("put_writes")
    saver.put_writes(cfg2, [("__error__", "boom")], "task-y")
    one("put_writes special")
    latest: RunnableConfig = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
    assert saver.get_tuple(latest) is not None
    one("get_tuple latest")
    assert saver.get_tuple(cfg) is not None
    one("get_tuple by id")
    assert len(list(saver.list({"configurable": {"thread_id": tid}}, limit=3))) == 3
    one("list thread limit")
    assert len(list(saver.list(latest, limit=2))) == 2
    one("list thread+ns limit")
    assert len(list(saver.list({"configurable": {"thread_id": tid}}))) == 7
    one("list thread")
    assert len(list(saver.list({"configurable": {"thread_id": tid}}, before=cfg, limit=2))) == 2
    one("list thread before")
    hist = saver.get_delta_channel_history(config=cfg, channels=["messages"])
    assert [w[2] for w in hist["messages"]["writes"]] == [[f"m{s}"] for s in range(5)]
    one("delta_history")
    return out


@pytest.mark.parametrize("generic", [True, False], ids=["generic", "custom"])
def test_hot_statements_touch_one_partition(partitioned: Any, generic: bool) -> None:
    saver, rec, meter = partitioned
    stmts = _hot_statements(saver, rec)
    home = _thread_partition(meter, "the-thread")
    for name, stmt in stmts.items():
        plan = explain(meter, stmt, generic=generic)
        touched = scanned(plan)
        assert _remainders(touched) <= {home}, (name, touched, plan)
        if not name.startswith("put"):  # the inserts route by value and scan nothing else
            assert touched, (name, plan)
        for t in TABLES:
            assert len([p for p in touched if p.rsplit("_p", 1)[0] == t]) <= 1, (name, touched)
        if generic and touched:
            # a generic plan cannot prune while planning: the executor did, at startup
            assert subplans_removed(plan) > 0, (name, plan)
    # The check can fail: a list across threads reads every partition.
    list(saver.list(None, limit=2))
    (across,) = rec.take()
    assert _remainders(scanned(explain(meter, across, generic=generic))) == set(range(MODULUS))
