"""A loopback TCP proxy that can fall silent, as a network partition does.

``PartitionProxy(upstream)`` listens on ``127.0.0.1`` (an ephemeral port) and forwards
every connection to ``upstream`` (a Unix socket path or ``(host, port)``, as
:func:`langgraph_delta_postgres.bench.proxy.upstream_of` gives). After :meth:`silence`,
it forwards nothing, either way, on the connections it has and on new ones, and closes
nothing: every socket stays open. The kernel still accepts and ACKs what a client sends,
so to the client the server just never answers (TCP keepalive is answered too: it does
not notice). :meth:`heal` forwards again (what was held, then the rest); :meth:`close`
shuts every socket down (a client waiting on one gets EOF) and joins the threads.

Only ``127.0.0.1`` is ever bound; every thread is a daemon.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

from langgraph_delta_postgres.bench.proxy import Upstream, forward, via_loopback


class PartitionProxy:
    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self._lock = threading.Lock()
        self._open = threading.Event()  # set: forwarding; clear: silent
        self._open.set()
        self._closed = False
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self.connections = 0
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self._spawn(self._accept)

    # ------------------------------------------------------------------ public

    def dsn(self, dsn: str) -> str:
        """``dsn`` (its dbname, user, options) going through this proxy."""
        return via_loopback(dsn, self.port)

    def silence(self) -> None:
        """From now on forward nothing (the sockets stay open)."""
        self._open.clear()

    def heal(self) -> None:
        self._open.set()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets = list(self._sockets)
        with contextlib.suppress(OSError):  # wakes the accept() (close alone does not)
            self._listener.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._listener.close()
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
        self._open.set()  # wakes the held pumps: they see _closed and end
        for t in list(self._threads):
            t.join(timeout=5)

    def __enter__(self) -> PartitionProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _spawn(self, target: Any, *args: Any) -> None:
        t = threading.Thread(target=target, args=args, daemon=True, name="lgdp-partition")
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive()]
            self._threads.append(t)
        t.start()

    def _track(self, s: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._sockets.add(s)
            return True

    def _wait_open(self) -> bool:
        """Block while silent; False once closed."""
        self._open.wait()
        with self._lock:
            return not self._closed

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._track(client):
                client.close()
                return
            with self._lock:
                self.connections += 1
            self._spawn(self._connection, client)

    def _connection(self, client: socket.socket) -> None:
        # while silent, a new connection is accepted (the kernel would anyway) and held:
        # nothing reaches the server, nothing comes back
        if not self._wait_open():
            return
        try:
            if isinstance(self.upstream, str):
                server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                server.connect(self.upstream)
            else:
                server = socket.create_connection(self.upstream)
        except OSError:
            with contextlib.suppress(OSError):
                client.close()
            return
        if not self._track(server):
            server.close()
            return
        with contextlib.suppress(OSError):
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._spawn(self._pump, client, server)
        self._spawn(self._pump, server, client)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while True:
            if not self._wait_open():  # silent: read nothing
                return
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not self._wait_open():  # fell silent meanwhile: hold it, forward nothing
                return
            if not forward(dst, data):
                return
