"""The decoded-value cache of get_delta_channel_history: isolation of answers, no stale
rows after a thread is written again (by this saver or another), the memory budget,
and what the statement sends when the client holds a chain or a seed."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import START, StateGraph

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver
from langgraph_delta_postgres._cache import HistoryCache
from langgraph_delta_postgres.bench.rows import copy_threads, write_chain
from tests._config import cfg
from tests.graph._reducers import append_reducer
from tests.graph._util import canon, canon_history

CHANNELS = ["messages", "files"]


def _cfg(thread_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    return cfg(thread_id, checkpoint_id=checkpoint_id)


class State(TypedDict):
    messages: Annotated[list[Any], DeltaChannel(append_reducer, snapshot_frequency=4)]
    files: Annotated[list[Any], DeltaChannel(append_reducer, snapshot_frequency=3)]


def _chat(state: State) -> dict[str, Any]:
    n = len(state["messages"])
    return {
        "messages": [AIMessage(content=f"reply {n}", additional_kwargs={"n": n})],
        "files": [{"path": f"f{n}", "lines": [n]}],
    }


def _graph(saver: Any) -> Any:
    b = StateGraph(State)
    b.add_node("chat", _chat)
    b.add_edge(START, "chat")
    return b.compile(checkpointer=saver)


def _run_turns(graph: Any, thread_id: str, turns: int) -> None:
    for i in range(turns):
        graph.invoke({"messages": [HumanMessage(content=f"turn {i}")]}, _cfg(thread_id))


def test_answers_are_isolated_from_callers(dsn: str) -> None:
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        graph = _graph(saver)
        _run_turns(graph, "iso", 9)
        latest = saver.get_tuple(_cfg("iso"))
        assert latest is not None
        first = saver.get_delta_channel_history(config=latest.config, channels=CHANNELS)
        expected = canon_history(first)
        assert first["messages"]["writes"] and "seed" in first["messages"]
        # mutate everything a caller can reach
        for entry in first.values():
            for _, _, value in entry["writes"]:
                for item in value:
                    if isinstance(item, AIMessage):
                        item.content = "MUTATED"
                        item.additional_kwargs["n"] = -1
                    elif isinstance(item, dict):
                        item["path"] = "MUTATED"
                        item["lines"].append(-1)
            entry["writes"].append(("x", "y", "z"))
            seed = entry.get("seed")
            if seed is not None:
                seed.value.append("MUTATED")  # a _DeltaSnapshot
        assert saver.history_cache is not None and saver.history_cache.nbytes > 0
        second = saver.get_delta_channel_history(config=latest.config, channels=CHANNELS)
        assert saver.history_cache.chain_hits > 0
        assert canon_history(second) == expected
        # and through the graph: state built from the cache, then mutated, stays private
        state = graph.get_state(_cfg("iso"))
        state.values["messages"][0].content = "MUTATED"
        state.values["messages"].append("MUTATED")
        again = graph.get_state(_cfg("iso"))
        with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as fresh:
            assert canon(again.values) == canon(_graph(fresh).get_state(_cfg("iso")).values)


def _rewrite_thread(dsn: str, thread_id: str) -> None:
    """Delete the thread and write it again under the same checkpoint ids, with every
    write's value replaced by another write's (as another process restoring a different
    copy would): same ids, other rows."""
    with psycopg.connect(dsn, autocommit=False) as conn:
        for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
            conn.execute(
                f"CREATE TEMP TABLE keep_{table} ON COMMIT DROP AS "
                f"SELECT * FROM {table} WHERE thread_id = %s",
                (thread_id,),
            )
            conn.execute(f"DELETE FROM {table} WHERE thread_id = %s", (thread_id,))
        conn.execute(
            "UPDATE keep_checkpoint_writes AS w SET blob = o.blob FROM ("
            " SELECT checkpoint_id, task_id, idx,"
            "  lag(blob) OVER (ORDER BY checkpoint_id, task_id, idx) AS blob"
            " FROM keep_checkpoint_writes) AS o"
            " WHERE o.blob IS NOT NULL AND w.checkpoint_id = o.checkpoint_id"
            " AND w.task_id = o.task_id AND w.idx = o.idx"
        )
        for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
            conn.execute(f"INSERT INTO {table} SELECT * FROM keep_{table}")
        conn.commit()


def test_thread_written_again_under_the_same_ids_is_never_stale(dsn: str) -> None:
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        chain = write_chain(saver, "again", 60, CHANNELS)
        targets = [_cfg("again", cid) for cid in chain.ids[-12:]] + [_cfg("again")]
        before = [saver.get_delta_channel_history(config=t, channels=CHANNELS) for t in targets]
        for t in targets:  # warm: every answer now comes from held chains
            saver.get_delta_channel_history(config=t, channels=CHANNELS)
        assert saver.history_cache is not None and saver.history_cache.chain_hits > 0
        _rewrite_thread(dsn, "again")  # by another connection: the saver is not told
        with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as fresh:
            for t, old in zip(targets, before, strict=True):
                want = canon_history(fresh.get_delta_channel_history(config=t, channels=CHANNELS))
                got = canon_history(saver.get_delta_channel_history(config=t, channels=CHANNELS))
                assert got == want
                assert got != canon_history(old)  # the rewrite changed every answer


def test_writes_added_to_a_cached_ancestor_are_seen(dsn: str) -> None:
    """A run that resumes or forks from an old checkpoint adds writes to it after its
    children exist (LangGraph 1.2.0's update_state writes to the fork point): a cached
    chain through it must not hide them."""
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        chain = write_chain(saver, "fork", 30, CHANNELS)
        head = _cfg("fork", chain.ids[-1])
        saver.get_delta_channel_history(config=head, channels=CHANNELS)
        saver.get_delta_channel_history(config=head, channels=CHANNELS)
        assert saver.history_cache is not None and saver.history_cache.chain_hits > 0
        fork_point = _cfg("fork", chain.ids[10])
        saver.put_writes(fork_point, [("messages", ["forked"])], task_id="late", task_path="~z")
        got = saver.get_delta_channel_history(config=head, channels=CHANNELS)
        with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as fresh:
            want = fresh.get_delta_channel_history(config=head, channels=CHANNELS)
        assert canon_history(got) == canon_history(want)
        assert ("late", "messages", ["forked"]) in got["messages"]["writes"]


def test_own_maintenance_forgets_threads(dsn: str) -> None:
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        write_chain(saver, "gone", 20, CHANNELS)
        write_chain(saver, "kept", 20, CHANNELS)
        for t in ("gone", "kept"):
            saver.get_delta_channel_history(config=_cfg(t), channels=CHANNELS)
        cache = saver.history_cache
        assert cache is not None and len(cache) == 2
        saver.delete_thread("gone")
        assert len(cache) == 1
        assert saver.get_delta_channel_history(config=_cfg("gone"), channels=CHANNELS) == {
            ch: {"writes": []} for ch in CHANNELS
        }
        saver.copy_thread("kept", "copy")
        assert canon_history(
            saver.get_delta_channel_history(config=_cfg("copy"), channels=CHANNELS)
        ) == canon_history(saver.get_delta_channel_history(config=_cfg("kept"), channels=CHANNELS))


def test_threads_without_history_leave_nothing(dsn: str) -> None:
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        for i in range(50):
            assert saver.get_delta_channel_history(config=_cfg(f"none-{i}"), channels=CHANNELS)
        write_chain(saver, "one", 1, CHANNELS)  # a root only: no ancestor to walk
        saver.get_delta_channel_history(config=_cfg("one"), channels=CHANNELS)
        cache = saver.history_cache
        assert cache is not None and len(cache) == 0 and cache.nbytes == 0


def test_budget_is_never_exceeded(dsn: str) -> None:
    budget = 200_000
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=budget) as saver:
        chains = {t: write_chain(saver, t, 40, CHANNELS) for t in ("b1", "b2", "b3", "b4")}
        cache = saver.history_cache
        assert cache is not None
        with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as fresh:
            for rnd in range(2):
                for t, chain in chains.items():
                    for cid in chain.ids[-10:]:
                        cfg = _cfg(t, cid)
                        got = saver.get_delta_channel_history(config=cfg, channels=CHANNELS)
                        assert cache.nbytes <= budget
                        if rnd:
                            assert canon_history(got) == canon_history(
                                fresh.get_delta_channel_history(config=cfg, channels=CHANNELS)
                            )
        assert 0 < cache.nbytes <= budget
        assert 1 <= len(cache) < 4  # buckets were evicted to stay within it


@pytest.mark.parametrize(
    ("checkpoints", "calls", "budget"),
    [
        pytest.param(900, 20, 3 << 20, id="300-turns"),
        # the thread's bucket (~4 MB) within MAX_SHARE of the budget; tracemalloc makes
        # its 60 loads take ~80 s on 2 cores
        pytest.param(3000, 60, 10 << 20, id="1000-turns", marks=pytest.mark.slow),
    ],
)
def test_memory_of_a_long_run_stays_within_budget(
    dsn: str, checkpoints: int, calls: int, budget: int
) -> None:
    """The real memory the cache holds (tracemalloc) is within its budget plus 10%,
    over a resume loop along a long thread (three checkpoints a turn)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        writer = DeltaPostgresSaver(conn, cache_bytes=0)
        chain = write_chain(writer, "big", checkpoints, CHANNELS)
        saver = DeltaPostgresSaver(conn, cache_bytes=budget)
        cache = saver.history_cache
        assert cache is not None
        gc.collect()
        tracemalloc.start()
        try:
            peak_held = 0
            for cid in chain.ids[-calls:]:
                saver.get_delta_channel_history(config=_cfg("big", cid), channels=CHANNELS)
                assert cache.nbytes <= budget
                peak_held = max(peak_held, cache.nbytes)
            gc.collect()
            with_cache = tracemalloc.get_traced_memory()[0]
            cache.clear()
            gc.collect()
            without = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert peak_held > budget // 4, "the run did not fill the cache enough to measure"
        assert with_cache - without <= 1.1 * budget
        # and the cache's own count is an honest estimate of what it holds
        assert with_cache - without <= 1.1 * peak_held


def test_thread_too_big_for_the_budget_is_answered_without_the_cache(dsn: str) -> None:
    """A thread whose history would take more than MAX_SHARE of the budget keeps nothing,
    leaves the other buckets alone, and is then asked of the statement as a saver without
    a cache asks it (no 'c' rows, nothing held), through that saver's answer path."""
    budget = 64 << 10
    with psycopg.connect(dsn, autocommit=True) as conn:
        writer = DeltaPostgresSaver(conn, cache_bytes=0)
        huge = write_chain(writer, "huge", 300, CHANNELS)  # ~250 KB of pickles
        write_chain(writer, "small", 4, CHANNELS)
        saver = DeltaPostgresSaver(conn, cache_bytes=budget)
        cache = saver.history_cache
        assert cache is not None

        def check(thread_id: str, checkpoint_id: str | None = None) -> None:
            cfg = _cfg(thread_id, checkpoint_id)
            got = saver.get_delta_channel_history(config=cfg, channels=CHANNELS)
            want = writer.get_delta_channel_history(config=cfg, channels=CHANNELS)
            assert canon_history(got) == canon_history(want)

        check("small")
        assert len(cache) == 1 and not cache.outsized("small", "")
        check("huge")  # the first call finds out: nothing kept, the small bucket stays
        assert cache.outsized("huge", "") and len(cache) == 1 and cache.nbytes <= budget
        assert ("huge", "") not in cache._buckets
        plan = cache.plan("huge", "", None, CHANNELS)
        assert plan.bucket is None
        assert plan.params() == {
            "held_ids": [], "held_tokens": [], "seed_tokens": [], "nodes": False,
            "held_values": [],
        }

        def no_cache_answer(*args: Any, **kw: Any) -> Any:
            raise AssertionError("an outsized thread went through the cache")

        real_answer = cache.answer
        cache.answer = no_cache_answer  # type: ignore[method-assign]
        try:
            for cid in (None, *huge.ids[-3:]):
                check("huge", cid)
            # get_tuple's prefetch asks the same statement without the cache too
            latest = saver.get_tuple(_cfg("huge"))
            assert latest is not None
            got = saver.get_delta_channel_history(config=latest.config, channels=CHANNELS)
            want = writer.get_delta_channel_history(config=latest.config, channels=CHANNELS)
            assert canon_history(got) == canon_history(want)
        finally:
            cache.answer = real_answer  # type: ignore[method-assign]
        assert ("huge", "") not in cache._buckets and len(cache) == 1
        # a history that fits again (a short chain) takes the thread back into the cache
        check("huge", huge.ids[3])
        assert not cache.outsized("huge", "")
        check("huge", huge.ids[3])
        assert ("huge", "") in cache._buckets and cache.nbytes <= budget
        check("huge")  # and out again
        assert cache.outsized("huge", "") and ("huge", "") not in cache._buckets
        saver.delete_thread("huge")  # forgetting a thread drops its mark
        assert not cache.outsized("huge", "")


def test_admission_keeps_threads_loaded_in_turn_from_thrashing(dsn: str) -> None:
    """Six threads loaded in turn, round after round, with a budget that holds two of
    their buckets: the two admitted first stay and are answered warm; the other four are
    refused a bucket (so asked of the statement as without a cache: no 'c' rows, nothing
    pickled) instead of each evicting the bucket the next load needs. A thread asked for
    more often than the bucket it would evict is then admitted. Answers equal a saver's
    without a cache throughout."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        writer = DeltaPostgresSaver(conn, cache_bytes=0)
        write_chain(writer, "adm0", 120, CHANNELS)
        copy_threads(conn, "adm0", 5, "adm")
        threads = [f"adm{i}" for i in range(6)]
        sizer = DeltaPostgresSaver(conn)
        sizer.get_delta_channel_history(config=_cfg("adm0"), channels=CHANNELS)
        assert sizer.history_cache is not None
        one = sizer.history_cache.nbytes  # one thread's bucket
        saver = DeltaPostgresSaver(conn, cache_bytes=one * 5 // 2)
        cache = saver.history_cache
        assert cache is not None and one <= cache.max_bucket

        nodes: dict[str, list[bool]] = {t: [] for t in threads}
        through_cache: list[str] = []
        real_plan, real_answer = cache.plan, cache.answer

        def plan(thread_id: str, *args: Any, **kw: Any) -> Any:
            got = real_plan(thread_id, *args, **kw)
            nodes[thread_id].append(got.params()["nodes"])
            return got

        def answer(plan: Any, *args: Any, **kw: Any) -> Any:
            through_cache.append(plan.key[0])
            return real_answer(plan, *args, **kw)

        cache.plan = plan  # type: ignore[method-assign]
        cache.answer = answer  # type: ignore[method-assign]

        def load(thread_id: str) -> None:  # what a run or get_state asks
            tup = saver.get_tuple(_cfg(thread_id))
            assert tup is not None
            got = saver.get_delta_channel_history(config=tup.config, channels=CHANNELS)
            want = writer.get_delta_channel_history(config=tup.config, channels=CHANNELS)
            assert canon_history(got) == canon_history(want)

        for t in threads:
            load(t)
        # a thread's first load (get_tuple) gets no bucket: each answered as without a
        # cache, its size remembered (see _cache/policy.py "A thread's first load")
        assert not cache._buckets and cache.refused == 6 and through_cache == []
        for t in threads:
            load(t)
        # room: the first two admitted without evicting anything; then no room: the
        # others answered as without a cache
        assert list(cache._buckets) == [("adm0", ""), ("adm1", "")]
        assert cache.refused == 6 + 4 and cache.nbytes <= cache.max_bytes
        assert through_cache == ["adm0", "adm1"]
        hits = cache.chain_hits
        for _ in range(3):
            for t in threads:
                load(t)
        # asked as often as the buckets they would evict: still refused, nothing evicted
        assert sorted(cache._buckets) == [("adm0", ""), ("adm1", "")]
        assert cache.refused == 6 + 4 * 4
        assert all(nodes[t] == [False] + [True] * 4 for t in threads[:2])
        assert all(nodes[t] == [False] * 5 for t in threads[2:])
        assert through_cache == ["adm0", "adm1"] * 4
        assert cache.chain_hits - hits == 3 * 2 * len(CHANNELS)  # warm, every round
        # a thread asked for more often than the least recent bucket takes its place,
        # and is answered warm from its next call on
        load("adm5")
        assert nodes["adm5"][-1] is True and through_cache[-1] == "adm5"
        assert ("adm5", "") in cache._buckets and ("adm0", "") not in cache._buckets
        hits = cache.chain_hits
        load("adm5")
        assert cache.chain_hits - hits == len(CHANNELS) and cache.nbytes <= cache.max_bytes


def test_statement_sends_no_blob_the_client_holds(dsn: str) -> None:
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        graph = _graph(saver)
        _run_turns(graph, "held", 7)
        cfg = _cfg("held")
        saver.get_delta_channel_history(config=cfg, channels=CHANNELS)
        cache = saver.history_cache
        assert cache is not None
        latest = saver.get_tuple(cfg)
        assert latest is not None
        plan = cache.plan("held", "", latest.config["configurable"]["checkpoint_id"], CHANNELS)
        assert plan.held_tokens and plan.seed_tokens
        with saver._connection() as conn, conn.cursor(binary=True) as cur:
            cur.execute(
                saver.history_query(),
                {
                    "thread_id": "held",
                    "checkpoint_ns": "",
                    "checkpoint_id": None,
                    "channels": CHANNELS,
                    "max_depth": saver.max_history_depth,
                    **plan.params(),
                },
            )
            rows = cur.fetchall()
        # the parent is held for both channels: one 'c' row and one 'h' row each
        assert sorted(r[0] for r in rows) == ["c", "h", "h"]
        # without the chains (dropped by hand) but with the seeds: the walk goes down
        # to the seeds again, and the statement names them instead of sending them
        bucket = cache._buckets[("held", "")]
        bucket.ok.clear()
        bucket.tops.clear()
        before = cache.seed_hits
        got = saver.get_delta_channel_history(config=cfg, channels=CHANNELS)
        assert cache.seed_hits == before + 2
        with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as fresh:
            assert canon_history(got) == canon_history(
                fresh.get_delta_channel_history(config=cfg, channels=CHANNELS)
            )


def test_history_page_through_a_graph(dsn: str) -> None:
    """get_state_history pages answered with the cache (twice: cold, then warm) equal
    the same pages without it, on the same rows."""
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as plain:
        _run_turns(_graph(plain), "page", 25)
        want = [canon((s.values, s.next)) for s in _graph(plain).get_state_history(_cfg("page"))]
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        graph = _graph(saver)
        for _ in range(2):
            got = [canon((s.values, s.next)) for s in graph.get_state_history(_cfg("page"))]
            assert got == want
            page = [
                canon((s.values, s.next)) for s in graph.get_state_history(_cfg("page"), limit=10)
            ]
            assert page == want[:10]
        assert saver.history_cache is not None and saver.history_cache.chain_hits > 0


async def test_async_saver_uses_the_cache(dsn: str) -> None:
    async with AsyncDeltaPostgresSaver.from_conn_string(dsn) as saver:
        graph = _graph(saver)
        for i in range(8):
            await graph.ainvoke({"messages": [HumanMessage(content=f"t{i}")]}, _cfg("aio"))
        states = [s async for s in graph.aget_state_history(_cfg("aio"), limit=6)]
        # (the page's entries whose chains are in the listing are answered from it, see
        # _ops/listed.py; a history call past the page goes through the cache)
        older = states[-1].parent_config
        assert older is not None
        for _ in range(2):
            await saver.aget_delta_channel_history(config=older, channels=["messages", "files"])
        assert saver.history_cache is not None and saver.history_cache.chain_hits > 0
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as fresh:
        want = list(_graph(fresh).get_state_history(_cfg("aio"), limit=6))
    assert [canon(s.values) for s in states] == [canon(s.values) for s in want]


@pytest.mark.parametrize("bad", [-1, 1.5, "10", True])
def test_cache_bytes_must_be_a_non_negative_int(bad: Any) -> None:
    with pytest.raises(ValueError, match="cache_bytes"):
        HistoryCache(bad)
