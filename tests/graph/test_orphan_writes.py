"""Orphan writes are never replayed (../shared/DELTA_CONTRACT.md rule 13).

A ``checkpoint_writes`` row whose checkpoint was never saved (a ``put`` that failed after
the next step's writes landed, under ``durability="async"``) or was deleted (a
``delete_thread`` racing a running step, the thread id then used again or copied) sits
in the id range of the chain. Every read path must ignore it, as the step-by-step walk
and the official saver do: the range walk, the cache, get_tuple's prefetch, copy_thread.

Each case makes the orphans the way production makes them, then compares the state and
history of ours (cache off, cache on after warm reads, a new saver) with the official
saver reading the same rows and with InMemorySaver fed the same operations.
"""

from __future__ import annotations

import operator
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver
from tests.graph._graphs import append_reducer
from tests.graph._util import canon, official_saver


class State(TypedDict):
    items: Annotated[list[Any], DeltaChannel(append_reducer, snapshot_frequency=4)]
    log: Annotated[list[Any], DeltaChannel(append_reducer, snapshot_frequency=100)]
    n: Annotated[int, operator.add]


def _node(name: str) -> Any:
    def node(state: State) -> dict[str, Any]:
        return {"items": [f"{name}{state['n']}"], "log": [name], "n": 1}

    return node


def graph_builder() -> StateGraph[Any]:
    b = StateGraph(State)
    b.add_node("a", _node("a"))
    b.add_node("b", _node("b"))
    b.add_node("c", _node("c"))
    b.add_edge(START, "a")
    b.add_edge("a", "b")
    b.add_edge("b", "c")
    b.add_edge("c", END)
    return b


class PutFault(ConnectionError):
    """The injected fault: the network dropped the put's statement."""


def failing(saver_cls: type[Any]) -> type[Any]:
    """``saver_cls`` whose put fails on chosen calls (counted from 1), before any
    statement runs, as a connection lost on the way out would."""

    class Failing(saver_cls):  # type: ignore[misc]  # its base is the parameter: Any to mypy
        fail_on: set[int] = set()
        puts = 0

        def put(self, *a: Any, **kw: Any) -> Any:
            type(self).puts += 1
            if type(self).puts in self.fail_on:
                raise PutFault("injected: put lost")
            return super().put(*a, **kw)

        async def aput(self, *a: Any, **kw: Any) -> Any:
            type(self).puts += 1
            if type(self).puts in self.fail_on:
                raise PutFault("injected: put lost")
            return await super().aput(*a, **kw)

    return Failing


def cfg(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


def observe(saver: BaseCheckpointSaver[Any], thread: str) -> list[Any]:
    """The state and every checkpoint's values of the thread, newest first."""
    graph = graph_builder().compile(checkpointer=saver)
    return [
        (canon(s.values), tuple(s.next), (s.metadata or {}).get("step"))
        for s in graph.get_state_history(cfg(thread))
    ]


async def aobserve(saver: BaseCheckpointSaver[Any], thread: str) -> list[Any]:
    graph = graph_builder().compile(checkpointer=saver)
    return [
        (canon(s.values), tuple(s.next), (s.metadata or {}).get("step"))
        async for s in graph.aget_state_history(cfg(thread))
    ]


def run_with_faults(saver: BaseCheckpointSaver[Any], thread: str, fail_on: set[int]) -> int:
    """Five invokes under durability="async"; the chosen puts fail. Returns how many
    invokes raised the fault."""
    type(saver).fail_on = fail_on  # type: ignore[attr-defined]
    type(saver).puts = 0  # type: ignore[attr-defined]
    graph = graph_builder().compile(checkpointer=saver)
    failed = 0
    for _ in range(5):
        try:
            graph.invoke({"items": [], "log": [], "n": 0}, cfg(thread), durability="async")
        except PutFault:
            failed += 1
    return failed


async def arun_with_faults(saver: BaseCheckpointSaver[Any], thread: str, fail_on: set[int]) -> int:
    type(saver).fail_on = fail_on  # type: ignore[attr-defined]
    type(saver).puts = 0  # type: ignore[attr-defined]
    graph = graph_builder().compile(checkpointer=saver)
    failed = 0
    for _ in range(5):
        try:
            await graph.ainvoke({"items": [], "log": [], "n": 0}, cfg(thread), durability="async")
        except PutFault:
            failed += 1
    return failed


def orphan_count(dsn: str, thread: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM checkpoint_writes AS w WHERE w.thread_id = %s AND NOT EXISTS "
            "(SELECT 1 FROM checkpoints AS c WHERE c.thread_id = w.thread_id "
            "AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id)",
            (thread,),
        ).fetchone()
    assert row is not None
    return int(row[0])


#: puts counted from 1: each invoke of the 3-node graph puts 5 checkpoints (input, start
#: and one per node), so these fail mid-run, after the next node's writes landed.
FAULTS = {3, 9, 14, 17}


@pytest.fixture
def reference() -> Iterator[list[Any]]:
    mem = failing(InMemorySaver)()
    assert run_with_faults(mem, "t", FAULTS) == len(FAULTS)
    yield observe(mem, "t")


@pytest.mark.parametrize("cache_bytes", [0, 64 * 1024 * 1024])
def test_failed_puts_leave_orphans_that_no_read_replays(
    dsn: str, reference: list[Any], cache_bytes: int
) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        saver = failing(DeltaPostgresSaver)(conn, cache_bytes=cache_bytes)
        assert run_with_faults(saver, "t", FAULTS) == len(FAULTS)
        assert orphan_count(dsn, "t") > 0, "the faults left no orphan: the test proves nothing"
        first = observe(saver, "t")
        assert first == reference
        assert observe(saver, "t") == reference  # warm: through the cache when on
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=cache_bytes) as cold:
        assert observe(cold, "t") == reference
    with official_saver(dsn) as official:
        assert observe(official, "t") == reference


