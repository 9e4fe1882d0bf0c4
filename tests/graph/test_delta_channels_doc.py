"""docs/delta-channels.md (issue 38, item 2): each ```python block of the page, run as
written, declares a state whose graph gives on this saver what it gives on InMemorySaver,
across several snapshots of the field; and what the page says about the messages reducer
holds on the installed LangGraph."""

from __future__ import annotations

import inspect
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict, get_type_hints

import pytest
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    MessageLikeRepresentation,
    RemoveMessage,
)
from langchain_core.runnables import RunnableConfig
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.graph import START, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages

from langgraph_delta_postgres import DeltaPostgresSaver
from tests.graph._util import canon

PAGE = Path(__file__).resolve().parents[2] / "docs" / "delta-channels.md"


def page_blocks() -> dict[str, str]:
    """The page's ```python blocks, by the ``##`` heading they are under."""
    text = PAGE.read_text(encoding="utf-8")
    blocks: dict[str, str] = {}
    for section in re.split(r"\n(?=## )", text):
        heading = section.splitlines()[0].removeprefix("## ").strip()
        found = re.findall(r"```python\n(.*?)```", section, re.S)
        assert len(found) <= 1, f"{heading}: one python block per section"
        if found:
            blocks[heading] = found[0]
    return blocks


def page_state(heading: str) -> tuple[type, dict[str, Any]]:
    """Run the block under ``heading`` as written, in a namespace of its own."""
    ns: dict[str, Any] = {"__name__": f"delta_channels_doc_{len(heading)}"}
    # dont_inherit: run as a user module would, without this module's __future__ imports
    exec(compile(page_blocks()[heading], f"{PAGE}:{heading}", "exec", dont_inherit=True), ns)
    return ns["State"], ns


def test_the_page_has_the_three_declarations() -> None:
    assert set(page_blocks()) == {"Messages", "A file map", "A plain list"}


def T(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


# ------------------------------------------------------------------------------ messages


def is_uuid(s: Any) -> bool:
    try:
        uuid.UUID(str(s))
    except ValueError:
        return False
    return True


def canon_messages(msgs: list[AnyMessage]) -> list[tuple[str, Any, str]]:
    """Messages compared across savers: a LangGraph-made id (a uuid, random per run)
    is compared as ``uuid``."""
    out: list[tuple[str, Any, str]] = []
    for m in msgs:
        assert m.id, f"a message without an id: {m!r}"
        out.append((m.type, m.content, "uuid" if is_uuid(m.id) else m.id))
    return out


def chat_builder(state: type) -> StateGraph[Any]:
    """A node that acts on the last human message: ``replace <id>`` replaces a message
    by id, ``remove <id>`` / ``remove first-human`` removes one, ``clear`` removes all;
    anything else gets an AI reply (with an id of its own)."""

    def chat(state: Any) -> dict[str, Any]:  # "state": the name langgraph's stub types
        msgs = state["messages"]
        last = msgs[-1].content if msgs else ""
        n = len(msgs)
        if last.startswith("replace "):
            target = last.split()[1]
            return {"messages": [AIMessage(content=f"edited {target} at {n}", id=target)]}
        if last == "remove first-human":
            first = next(m for m in msgs if m.type == "human")
            return {"messages": [RemoveMessage(id=first.id)]}
        if last.startswith("remove "):
            return {"messages": [RemoveMessage(id=last.split()[1])]}
        if last == "clear":
            return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), AIMessage("cleared")]}
        return {"messages": [AIMessage(content=f"reply {n}", id=f"ai-{n}")]}

    g: StateGraph[Any] = StateGraph(state)
    g.add_node("chat", chat)
    g.add_edge(START, "chat")
    return g


def _strings_get_ids() -> bool:
    """Whether this LangGraph gives strings and tuples written to a messages DeltaChannel
    an id (1.2.24 does: ``ensure_message_ids(channels, writes)``; 1.2.12 did not)."""
    from langgraph.pregel import _messages

    params = list(inspect.signature(_messages.ensure_message_ids).parameters)
    return params == ["channels", "writes"]


STRINGS_GET_IDS = _strings_get_ids()


def human(text: str) -> Any:
    """A human turn as a string, or where strings get no id, as a message object (the
    page: on such a release, write message objects)."""
    return text if STRINGS_GET_IDS else HumanMessage(text)


def chat_inputs() -> list[Any]:
    """Every message-like the page says the reducer accepts, and edits by id, over
    enough turns (two updates each) for 4 snapshots at snapshot_frequency=50."""
    ins: list[Any] = []
    for i in range(105):
        kind = i % 7
        if kind == 0:  # saved as a message with an id (on a LangGraph that does so)
            ins.append(f"plain string {i}" if STRINGS_GET_IDS else HumanMessage(f"string {i}"))
        elif kind == 1:
            ins.append(("user", f"tuple {i}") if STRINGS_GET_IDS else [HumanMessage(f"t {i}")])
        elif kind == 2:
            ins.append({"role": "user", "content": f"dict {i}"})
        elif kind == 3:
            ins.append([HumanMessage(content=f"message {i}", id=f"h-{i}")])
        elif kind == 4:
            ins.append(human(f"replace ai-{(i // 2) * 2}"))  # an earlier AI reply, by id
        elif kind == 5:
            ins.append(human("remove first-human"))  # by the id the saver returned
        else:
            ins.append(human(f"remove h-{i - 3}"))
        if i == 60:
            ins.append(human("clear"))
    return ins


