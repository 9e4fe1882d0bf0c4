"""_cache.store.gc_paused: no automatic collection inside; the collector's settings are
left as they were found after (also when the body raises); whether the collector is
enabled is the application's alone, before or during a call; overlapping calls (threads,
nesting) keep the pause until the last one ends (issue 37)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from langgraph_delta_postgres._cache import gc_paused


@pytest.fixture(autouse=True)
def collector_as_found() -> Iterator[None]:
    enabled, threshold = gc.isenabled(), gc.get_threshold()
    yield
    gc.set_threshold(*threshold)
    (gc.enable if enabled else gc.disable)()


def _collections() -> int:
    return sum(s["collections"] for s in gc.get_stats())


def _churn(n: int = 200_000) -> list[list[int]]:
    """Many container objects kept alive: enough for several young collections."""
    return [[i] for i in range(n)]


def test_no_collection_inside_and_the_thresholds_back_after() -> None:
    before_threshold = gc.get_threshold()
    start = _collections()
    with gc_paused():
        kept = _churn()
        inside = _collections() - start
    assert inside == 0 and len(kept) == 200_000
    assert gc.get_threshold() == before_threshold and gc.isenabled()
    _churn()
    assert _collections() > start  # collection goes on after


def test_restored_when_the_body_raises() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.get_threshold() == before and gc.isenabled()


def test_an_application_that_turned_it_off_keeps_it_off() -> None:
    gc.disable()
    with gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_turned_off_during_a_call_stays_off() -> None:
    with gc_paused():
        gc.disable()  # the application's choice, made while a call runs
    assert not gc.isenabled()


def test_thresholds_the_application_sets_during_a_call_stay() -> None:
    with gc_paused():
        gc.set_threshold(1234, 11, 12)
    assert gc.get_threshold() == (1234, 11, 12)


def test_nested_and_overlapping_calls_pause_until_the_last_ends() -> None:
    before = gc.get_threshold()
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, tuple[int, ...]] = {}

    def call_a() -> None:
        with gc_paused():
            a_in.set()
            b_in.wait(10)
        a_out.set()

    def call_b() -> None:
        a_in.wait(10)
        with gc_paused():
            b_in.set()
            a_out.wait(10)  # A ended first: B's pause must hold
            seen["b after a"] = gc.get_threshold()
            with gc_paused():  # nested
                pass
            seen["b after nested"] = gc.get_threshold()

    threads = [threading.Thread(target=call_a), threading.Thread(target=call_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert seen["b after a"][0] > before[0] and seen["b after nested"][0] > before[0]
    assert gc.get_threshold() == before and gc.isenabled()


def test_a_collector_off_by_threshold_zero_is_left_alone() -> None:
    gc.set_threshold(0)
    with gc_paused():
        assert gc.get_threshold()[0] == 0
    assert gc.get_threshold()[0] == 0
