"""Deterministic agent workloads for the demo and the benchmark (no network, no model).

Each workload is a real compiled LangGraph graph: ``agent`` (a fake model that answers and
calls a tool) -> ``tools`` (fake tool results and file writes) -> END, one ``invoke`` per
user turn. The state has two fields, ``messages`` and ``files``, declared either as
``DeltaChannel`` fields (each checkpoint stores only that step's writes plus a
``_DeltaSnapshot`` every ``snapshot_frequency`` updates) or as classic full-snapshot
fields (``add_messages`` and a dict-merge reducer: the whole value is re-serialized
whenever it changes), the O(N^2) baseline.

Shapes (per user turn):

* ``messages``: one ~400-character user message and one ~400-character answer.
* ``coding_a``: a 1 KB file write and a 1 KB search result; an 82 KB search result every
  10 turns.
* ``coding_b``: two 8 KB file writes, a 5 KB search result and a ~200-token answer;
  a 100 KB result every 5 turns.

Text is drawn from a fixed vocabulary with a seeded RNG, so it compresses like prose
rather than like a repeated byte, and every run writes the same bytes.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

_WORDS = (
    "agent tool graph state node edge checkpoint delta channel snapshot write read file "
    "search result function class module import return value error test assert config "
    "thread parent child version blob table index query postgres python async await "
    "loop step task path merge reducer message model answer user system token stream"
).split()


def text(seed: int, size: int) -> str:
    """About ``size`` characters of deterministic pseudo-prose."""
    rng = random.Random(seed)
    out: list[str] = []
    n = 0
    while n < size:
        w = rng.choice(_WORDS)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)[:size]


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    user_chars: int
    answer_chars: int
    file_writes: tuple[int, ...]  # sizes of the files written per turn
    search_chars: int  # per-turn tool result (0: no tool call)
    big_every: int  # every Nth turn one more big result (0: never)
    big_chars: int


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("messages", "~400-char user message and answer per turn", 400, 400, (), 0, 0, 0),
        Workload(
            "coding_a",
            "1 KB file write + 1 KB search per turn, 82 KB search every 10 turns",
            200, 300, (1024,), 1024, 10, 82 * 1024,
        ),
        Workload(
            "coding_b",
            "two 8 KB file writes, 5 KB search, ~200-token answer per turn; "
            "100 KB result every 5 turns",
            200, 800, (8 * 1024, 8 * 1024), 5 * 1024, 5, 100 * 1024,
        ),
    )
}


def _merge_files(state: dict[str, str] | None, update: dict[str, str]) -> dict[str, str]:
    return {**(state or {}), **update}


def _delta_messages(state: list[AnyMessage], writes: Sequence[Any]) -> list[AnyMessage]:
    # One add_messages call over all the writes: folding it write by write re-scans the
    # whole list each time (O(writes x length) on every replay).
    batch: list[Any] = []
    for w in writes:
        batch.extend(w if isinstance(w, list) else [w])
    return add_messages(state, batch)  # type: ignore[arg-type,return-value]


def _delta_files(state: dict[str, str], writes: Sequence[dict[str, str]]) -> dict[str, str]:
    out = dict(state)
    for w in writes:
        out.update(w)
    return out


class FullState(TypedDict):
    """Classic reducer fields: the whole value is stored again whenever it changes."""

    messages: Annotated[list[AnyMessage], add_messages]
    files: Annotated[dict[str, str], _merge_files]


def state_schema(delta: bool, snapshot_frequency: int | None) -> Any:
    """The graph state: DeltaChannel fields, or full-snapshot reducer fields."""
    if not delta:
        return FullState
    # The functional form: the annotations hold a DeltaChannel configured at run time.
    kw: dict[str, Any] = {}
    if snapshot_frequency is not None:
        kw["snapshot_frequency"] = snapshot_frequency
    DeltaState = TypedDict(  # noqa: UP013
        "DeltaState",
        {
            "messages": Annotated[list[AnyMessage], DeltaChannel(_delta_messages, **kw)],
            "files": Annotated[dict[str, str], DeltaChannel(_delta_files, **kw)],
        },
    )
    return DeltaState


def _turn_of(messages: Sequence[AnyMessage]) -> int:
    return sum(1 for m in messages if isinstance(m, HumanMessage))


def build_graph(
    workload: Workload | str,
    checkpointer: BaseCheckpointSaver[Any] | None,
    *,
    delta: bool = True,
    snapshot_frequency: int | None = None,
) -> Any:
    """Compile the workload's graph on ``checkpointer``."""
    w = WORKLOADS[workload] if isinstance(workload, str) else workload

    def agent(state: Any) -> dict[str, Any]:
        turn = _turn_of(state["messages"])
        calls = []
        if w.search_chars or w.file_writes:
            calls = [{"name": "work", "args": {"turn": turn}, "id": f"call-{turn}"}]
        return {
            "messages": [
                AIMessage(
                    content=text(turn * 7 + 1, w.answer_chars), tool_calls=calls, id=f"ai-{turn}"
                )
            ]
        }

    def tools(state: Any) -> dict[str, Any]:
        turn = _turn_of(state["messages"])
        size = w.search_chars + (w.big_chars if w.big_every and turn % w.big_every == 0 else 0)
        files = {
            f"src/file_{turn}_{j}.py": text(turn * 7 + 3 + j, n)
            for j, n in enumerate(w.file_writes)
        }
        return {
            "messages": [
                ToolMessage(
                    content=text(turn * 7 + 2, size), tool_call_id=f"call-{turn}", id=f"tool-{turn}"
                )
            ],
            "files": files,
        }

    def route(state: Any) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    g: StateGraph[Any] = StateGraph(state_schema(delta, snapshot_frequency))
    g.add_node("agent", agent)
    g.add_node("tools", tools)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["tools", END])
    g.add_edge("tools", END)
    return g.compile(checkpointer=checkpointer)


def user_input(workload: Workload | str, turn: int) -> dict[str, Any]:
    """The input of user turn ``turn`` (0-based)."""
    w = WORKLOADS[workload] if isinstance(workload, str) else workload
    return {"messages": [HumanMessage(content=text(turn * 7, w.user_chars), id=f"user-{turn}")]}


def run_turns(
    graph: Any,
    workload: Workload | str,
    thread_id: str,
    turns: int,
    *,
    start: int = 0,
    on_turn: Callable[[int], None] | None = None,
) -> None:
    """Invoke ``turns`` user turns on ``thread_id``, synchronously."""
    cfg = {"configurable": {"thread_id": thread_id}}
    for t in range(start, start + turns):
        graph.invoke(user_input(workload, t), cfg)
        if on_turn:
            on_turn(t)
