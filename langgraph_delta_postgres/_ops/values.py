"""The stored values of tuple rows (``checkpoints.tuples_of``'s blobs): each one decoded
at most once per call, and one the client already holds decoded not sent at all.

Each blob comes with its token: channel, version and the xmin of the blob row
(``sql/checkpoints.sql``, the same key the history cache gives a seed). A thread deleted
and written again under the same ids has new blob rows, so new tokens: a token names
one row's bytes, and the decoded value of equal bytes is equal.

* **Held values.** get_tuple and list of a thread tell the statement the tokens whose
  decoded value the saver's cache holds (``held_values``); those blobs come as NULL and
  the value is unpickled from the cache. A long session's ``get_state`` reads the same
  head again and again, and the DeltaChannel snapshot stored at an earlier step and
  carried over at the channel's current version is there every time: 720 messages of
  the benchmark's deepagents session cost about 24 ms to decode with the serializer
  and about 7 to unpickle (``python scripts/profile_agent_state.py``).
* **Once per call.** The rows of one ``list`` name the same blob as often as checkpoints
  carry it over: it is decoded for the first and copied (pickled once, unpickled per
  row) for the others.
* **Isolation.** No two tuples, and no tuple and the cache, share a mutable object:
  every copy is a fresh unpickle, as the history cache's answers are (_cache/store.py).
* **Faithful copies.** A value with an object whose pickle copy is not proven to be what
  serde gives (_cache/copies.py, "Proven types") is kept as its blob instead: each copy
  of it is a fresh ``serde.loads_typed``, as the official saver reads it, and a held one
  still spares the statement its bytes.
* **What the cache keeps.** Only a value read a second time (its token was seen on an
  earlier get_tuple of the thread and sent again): a value that changes at every step,
  such as a plain ``add_messages`` channel's list, is decoded as before and never pickled
  for nothing. One value per channel is kept; a newer version replaces it
  (:meth:`~langgraph_delta_postgres._cache.HistoryCache.keep_values`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._cache import copies
from ..errors import CorruptCheckpointError

#: Blobs shorter than this are decoded every time, never kept (the serializer is fast on
#: them and a kept value costs its token on every statement).
KEEP_MIN_BYTES = 2048


class RowValues:
    """The decoder of one call's tuple rows. ``held``: token -> pickled value the cache
    holds (the statement sent those blobs as NULL); ``seen``: tokens an earlier call of
    this thread decoded (a second sighting is kept, see the module docstring)."""

    __slots__ = ("loads", "held", "seen", "_first", "_pickled", "keep", "sent",
                 "sent_bytes")

    def __init__(
        self,
        loads: Callable[[tuple[str, bytes]], Any],
        held: Mapping[str, bytes] | None = None,
        seen: Mapping[str, str] | None = None,
    ) -> None:
        self.loads = loads
        self.held: Mapping[str, bytes] = held or {}
        self.seen: Mapping[str, str] = seen or {}
        #: (scope, token) -> (type, blob, the value decoded for its first row)
        self._first: dict[tuple[str, str], tuple[str, bytes, Any]] = {}
        #: (scope, token) -> its pickle (made when a second row names it; a
        #: :class:`~.._cache.copies.Kept` of its blob for a value not proven)
        self._pickled: dict[tuple[str, str], bytes] = {}
        #: channel -> (token, pickled value) for the cache to keep
        self.keep: dict[str, tuple[str, bytes]] = {}
        #: channel -> token of each blob decoded here that is worth keeping if read again
        self.sent: dict[str, str] = {}
        #: their bytes
        self.sent_bytes = 0

    def value(self, scope: str, channel: str, token: str, typ: str, blob: bytes | None) -> Any:
        """The value of one blob of a row, a copy of its own. ``scope`` tells tokens of
        different threads and namespaces apart (a list without a thread spans many)."""
        if blob is None:
            return copies.loads(self._held(channel, token), self.loads)
        key = (scope, token)
        first = self._first.get(key)
        if first is None:
            value = self.loads((typ, blob))
            self._first[key] = (typ, blob, value)
            if len(blob) < KEEP_MIN_BYTES:
                return value
            self.sent[channel] = token
            self.sent_bytes += len(blob)
            if self.seen.get(channel) == token:
                self.keep[channel] = (token, self._pickle(key, value, (typ, blob)))
            return value
        data = self._pickled.get(key)
        if data is None:
            data = self._pickle(key, first[2], (typ, blob))
        return copies.loads(data, self.loads)

    def pickled(
        self, scope: str, channel: str, token: str, typ: str, blob: bytes | None
    ) -> bytes:
        """The pickle of one blob's value, for a later copy (the list prefetch's seeds,
        _ops/listed.py; :func:`~.._cache.copies.loads` of it): the held one, the one made
        for this call's rows, or a fresh decode (never a value already handed out, which
        its caller may have changed)."""
        if blob is None:
            return self._held(channel, token)
        key = (scope, token)
        got = self._pickled.get(key)
        if got is None:
            got = self._pickle(key, self.loads((typ, blob)), (typ, blob))
        return got

    def _held(self, channel: str, token: str) -> bytes:
        """The cache's pickle of a blob the statement sent as NULL (it sends NULL only
        for the tokens it was told are held; a NULL otherwise is a corrupt row)."""
        data = self.held.get(token)
        if data is None:
            raise CorruptCheckpointError(
                f"the stored value of channel {channel!r} (blob {token!r}) has no "
                "bytes: the row is corrupt"
            )
        return data

    def done(self) -> None:
        """The call's rows are built and handed out: forget the first copies."""
        self._first.clear()

    def _pickle(self, key: tuple[str, str], value: Any, typed: tuple[str, bytes]) -> bytes:
        """What is kept of the value decoded from ``typed`` (:func:`~.._cache.copies.keep`:
        its pickle, or its blob when it is not proven or does not pickle), made before any
        row's copy leaves the call."""
        data = self._pickled[key] = copies.keep(value, typed)
        return data
