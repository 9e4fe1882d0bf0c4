"""Long delta threads (200+ supersteps) at snapshot_frequency 1, 2, 7 and 100: get_state
and the whole get_state_history equal InMemorySaver's, including time travel from a
mid-chain checkpoint and a fork made with update_state, with both branches continued."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph

from tests.graph._graphs import Driver, append_reducer, run_both
from tests.plugins.savers import SaverFactory

STEPS_PER_TURN = 55
TURNS = 4  # 4 x 55 loop supersteps (+ inputs) > 200 checkpoints


def loop_builder(freq: int) -> StateGraph[Any]:
    S = TypedDict(  # noqa: UP013 (class syntax would leave `freq` unresolved)
        "S",
        {
            # written every superstep
            "items": Annotated[list[Any], DeltaChannel(append_reducer, snapshot_frequency=freq)],
            # written every third superstep only: its walk crosses many checkpoints
            "sparse": Annotated[list[Any], DeltaChannel(append_reducer, snapshot_frequency=freq)],
            "n": int,
        },
        total=False,
    )

    def tick(state: Any) -> dict[str, Any]:
        n = state.get("n", 0) + 1
        out: dict[str, Any] = {"n": n, "items": [n]}
        if n % 3 == 0:
            out["sparse"] = [f"s{n}"]
        return out

    def other(state: Any) -> dict[str, Any]:
        # a parallel writer in the same superstep, every fifth step
        return {"items": [f"o{state.get('n', 0)}"]}

    def route(s: Any) -> list[str] | str:
        if s["n"] % STEPS_PER_TURN == 0:
            return END
        return ["tick", "other"] if s["n"] % 5 == 0 else ["tick"]

    g = StateGraph(S)
    g.add_node("tick", tick)  # nodes' argument: "state", as langgraph's stub names it
    g.add_node("other", other)
    g.add_edge(START, "tick")
    g.add_conditional_edges("tick", route, ["tick", "other", END])
    g.add_edge("other", "tick")
    return g


def _pick(hist: list[Any], frac: float) -> RunnableConfig:
    config: RunnableConfig = hist[int(len(hist) * frac)].config
    return config


def scenario(freq: int):  # type: ignore[no-untyped-def]
    async def run(saver: BaseCheckpointSaver[Any], is_async: bool) -> list[Any]:
        d = Driver(loop_builder(freq), saver, is_async)
        t: RunnableConfig = {"configurable": {"thread_id": f"long-{freq}"}, "recursion_limit": 1000}
        for turn in range(TURNS):
            await d.invoke({"items": [f"in{turn}"]}, t)
        await d.state(t)
        hist = await d.history(t)
        assert len(hist) > 200
        # time travel: rerun from a mid-chain checkpoint (new branch), twice
        for frac in (0.5, 0.77):
            cfg: RunnableConfig = {**_pick(hist, frac), "recursion_limit": 1000}
            await d.state(cfg)
            await d.invoke(None, cfg)
            await d.state(t)
        # fork a mid-chain checkpoint with update_state, continue the fork and the main line
        fork: RunnableConfig = await d.update(
            _pick(hist, 0.33), {"items": ["forked"], "sparse": ["f"]}, as_node="tick"
        )
        await d.state(fork)
        await d.invoke(None, {**fork, "recursion_limit": 1000})
        fork_head = await d.state(t)
        await d.invoke({"items": ["main-again"]}, {**_pick(hist, 0.0), "recursion_limit": 1000})
        await d.state(t)
        await d.history(t)
        await d.history(fork_head.config, limit=40)
        return d.log

    return run


@pytest.mark.parametrize("kind", ["sync-conn", "async-pool"])
@pytest.mark.parametrize("freq", [1, 2, 7, 100])
async def test_long_thread(dsn: str, freq: int, kind: str) -> None:
    factory = SaverFactory(kind)
    run = scenario(freq)
    ours = await run_both(dsn, factory, run)
    states = [o for o in ours if o[0] == "state"]
    # the first get_state holds every superstep's write, in order
    values = dict(states[0][1][0][1])
    items = [v for _, v in values["items"][1]]
    assert [i for i in items if isinstance(i, int)] == list(range(1, TURNS * STEPS_PER_TURN + 1))
