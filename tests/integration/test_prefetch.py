"""get_tuple reads the checkpoint and the delta history LangGraph asks for next in one
statement (sql/delta_history.sql, tuple_history), and the next
get_delta_channel_history call on that checkpoint takes it.

Why: the two calls used to be two statements, so a prune (or delete) committed between
them could delete the checkpoint get_tuple had just returned, and its history then read
as empty: a reader saw a state that had lost its history (found by
tests/graph/test_retention_race.py on CI). These tests make that interleaving happen
deterministically, and check what the prefetch must not change: a write this context
makes between the two calls is seen, another saver or context never takes the answer,
and the answer equals the standalone statement's, on every history shape.
"""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver
from langgraph_delta_postgres._ops.base import _PREFETCH, _Listed, _Prefetch
from tests.graph._util import apply_steps, canon_history, cfg
from tests.graph.test_history_differential import CHANNELS as HCHANNELS
from tests.graph.test_history_differential import SHAPES, compare_channel, skewed
from tests.integration.test_cache import CHANNELS, _cfg, _graph, _run_turns
from tests.integration.test_list_prefetch import twin_threads


def _elsewhere(fn: Any) -> None:
    """Run ``fn`` in another thread (another context: a write made in this one would
    clear the prefetch, which is the point of test_a_write_between_the_calls_is_seen)."""
    t = threading.Thread(target=fn)
    t.start()
    t.join()


@pytest.mark.parametrize("cache_bytes", [0, 1 << 24], ids=["nocache", "cache"])
def test_history_outlives_a_delete_after_get_tuple(dsn: str, cache_bytes: int) -> None:
    with (
        DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=cache_bytes) as saver,
        psycopg.connect(dsn, autocommit=True) as other_conn,
    ):
        graph = _graph(saver)
        _run_turns(graph, "gone", 7)
        first = saver.get_tuple(_cfg("gone"))
        assert first is not None
        want = canon_history(
            saver.get_delta_channel_history(config=first.config, channels=CHANNELS)
        )
        assert want["messages"]["writes"], want
        tup = saver.get_tuple(_cfg("gone"))
        assert tup is not None
        # another process deletes the thread between the two calls
        _elsewhere(lambda: DeltaPostgresSaver(other_conn).delete_thread("gone"))
        got = saver.get_delta_channel_history(config=tup.config, channels=CHANNELS)
        assert canon_history(got) == want
        # taken once: asked again, the history is read again (the thread is gone now)
        again = saver.get_delta_channel_history(config=tup.config, channels=CHANNELS)
        assert again == {ch: {"writes": []} for ch in CHANNELS}


@pytest.mark.parametrize("cache_bytes", [0, 64 << 20])
@pytest.mark.parametrize("shape", ["linear", "linear-seedy", "forks", "namespaces", "skewed"])
def test_prefetched_equals_the_statement_on_generated_histories(
    dsn: str, shape: str, cache_bytes: int
) -> None:
    """Generated histories whose rows carry delta counters (so get_tuple derives the
    channels to prefetch), written one step at a time: after every step, for each
    namespace, the history get_tuple prefetched for the latest checkpoint equals the
    standalone statement's (asked right after: the prefetch is taken once) and
    InMemorySaver's."""
    rng = random.Random(f"prefetch-{shape}")
    steps = {**SHAPES, "skewed": skewed}[shape](rng)
    for st in steps:
        st.metadata["counters_since_delta_snapshot"] = {ch: [1, 1] for ch in HCHANNELS}
    mem = InMemorySaver()
    prefetched = 0
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=cache_bytes) as ours:
        for i, st in enumerate(steps):
            apply_steps(ours, "P", [st])
            apply_steps(mem, "P", [st])
            tup = ours.get_tuple({"configurable": {"thread_id": "P", "checkpoint_ns": st.ns}})
            assert tup is not None
            values = tup.checkpoint["channel_values"]
            chans = [
                ch for ch in HCHANNELS
                if ch in tup.checkpoint["channel_versions"] and ch not in values
            ]
            if not chans:
                continue
            where = f"step {i} {tup.config['configurable']} channels={chans}"
            pre = _PREFETCH.get()  # what the next call takes
            assert isinstance(pre, _Prefetch), where  # a get_tuple's, not a listing's
            assert pre is not None and set(chans) <= set(pre.channels), where
            got = canon_history(ours.get_delta_channel_history(config=tup.config, channels=chans))
            fresh = canon_history(
                ours.get_delta_channel_history(config=tup.config, channels=chans)
            )
            memory = canon_history(
                mem.get_delta_channel_history(config=tup.config, channels=chans)
            )
            assert _PREFETCH.get() is None, where  # taken once
            assert got == fresh, where
            for ch in got:  # the None seed exempt, its writes not
                compare_channel(got[ch], memory[ch], f"{ch!r} at {where}")
            prefetched += 1
    assert prefetched > 10


def test_a_write_between_the_calls_is_seen(dsn: str) -> None:
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        graph = _graph(saver)
        _run_turns(graph, "w", 5)
        tup = saver.get_tuple(_cfg("w"))
        assert tup is not None and tup.parent_config is not None
        # this context adds a write to the parent (as an update_state fork from an old
        # checkpoint did on LangGraph 1.2.0): the prefetched answer predates it
        saver.put_writes(tup.parent_config, [("messages", ["added"])], "late-task", "~")
        got = saver.get_delta_channel_history(config=tup.config, channels=["messages"])
        assert any(w[0] == "late-task" for w in got["messages"]["writes"]), got


