"""The range walk (delta_history.sql, "Range walk"): a linear stretch of the chain is
read with two index range scans, and only when the rows prove it is the parent chain;
everything else (forks interleaved in the range, skewed ids, rows written by the official
saver, claims without a blob, the depth guard) walks step by step. Each case checks which
path the statement took (EXPLAIN ANALYZE: did the `fast` CTE yield its row) and that the
answer equals InMemorySaver's, which follows the parents."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._cache import NO_PLAN
from tests.graph._util import (
    ThreadGen,
    apply_steps,
    canon_history,
    cfg,
    official_saver,
    skewed_clock,
)

CHANNELS = ["a", "b"]


def _ctes(plan: Any) -> Iterator[dict[str, Any]]:
    if isinstance(plan, dict):
        if plan.get("Subplan Name", "").startswith("CTE "):
            yield plan
        for child in plan.get("Plans", []):
            yield from _ctes(child)


def took_range(saver: DeltaPostgresSaver, config: RunnableConfig, channels: list[str]) -> bool:
    """Whether the history statement read this call's chain as a verified stretch."""
    conf = config["configurable"]
    params = saver._history_params(
        conf["thread_id"], conf.get("checkpoint_ns", ""), conf.get("checkpoint_id"),
        channels, NO_PLAN,
    )
    assert isinstance(saver.conn, psycopg.Connection)
    query = saver.history_query().as_string(saver.conn)
    row = saver.conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query, params).fetchone()
    assert row is not None
    plan = row[0] if not isinstance(row[0], str) else json.loads(row[0])
    fast = [c for c in _ctes(plan[0]["Plan"]) if c["Subplan Name"] == "CTE fast"]
    assert len(fast) == 1, plan
    return bool(fast[0]["Actual Rows"])


def check(saver: DeltaPostgresSaver, mem: Any, thread: str, checkpoint_id: str) -> None:
    """``mem``: the reference (InMemorySaver; the official saver on rows it wrote)."""
    config = cfg(thread, "", checkpoint_id)
    got = canon_history(saver.get_delta_channel_history(config=config, channels=CHANNELS))
    want = canon_history(mem.get_delta_channel_history(config=config, channels=CHANNELS))
    for ch in CHANNELS:
        if want[ch].get("seed") == ("NoneType", None):
            want[ch].pop("seed")  # the documented divergence: a stored None is no seed
            got[ch].pop("seed", None)
    assert got == want, config


@pytest.fixture
def saver(dsn: str) -> Iterator[DeltaPostgresSaver]:
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as s:
        yield s


@pytest.mark.parametrize("seed_p", [0.0, 0.1, 0.4])
def test_linear_chain_is_read_as_a_range(saver: DeltaPostgresSaver, seed_p: float) -> None:
    g = ThreadGen(random.Random(f"linear-{seed_p}"), CHANNELS, "t")
    last = g.step(None, seed_p=seed_p)
    for _ in range(40):
        last = g.step(last, seed_p=seed_p)
    mem = InMemorySaver()
    apply_steps(mem, "lin", g.steps)
    apply_steps(saver, "lin", g.steps)
    for st in g.steps[1:]:
        check(saver, mem, "lin", st.checkpoint_id)
    # the head's chain (a chain of 40 with no fork) is read as one stretch
    assert took_range(saver, cfg("lin", "", g.steps[-1].checkpoint_id), CHANNELS)


def test_fork_inside_the_range_walks_step_by_step(saver: DeltaPostgresSaver) -> None:
    """A fork written between two checkpoints of the main chain sits in its id range."""
    g = ThreadGen(random.Random("fork"), CHANNELS, "t")
    main = [g.step(None, seed_p=0.0)]
    for _ in range(10):
        main.append(g.step(main[-1], seed_p=0.0))
    fork = g.step(main[3], seed_p=0.0)  # its id sorts between main[-1] and what follows
    for _ in range(5):
        main.append(g.step(main[-1], seed_p=0.0))
    mem = InMemorySaver()
    apply_steps(mem, "fk", g.steps)
    apply_steps(saver, "fk", g.steps)
    for st in g.steps[1:]:
        check(saver, mem, "fk", st.checkpoint_id)
    head = cfg("fk", "", main[-1].checkpoint_id)
    assert not took_range(saver, head, CHANNELS)
    # below the fork's id the chain is linear again: the fork's own history is a range
    assert took_range(saver, cfg("fk", "", fork.checkpoint_id), CHANNELS)


