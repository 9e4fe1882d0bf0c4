"""Tuple values the cache holds (_ops/values.py, checkpoints.tuples_of's held_values):
a value get_tuple reads a second time is kept pickled, and from then on the statement
does not send its blob; one list call decodes a blob once, however many rows carry it.

The shortcut must read what the slow path reads: every answer is compared with a saver
without a cache and with the official saver on the same rows, after the cases that
change rows under a cache (a thread deleted and written again by another saver, with
the same channel versions; a value mutated by its caller), sync and async.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import Checkpoint, empty_checkpoint
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.graph import END, START, StateGraph

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver
from tests.graph._graphs import append_reducer
from tests.graph._util import canon, official_saver
from tests.integration._helpers import CountingSerde


def _snapshot_length(value: Any) -> list[int]:
    """What CountingSerde counts: the DeltaChannel snapshots, by their length."""
    return [len(value.value)] if isinstance(value, _DeltaSnapshot) else []


class State(TypedDict):
    big: Annotated[list[Any], DeltaChannel(append_reducer, snapshot_frequency=1)]
    small: Annotated[list[Any], DeltaChannel(append_reducer, snapshot_frequency=100)]
    n: Annotated[int, operator.add]


def _graph(saver: Any, tag: str, size: int = 2000) -> Any:
    """``first`` writes ``size`` items to ``big`` (a snapshot every update), the next
    three nodes only ``small``: the head carries big's snapshot over at its version."""
    b = StateGraph(State)
    b.add_node("first", lambda s: {"big": [f"{tag}{i}" for i in range(size)], "n": 1})
    b.add_node("second", lambda s: {"small": [f"{tag}-s1"], "n": 1})
    b.add_node("third", lambda s: {"small": [f"{tag}-s2"], "n": 1})
    b.add_node("fourth", lambda s: {"small": [f"{tag}-s3"], "n": 1})
    b.add_edge(START, "first")
    b.add_edge("first", "second")
    b.add_edge("second", "third")
    b.add_edge("third", "fourth")
    b.add_edge("fourth", END)
    return b.compile(checkpointer=saver)


INPUT = {"big": [], "small": [], "n": 0}