def test_only_the_same_saver_and_context_take_it(dsn: str) -> None:
    with (
        DeltaPostgresSaver.from_conn_string(dsn) as saver,
        DeltaPostgresSaver.from_conn_string(dsn) as other,
    ):
        graph = _graph(saver)
        _run_turns(graph, "ctx", 5)
        tup = saver.get_tuple(_cfg("ctx"))
        assert tup is not None
        want = canon_history(saver.get_delta_channel_history(config=tup.config, channels=CHANNELS))
        tup = saver.get_tuple(_cfg("ctx"))
        assert tup is not None
        saver.put_writes(tup.config, [("messages", ["pending"])], "t-next", "~")  # clears
        tup = saver.get_tuple(_cfg("ctx"))
        assert tup is not None
        # another saver object in this context does not take this saver's prefetch
        theirs = other.get_delta_channel_history(config=tup.config, channels=CHANNELS)
        assert canon_history(theirs) == want
        # another thread (its own context) reads for itself
        seen: list[Any] = []
        t = threading.Thread(
            target=lambda: seen.append(
                saver.get_delta_channel_history(config=tup.config, channels=CHANNELS)
            )
        )
        t.start()
        t.join()
        assert canon_history(seen[0]) == want
        # a channel the prefetch did not derive: the statement runs for it
        got = saver.get_delta_channel_history(config=tup.config, channels=["messages", "nope"])
        assert got["nope"] == {"writes": []} and canon_history(got)["messages"] == want["messages"]


def _replayed(tup: Any) -> list[str]:
    """The channels LangGraph asks the history of after this get_tuple."""
    cp = tup.checkpoint
    return [c for c in CHANNELS if c in cp["channel_versions"] and c not in cp["channel_values"]]


async def test_async_prefetch_survives_a_delete(dsn: str) -> None:
    async with (
        AsyncDeltaPostgresSaver.from_conn_string(dsn) as saver,
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as other_conn,
    ):
        graph = _graph(saver)
        for i in range(12):  # until the latest checkpoint has history to replay
            await graph.ainvoke({"messages": [f"turn {i}"]}, _cfg("agone"))
            first = await saver.aget_tuple(_cfg("agone"))
            assert first is not None
            if i > 4 and _replayed(first):
                break
        assert first is not None
        assert _replayed(first)
        want = canon_history(
            await saver.aget_delta_channel_history(config=first.config, channels=_replayed(first))
        )
        # concurrent tasks each take only their own
        tups = await asyncio.gather(*(saver.aget_tuple(_cfg("agone")) for _ in range(3)))
        assert all(t is not None and t.config == first.config for t in tups)
        tup = await saver.aget_tuple(_cfg("agone"))
        assert tup is not None
        # another task (its own context) deletes the thread between the two calls
        await asyncio.create_task(AsyncDeltaPostgresSaver(other_conn).adelete_thread("agone"))
        got = await saver.aget_delta_channel_history(config=tup.config, channels=_replayed(tup))
        assert canon_history(got) == want
        assert any(e["writes"] for e in got.values()), got


@pytest.mark.parametrize("cache_bytes", [0, 64 << 20], ids=["nocache", "cache"])
def test_only_the_checkpoint_read_takes_it(dsn: str, cache_bytes: int) -> None:
    """The prefetch is keyed by thread, namespace and checkpoint: after get_tuple of the
    latest checkpoint, a history call on the same id in another namespace (a subgraph's)
    or another thread (a copy), or on another checkpoint of the same namespace (its
    parent), is answered by the statement, for that checkpoint."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = twin_threads(DeltaPostgresSaver(conn))
        saver = DeltaPostgresSaver(conn, cache_bytes=cache_bytes)
        plain = DeltaPostgresSaver(conn, cache_bytes=0)
        latest, parent = ids[-1], ids[-2]
        tup = saver.get_tuple(cfg("twin", "", None))
        assert tup is not None and tup.config["configurable"]["checkpoint_id"] == latest
        pre = _PREFETCH.get()
        assert pre is not None and not isinstance(pre, _Listed) and pre.channels
        chans = list(pre.channels)

        def want(thread: str, ns: str, cid: str) -> Any:
            _PREFETCH.set(None)
            return canon_history(plain.get_delta_channel_history(
                config=cfg(thread, ns, cid), channels=chans
            ))

        mine = want("twin", "", latest)
        others = [("twin", "sub", latest), ("twin-b", "", latest), ("twin", "", parent)]
        for other in others:
            assert want(*other) != mine, other  # a wrong answer would show
            assert saver.get_tuple(cfg("twin", "", None)) is not None
            before = saver.stats().walk.prefetch_hits
            got = saver.get_delta_channel_history(config=cfg(*other), channels=chans)
            assert canon_history(got) == want(*other), other
            assert saver.stats().walk.prefetch_hits == before, other
        # and the checkpoint read takes it
        assert saver.get_tuple(cfg("twin", "", None)) is not None
        before = saver.stats().walk.prefetch_hits
        got = saver.get_delta_channel_history(config=cfg("twin", "", latest), channels=chans)
        assert canon_history(got) == mine
        assert saver.stats().walk.prefetch_hits == before + 1