def test_skewed_child_walks_step_by_step(saver: DeltaPostgresSaver) -> None:
    """A child whose id sorts below its parent's (a worker whose clock is behind)."""
    g = ThreadGen(random.Random("skew"), CHANNELS, "t")
    last = g.step(None, seed_p=0.0)
    for _ in range(8):
        last = g.step(last, seed_p=0.0)
    with skewed_clock(1.0):
        last = g.step(last, seed_p=0.0)
    for _ in range(5):
        last = g.step(last, seed_p=0.0)
    mem = InMemorySaver()
    apply_steps(mem, "sk", g.steps)
    apply_steps(saver, "sk", g.steps)
    for st in g.steps[1:]:
        check(saver, mem, "sk", st.checkpoint_id)
    assert not took_range(saver, cfg("sk", "", g.steps[-1].checkpoint_id), CHANNELS)


def test_rows_of_the_official_saver_walk_step_by_step(
    dsn: str, saver: DeltaPostgresSaver
) -> None:
    """Rows another saver writes into the adopted tables do not say which channels they
    store (stored_channels is NULL): a stretch holding one is not trusted."""
    g = ThreadGen(random.Random("official"), CHANNELS, "t")
    last = g.step(None, seed_p=0.2)
    for _ in range(20):
        last = g.step(last, seed_p=0.2)
    apply_steps(saver, "of", g.steps[:10])
    with official_saver(dsn) as off:
        apply_steps(off, "of", g.steps[10:])
        # the official saver reads its own rows (it stores the generated steps' values
        # its own way), ours must read them as it does
        for st in g.steps[1:]:
            check(saver, off, "of", st.checkpoint_id)
    assert not took_range(saver, cfg("of", "", g.steps[-1].checkpoint_id), CHANNELS)
    # below the official saver's rows the chain is ours and is read as a range
    assert took_range(saver, cfg("of", "", g.steps[9].checkpoint_id), CHANNELS)


def test_claim_without_a_blob_walks_step_by_step(dsn: str, saver: DeltaPostgresSaver) -> None:
    """The nearest checkpoint claiming a channel has lost its blob (deleted under it):
    the statement does not trust the claim, and the walk goes on below it."""
    g = ThreadGen(random.Random("claim"), ["a"], "t")
    steps = [g.step(None, seed_p=0.0)]
    for i in range(12):
        steps.append(g.step(steps[-1], seed_p=1.0 if i in (3, 8) else 0.0))
    mem = InMemorySaver()
    apply_steps(saver, "cl", steps)
    head = cfg("cl", "", steps[-1].checkpoint_id)
    assert took_range(saver, head, ["a"])
    claimed = steps[9]  # the newest seed
    version = claimed.channel_versions["a"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        n = conn.execute(
            "DELETE FROM checkpoint_blobs WHERE thread_id = 'cl' AND channel = 'a'"
            " AND version = %s", (version,),
        ).rowcount
    assert n == 1, "the generated newest seed is a blob (a plain dict value)"
    assert not took_range(saver, head, ["a"])
    # InMemorySaver's view of the same rows: that checkpoint stores nothing
    claimed.channel_values.pop("a", None)
    apply_steps(mem, "cl", steps)
    got = saver.get_delta_channel_history(config=head, channels=["a"])
    want = mem.get_delta_channel_history(config=head, channels=["a"])
    assert canon_history(got) == canon_history(want)


def test_depth_guard_still_raises(saver: DeltaPostgresSaver) -> None:
    from langgraph_delta_postgres import HistoryError

    g = ThreadGen(random.Random("deep"), CHANNELS, "t")
    last = g.step(None, seed_p=0.0)
    for _ in range(30):
        last = g.step(last, seed_p=0.0)
    apply_steps(saver, "dp", g.steps)
    head = cfg("dp", "", g.steps[-1].checkpoint_id)
    assert took_range(saver, head, CHANNELS)
    saver.max_history_depth = 10
    assert not took_range(saver, head, CHANNELS)
    with pytest.raises(HistoryError, match="max_history_depth"):
        saver.get_delta_channel_history(config=head, channels=CHANNELS)
