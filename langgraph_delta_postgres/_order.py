"""The order of a saver's own writes on one thread and namespace: FIFO turns, written
once for the sync and the async saver (no I/O here; the drivers wait).

A ``put`` takes its turn alone; ``put_writes`` calls take theirs together (the writes of
LangGraph's parallel tasks), each after every call that arrived before it that it
conflicts with: a put after the earlier puts and put_writes, a put_writes after the
earlier puts. A waiter is woken only when its turn comes (one wake-up each), and holds
no connection while it waits.

Why the saver orders its calls at all, when the database decides whatever the order
(other savers, other processes: ``migrations/0007_epoch_triggers.sql``): under
``durability="async"`` LangGraph's tasks write to their checkpoint while its put may
still run, and the next step's put may start while those writes run.

* A put that commits before a write to its parent makes that write late: the namespace's
  late-write count moves and every cache of the thread reads the whole chain again. Taken
  in arrival order, the write lands first.
* A write to a checkpoint whose put is running waits in the database for the put's
  commit (the namespace's row), holding a connection of the pool meanwhile; here it
  waits for its turn with none.

Before migration 0007 every finished call woke every waiter of the saver, and put_writes
ran one after another (394 wake-ups for 33 calls in one turn of a 16-task ``Send``
fan-out), because each held the namespace's row exclusively in the database; since 0007
writes share it.

A turn waits at most :data:`PUT_ORDER_WAIT_S`, then runs anyway (the database still
orders it correctly; only the needless bump or wait above can follow). A wait longer
than :data:`SLOW_WAIT_S` is logged (WARNING) and counted (``saver.stats().order``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from langchain_core.runnables import RunnableConfig

from ._ops.base import _ns, _thread_id

log = logging.getLogger("langgraph_delta_postgres")

#: How long a put / put_writes waits for its turn before it runs anyway.
PUT_ORDER_WAIT_S = 10.0
#: Waits longer than this are logged and counted.
SLOW_WAIT_S = 1.0

Key = tuple[str, str]


def namespace_key(config: RunnableConfig) -> Key:
    """The (thread, namespace) a put / put_writes goes to (a config without a thread:
    ValueError, as the call itself would raise)."""
    return (_thread_id(config), _ns(config))


class Turn:
    """One call's place in its namespace's queue. ``signal``: the driver's event
    (``threading.Event`` or ``asyncio.Event``), set when the turn comes; None when the
    turn was there on arrival."""

    __slots__ = ("key", "alone", "ready", "signal")

    def __init__(self, key: Key, alone: bool) -> None:
        self.key = key
        self.alone = alone
        self.ready = False
        self.signal: Any = None


class Turns:
    """The queues of one saver, per (thread, namespace). Thread-safe (one lock, held for
    a few list operations); the async saver calls it from its event loop only."""

    def __init__(self, new_signal: Callable[[], Any]) -> None:
        self._new_signal = new_signal
        self._lock = threading.Lock()
        self._queues: dict[Key, deque[Turn]] = {}
        #: turns that waited; waited longer than SLOW_WAIT_S; ran at PUT_ORDER_WAIT_S
        self.waits = 0
        self.slow_waits = 0
        self.overdue = 0

    def arrive(self, key: Key, alone: bool) -> Turn:
        """Queue a call (``alone``: a put); ready at once when nothing it conflicts with
        is ahead, else with a ``signal`` to wait on."""
        turn = Turn(key, alone)
        with self._lock:
            queue = self._queues.get(key)
            if queue is None:
                queue = self._queues[key] = deque()
            if not queue or (not alone and not any(t.alone for t in queue)):
                turn.ready = True
            else:
                turn.signal = self._new_signal()
                self.waits += 1
            queue.append(turn)
        return turn

    def leave(self, turn: Turn) -> None:
        """The call returned (or raised): hand the turn on."""
        with self._lock:
            queue = self._queues[turn.key]
            queue.remove(turn)
            if not queue:
                del self._queues[turn.key]
                return
            woken = []
            for i, t in enumerate(queue):
                if t.alone:
                    if i == 0 and not t.ready:
                        woken.append(t)
                    break
                if not t.ready:
                    woken.append(t)
            for t in woken:
                t.ready = True
        for t in woken:
            t.signal.set()

    def give_up(self, turn: Turn) -> None:
        """The turn did not come within PUT_ORDER_WAIT_S: it runs anyway (and keeps its
        place, so the calls behind it still wait for it)."""
        with self._lock:
            if turn.ready:
                return
            turn.ready = True
            self.overdue += 1
        log.warning(
            "langgraph-delta-postgres: a %s on thread %r namespace %r waited %.0f s for "
            "this saver's earlier calls there and runs anyway",
            "put" if turn.alone else "put_writes", turn.key[0], turn.key[1], PUT_ORDER_WAIT_S,
        )

    def waited(self, turn: Turn, seconds: float) -> None:
        """How long a turn that waited waited (logged and counted past SLOW_WAIT_S)."""
        if seconds <= SLOW_WAIT_S:
            return
        with self._lock:
            self.slow_waits += 1
        log.warning(
            "langgraph-delta-postgres: a %s on thread %r namespace %r waited %.1f s for "
            "this saver's earlier calls there",
            "put" if turn.alone else "put_writes", turn.key[0], turn.key[1], seconds,
        )

    def counters(self) -> dict[str, int]:
        with self._lock:
            return {"waits": self.waits, "slow_waits": self.slow_waits, "overdue": self.overdue}


@contextmanager
def hold(turns: Turns, key: Key, alone: bool) -> Iterator[None]:
    """The sync saver's turn (a thread waits on a ``threading.Event``)."""
    turn = turns.arrive(key, alone)
    try:
        if not turn.ready:
            started = time.monotonic()
            if not turn.signal.wait(PUT_ORDER_WAIT_S):
                turns.give_up(turn)
            turns.waited(turn, time.monotonic() - started)
        yield
    finally:
        turns.leave(turn)


@asynccontextmanager
async def ahold(turns: Turns, key: Key, alone: bool) -> AsyncIterator[None]:
    """The async saver's turn (a task waits on an ``asyncio.Event``; cancelled while it
    waits, it leaves the queue)."""
    turn = turns.arrive(key, alone)
    try:
        if not turn.ready:
            started = time.monotonic()
            try:
                await asyncio.wait_for(turn.signal.wait(), PUT_ORDER_WAIT_S)
            except TimeoutError:
                turns.give_up(turn)
            turns.waited(turn, time.monotonic() - started)
        yield
    finally:
        turns.leave(turn)