def _cfg(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


def _tuple_form(t: Any) -> Any:
    return (
        t.config["configurable"]["checkpoint_id"],
        canon(t.checkpoint["channel_values"]),
        canon(t.checkpoint["channel_versions"]),
        canon([(w[0], w[1], w[2]) for w in t.pending_writes or []]),
    )


def _reference(dsn: str, thread: str) -> tuple[Any, list[Any]]:
    """The head tuple and the whole listing as a saver without a cache and the official
    saver read them (they must agree)."""
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as plain:
        head = _tuple_form(plain.get_tuple(_cfg(thread)))
        listing = [_tuple_form(t) for t in plain.list(_cfg(thread))]
    with official_saver(dsn) as off:
        assert _tuple_form(off.get_tuple(_cfg(thread))) == head
        assert [_tuple_form(t) for t in off.list(_cfg(thread))] == listing
    return head, listing


def test_a_value_read_again_is_not_sent_or_decoded_again(dsn: str) -> None:
    with DeltaPostgresSaver.from_conn_string(dsn) as w:
        _graph(w, "a").invoke(INPUT, _cfg("held-a"))
    head, _ = _reference(dsn, "held-a")
    serde = CountingSerde(_snapshot_length)
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        saver.serde = serde
        decoded = []
        for _ in range(5):
            serde.decoded.clear()
            state = _graph(saver, "a").get_state(_cfg("held-a"))
            assert len(state.values["big"]) == 2000
            assert state.values["small"] == ["a-s1", "a-s2", "a-s3"]
            assert _tuple_form(saver.get_tuple(_cfg("held-a"))) == head
            decoded.append(serde.decoded[2000])
        # get_state + get_tuple per round: the thread gets a bucket on its second load,
        # the snapshot is kept on its second read there, then never decoded again
        assert decoded[-2:] == [0, 0], decoded
        assert sum(decoded) <= 4, decoded
        cache = saver.history_cache
        assert cache is not None
        bucket = cache._buckets[("held-a", "")]
        token, data = bucket.values["big"]
        assert data is not None and token.startswith("big\x1f")
        # isolation: what a caller changes is not what the next call gets
        got = saver.get_tuple(_cfg("held-a"))
        assert got is not None
        snap = got.checkpoint["channel_values"]["big"]
        snap.value.append("mutated")
        snap.value[0] = "changed"
        assert _tuple_form(saver.get_tuple(_cfg("held-a"))) == head


def test_a_thread_written_again_elsewhere_is_read_fresh(dsn: str) -> None:
    """Another saver deletes the thread and runs it again: the same checkpoint shape and
    channel versions, other values. The warm saver is not told; the blob rows' xmins
    changed, so the held tokens match nothing and the new values are sent."""
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        _graph(saver, "old").invoke(INPUT, _cfg("held-b"))
        for _ in range(4):  # kept by now
            _graph(saver, "old").get_state(_cfg("held-b"))
        cache = saver.history_cache
        assert cache is not None and cache._buckets[("held-b", "")].values["big"][1]
        with DeltaPostgresSaver.from_conn_string(dsn) as other:
            other.delete_thread("held-b")
            _graph(other, "new").invoke(INPUT, _cfg("held-b"))
        head, listing = _reference(dsn, "held-b")
        for _ in range(3):
            state = _graph(saver, "new").get_state(_cfg("held-b"))
            assert state.values["big"][0] == "new0" and state.values["small"][0] == "new-s1"
            assert _tuple_form(saver.get_tuple(_cfg("held-b"))) == head
            assert [_tuple_form(t) for t in saver.list(_cfg("held-b"))] == listing
            by_id = saver.get_tuple(
                {"configurable": {"thread_id": "held-b", "checkpoint_ns": "",
                                  "checkpoint_id": head[0]}}
            )
            assert _tuple_form(by_id) == head


def test_list_decodes_a_carried_over_blob_once(dsn: str) -> None:
    with DeltaPostgresSaver.from_conn_string(dsn) as w:
        _graph(w, "c", size=300).invoke(INPUT, _cfg("held-c"))
    _, listing = _reference(dsn, "held-c")
    serde = CountingSerde(_snapshot_length)
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as saver:
        saver.serde = serde
        tuples = list(saver.list(_cfg("held-c")))
        assert [_tuple_form(t) for t in tuples] == listing
        carrying = [t for t in tuples if "big" in t.checkpoint["channel_values"]]
        snaps = [t.checkpoint["channel_values"]["big"] for t in carrying]
        full = [s for s in snaps if len(s.value) == 300]
        assert len(full) >= 3  # the head and the steps after `first` carry it over
        assert serde.decoded[300] == 1, serde.decoded
        # every tuple has its own copy
        assert len({id(s) for s in full}) == len(full)
        assert len({id(s.value) for s in full}) == len(full)
        # get_state_history answers from the listing: equal to the official saver's
        with official_saver(dsn) as off:
            ours = [canon(s.values) for s in _graph(saver, "c").get_state_history(
                _cfg("held-c"))]
            theirs = [canon(s.values) for s in _graph(off, "c").get_state_history(
                _cfg("held-c"))]
        assert ours == theirs


async def test_async_saver_keeps_and_reads_held_values(dsn: str) -> None:
    with DeltaPostgresSaver.from_conn_string(dsn) as w:
        _graph(w, "d").invoke(INPUT, _cfg("held-d"))
    head, listing = _reference(dsn, "held-d")
    serde = CountingSerde(_snapshot_length)
    async with AsyncDeltaPostgresSaver.from_conn_string(dsn) as saver:
        saver.serde = serde
        for _ in range(5):
            serde.decoded.clear()
            state = await _graph(saver, "d").aget_state(_cfg("held-d"))
            assert len(state.values["big"]) == 2000
            got = await saver.aget_tuple(_cfg("held-d"))
            assert _tuple_form(got) == head
        assert serde.decoded[2000] == 0, serde.decoded
        assert [_tuple_form(t) async for t in saver.alist(_cfg("held-d"))] == listing


def test_same_ids_and_versions_written_again_are_read_fresh(dsn: str) -> None:
    """The xmin in the token is what tells two incarnations of a thread apart when the
    checkpoint id and the channel versions are the same (a restore, a tool that writes a
    thread again from its JSON): another saver deletes and puts the same checkpoint with
    another value; the warm saver, never told, must read the new one."""
    cp = empty_checkpoint()
    cp["channel_values"] = {"doc": ["old"] * 1000}
    cp["channel_versions"] = {"doc": 1}
    head: RunnableConfig = {"configurable": {"thread_id": "held-e", "checkpoint_ns": ""}}
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        saver.put(head, cp, {"source": "input", "step": -1}, {"doc": 1})
        for _ in range(4):
            got = saver.get_tuple(head)
            assert got is not None and got.checkpoint["channel_values"]["doc"][0] == "old"
        cache = saver.history_cache
        assert cache is not None and cache._buckets[("held-e", "")].values["doc"][1]
        with DeltaPostgresSaver.from_conn_string(dsn) as other:
            other.delete_thread("held-e")
            again: Checkpoint = {**cp, "channel_values": {"doc": ["new"] * 1000}}
            other.put(head, again, {"source": "input", "step": -1}, {"doc": 1})
        for _ in range(2):
            got = saver.get_tuple(head)
            assert got is not None and got.checkpoint["channel_values"]["doc"][0] == "new"
            listed = list(saver.list(head))
            assert listed[0].checkpoint["channel_values"]["doc"][0] == "new"
