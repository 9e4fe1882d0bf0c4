"""A loopback TCP proxy that adds network latency (and counts what crosses it).

``LatencyProxy(upstream, rtt_ms)`` listens on ``127.0.0.1`` (an ephemeral port) and
forwards every connection to ``upstream`` (a unix socket path, or ``(host, port)``).
Each chunk is released ``rtt_ms / 2`` after it was received, in each direction, without
holding back the chunks behind it: it behaves like a link with that one-way delay, so
pipelined traffic is not serialized by the proxy.

It also counts, across its connections, the bytes each way and the *round trips*: the
number of times the server starts answering after the client sent something. That is
the wire-level count the benchmark reports (statements are counted at the driver).

Bounded: at most ``max_connections`` live connections; threads are daemons and
:meth:`close` joins them. Only ``127.0.0.1`` is ever bound.
"""

from __future__ import annotations

import collections
import contextlib
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo

Upstream = str | tuple[str, int]


def via_loopback(dsn: str, port: int) -> str:
    """``dsn`` (its dbname, user, options) pointed at ``127.0.0.1:port`` (a proxy)."""
    params: dict[str, Any] = dict(conninfo_to_dict(dsn))
    params.pop("hostaddr", None)
    params["host"] = "127.0.0.1"
    params["port"] = str(port)
    return make_conninfo(**params)


def upstream_of(dsn: str) -> Upstream:
    """Where ``dsn`` points: a unix socket path or a ``(host, port)``."""
    params = conninfo_to_dict(dsn)
    host = str(params.get("host") or "/tmp").split(",")[0]
    port = int(str(params.get("port") or 5432).split(",")[0])
    if host.startswith("/"):
        return f"{host}/.s.PGSQL.{port}"
    return (str(params.get("hostaddr") or host), port)


def forward(dst: socket.socket, data: bytes) -> bool:
    """Send ``data`` (a read from the other side) on to ``dst``; an empty read (the
    other side's EOF) ends ``dst``'s sending half. False: this direction is over (EOF
    passed on, or ``dst`` failed)."""
    if not data:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
        return False
    try:
        dst.sendall(data)
    except OSError:
        return False
    return True


@dataclass
class Counts:
    up_bytes: int = 0
    down_bytes: int = 0
    round_trips: int = 0

    def __sub__(self, other: Counts) -> Counts:
        return Counts(
            self.up_bytes - other.up_bytes,
            self.down_bytes - other.down_bytes,
            self.round_trips - other.round_trips,
        )


class LatencyProxy:
    def __init__(self, upstream: Upstream, rtt_ms: float, *, max_connections: int = 16) -> None:
        self.upstream = upstream
        self.rtt_ms = float(rtt_ms)
        self.delay = self.rtt_ms / 2000.0
        self.max_connections = max_connections
        self._lock = threading.Lock()
        self._counts = Counts()
        self._last_up: dict[int, bool] = {}
        self._live: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._closed = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(max_connections)
        self.port: int = self._listener.getsockname()[1]
        self._accepter = threading.Thread(target=self._accept, name="lgdp-proxy", daemon=True)
        self._accepter.start()

    # ------------------------------------------------------------------ public

    def dsn(self, dsn: str) -> str:
        """``dsn`` rewritten to go through this proxy."""
        return via_loopback(dsn, self.port)

    def counts(self) -> Counts:
        with self._lock:
            return Counts(**vars(self._counts))

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            live = list(self._live)
        for s in live:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
        self._accepter.join(timeout=2)
        for t in self._threads:
            t.join(timeout=2)

    def __enter__(self) -> LatencyProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _connect_upstream(self) -> socket.socket:
        if isinstance(self.upstream, str):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(self.upstream)
        else:
            s = socket.create_connection(self.upstream)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                too_many = len(self._live) >= 2 * self.max_connections
            if too_many:
                client.close()
                continue
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                server = self._connect_upstream()
            except OSError:
                client.close()
                continue
            key = id(client)
            with self._lock:
                self._live.update((client, server))
                self._last_up[key] = False
            self._threads = [t for t in self._threads if t.is_alive()]
            for src, dst, up in ((client, server, True), (server, client, False)):
                q: collections.deque[tuple[float, bytes]] = collections.deque()
                cv = threading.Condition()
                r = threading.Thread(
                    target=self._reader, args=(src, q, cv, up, key), daemon=True
                )
                w = threading.Thread(target=self._writer, args=(dst, q, cv), daemon=True)
                self._threads += [r, w]
                r.start()
                w.start()

    def _reader(
        self,
        src: socket.socket,
        q: collections.deque[tuple[float, bytes]],
        cv: threading.Condition,
        up: bool,
        key: int,
    ) -> None:
        try:
            while True:
                try:
                    data = src.recv(65536)
                except OSError:
                    data = b""
                now = time.perf_counter()
                if data:
                    with self._lock:
                        if up:
                            self._counts.up_bytes += len(data)
                        else:
                            self._counts.down_bytes += len(data)
                            if self._last_up.get(key):
                                self._counts.round_trips += 1
                        self._last_up[key] = up
                with cv:
                    q.append((now + self.delay, data))
                    cv.notify()
                if not data:
                    return
        finally:
            with self._lock:
                self._live.discard(src)

    def _writer(
        self,
        dst: socket.socket,
        q: collections.deque[tuple[float, bytes]],
        cv: threading.Condition,
    ) -> None:
        try:
            while True:
                with cv:
                    while not q:
                        cv.wait()
                    due, data = q.popleft()
                wait = due - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                if not forward(dst, data):
                    return
        finally:
            with contextlib.suppress(OSError):
                dst.close()
