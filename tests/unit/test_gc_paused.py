"""_cache.store.gc_paused: the collector is paused inside and left as it was found after,
also when the body raises, and an application that turned it off keeps it off."""

from __future__ import annotations

import gc

import pytest

from langgraph_delta_postgres._cache import gc_paused


def test_paused_inside_and_resumed_after() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_resumed_when_the_body_raises() -> None:
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_left_off_when_the_application_turned_it_off() -> None:
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