def run_chat(saver: BaseCheckpointSaver[Any], state: type, thread: str) -> list[Any]:
    graph = chat_builder(state).compile(checkpointer=saver)
    log = []
    for inp in chat_inputs():
        graph.invoke({"messages": inp}, T(thread))
        log.append(canon_messages(graph.get_state(T(thread)).values["messages"]))
    return log


def history(saver: BaseCheckpointSaver[Any], builder: StateGraph[Any], thread: str) -> list[Any]:
    graph = builder.compile(checkpointer=saver)
    return [canon_messages(s.values.get("messages", []))
            for s in graph.get_state_history(T(thread))]


def snapshots(saver: BaseCheckpointSaver[Any], thread: str, channel: str) -> int:
    return sum(
        isinstance(t.checkpoint["channel_values"].get(channel), _DeltaSnapshot)
        for t in saver.list(T(thread))
    )


def test_messages_declaration_matches_in_memory(dsn: str) -> None:
    State, _ = page_state("Messages")
    mem = InMemorySaver()
    expected = run_chat(mem, State, "chat")
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        got = run_chat(saver, State, "chat")
        assert got == expected
        assert snapshots(saver, "chat", "messages") >= 4
    # a new saver (an empty history cache): every state of the thread read back from SQL
    with DeltaPostgresSaver.from_conn_string(dsn) as fresh:
        hist = history(fresh, chat_builder(State), "chat")
        assert hist == history(mem, chat_builder(State), "chat")
        # the ids LangGraph gave strings, tuples and dicts are stored: two loads agree
        graph = chat_builder(State).compile(checkpointer=fresh)
        ids = [m.id for m in graph.get_state(T("chat")).values["messages"]]
        assert ids == [m.id for m in graph.get_state(T("chat")).values["messages"]]
    final = expected[-1]
    assert any(c == "uuid" for _, _, c in final), "no LangGraph-made id left to check"
    assert any(content.startswith("edited ") for _, content, _ in final)  # replaced by id
    assert ("ai", "cleared", "uuid") in final  # REMOVE_ALL_MESSAGES, then a message


def test_switch_from_add_messages_to_the_page_declaration(dsn: str) -> None:
    """The page (and README): an add_messages field switched to the declaration keeps
    its thread."""
    State, _ = page_state("Messages")

    class Old(TypedDict):
        messages: Annotated[list[AnyMessage], add_messages]

    def turns(saver: BaseCheckpointSaver[Any]) -> list[Any]:
        old = chat_builder(Old).compile(checkpointer=saver)
        for i in range(3):
            old.invoke({"messages": [HumanMessage(content=f"h{i}", id=f"h{i}")]}, T("sw"))
        new = chat_builder(State).compile(checkpointer=saver)
        for inp in map(human, ["more", "replace ai-1", "remove h0", "again"]):
            new.invoke({"messages": inp}, T("sw"))
        return canon_messages(new.get_state(T("sw")).values["messages"])

    expected = turns(InMemorySaver())
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        assert turns(saver) == expected
    assert ("ai", "edited ai-1 at 9", "ai-1") in expected
    assert not any(i == "h0" for _, _, i in expected)


# The page's reasons for the private name, on the installed LangGraph.


def test_a_wrapper_of_the_reducer_loses_the_ids_of_strings() -> None:
    """On a LangGraph that gives ids by the reducer (1.2.24), a wrapper loses them; on one
    that gives ids to message objects only (the page: older 1.2 releases), a string gets
    none with either declaration, which is why the page says to write message objects."""
    _, ns = page_state("Messages")
    reducer = ns["_messages_delta_reducer"]

    def wrapped(value: list[Any], writes: list[Any]) -> list[Any]:
        merged: list[Any] = reducer(value, writes)
        return merged

    Wrapped = TypedDict(  # noqa: UP013 (class syntax would leave `wrapped` unresolved)
        "Wrapped",
        {"messages": Annotated[list[AnyMessage], DeltaChannel(wrapped, snapshot_frequency=50)]},
    )

    def ids(state: type) -> list[Any]:
        graph = chat_builder(state).compile(checkpointer=InMemorySaver())
        graph.invoke({"messages": "hi"}, T("w"))
        return [m.id for m in graph.get_state(T("w")).values["messages"]]

    page = ids(page_state("Messages")[0])
    if not STRINGS_GET_IDS:
        assert page[0] is None and ids(Wrapped)[0] is None
        return
    assert page[0] and is_uuid(page[0])
    assert ids(Wrapped)[0] is None  # the string came back as a message without an id


