"""A bound on how long a connection may be used, whatever the network does.

A server-side ``statement_timeout`` cancels a slow query, and TCP keepalives and
``tcp_user_timeout`` end a connection whose packets are lost; neither ends a read on a
connection whose peer (a proxy, a load balancer, a hung host's kernel) still acknowledges
packets but never answers: the client then waits forever. ``deadline(conn, seconds)``
ends that wait from the client side: past the deadline, one watchdog thread shuts the
connection's socket down (``shutdown(2)``, not ``close``: the descriptor stays libpq's),
the blocked call (sync, or an awaited async one: both wait on the same socket) fails at
once with an ``OperationalError``, and the pool discards the connection. ``expired``
says whether it was the deadline that ended it.

One daemon thread serves every deadline of the process (a heap of expiry times); arming
and disarming take one lock, no thread per call. The watchdog holds a duplicate of the
socket's descriptor from arming to disarming, so it never shuts down another socket that
reused the number; disarming happens before the connection goes back to its pool, under
that lock, so a deadline never fires on a connection lent to another call.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any


class _Armed:
    __slots__ = ("fd", "fired", "live")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.live = True
        self.fired = False


class _Watchdog:
    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._heap: list[tuple[float, int, _Armed]] = []
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, fd: int, seconds: float) -> _Armed:
        # a duplicate of the descriptor: if libpq closes its own (a lost connection)
        # before the deadline is disarmed, the number may be reused by another socket;
        # the duplicate still names this connection's socket
        armed = _Armed(os.dup(fd))
        with self._cv:
            heapq.heappush(self._heap, (time.monotonic() + seconds, next(self._ids), armed))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="lgdp-deadline", daemon=True
                )
                self._thread.start()
            elif self._heap[0][2] is armed:
                self._cv.notify()
        return armed

    def disarm(self, armed: _Armed) -> None:
        with self._cv:
            armed.live = False  # left in the heap; skipped when it comes up
            os.close(armed.fd)  # under the lock: the watchdog never uses a closed one

    def _run(self) -> None:
        with self._cv:
            while True:
                while self._heap and not self._heap[0][2].live:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cv.wait(30.0)
                    if not self._heap:
                        self._thread = None
                        return
                    continue
                at, _, armed = self._heap[0]
                wait = at - time.monotonic()
                if wait > 0:
                    self._cv.wait(wait)
                    continue
                heapq.heappop(self._heap)
                armed.live = False
                armed.fired = True
                _shut_down(armed.fd)


def _shut_down(fd: int) -> None:
    """End the connection on ``fd`` for both directions without closing ``fd``."""
    with contextlib.suppress(OSError):
        sock = socket.socket(fileno=fd)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.detach()  # ``fd`` stays open: disarm closes it


_WATCHDOG = _Watchdog()


class Deadline:
    """What :func:`deadline` yields: ``expired`` once the deadline ended the connection."""

    __slots__ = ("_armed",)

    def __init__(self, armed: _Armed | None) -> None:
        self._armed = armed

    @property
    def expired(self) -> bool:
        return self._armed is not None and self._armed.fired


@contextlib.contextmanager
def deadline(conn: Any, seconds: float | None) -> Iterator[Deadline]:
    """Within the block, ``conn`` (a psycopg connection, sync or async) is shut down
    after ``seconds`` (None: no bound)."""
    if seconds is None or conn.closed:
        yield Deadline(None)
        return
    armed = _WATCHDOG.arm(conn.pgconn.socket, seconds)
    try:
        yield Deadline(armed)
    finally:
        _WATCHDOG.disarm(armed)
