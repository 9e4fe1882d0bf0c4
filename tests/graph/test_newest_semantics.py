"""The DeltaChannel semantics that changed inside the langgraph versions we support, on
real graphs, read equal to InMemorySaver on the lowest LangGraph CI installs and the
newest (written against 1.2.0, CI's lowest until 1.2.13 became the floor).

What changed between langgraph 1.2.0 and the newest 1.2.x, and what each case runs:

* **Remove-all.** The newest ``_messages_delta_reducer`` resets the state at the last
  ``RemoveMessage(id=REMOVE_ALL_MESSAGES)`` of a batch. In 1.2.0 the same reducer (and
  ``REMOVE_ALL_MESSAGES``) exist but the reducer treats it as a ``RemoveMessage`` of an
  unknown id: dropped, nothing removed. The remove-all history runs on both; what the
  messages hold afterwards is asserted per version (``HANDLES_REMOVE_ALL``).
* **Overwrite.** ``DeltaChannel.update`` with an ``Overwrite`` and other writes in one
  superstep keeps only the ``Overwrite`` in the newest; 1.2.0 applies the other writes
  on top of it (while its ``replay_writes`` drops those that sort before the
  ``Overwrite``, so 1.2.0's live and reloaded values can differ: a langgraph matter, the
  same on every saver). The newest also snapshots a channel an ``Overwrite`` set.
  Asserted per version (``OVERWRITE_DROPS_SIBLINGS``).
* **Channels added to a thread.** The newest does not ask the saver for a
  ``DeltaChannel`` with no version at the checkpoint; 1.2.0 walks to the root for it.
  Both show ``[]``. A field switched from ``operator.add`` / ``add_messages`` to
  ``DeltaChannel`` is seeded by its last plain value (../shared/DELTA_CONTRACT.md rule 8)
  on both.
* **``from_checkpoint(None)``** starts empty in the newest; 1.2.0 keeps ``None``. A
  ``None`` reaches it from a field that held ``None`` before it became a
  ``DeltaChannel``; InMemorySaver then also hands ``None`` as the seed of later
  checkpoints, where we (like the official saver) walk past an inline null (contract
  rule 7). ``test_none_before_switch_is_the_documented_divergence`` pins that.

Every case runs its calls on our saver (the sync or async one) and on InMemorySaver and
compares every observation (invoke output, state, history: values, next, step, source);
then the final graph reads the whole thread back (the latest state, the history, the
state at every checkpoint of it) through the saver that wrote it (cache warm), a saver
with ``cache_bytes=0`` and a new saver (cold cache), each equal to InMemorySaver's.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import (
    REMOVE_ALL_MESSAGES,
    _messages_delta_reducer,
    add_messages,
)
from langgraph.types import Overwrite

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver
from tests.graph._graphs import Driver, append_reducer, assert_logs_equal
from tests.graph._util import official_saver

# ------------------------------------------------------------------ what this version does


def _handles_remove_all() -> bool:
    out = _messages_delta_reducer(
        [HumanMessage(content="x", id="x")],
        # langgraph's stub types the writes without RemoveMessage, which the reducer handles
        [[RemoveMessage(id=REMOVE_ALL_MESSAGES)]],  # type: ignore[list-item]
    )
    return out == []


def _overwrite_drops_siblings() -> bool:
    ch: DeltaChannel[list[Any]] = DeltaChannel(append_reducer)
    ch = ch.from_checkpoint(None)
    ch.update([Overwrite(["ow"]), ["sibling"]])
    return bool(ch.get() == ["ow"])


#: newest: a remove-all clears the messages; 1.2.0: it is dropped as an unknown id
HANDLES_REMOVE_ALL = _handles_remove_all()
#: newest: an Overwrite wins over the other writes of its superstep; 1.2.0: they apply on it
OVERWRITE_DROPS_SIBLINGS = _overwrite_drops_siblings()


# ------------------------------------------------------------------ the graph


def builder(
    freq: int, *, messages: str | None = "delta", items: str | None = "delta"
) -> StateGraph[Any]:
    """``chat`` and ``audit`` run in parallel each turn. ``messages`` is a DeltaChannel
    with the delta messages reducer ("delta") or ``add_messages`` ("plain"); ``items`` a
    DeltaChannel list ("delta"), an ``operator.add`` list ("plain") or absent (None).
    The ``cmd`` of the input makes ``chat`` write a remove-all or an ``Overwrite``."""
    fields: dict[str, Any] = {"cmd": str, "turn": Annotated[int, operator.add]}
    if messages == "delta":
        fields["messages"] = Annotated[
            list[AnyMessage],
            DeltaChannel(
                # langgraph's stub: the reducer takes lists, DeltaChannel types a Sequence
                _messages_delta_reducer,  # type: ignore[arg-type]
                snapshot_frequency=freq,
            ),
        ]
    elif messages == "plain":
        fields["messages"] = Annotated[list[AnyMessage], add_messages]
    if items == "delta":
        fields["items"] = Annotated[
            list[Any], DeltaChannel(append_reducer, snapshot_frequency=freq)
        ]
    elif items == "plain":
        fields["items"] = Annotated[list[Any], operator.add]
    S = TypedDict("S", fields, total=False)  # type: ignore[misc]  # noqa: UP013

    def chat(state: Any) -> dict[str, Any]:
        n, cmd = state.get("turn", 0), state.get("cmd", "")
        reply = AIMessage(content=f"reply{n} to {len(state.get('messages', []))}", id=f"ai{n}")
        out: dict[str, Any] = {"messages": [reply], "turn": 1}
        if cmd == "reset":
            out["messages"] = [RemoveMessage(id=REMOVE_ALL_MESSAGES), reply]
        if items is not None:
            seen = len(state.get("items", []))
            out["items"] = Overwrite([f"ow{n}"]) if cmd == "overwrite" else [f"chat{n}/{seen}"]
        return out

    def audit(state: Any) -> dict[str, Any]:
        if items is None:
            return {}
        return {"items": [f"audit{state.get('turn', 0)}/{len(state.get('items', []))}"]}

    g = StateGraph(S)
    g.add_node("chat", chat)  # nodes' argument: "state", as langgraph's stub names it
    g.add_node("audit", audit)
    g.add_edge(START, "chat")
    g.add_edge(START, "audit")
    g.add_edge("chat", END)
    g.add_edge("audit", END)
    return g


def T(thread: str) -> Any:  # a RunnableConfig, which Driver takes as a dict
    return {"configurable": {"thread_id": thread}}


def human(i: int | str) -> HumanMessage:
    return HumanMessage(content=f"h{i}", id=f"h{i}")


def msg_ids(snap: Any) -> list[str]:
    return [m.id for m in snap.values.get("messages", [])]


# ------------------------------------------------------------------ the cases


async def remove_all_case(d: Driver, freq: int) -> StateGraph[Any]:
    t = T("remove-all")
    for i in range(7):
        inp: dict[str, Any] = {"messages": [human(i)], "cmd": "reset" if i == 2 else ""}
        if i == 4:  # a remove-all in the input, with a message after it in the same write
            inp["messages"] = [RemoveMessage(id=REMOVE_ALL_MESSAGES), human(i)]
        await d.invoke(inp, t)
        await d.state(t)
    hist = await d.history(t)
    # a remove-all through update_state, then a turn on top of it
    await d.update(
        t, {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), human("u")]}, as_node="chat"
    )
    await d.state(t)
    await d.invoke({"messages": [human(7)], "cmd": ""}, t)
    snap = await d.state(t)
    if HANDLES_REMOVE_ALL:
        assert msg_ids(snap) == ["hu", "h7", "ai7"], msg_ids(snap)
    else:  # 1.2.0: every remove-all was dropped, nothing removed
        assert msg_ids(snap)[:4] == ["h0", "ai0", "h1", "ai1"], msg_ids(snap)
        assert "hu" in msg_ids(snap) and "h7" in msg_ids(snap)
    # a branch from before the first remove-all: the reset never happened there
    before = next(s for s in hist if s.values.get("turn") == 1 and not s.next)
    await d.state(before.config)
    await d.invoke({"messages": [human("b")], "cmd": ""}, before.config)
    await d.state(t)
    await d.history(t)
    return builder(freq)


async def overwrite_case(d: Driver, freq: int) -> StateGraph[Any]:
    t = T("overwrite")
    for i in range(7):
        inp: dict[str, Any] = {"messages": [human(i)], "cmd": "overwrite" if i in (2, 5) else ""}
        if i == 4:  # an Overwrite in the input, in its dict form
            inp["items"] = {"__overwrite__": [f"in-ow{i}"]}
        await d.invoke(inp, t)
        await d.state(t)
    snap = await d.state(t)
    items = snap.values["items"]
    assert items[0] == "ow5" and items[-2][:7] == "audit6/" and items[-1][:6] == "chat6/", items
    if OVERWRITE_DROPS_SIBLINGS:  # turn 5's Overwrite dropped audit's write of its step
        assert items == ["ow5", "audit6/1", "chat6/1"], items
    await d.history(t)
    # an Overwrite through update_state, a turn on top, then Overwrite(None): empty
    await d.update(t, {"items": Overwrite(["updated"])}, as_node="chat")
    await d.state(t)
    await d.invoke({"messages": [human(7)], "cmd": ""}, t)
    await d.update(t, {"items": Overwrite(None)}, as_node="chat")
    snap = await d.state(t)
    assert snap.values["items"] == []
    await d.invoke({"messages": [human(8)], "cmd": ""}, t)
    hist = await d.history(t)
    # continue from the checkpoint before the first Overwrite
    before = next(s for s in hist if s.values.get("turn") == 2 and not s.next)
    await d.state(before.config)
    await d.invoke({"messages": [human("b")], "cmd": ""}, before.config)
    await d.state(t)
    await d.history(t)
    return builder(freq)


async def added_channel_case(d: Driver, freq: int) -> StateGraph[Any]:
    """Turns with ``messages`` as ``add_messages`` and no ``items``; then ``messages``
    becomes a DeltaChannel and ``items`` is added. Then ``items`` goes from
    ``operator.add`` to a DeltaChannel, which is seeded by its last plain value."""
    t = T("added")
    d.recompile(builder(freq, messages="plain", items=None))
    for i in range(3):
        await d.invoke({"messages": [human(i)], "cmd": ""}, t)
    old = await d.history(t)
    d.recompile(builder(freq, messages="delta", items="delta"))
    snap = await d.state(t)
    # never written: empty (the newest without asking the saver, 1.2.0 by a walk to the root)
    assert snap.values["items"] == []
    assert msg_ids(snap) == ["h0", "ai0", "h1", "ai1", "h2", "ai2"]
    await d.history(t)
    for i in range(3, 7):
        cmd = {4: "reset", 5: "overwrite"}.get(i, "")
        await d.invoke({"messages": [human(i)], "cmd": cmd}, t)
        await d.state(t)
    await d.history(t)
    # a checkpoint written before the switch, read and continued by the new graph
    await d.state(old[1].config)
    await d.invoke({"messages": [human("b")], "cmd": ""}, old[1].config)
    await d.state(t)

    # ``items`` as operator.add on a new thread, then switched to a DeltaChannel
    t2 = T("plain-to-delta")
    d.recompile(builder(freq, messages="plain", items="plain"))
    for i in range(3):
        await d.invoke({"messages": [human(i)], "items": [f"in{i}"], "cmd": ""}, t2)
    d.recompile(builder(freq, messages="delta", items="delta"))
    snap = await d.state(t2)
    plain_items = snap.values["items"]
    assert len(plain_items) == 9
    for i in range(3, 7):
        await d.invoke({"messages": [human(i)], "items": [f"in{i}"], "cmd": ""}, t2)
        await d.state(t2)
    snap = await d.state(t2)
    assert snap.values["items"][: len(plain_items)] == plain_items
    assert len(snap.values["items"]) == 9 + 4 * 3
    await d.history(t2)
    return builder(freq)


Case = Callable[[Driver, int], Any]
CASES: dict[str, Case] = {
    "remove_all": remove_all_case,
    "overwrite": overwrite_case,
    "added_channel": added_channel_case,
}
THREADS = {
    "remove_all": ["remove-all"],
    "overwrite": ["overwrite"],
    "added_channel": ["added", "plain-to-delta"],
}


# ------------------------------------------------------------------ running and reading back


async def read_back(
    final: StateGraph[Any], saver: BaseCheckpointSaver[Any], is_async: bool, threads: list[str]
) -> list[Any]:
    """Every thread through ``final``: the latest state, the history, and the state at
    every checkpoint of it."""
    d = Driver(final, saver, is_async)
    for thread in threads:
        await d.state(T(thread))
        for snap in await d.history(T(thread)):
            await d.state(snap.config)
    return d.log


async def run_case(dsn: str, name: str, freq: int, is_async: bool) -> tuple[list[Any], list[Any]]:
    case, threads = CASES[name], THREADS[name]
    ref_saver = InMemorySaver()
    ref = Driver(builder(freq), ref_saver, is_async)
    final = await case(ref, freq)
    ref_back = await read_back(final, ref_saver, is_async, threads)

    backs: dict[str, list[Any]] = {}
    if is_async:
        async with AsyncDeltaPostgresSaver.from_conn_string(dsn) as saver:
            ours = Driver(builder(freq), saver, True)
            await case(ours, freq)
            backs["writer (cache warm)"] = await read_back(final, saver, True, threads)
        async with AsyncDeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as saver:
            backs["cache_bytes=0"] = await read_back(final, saver, True, threads)
        async with AsyncDeltaPostgresSaver.from_conn_string(dsn) as saver:
            backs["new saver"] = await read_back(final, saver, True, threads)
    else:
        with DeltaPostgresSaver.from_conn_string(dsn) as ssaver:
            ours = Driver(builder(freq), ssaver, False)
            await case(ours, freq)
            backs["writer (cache warm)"] = await read_back(final, ssaver, False, threads)
        with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as ssaver:
            backs["cache_bytes=0"] = await read_back(final, ssaver, False, threads)
        with DeltaPostgresSaver.from_conn_string(dsn) as ssaver:
            backs["new saver"] = await read_back(final, ssaver, False, threads)

    assert_logs_equal(ours.log, ref.log)
    for label, back in backs.items():
        try:
            assert_logs_equal(back, ref_back)
        except AssertionError as e:
            raise AssertionError(f"read back through {label}: {e}") from None
    return ours.log, ref_back


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("freq", [1, 3, 100])
@pytest.mark.parametrize("name", list(CASES))
async def test_newest_semantics_equal_in_memory(
    dsn: str, name: str, freq: int, is_async: bool
) -> None:
    log, back = await run_case(dsn, name, freq, is_async)
    assert sum(1 for o in log if o[0] == "state") >= 8
    assert len(back) > 20


# ------------------------------------------------------------------ a None before the switch


def none_builder(delta: bool) -> StateGraph[Any]:
    """``items`` is a plain ``list | None`` field that ends each turn at ``None``; with
    ``delta`` it is a DeltaChannel list."""
    items: Any = (
        Annotated[list[Any], DeltaChannel(append_reducer, snapshot_frequency=100)]
        if delta
        else list[Any] | None
    )
    S = TypedDict("S", {"items": items, "n": int}, total=False)  # noqa: UP013

    def node(state: Any) -> dict[str, Any]:
        return {"items": ["x"] if delta else None, "n": state.get("n", 0) + 1}

    g = StateGraph(S)
    g.add_node("node", node)
    g.add_edge(START, "node")
    g.add_edge("node", END)
    return g


def none_run(saver: BaseCheckpointSaver[Any]) -> list[Any]:
    t = T("none")
    old = none_builder(False).compile(checkpointer=saver)
    old.invoke({"items": ["old"]}, t)
    old.invoke({"items": ["old2"]}, t)
    new = none_builder(True).compile(checkpointer=saver)
    out: list[Any] = [new.get_state(t).values]
    try:
        new.invoke({"items": ["new"]}, t)
    except TypeError as e:  # 1.2.0: the reducer is handed the None
        return [*out, repr(e)]
    return [*out, new.get_state(t).values]


def test_none_before_switch_is_the_documented_divergence(dsn: str) -> None:
    """A field whose last plain value was ``None``, switched to a DeltaChannel. At the
    switch both savers load it the same (newest: ``[]``; 1.2.0: ``None``, and the next
    write fails on every saver). On the newest, the next checkpoint differs: InMemorySaver
    seeds the walk with the stored ``None`` (``from_checkpoint(None)``: empty), we walk
    past the inline null to the last list and replay the ``None`` writes after it, as
    the official saver does on the same rows (contract rule 7, a documented divergence)."""
    ref = none_run(InMemorySaver())
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        ours = none_run(saver)
    with official_saver(dsn) as official:
        t = T("none")
        theirs = none_builder(True).compile(checkpointer=official).get_state(t).values
    assert ours[0] == ref[0]
    if isinstance(ref[1], str):  # 1.2.0
        assert ref[0]["items"] is None and ours[1] == ref[1]
        return
    assert ref == [{"items": [], "n": 2}, {"items": ["new", "x"], "n": 3}]
    assert ours[1] == theirs == {"items": ["old2", None, "new", "x"], "n": 3}
