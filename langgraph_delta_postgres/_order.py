"""The order of a saver's own writes: FIFO turns per checkpoint, written once for the
sync and the async saver (no I/O here; the drivers wait).

A ``put`` of checkpoint C (child of P) waits for the ``put_writes`` to P that arrived
before it; a ``put_writes`` to C waits for the put of C that arrived before it. Writes
of parallel tasks run together, and so do puts; calls on other checkpoints (another
branch, concurrent runs of one thread, another thread) are not ordered at all. A waiter
is woken only when its turn comes (one wake-up each), and holds no connection while it
waits.

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

Nothing else needs an order, so nothing else gets one: puts of one parent (forks,
concurrent runs of one thread) run together, and so do writes. Before, the queues were
per namespace (a put alone after every earlier call of the thread), and before migration
0007 every finished call woke every waiter of the saver and put_writes ran one after
another (394 wake-ups for 33 calls in one turn of a 16-task ``Send`` fan-out), because
each held the namespace's row exclusively in the database; since 0007 writes share it.
Measured with ``langgraph-delta-pg bench --only writes`` (docs/design/writes.md, "Measured").

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

Key = tuple[str, str, str]  # (thread, namespace, checkpoint id)
PUT = "put"
WRITES = "writes"


def put_keys(config: RunnableConfig, checkpoint: Any) -> list[Key]:
    """A put's places: its parent's queue (after the writes to the parent that arrived
    before it) and its own checkpoint's (writes to it that arrive later wait for it). A
    config without a thread: ValueError, as the call itself would raise; a checkpoint
    that is not one takes no place (the call raises its own error)."""
    thread, ns = _thread_id(config), _ns(config)
    parent = (config.get("configurable") or {}).get("checkpoint_id")
    own = checkpoint.get("id") if isinstance(checkpoint, dict) else None
    keys = [(thread, ns, str(parent))] if parent and parent != own else []
    return keys + [(thread, ns, str(own))] if own else keys


def writes_keys(config: RunnableConfig) -> list[Key]:
    """A put_writes' place: its checkpoint's queue."""
    thread, ns = _thread_id(config), _ns(config)
    return [(thread, ns, str((config.get("configurable") or {}).get("checkpoint_id")))]


class Turn:
    """One call's places in the queues of its checkpoints. ``signal``: the driver's
    event (``threading.Event`` or ``asyncio.Event``), set when the turn comes; None when
    it was there on arrival."""

    __slots__ = ("keys", "kind", "ready", "waiting_on", "signal")

    def __init__(self, keys: list[Key], kind: str) -> None:
        self.keys = keys
        self.kind = kind
        self.ready = False
        self.waiting_on: set[Key] = set()
        self.signal: Any = None


class Turns:
    """The queues of one saver, per checkpoint. Thread-safe (one lock, held for a few
    list operations); the async saver calls it from its event loop only.

    In each queue a turn is admitted once every turn ahead of it is of its kind (puts
    together, put_writes together, in arrival order); a turn runs once admitted in all
    of its queues. A turn waits only for turns that arrived before it (it arrives in all
    of its queues at once), so no two turns ever wait for each other."""

    def __init__(self, new_signal: Callable[[], Any]) -> None:
        self._new_signal = new_signal
        self._lock = threading.Lock()
        self._queues: dict[Key, deque[Turn]] = {}
        #: turns that waited; waited longer than SLOW_WAIT_S; ran at PUT_ORDER_WAIT_S
        self.waits = 0
        self.slow_waits = 0
        self.overdue = 0

    def arrive(self, keys: list[Key], kind: str) -> Turn:
        """Queue a call (``kind``: PUT or WRITES) in each of its checkpoints' queues;
        ready at once when nothing of another kind is ahead in any, else with a
        ``signal`` to wait on."""
        turn = Turn(keys, kind)
        with self._lock:
            for key in keys:
                queue = self._queues.get(key)
                if queue is None:
                    queue = self._queues[key] = deque()
                elif any(t.kind != kind for t in queue):
                    turn.waiting_on.add(key)
                queue.append(turn)
            if turn.waiting_on:
                turn.signal = self._new_signal()
                self.waits += 1
            else:
                turn.ready = True
        return turn

    def leave(self, turn: Turn) -> None:
        """The call returned (or raised): hand its places on."""
        woken = []
        with self._lock:
            for key in turn.keys:
                queue = self._queues[key]
                queue.remove(turn)
                if not queue:
                    del self._queues[key]
                    continue
                head = queue[0].kind
                for t in queue:  # the leading run of one kind is admitted here
                    if t.kind != head:
                        break
                    if key in t.waiting_on:
                        t.waiting_on.discard(key)
                        if not t.waiting_on and not t.ready:
                            t.ready = True
                            woken.append(t)
        for t in woken:
            t.signal.set()

    def give_up(self, turn: Turn) -> None:
        """The turn did not come within PUT_ORDER_WAIT_S: it runs anyway (and keeps its
        places, so the calls behind it still wait for it)."""
        with self._lock:
            if turn.ready:
                return
            turn.ready = True
            self.overdue += 1
        log.warning(
            "langgraph-delta-postgres: a %s on thread %r namespace %r waited %.0f s for "
            "this saver's earlier calls there and runs anyway",
            turn.kind, turn.keys[0][0], turn.keys[0][1], PUT_ORDER_WAIT_S,
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
            turn.kind, turn.keys[0][0], turn.keys[0][1], seconds,
        )

    def counters(self) -> dict[str, int]:
        with self._lock:
            return {"waits": self.waits, "slow_waits": self.slow_waits, "overdue": self.overdue}


@contextmanager
def hold(turns: Turns, keys: list[Key], kind: str) -> Iterator[None]:
    """The sync saver's turn (a thread waits on a ``threading.Event``)."""
    turn = turns.arrive(keys, kind)
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
async def ahold(turns: Turns, keys: list[Key], kind: str) -> AsyncIterator[None]:
    """The async saver's turn (a task waits on an ``asyncio.Event``; cancelled while it
    waits, it leaves the queues)."""
    turn = turns.arrive(keys, kind)
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
