"""prune racing a live run on the same thread, in a loop: no acknowledged write is lost
and the thread always loads.

A run invokes a DeltaChannel graph over and over (each invoke acknowledged when it
returns) while another connection prunes the thread (keep_latest, keep_last) as fast as
it can and a third one loads it. At the end the thread's state must equal the same
inputs replayed on InMemorySaver, through our saver and the official one, and no prune
or load may have failed. The run makes at least TURNS invokes, and goes on until the
pruner and the loader have each done their MIN_RACING calls during it (counted, not
timed: a loaded machine prunes less per invoke); one that has not by RUN_S fails.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Durability
from psycopg_pool import AsyncConnectionPool

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver
from tests.graph._util import canon, official_saver
from tests.graph.test_delta_graphs import fanout_builder

TURNS = 40
#: a snapshot every ~12 invokes: the state is rebuilt from many checkpoints' writes
FREQ = 50
#: the longest a worker may take to stop after being told (one prune or load)
JOIN_S = 60.0
#: a worker stops by itself after this long even if never told (the run hung); the run
#: stops invoking by then too, and fails if the race was not done
RUN_S = 300.0
#: prunes and loads that must have run during the invokes
MIN_RACING = 11


def T(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


def expected_state(durability: Durability, turns: int = TURNS) -> Any:
    g = fanout_builder(FREQ).compile(checkpointer=InMemorySaver())
    for i in range(turns):
        g.invoke({"items": [f"u{i}"]}, T("R"), durability=durability)
    return canon(g.get_state(T("R")).values)


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_prune_racing_a_live_run_sync(dsn: str, durability: Durability) -> None:
    stop = threading.Event()
    errors: list[BaseException] = []
    pruned = [0, 0]  # prunes done, checkpoints they deleted
    loads = [0]

    def pruner() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            saver = DeltaPostgresSaver(conn)
            n = 0
            deadline = time.monotonic() + RUN_S
            while not stop.is_set() and time.monotonic() < deadline:
                try:
                    stats = saver.prune(["R"], keep_last=None if n % 2 else 2)
                except BaseException as e:  # noqa: BLE001 - every failure is reported
                    errors.append(e)
                    return
                pruned[0] += 1
                pruned[1] += stats.checkpoints
                n += 1

    def loader() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            g = fanout_builder(FREQ).compile(checkpointer=DeltaPostgresSaver(conn))
            seen = 0
            deadline = time.monotonic() + RUN_S
            while not stop.is_set() and time.monotonic() < deadline:
                try:
                    items = g.get_state(T("R")).values.get("items", [])
                    # the state only grows: a load that lost history would shrink it
                    assert len(items) >= seen, (len(items), seen)
                    seen = len(items)
                except BaseException as e:  # noqa: BLE001
                    errors.append(e)
                    return
                loads[0] += 1

    with psycopg.connect(dsn, autocommit=True) as conn:
        saver = DeltaPostgresSaver(conn)
        g = fanout_builder(FREQ).compile(checkpointer=saver)
        g.invoke({"items": ["u0"]}, T("R"), durability=durability)
        # daemons: a worker that hangs fails the join below and does not keep the
        # interpreter alive
        workers = [
            threading.Thread(target=pruner, daemon=True),
            threading.Thread(target=loader, daemon=True),
        ]
        for w in workers:
            w.start()
        try:
            t0 = time.monotonic()
            turns = 1
            while turns < TURNS or (
                (pruned[0] < MIN_RACING or pruned[1] == 0 or loads[0] < MIN_RACING)
                and time.monotonic() - t0 < RUN_S
            ):
                g.invoke({"items": [f"u{turns}"]}, T("R"), durability=durability)
                turns += 1
                assert not errors, errors
            elapsed = time.monotonic() - t0
        finally:
            stop.set()
            for w in workers:
                w.join(JOIN_S)
        assert not any(w.is_alive() for w in workers), "a pruner or loader hung"
        assert not errors, errors
        did = f"{turns} invokes, {pruned} prunes and checkpoints pruned, {loads} loads"
        assert pruned[0] >= MIN_RACING and pruned[1] > 0, f"{did} in {elapsed:.0f} s"
        assert loads[0] >= MIN_RACING, f"{did} in {elapsed:.0f} s"
        want = expected_state(durability, turns)
        assert canon(g.get_state(T("R")).values) == want
        with official_saver(dsn) as off:
            g_off = fanout_builder(FREQ).compile(checkpointer=off)
            assert canon(g_off.get_state(T("R")).values) == want
        # and it goes on
        g.invoke({"items": ["more"]}, T("R"))
        items = g.get_state(T("R")).values["items"]
        assert items.count("more") == 1 and items[-1].startswith("join")


async def test_prune_racing_a_live_run_async(dsn: str) -> None:
    done = asyncio.Event()
    errors: list[BaseException] = []
    pruned = [0]
    async with AsyncConnectionPool(dsn, min_size=3, max_size=3, open=False) as pool:
        saver = AsyncDeltaPostgresSaver(pool)
        g = fanout_builder(FREQ).compile(checkpointer=saver)

        async def pruner() -> None:
            deadline = time.monotonic() + RUN_S
            while not done.is_set() and time.monotonic() < deadline:
                try:
                    await saver.aprune(["R"])
                except BaseException as e:  # noqa: BLE001
                    errors.append(e)
                    return
                pruned[0] += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(pruner())
        turns = 0
        t0 = time.monotonic()
        try:
            while turns < TURNS or (pruned[0] < MIN_RACING and time.monotonic() - t0 < RUN_S):
                await asyncio.wait_for(g.ainvoke({"items": [f"u{turns}"]}, T("R")), JOIN_S)
                await asyncio.wait_for(g.aget_state(T("R")), JOIN_S)
                turns += 1
                assert not errors, errors
        finally:
            done.set()
            # bounded: a pruner stuck in a statement fails here, not the suite
            await asyncio.wait_for(task, JOIN_S)
        assert not errors, errors
        assert pruned[0] >= MIN_RACING, f"{turns} invokes, {pruned[0]} prunes"
        assert canon((await g.aget_state(T("R"))).values) == expected_state("async", turns)
