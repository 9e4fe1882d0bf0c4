"""One load decodes each value once (issue: get_state of long sessions decoded a big
snapshot twice).

get_tuple of the latest checkpoint reads, in the same statement, the history of the
DeltaChannels LangGraph will ask for next (the prefetch). LangGraph asks only for the
channels with a version whose value get_tuple did not return
(``_delta_channels_to_replay``): a channel whose snapshot blob was stored at an earlier
step and carried over at its current version has no key in the checkpoint JSON's
channel_values, yet get_tuple returns it from the blob, so its history is never asked.
Prefetching it sent and decoded the snapshot a second time.

A serde that counts what it decodes proves it, on our threads and the official saver's,
cache on and off, sync and async.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.graph import END, START, StateGraph

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver
from tests.graph._graphs import append_reducer
from tests.graph._util import official_saver
from tests.integration._helpers import CountingSerde


def _kind(value: Any) -> list[str]:
    """What CountingSerde counts: a decoded value by its type, a snapshot by its length."""
    if isinstance(value, _DeltaSnapshot):
        return [f"snapshot of {len(value.value)}"]
    return [type(value).__name__]


class State(TypedDict):
    big: Annotated[list[Any], DeltaChannel(append_reducer, snapshot_frequency=1)]
    small: Annotated[list[Any], DeltaChannel(append_reducer, snapshot_frequency=100)]
    n: Annotated[int, operator.add]


def _graph(saver: Any) -> Any:
    b = StateGraph(State)
    b.add_node("first", lambda s: {"big": [f"m{i}" for i in range(2000)], "n": 1})
    b.add_node("second", lambda s: {"small": ["s1"], "n": 1})
    b.add_node("third", lambda s: {"small": ["s2"], "n": 1})
    b.add_edge(START, "first")
    b.add_edge("first", "second")
    b.add_edge("second", "third")
    b.add_edge("third", END)
    return b.compile(checkpointer=saver)


CFG = {"configurable": {"thread_id": "dec"}}


@pytest.mark.parametrize("writer", ["ours", "official"])
@pytest.mark.parametrize("cache_bytes", [0, 1 << 26], ids=["nocache", "cache"])
def test_get_state_decodes_the_snapshot_once(dsn: str, writer: str, cache_bytes: int) -> None:
    if writer == "ours":
        with DeltaPostgresSaver.from_conn_string(dsn) as w:
            _graph(w).invoke({"big": [], "small": [], "n": 0}, CFG)
    else:
        with official_saver(dsn) as off:
            _graph(off).invoke({"big": [], "small": [], "n": 0}, CFG)
    serde = CountingSerde(_kind)
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=cache_bytes) as saver:
        saver.serde = serde
        for _ in range(3):  # cold, then warm
            serde.decoded.clear()
            state = _graph(saver).get_state(CFG)
            assert len(state.values["big"]) == 2000 and state.values["small"] == ["s1", "s2"]
            assert serde.decoded["snapshot of 2000"] == 1, serde.decoded


async def test_aget_state_decodes_the_snapshot_once(dsn: str) -> None:
    with DeltaPostgresSaver.from_conn_string(dsn) as w:
        _graph(w).invoke({"big": [], "small": [], "n": 0}, CFG)
    serde = CountingSerde(_kind)
    async with AsyncDeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as saver:
        saver.serde = serde
        state = await _graph(saver).aget_state(CFG)
    assert len(state.values["big"]) == 2000
    assert serde.decoded["snapshot of 2000"] == 1, serde.decoded
