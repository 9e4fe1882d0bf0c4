"""The FIFO turns of a saver's own writes (langgraph_delta_postgres/_order.py): who runs
together, who waits for whom, and that a waiter is woken once, when its turn comes."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest

from langgraph_delta_postgres import _order
from langgraph_delta_postgres._order import PUT, WRITES, Turns, ahold, hold, put_keys, writes_keys


def _at(cid: str) -> list[tuple[str, str, str]]:
    return [("thread", "", cid)]


def _put(parent: str | None, cid: str) -> list[tuple[str, str, str]]:
    conf: dict[str, Any] = {"thread_id": "thread", "checkpoint_ns": ""}
    if parent:
        conf["checkpoint_id"] = parent
    return put_keys({"configurable": conf}, {"id": cid})


K = _at("c1")


class _Signal:
    """Counts how many times a waiter is woken."""

    made: list[_Signal] = []

    def __init__(self) -> None:
        self.sets = 0
        _Signal.made.append(self)

    def set(self) -> None:
        self.sets += 1


@pytest.fixture
def turns() -> Turns:
    _Signal.made.clear()
    return Turns(_Signal)


def test_keys() -> None:
    assert _put(None, "c1") == _at("c1")
    assert _put("c1", "c2") == _at("c1") + _at("c2")
    assert put_keys({"configurable": {"thread_id": "thread"}}, None) == []
    cfg: Any = {"configurable": {"thread_id": "thread", "checkpoint_id": "c2"}}
    assert writes_keys(cfg) == _at("c2")
    with pytest.raises(ValueError):
        writes_keys({"configurable": {}})


def test_writes_run_together_the_childs_put_after_them(turns: Turns) -> None:
    w1, w2 = turns.arrive(_at("c1"), WRITES), turns.arrive(_at("c1"), WRITES)
    assert w1.ready and w2.ready
    p = turns.arrive(_put("c1", "c2"), PUT)
    assert not p.ready
    w3 = turns.arrive(_at("c1"), WRITES)  # behind the waiting put: FIFO
    w_child = turns.arrive(_at("c2"), WRITES)  # the child's writes wait for its put
    assert not w3.ready and not w_child.ready
    other = turns.arrive(_put("b1", "b2"), PUT)  # another branch: not ordered
    assert other.ready
    turns.leave(w1)
    assert not p.ready and p.signal.sets == 0  # w2 still runs
    turns.leave(w2)
    assert p.ready and p.signal.sets == 1 and not w3.ready and not w_child.ready
    turns.leave(p)
    assert w3.ready and w_child.ready and w3.signal.sets == 1 and w_child.signal.sets == 1
    for t in (w3, w_child, other):
        turns.leave(t)
    assert turns.counters() == {"waits": 3, "slow_waits": 0, "overdue": 0}
    assert all(s.sets == 1 for s in _Signal.made), "a waiter was woken more than once"
    assert turns._queues == {}


def test_puts_of_one_parent_run_together_and_wake_every_write_behind(turns: Turns) -> None:
    p1, p2 = turns.arrive(_put("c1", "x"), PUT), turns.arrive(_put("c1", "y"), PUT)
    assert p1.ready and p2.ready
    ws = [turns.arrive(_at("c1"), WRITES) for _ in range(5)]
    assert not any(w.ready for w in ws)
    turns.leave(p1)
    assert not any(w.ready for w in ws)
    turns.leave(p2)
    assert all(w.ready and w.signal.sets == 1 for w in ws)
    for w in ws:
        turns.leave(w)
    assert turns._queues == {}


def test_given_up_turn_keeps_its_place(turns: Turns, caplog: Any) -> None:
    w = turns.arrive(K, WRITES)
    p = turns.arrive(_put("c1", "c2"), PUT)
    w2 = turns.arrive(K, WRITES)
    with caplog.at_level(logging.WARNING, logger="langgraph_delta_postgres"):
        turns.give_up(p)
    assert p.ready and turns.overdue == 1 and "runs anyway" in caplog.text
    turns.leave(w)
    assert not w2.ready  # the put still runs
    turns.leave(p)
    assert w2.ready
    turns.leave(w2)


def test_a_cancelled_waiter_leaves_the_queue() -> None:
    async def main() -> None:
        turns = Turns(asyncio.Event)
        first = turns.arrive(K, PUT)
        waiter = asyncio.ensure_future(_hold_async(turns, WRITES))
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        turns.leave(first)
        assert turns._queues == {}

    asyncio.run(main())


async def _hold_async(turns: Turns, kind: str) -> None:
    async with ahold(turns, K, kind):
        await asyncio.sleep(0)


def test_slow_waits_are_counted_and_logged(monkeypatch: Any, caplog: Any) -> None:
    monkeypatch.setattr(_order, "SLOW_WAIT_S", 0.05)
    monkeypatch.setattr(_order, "PUT_ORDER_WAIT_S", 0.3)
    turns = Turns(threading.Event)
    first = turns.arrive(K, PUT)
    done: list[float] = []

    def call() -> None:
        started = time.monotonic()
        with hold(turns, K, WRITES):
            done.append(time.monotonic() - started)

    with caplog.at_level(logging.WARNING, logger="langgraph_delta_postgres"):
        t = threading.Thread(target=call)
        t.start()
        time.sleep(0.1)
        turns.leave(first)  # its turn comes after 0.1 s: slow, not overdue
        t.join(5)
        assert done and turns.counters() == {"waits": 1, "slow_waits": 1, "overdue": 0}
        assert "waited" in caplog.text
        # a turn that never comes: it runs anyway at PUT_ORDER_WAIT_S
        stuck = turns.arrive(K, PUT)
        t = threading.Thread(target=call)
        t.start()
        t.join(5)
        assert len(done) == 2 and 0.25 < done[1] < 3
        assert turns.counters() == {"waits": 2, "slow_waits": 2, "overdue": 1}
        turns.leave(stuck)
    assert turns._queues == {}


def test_async_turns_in_order() -> None:
    async def main() -> list[str]:
        turns = Turns(asyncio.Event)
        seen: list[str] = []

        async def call(name: str, kind: str) -> None:
            keys = _put("c1", "c2") if kind == PUT else K
            async with ahold(turns, keys, kind):
                seen.append(name + "+")
                await asyncio.sleep(0.01)
                seen.append(name + "-")

        await asyncio.gather(call("w1", WRITES), call("w2", WRITES), call("p", PUT),
                             call("w3", WRITES))
        return seen

    seen = asyncio.run(main())
    assert seen.index("p+") > max(seen.index("w1-"), seen.index("w2-"))
    assert seen.index("w3+") > seen.index("p-")
    assert seen.index("w2+") < seen.index("w1-")  # the two writes ran together
