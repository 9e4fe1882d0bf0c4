"""Real LangGraph graphs with DeltaChannel fields on our saver, observed exactly like on
InMemorySaver running the identical sequence (state values, next, interrupts, history)."""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

from tests.graph._graphs import Driver, Scenario, append_reducer, run_both
from tests.plugins.savers import SaverFactory


def T(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


# --------------------------------------------------------------------- fan-out graph


def fanout_builder(freq: int) -> StateGraph[Any]:
    S = TypedDict(  # noqa: UP013 (class syntax would leave `freq` unresolved)
        "S",
        {
            "items": Annotated[list[Any], DeltaChannel(append_reducer, snapshot_frequency=freq)],
            "turns": int,
        },
        total=False,
    )

    def start(state: Any) -> dict[str, Any]:
        n = state.get("turns", 0)
        return {"items": [f"start{n}"], "turns": n + 1}

    def a(state: Any) -> dict[str, Any]:
        return {"items": [f"a{len(state['items'])}"]}

    def b(state: Any) -> dict[str, Any]:
        return {"items": [f"b{len(state['items'])}", "b-second"]}

    def c(state: Any) -> dict[str, Any]:
        return {"items": f"c{len(state['items'])}"}

    def join(state: Any) -> dict[str, Any]:
        return {"items": [f"join{len(state['items'])}"]}

    g = StateGraph(S)
    for name, fn in (("start", start), ("a", a), ("b", b), ("c", c), ("join", join)):
        g.add_node(name, fn)  # nodes' argument: "state", as langgraph's stub names it
    g.add_edge(START, "start")
    for n in ("a", "b", "c"):
        g.add_edge("start", n)
        g.add_edge(n, "join")
    g.add_edge("join", END)
    return g


def fanout_scenario(freq: int) -> Scenario:
    async def scenario(saver: BaseCheckpointSaver[Any], is_async: bool) -> list[Any]:
        d = Driver(fanout_builder(freq), saver, is_async)
        t = T("fan")
        for turn in range(4):
            await d.invoke({"items": [f"user{turn}"]}, t)
            await d.state(t)
        hist = await d.history(t)
        assert len(hist) > 10
        await d.update(t, {"items": ["updated"]}, as_node="join")
        await d.state(t)
        await d.invoke({"items": ["after-update"]}, t)
        # time travel: replay from a mid-chain checkpoint (a new branch)
        mid = hist[len(hist) // 2].config
        await d.state(mid)
        await d.invoke(None, mid)
        await d.state(t)
        await d.history(t)
        await d.history(t, limit=5)
        # fork a mid checkpoint with update_state, then continue the fork
        fork = await d.update(hist[3].config, {"items": ["forked"]})
        await d.state(fork)
        await d.invoke(None, fork)
        await d.invoke({"items": ["fork-turn"]}, t)
        await d.state(t)
        await d.history(t)
        return d.log

    return scenario


@pytest.mark.parametrize("freq", [1, 3, 100])
async def test_fanout_multi_turn(dsn: str, saver_factory: SaverFactory, freq: int) -> None:
    log = await run_both(dsn, saver_factory, fanout_scenario(freq))
    # the state really holds the parallel writes in task-path order (a, b, c): every
    # start{n} at index i is followed by what a, b and c wrote seeing i + 1 items, then
    # join seeing i + 5
    final = [o for o in log if o[0] == "state"][-1][1][0]
    assert final[0] == "dict"
    items = [v for _, v in dict(final[1])["items"][1]]  # canon: ("str", value) pairs
    # (langgraph 1.2.0 replays `start` once more when continuing the update_state fork:
    # both savers and InMemorySaver hold "start3", "start3"; the check starts at the last)
    starts = [
        i for i, x in enumerate(items)
        if str(x).startswith("start") and not str(items[i + 1]).startswith("start")
    ]
    assert len(starts) >= 5, items
    for i in starts:
        n = i + 1
        assert items[i + 1 : i + 6] == [f"a{n}", f"b{n}", "b-second", f"c{n}", f"join{n + 4}"], (
            i,
            items,
        )


# --------------------------------------------------------------------- interrupts


def interrupt_builder() -> StateGraph[Any]:
    S = TypedDict(  # noqa: UP013
        "S",
        {"items": Annotated[list[Any], DeltaChannel(append_reducer, snapshot_frequency=2)]},
        total=False,
    )

    def prep(state: Any) -> dict[str, Any]:
        return {"items": [f"prep{len(state.get('items', []))}"]}

    def ask(state: Any) -> dict[str, Any]:
        answer = interrupt({"q": len(state["items"])})
        return {"items": [f"ans:{answer}"]}

    def side1(state: Any) -> dict[str, Any]:
        return {"items": ["side1"]}

    def side2(state: Any) -> dict[str, Any]:
        return {"items": ["side2", len(state["items"])]}

    def after(state: Any) -> dict[str, Any]:
        return {"items": [f"after{len(state['items'])}"]}

    g = StateGraph(S)
    for name, fn in (
        ("prep", prep),
        ("ask", ask),
        ("side1", side1),
        ("side2", side2),
        ("after", after),
    ):
        g.add_node(name, fn)
    g.add_edge(START, "prep")
    for n in ("ask", "side1", "side2"):
        g.add_edge("prep", n)
        g.add_edge(n, "after")
    g.add_edge("after", END)
    return g


async def interrupt_scenario(saver: BaseCheckpointSaver[Any], is_async: bool) -> list[Any]:
    d = Driver(interrupt_builder(), saver, is_async)
    t = T("int")
    for turn in range(3):
        await d.invoke({"items": [f"in{turn}"]}, t)
        snap = await d.state(t)
        assert snap.next == ("ask",)
        await d.invoke(Command(resume=f"yes{turn}"), t)
        await d.state(t)
    await d.history(t)
    return d.log


async def test_interrupt_resume(dsn: str, saver_factory: SaverFactory) -> None:
    log = await run_both(dsn, saver_factory, interrupt_scenario)
    final = [o for o in log if o[0] == "state"][-1][1][0]
    assert "ans:yes2" in repr(final)


# --------------------------------------------------------------------- subgraph


def subgraph_builder() -> StateGraph[Any]:
    Sub = TypedDict(  # noqa: UP013
        "Sub",
        {
            "items": Annotated[list[Any], DeltaChannel(append_reducer, snapshot_frequency=2)],
            "inner": Annotated[list[Any], DeltaChannel(append_reducer, snapshot_frequency=1)],
        },
        total=False,
    )

    def s1(state: Any) -> dict[str, Any]:
        return {"inner": [f"s1-{len(state.get('inner', []))}"], "items": ["from-sub"]}

    def s2(state: Any) -> dict[str, Any]:
        ans = interrupt("sub?")
        return {"inner": [f"s2-{ans}"]}

    def s3(state: Any) -> dict[str, Any]:
        return {"items": [f"s3-{len(state['inner'])}"]}

    sub = StateGraph(Sub)
    sub.add_node("s1", s1)
    sub.add_node("s2", s2)
    sub.add_node("s3", s3)
    sub.add_edge(START, "s1")
    sub.add_edge("s1", "s2")
    sub.add_edge("s2", "s3")
    sub.add_edge("s3", END)

    P = TypedDict(  # noqa: UP013
        "P",
        {"items": Annotated[list[Any], DeltaChannel(append_reducer, snapshot_frequency=3)]},
        total=False,
    )

    def p1(state: Any) -> dict[str, Any]:
        return {"items": [f"p1-{len(state.get('items', []))}"]}

    def p2(state: Any) -> dict[str, Any]:
        return {"items": [f"p2-{len(state['items'])}"]}

    g = StateGraph(P)
    g.add_node("p1", p1)
    g.add_node("sub", sub.compile())
    g.add_node("p2", p2)
    g.add_edge(START, "p1")
    g.add_edge("p1", "sub")
    g.add_edge("sub", "p2")
    g.add_edge("p2", END)
    return g


async def subgraph_scenario(saver: BaseCheckpointSaver[Any], is_async: bool) -> list[Any]:
    d = Driver(subgraph_builder(), saver, is_async)
    t = T("sub")
    for turn in range(3):
        await d.invoke({"items": [f"u{turn}"]}, t)
        snap = await d.state(t, subgraphs=True)
        assert snap.tasks and snap.tasks[0].state is not None
        await d.invoke(Command(resume=f"r{turn}"), t)
        await d.state(t, subgraphs=True)
    await d.history(t)
    return d.log


async def test_subgraph_with_own_delta_channel(dsn: str, saver_factory: SaverFactory) -> None:
    await run_both(dsn, saver_factory, subgraph_scenario)


# --------------------------------------------------------------------- switching channel type


def messages_reducer(state: list[AnyMessage], writes: Sequence[Any]) -> list[AnyMessage]:
    return functools.reduce(add_messages, writes, state)  # type: ignore[arg-type]


def chat_builder(delta: bool) -> StateGraph[Any]:
    if delta:
        messages: Any = Annotated[
            list[AnyMessage], DeltaChannel(messages_reducer, snapshot_frequency=3)
        ]
        log: Any = Annotated[list[Any], DeltaChannel(append_reducer, snapshot_frequency=50)]
    else:
        messages = Annotated[list[AnyMessage], add_messages]
        log = Annotated[list[Any], operator.add]
    S = TypedDict("S", {"messages": messages, "log": log})  # noqa: UP013

    def chat(state: Any) -> dict[str, Any]:
        n = len(state["messages"])
        return {
            "messages": [
                AIMessage(content=f"reply to {state['messages'][-1].content}", id=f"ai{n}")
            ],
            "log": [n],
        }

    g = StateGraph(S)
    g.add_node("chat", chat)
    g.add_edge(START, "chat")
    g.add_edge("chat", END)
    return g


async def switch_scenario(saver: BaseCheckpointSaver[Any], is_async: bool) -> list[Any]:
    d = Driver(chat_builder(delta=False), saver, is_async)
    t = T("switch")
    for i in range(3):
        await d.invoke({"messages": [HumanMessage(content=f"h{i}", id=f"h{i}")], "log": []}, t)
    await d.state(t)
    before = await d.history(t)
    d.recompile(chat_builder(delta=True))
    await d.state(t)
    for i in range(3, 8):
        await d.invoke({"messages": [HumanMessage(content=f"h{i}", id=f"h{i}")], "log": []}, t)
        await d.state(t)
    # edit a message by id through the delta reducer
    await d.update(t, {"messages": [HumanMessage(content="edited", id="h0")]})
    snap = await d.state(t)
    assert [m.id for m in snap.values["messages"]][:2] == ["h0", "ai1"]
    await d.history(t)
    # a pre-switch checkpoint, read and continued with the delta graph
    await d.state(before[2].config)
    await d.invoke(
        {"messages": [HumanMessage(content="branch", id="hb")], "log": []}, before[2].config
    )
    await d.state(t)
    return d.log


async def test_switch_from_add_messages_to_delta(dsn: str, saver_factory: SaverFactory) -> None:
    log = await run_both(dsn, saver_factory, switch_scenario)
    final = repr(log[log.index(("update",)) + 1])
    # every turn before and after the switch survived, in order, plus the edit and branch
    for i in range(8):
        assert f"'h{i}'" in final and f"'ai{2 * i + 1}'" in final, i
    assert "'edited'" in final and "'hb'" not in final
