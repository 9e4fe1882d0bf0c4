"""Which server a saver's connections reach (``sql/server.sql``, ``identity``).

A connection is checked once, at its first use, by the saver that lends it (one
statement per new connection, none per call). Two things hang on the answer:

* **the history cache** is valid only for the server it was filled from. After a
  failover (a multi-host DSN with ``target_session_attrs=read-write`` that now reaches a
  promoted standby), the new primary may lack the last commits the old one had: the
  cache is dropped when a connection reaches a server of another cluster or timeline,
  and a connection to the server the saver used before is not lent any more (it is
  closed; the pool replaces it).
* **a replica** is used only when it is a hot standby of the primary's cluster, on the
  primary's timeline (:mod:`.replicas`).

The bookkeeping is here, with no I/O; the sync and async savers run the statement.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .errors import StaleServerError

log = logging.getLogger("langgraph_delta_postgres")


@dataclass(frozen=True, slots=True)
class ServerIdentity:
    """A server as ``server.identity`` describes it."""

    system_identifier: str
    in_recovery: bool
    timeline: int

    @classmethod
    def of(cls, row: Sequence[Any]) -> ServerIdentity:
        return cls(str(row[0]), bool(row[1]), int(row[2]))

    def same_history(self, other: ServerIdentity) -> bool:
        """The same cluster on the same timeline (LSNs of the two are comparable)."""
        return (self.system_identifier, self.timeline) == (
            other.system_identifier, other.timeline
        )

    def __str__(self) -> str:
        role = "standby" if self.in_recovery else "primary"
        return f"{role} of system identifier {self.system_identifier}, timeline {self.timeline}"


class ServerTracker:
    """The server of a saver's connections: each connection's identity once checked, and
    the current one (the last new identity seen). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: weakref.WeakKeyDictionary[Any, ServerIdentity] = (
            weakref.WeakKeyDictionary()
        )
        self.current: ServerIdentity | None = None
        #: how many times the server changed under this saver (a failover), the last when
        self.changes = 0
        self.changed_at = 0.0

    def known(self, conn: Any) -> ServerIdentity | None:
        """This connection's identity, if it was checked (None: run the statement)."""
        with self._lock:
            return self._seen.get(conn)

    def observe(self, conn: Any, row: Sequence[Any]) -> bool:
        """Record the identity of a newly checked connection; True when it is another
        server than the current one (the caller drops what it holds of the old)."""
        ident = ServerIdentity.of(row)
        with self._lock:
            self._seen[conn] = ident
            before, self.current = self.current, ident
            changed = before is not None and not before.same_history(ident)
            if changed:
                self.changes += 1
                self.changed_at = time.monotonic()
        if changed:
            log.warning(
                "langgraph-delta-postgres: the server changed (%s -> %s): a failover; the "
                "history cache is dropped and connections to the old server are closed",
                before, ident,
            )
        return changed

    def changed_within(self, seconds: float) -> bool:
        """The server changed under this saver less than ``seconds`` ago."""
        return self.changes > 0 and time.monotonic() - self.changed_at < seconds

    def reset(self) -> None:
        """Check every connection again at its next use (the expected server changed)."""
        with self._lock:
            self._seen = weakref.WeakKeyDictionary()

    def current_for(self, ident: ServerIdentity) -> bool:
        """A connection known as ``ident`` reaches the server this saver uses now."""
        cur = self.current
        return cur is None or ident.same_history(cur)


def unchanged_since(server: ServerTracker, changes: int) -> None:
    """A call that began before a server change (a failover: ``changes`` was the count
    then) goes no further: what it planned with may be the old server's (the history
    cache it asked for is gone). The caller may try again."""
    if server.changes != changes:
        raise StaleServerError("the server changed (a failover) while this call ran; try again")
