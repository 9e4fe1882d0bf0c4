"""prune racing a live run on the same thread, in a loop: no acknowledged write is lost
and the thread always loads.

A run invokes a DeltaChannel graph over and over (each invoke acknowledged when it
returns) while another connection prunes the thread (keep_latest, keep_last) as fast as
it can and a third one loads it. At the end the thread's state must equal the same
inputs replayed on InMemorySaver, through our saver and the official one, and no prune
or load may have failed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from psycopg_pool import AsyncConnectionPool

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver
from tests.graph._util import canon, official_saver
from tests.graph.test_delta_graphs import fanout_builder

TURNS = 40
#: a snapshot every ~12 invokes: the state is rebuilt from many checkpoints' writes
FREQ = 50
#: the longest a worker may take to stop after being told (one prune or load)
JOIN_S = 60.0
#: a worker stops by itself after this long even if never told (the run hung)
RUN_S = 300.0


def T(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def expected_state(durability: str) -> Any:
    g = fanout_builder(FREQ).compile(checkpointer=InMemorySaver())
    for i in range(TURNS):
        g.invoke({"items": [f"u{i}"]}, T("R"), durability=durability)  # type: ignore[arg-type]
    return canon(g.get_state(T("R")).values)


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_prune_racing_a_live_run_sync(dsn: str, durability: str) -> None:
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
        g.invoke({"items": ["u0"]}, T("R"), durability=durability)  # type: ignore[arg-type]
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
            for i in range(1, TURNS):
                g.invoke({"items": [f"u{i}"]}, T("R"), durability=durability)  # type: ignore[arg-type]
                assert not errors, errors
            elapsed = time.monotonic() - t0
        finally:
            stop.set()
            for w in workers:
                w.join(JOIN_S)
        assert not any(w.is_alive() for w in workers), "a pruner or loader hung"
        assert not errors, errors
        assert pruned[0] > 10 and pruned[1] > 0, (pruned, elapsed)
        assert loads[0] > 10
        want = expected_state(durability)
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
        try:
            for i in range(TURNS):
                await asyncio.wait_for(g.ainvoke({"items": [f"u{i}"]}, T("R")), JOIN_S)
                await asyncio.wait_for(g.aget_state(T("R")), JOIN_S)
        finally:
            done.set()
            # bounded: a pruner stuck in a statement fails here, not the suite
            await asyncio.wait_for(task, JOIN_S)
        assert not errors, errors
        assert pruned[0] > 10
        assert canon((await g.aget_state(T("R"))).values) == expected_state("async")
