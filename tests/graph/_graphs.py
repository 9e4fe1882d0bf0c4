"""A small driver that runs the same graph script on a sync or async checkpointer and
records what a user observes (state values, next nodes, interrupts, history), so the
records of our saver and of InMemorySaver can be compared."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import StateGraph
from langgraph.types import StateSnapshot

from tests.graph._reducers import append_reducer as append_reducer  # re-exported
from tests.graph._util import canon
from tests.plugins.savers import SaverFactory

#: A graph scenario: runs on a saver (async or not) and returns its observation log.
Scenario = Callable[[BaseCheckpointSaver[Any], bool], Awaitable[list[Any]]]


def observe_snapshot(snap: Any) -> Any:
    tasks = []
    for t in snap.tasks:
        sub = observe_snapshot(t.state) if isinstance(t.state, StateSnapshot) else None
        tasks.append((t.name, tuple(canon(i.value) for i in t.interrupts), sub))
    md = snap.metadata or {}
    return (
        canon(snap.values),
        tuple(snap.next),
        tuple(tasks),
        md.get("step"),
        md.get("source"),
    )


class Driver:
    """Runs graph calls sync or async; every observation goes to ``self.log``."""

    def __init__(self, builder: StateGraph[Any], saver: BaseCheckpointSaver[Any], is_async: bool):
        self.saver = saver
        self.is_async = is_async
        self.graph = builder.compile(checkpointer=saver)
        self.log: list[Any] = []

    def recompile(self, builder: StateGraph[Any]) -> None:
        self.graph = builder.compile(checkpointer=self.saver)

    async def _call(self, sync: Callable[[], Any], aio: Callable[[], Awaitable[Any]]) -> Any:
        return await aio() if self.is_async else sync()

    async def invoke(self, inp: Any, config: RunnableConfig, **kw: Any) -> Any:
        out = await self._call(
            lambda: self.graph.invoke(inp, config, **kw),
            lambda: self.graph.ainvoke(inp, config, **kw),
        )
        self.log.append(("invoke", canon(out)))
        return out

    async def state(self, config: RunnableConfig, subgraphs: bool = False) -> Any:
        snap = await self._call(
            lambda: self.graph.get_state(config, subgraphs=subgraphs),
            lambda: self.graph.aget_state(config, subgraphs=subgraphs),
        )
        self.log.append(("state", observe_snapshot(snap)))
        return snap

    async def history(self, config: RunnableConfig, **kw: Any) -> list[Any]:
        if self.is_async:
            snaps = [s async for s in self.graph.aget_state_history(config, **kw)]
        else:
            snaps = list(self.graph.get_state_history(config, **kw))
        self.log.append(("history", [observe_snapshot(s) for s in snaps]))
        return snaps

    async def update(self, config: RunnableConfig, values: Any, as_node: str | None = None) -> Any:
        new = await self._call(
            lambda: self.graph.update_state(config, values, as_node=as_node),
            lambda: self.graph.aupdate_state(config, values, as_node=as_node),
        )
        self.log.append(("update",))
        return new


def assert_logs_equal(ours: list[Any], reference: list[Any]) -> None:
    assert len(ours) == len(reference)
    for i, (a, b) in enumerate(zip(ours, reference, strict=True)):
        assert a == b, f"observation {i} ({b[0]}) differs from InMemorySaver:\n{a}\n!=\n{b}"


async def run_both(dsn: str, factory: SaverFactory, scenario: Scenario) -> list[Any]:
    """``scenario`` on InMemorySaver and on our saver of ``factory``'s kind; the logs must
    be equal. Returns ours."""
    reference = await scenario(InMemorySaver(), factory.is_async)
    if factory.is_async:
        async with factory.aio(dsn) as saver:
            ours = await scenario(saver, True)
    else:
        with factory.sync(dsn) as ssaver:
            ours = await scenario(ssaver, False)
    assert_logs_equal(ours, reference)
    return ours