def test_add_messages_is_not_deterministic_and_raises_on_unknown_ids() -> None:
    _, ns = page_state("Messages")
    reducer = ns["_messages_delta_reducer"]
    m = HumanMessage(content="x")
    one: list[MessageLikeRepresentation] = [m]
    other: list[MessageLikeRepresentation] = [HumanMessage(content="x")]
    a, b = add_messages([], one), add_messages([], other)
    assert isinstance(a, list) and isinstance(a[0], BaseMessage)  # stub: any Messages
    assert isinstance(b, list) and isinstance(b[0], BaseMessage)
    assert a[0].id != b[0].id
    assert reducer([], [[HumanMessage(content="x")]])[0].id is None  # makes none up
    kept: list[MessageLikeRepresentation] = [HumanMessage(content="a", id="a")]
    assert reducer(kept, [[RemoveMessage(id="nope")]]) == kept
    nope: list[MessageLikeRepresentation] = [RemoveMessage(id="nope")]
    with pytest.raises(ValueError):
        add_messages(kept, nope)
    # batching-invariant, as DeltaChannel requires
    xs = [[HumanMessage(content="b", id="b")], ("user", "c")]
    ys = [[RemoveMessage(id="a"), AIMessage(content="b2", id="b")]]
    assert reducer(reducer(kept, xs), ys) == reducer(kept, xs + ys)


def test_the_page_declares_langgraphs_own_object() -> None:
    from langgraph.graph import message
    from langgraph.pregel import _messages

    # the object ensure_message_ids compares with (1.2.24); older: langgraph.graph.message's
    ours = getattr(_messages, "_messages_delta_reducer", message._messages_delta_reducer)
    State, _ = page_state("Messages")
    channel = get_type_hints(State, include_extras=True)["messages"].__metadata__[0]
    assert isinstance(channel, DeltaChannel)
    assert channel.reducer is ours


# ------------------------------------------------------------------- file map and list


def files_builder(state: type) -> StateGraph[Any]:
    def write(state: Any) -> dict[str, Any]:  # "state": the name langgraph's stub types
        n = len(state["files"])
        return {"files": {f"/out/{n}.txt": f"made at {n}", "/notes.md": f"notes {n}"}}

    g: StateGraph[Any] = StateGraph(state)
    g.add_node("write", write)
    g.add_edge(START, "write")
    return g


def files_inputs() -> list[dict[str, Any]]:
    ins: list[dict[str, Any]] = []
    for i in range(80):  # two updates a turn: 3 snapshots at snapshot_frequency=50
        change: dict[str, Any] = {f"/src/{i % 9}.py": f"v{i}"}
        if i % 4 == 3:
            change[f"/src/{(i + 3) % 9}.py"] = None  # a delete
        if i % 10 == 9:
            change.update({f"/out/{k}.txt": None for k in range(i)})
        ins.append(change)
    return ins


def list_builder(state: type) -> StateGraph[Any]:
    def log(state: Any) -> dict[str, Any]:  # "state": the name langgraph's stub types
        return {"log": f"seen {len(state['log'])}"}  # a single item

    g: StateGraph[Any] = StateGraph(state)
    g.add_node("log", log)
    g.add_edge(START, "log")
    return g


CASES: dict[str, tuple[Callable[[type], StateGraph[Any]], str, Callable[[], list[Any]]]] = {
    # heading: (builder, field, inputs)
    "A file map": (files_builder, "files", files_inputs),
    "A plain list": (list_builder, "log", lambda: [[f"a{i}", f"b{i}"] for i in range(110)]),
}


@pytest.mark.parametrize("heading", list(CASES))
def test_declaration_matches_in_memory(dsn: str, heading: str) -> None:
    make, field, inputs = CASES[heading]
    State, _ = page_state(heading)
    channel = get_type_hints(State, include_extras=True)[field].__metadata__[0]
    # two updates of the field a turn (the input, the node): a snapshot every K of them
    # (K: the page's, or LangGraph's default, 100 on 1.2.24)
    min_snapshots = 2 * len(inputs()) // channel.snapshot_frequency

    def run(saver: BaseCheckpointSaver[Any]) -> tuple[list[Any], list[Any]]:
        graph = make(State).compile(checkpointer=saver)
        states = []
        for inp in inputs():
            graph.invoke({field: inp}, T(heading))
            states.append(canon(graph.get_state(T(heading)).values[field]))
        hist = [canon(s.values.get(field)) for s in graph.get_state_history(T(heading))]
        return states, hist

    expected = run(InMemorySaver())
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        assert run(saver) == expected
        assert snapshots(saver, T(heading)["configurable"]["thread_id"], field) >= min_snapshots
    with DeltaPostgresSaver.from_conn_string(dsn) as fresh:
        graph = make(State).compile(checkpointer=fresh)
        assert [canon(s.values.get(field)) for s in graph.get_state_history(T(heading))] == (
            expected[1]
        )