async def test_failed_puts_async(dsn: str, reference: list[Any]) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        saver = failing(AsyncDeltaPostgresSaver)(conn)
        assert await arun_with_faults(saver, "t", FAULTS) == len(FAULTS)
        assert orphan_count(dsn, "t") > 0
        assert await aobserve(saver, "t") == reference
        assert await aobserve(saver, "t") == reference
    async with AsyncDeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as cold:
        assert await aobserve(cold, "t") == reference


def test_writes_of_a_deleted_run_then_reused_id_and_copy(dsn: str) -> None:
    """A delete_thread racing a running step: the step's put_writes lands after the
    delete, the thread id is used again (its new checkpoints' ids sort above the orphan's),
    then copied. Neither the reused thread nor its copy replays the orphan."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    mem = InMemorySaver()
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as ours:
        graph = graph_builder().compile(checkpointer=ours)
        graph.invoke({"items": [], "log": [], "n": 0}, cfg(thread))
        latest = ours.get_tuple(cfg(thread))
        assert latest is not None
        ours.delete_thread(thread)
        # the racing step's writes land after the delete
        ours.put_writes(latest.config, [("items", ["ORPHAN"]), ("log", ["ORPHAN"])], "task-x")
        # Reused: new runs put checkpoints around and above the orphan's id.
        for saver in (ours, mem):
            g = graph_builder().compile(checkpointer=saver)
            for _ in range(3):
                g.invoke({"items": [], "log": [], "n": 0}, cfg(thread))
        assert orphan_count(dsn, thread) == 2
        want = observe(mem, thread)
        assert observe(ours, thread) == want
        ours.copy_thread(thread, thread + "-copy")
        assert observe(ours, thread + "-copy") == want
        assert orphan_count(dsn, thread + "-copy") == 0, "copy_thread copied orphan writes"
    with DeltaPostgresSaver.from_conn_string(dsn) as cached:
        assert observe(cached, thread) == want
        assert observe(cached, thread) == want
    with official_saver(dsn) as official:
        assert observe(official, thread) == want


def test_orphan_between_two_consecutive_checkpoints(dsn: str) -> None:
    """The issue's repro: put_writes to an id that sorts between two consecutive
    checkpoints of the chain and was never put; every path ignores it."""
    thread = "t-between"
    mem = InMemorySaver()
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as ours:
        for saver in (ours, mem):
            g = graph_builder().compile(checkpointer=saver)
            for _ in range(3):
                g.invoke({"items": [], "log": [], "n": 0}, cfg(thread))
        ids = sorted(c.config["configurable"]["checkpoint_id"] for c in ours.list(cfg(thread)))
        lo, hi = ids[4], ids[5]
        orphan_id = lo + "0"  # sorts right after lo, before hi
        assert lo < orphan_id < hi
        ours.put_writes(
            {"configurable": {"thread_id": thread, "checkpoint_id": orphan_id}},
            [("items", ["ORPHAN"]), ("log", ["ORPHAN"])],
            "task-x",
        )
        want = observe(mem, thread)
        assert observe(ours, thread) == want
    for cache_bytes in (0, 64 * 1024 * 1024):
        with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=cache_bytes) as s:
            assert observe(s, thread) == want
            assert observe(s, thread) == want
    with official_saver(dsn) as official:
        assert observe(official, thread) == want
