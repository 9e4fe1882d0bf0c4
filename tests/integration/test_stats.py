"""``saver.stats()`` on real Postgres: the counters move as docs/observability.md says,
across cold and warm calls, with the cache on and off, through get_tuple's prefetch, on
eviction and for a thread too big for the cache; and the savers log nothing above DEBUG
on a graph run (one DEBUG line per statement, and no log work when DEBUG is off)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import psycopg
import pytest

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver, SaverStats
from langgraph_delta_postgres._ops import base as core
from langgraph_delta_postgres._stats import WalkStats
from langgraph_delta_postgres.bench.rows import write_chain
from tests.integration.test_cache import CHANNELS, _cfg, _graph, _run_turns

N = 12  # checkpoints per chain: a history at the last walks the N - 1 before it


def _delta(after: SaverStats, before: SaverStats) -> dict[str, int]:
    a, b = after.as_dict(), before.as_dict()
    return {k: a[k] - b.get(k, 0) for k in a if k not in ("cache_bytes", "cache_buckets")
            and a[k] != b.get(k, 0)}


def test_cold_then_warm_with_the_cache(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        chain = write_chain(DeltaPostgresSaver(conn, cache_bytes=0), "st-warm", N, CHANNELS)
        saver = DeltaPostgresSaver(conn)
        s0 = saver.stats()
        assert s0.walk == WalkStats() and s0.cache is not None
        assert s0.cache.hits == s0.cache.misses == s0.cache.bytes == s0.cache.buckets == 0
        cfg = _cfg("st-warm", chain.ids[-1])  # by id: no prefetch
        saver.get_delta_channel_history(config=cfg, channels=CHANNELS)
        s1 = saver.stats()
        # cold: one statement, a 'c' row per visited checkpoint and a write per channel
        assert _delta(s1, s0) == {
            "walk_history_calls": 1, "walk_statements": 1,
            "walk_rows": 3 * (N - 1), "walk_checkpoints": N - 1,
            "cache_misses": len(CHANNELS),
        }
        assert s1.cache is not None and s1.cache.buckets == 1 and s1.cache.bytes > 0
        saver.get_delta_channel_history(config=cfg, channels=CHANNELS)
        s2 = saver.stats()
        # warm: the walk reads the target's parent ('c' row) and stops there, at the
        # chain the cache holds for each channel ('h' rows): no write is sent again
        assert _delta(s2, s1) == {
            "walk_history_calls": 1, "walk_statements": 1, "walk_checkpoints": 1,
            "walk_rows": 1 + len(CHANNELS), "cache_hits": len(CHANNELS),
        }
        assert s2.cache is not None and s2.cache.bytes == s1.cache.bytes
        # a snapshot is a value: later calls do not change it
        with pytest.raises(dataclasses.FrozenInstanceError):
            s2.walk.rows = 0  # type: ignore[misc]


def test_without_the_cache(dsn: str) -> None:
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as saver:
        chain = write_chain(saver, "st-off", N, CHANNELS)
        cfg = _cfg("st-off", chain.ids[-1])
        for _ in range(2):  # every call walks the whole chain again
            saver.get_delta_channel_history(config=cfg, channels=CHANNELS)
        st = saver.stats()
        assert st.cache is None and "cache_hits" not in st.as_dict()
        # no 'c' rows: the checkpoints holding a write of the channels (here all of them)
        assert st.walk == WalkStats(
            history_calls=2, statements=2, rows=2 * 2 * (N - 1), checkpoints=2 * (N - 1)
        )


@pytest.mark.parametrize("cache_bytes", [0, 1 << 24], ids=["nocache", "cache"])
def test_prefetch_answers_without_a_statement(dsn: str, cache_bytes: int) -> None:
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=cache_bytes) as saver:
        write_chain(saver, "st-pre", N, CHANNELS)
        s0 = saver.stats()
        tup = saver.get_tuple(_cfg("st-pre"))  # the latest: reads the history too
        assert tup is not None
        s1 = saver.stats()
        assert s1.walk.statements == s0.walk.statements + 1
        assert s1.walk.checkpoints == s0.walk.checkpoints + N - 1
        assert s1.walk.history_calls == s0.walk.history_calls
        saver.get_delta_channel_history(config=tup.config, channels=CHANNELS)
        s2 = saver.stats()
        assert _delta(s2, s1) == {
            "walk_history_calls": 1, "walk_prefetch_hits": 1,
            # with a cache: a thread's first load gets no bucket (answered as without one)
            **({"walk_uncached": 1} if cache_bytes else {}),
        }
        # get_tuple by id reads no history: no walk counted
        saver.get_tuple(tup.config)
        assert saver.stats().walk == s2.walk


def test_evictions_and_a_thread_too_big(dsn: str) -> None:
    budget = 200_000  # as test_cache.test_budget_is_never_exceeded: holds 1 to 3 of these
    with psycopg.connect(dsn, autocommit=True) as conn:
        writer = DeltaPostgresSaver(conn, cache_bytes=0)
        chains = {t: write_chain(writer, t, 40, CHANNELS) for t in ("ev1", "ev2", "ev3", "ev4")}
        huge = write_chain(writer, "ev-huge", 300, CHANNELS)
        saver = DeltaPostgresSaver(conn, cache_bytes=budget)
        for _ in range(2):
            for t, chain in chains.items():
                for cid in chain.ids[-10:]:
                    saver.get_delta_channel_history(config=_cfg(t, cid), channels=CHANNELS)
        st = saver.stats()
        assert st.cache is not None
        assert st.cache.max_bytes == budget and 0 < st.cache.bytes <= budget
        assert st.cache.buckets == len(saver.history_cache or ())
        # the four threads do not fit together: buckets were evicted, or refused one
        assert st.cache.evictions + st.cache.refused > 0
        assert st.walk.uncached == st.cache.refused  # nothing outsized yet
        saver.get_delta_channel_history(config=_cfg("ev-huge", huge.ids[-1]), channels=CHANNELS)
        saver.get_delta_channel_history(config=_cfg("ev-huge", huge.ids[-1]), channels=CHANNELS)
        after = saver.stats()
        assert after.cache is not None
        # the second call knew the thread was outsized: answered as without a cache
        assert after.walk.uncached - after.cache.refused >= st.walk.uncached - st.cache.refused + 1


async def test_async_saver_counts_the_same(dsn: str) -> None:
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as writer:
        chain = write_chain(writer, "st-async", N, CHANNELS)
    async with AsyncDeltaPostgresSaver.from_conn_string(dsn) as saver:
        cfg = _cfg("st-async", chain.ids[-1])
        for _ in range(2):
            await saver.aget_delta_channel_history(config=cfg, channels=CHANNELS)
        st = saver.stats()
        assert st.walk == WalkStats(
            history_calls=2, statements=2, rows=3 * (N - 1) + 1 + len(CHANNELS),
            checkpoints=N,
        )
        assert st.cache is not None and (st.cache.hits, st.cache.misses) == (2, 2)


def test_graph_run_logs_nothing_above_debug(
    dsn: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        graph = _graph(saver)
        with caplog.at_level(logging.DEBUG, logger="langgraph_delta_postgres"):
            _run_turns(graph, "st-log", 3)
        ours = [r for r in caplog.records if r.name.startswith("langgraph_delta_postgres")]
        assert ours and all(r.levelno == logging.DEBUG for r in ours)
        assert any(r.getMessage().startswith("_op_delta_history") for r in ours) or any(
            r.getMessage().startswith("_op_get_tuple") for r in ours
        )
        assert all(" ms" in r.getMessage() for r in ours)
        # DEBUG off (the default): not one log call, not one clock read per statement
        caplog.clear()

        def boom(*a: Any, **k: Any) -> None:
            raise AssertionError("a statement was logged with DEBUG off")

        monkeypatch.setattr("langgraph_delta_postgres._driver_sync.log_statement", boom)
        logging.getLogger("langgraph_delta_postgres").setLevel(logging.INFO)
        try:
            _run_turns(graph, "st-log", 2)
        finally:
            logging.getLogger("langgraph_delta_postgres").setLevel(logging.NOTSET)
        assert not [r for r in caplog.records if r.name.startswith("langgraph_delta_postgres")]
        assert core.debug_statements() is False or logging.getLogger().level <= logging.DEBUG
