"""The list prefetch: the rows of a ``list`` call of a thread answer the history calls
LangGraph makes next on its checkpoints (``get_state_history``), by the walk's rule
(``sql/delta_history.sql``), with no statement when a chain is whole in the listing."""

from __future__ import annotations

from typing import Any, NamedTuple

from langgraph.checkpoint.base import DeltaChannelHistory, PendingWrite

from .._cache import copies
from .values import RowValues

Row = dict[str, Any]  # a row of checkpoints.select_tuples, by column name


#: How many listed rows :meth:`_Listed._read_ahead` answers at a time, and the pickled
#: bytes it stops at (the answers' objects are a few times that).
AHEAD_ROWS = 8
AHEAD_BYTES = 8 * 1024 * 1024


class _Listed:
    """The rows of a ``list`` call of a thread, for the history calls LangGraph makes
    next, one per listed checkpoint (``get_state_history``: ``list``, then
    ``channels_from_checkpoint`` on every tuple). When a checkpoint's whole chain down to
    each channel's seed is in the listing, its history is read from these rows, in the
    snapshot the tuples came from, with no statement; otherwise the statement answers.

    It reads what the walk reads (delta_history.sql, "The walk"): from the target's
    parent down, per channel, each row's writes of the channel (writes_sort_key order,
    as checkpoints.tuples_of aggregates them) until a row that stores a value for it,
    inclusive. A row stores a value for ``ch`` when its claim allows it (its
    ``stored_channels``, sent by checkpoints.listed_claims, holds ``ch``, or is NULL: a
    row another saver wrote, probed for every channel) and either a non-"empty" blob is
    stored at the version the row names (the listing's blob columns are exactly those:
    the seed, as the walk's 's' row prefers a blob) or ``channel_values[ch]`` is a JSON
    string, number or boolean (not null, not an object or array). The answer is None
    (the statement answers, and raises where it raises) when a chain leaves the listing
    (a page, a filtered list, a pruned or missing parent), loops, or would reach
    ``max_history_depth``.

    Every value is decoded once (``serde.loads_typed``) and kept pickled; each answer
    unpickles its own copies, so no two answers, and no answer and a listed tuple, share
    a mutable object (the cache's isolation rule, _cache/store.py). A value whose pickle
    copy is not proven to be what serde gives is kept as its blob and decoded by serde
    for each answer (_cache/copies.py). Inline seeds are str, int, float or bool:
    immutable."""

    __slots__ = (
        "saver", "thread_id", "max_depth", "rows", "values", "_writes", "_seeds", "_chains",
        "broken", "_keys", "_order", "_ahead", "_last", "_ahead_end",
    )

    #: no seed at this row for this channel
    _NONE: tuple[str, Any] = ("", None)

    def __init__(
        self, saver: object, thread_id: str, rows: list[Row], max_depth: int,
        values: RowValues,
    ) -> None:
        self.saver = saver
        self.thread_id = thread_id
        self.max_depth = max_depth
        #: the list call's blob decoder: a seed blob carried over by many rows (one
        #: token) is decoded and pickled once; a blob the cache held came as NULL
        self.values = values
        #: (namespace, checkpoint id) -> its row (a list without checkpoint_ns spans all)
        self.rows = {(r["checkpoint_ns"], r["checkpoint_id"]): r for r in rows}
        #: (namespace, checkpoint id, channel) -> pickled list of its writes of that channel
        self._writes: dict[tuple[str, str, str], bytes | None] = {}
        #: (namespace, checkpoint id, channel) -> ("b", pickled value) | ("i", inline
        #: primitive) | _NONE
        self._seeds: dict[tuple[str, str, str], tuple[str, Any]] = {}
        #: (namespace, checkpoint id, channel) -> the walk from that row down (itself
        #: included), see :meth:`_chain`
        self._chains: dict[tuple[str, str, str], _Chain | None] = {}
        #: a part that does not pickle (a value decoded from a blob is kept as its blob
        #: instead, copies.Decoder): this listing answers nothing more
        self.broken = False
        #: the listed rows' keys, in the listing's order, and each one's position
        self._keys = list(self.rows)
        self._order = {k: i for i, k in enumerate(self._keys)}
        #: answers made ahead (:meth:`_read_ahead`): row key -> channel -> its history
        self._ahead: dict[tuple[str, str], dict[str, DeltaChannelHistory]] = {}
        #: the position of the row asked last, and of the last row made ahead
        self._last = -2
        self._ahead_end = -1

    def _seed_of(self, row: Row, ch: str) -> tuple[str, Any]:
        """The value ``row`` stores for ``ch`` by the walk's rule (class docstring), or
        :attr:`_NONE`."""
        key = (row["checkpoint_ns"], row["checkpoint_id"], ch)
        got = self._seeds.get(key)
        if got is not None:
            return got
        claims = row["stored_channels"]
        got = self._NONE
        if claims is None or ch in claims:
            blobs = row["blob_channels"]
            if blobs and ch in blobs:
                i = blobs.index(ch)
                got = ("b", self.values.pickled(
                    f"{row['thread_id']}\x1f{row['checkpoint_ns']}", ch, row["blob_tokens"][i],
                    row["blob_types"][i], row["blob_values"][i],
                ))
            else:
                # jsonb_typeof(channel_values -> ch) IN ('string', 'number', 'boolean'):
                # what json gives for those (None is JSON null; a dict or list is not one)
                values = row["checkpoint"].get("channel_values")
                v = values.get(ch) if isinstance(values, dict) else None
                if v is not None and isinstance(v, str | int | float | bool):
                    got = ("i", v)
        self._seeds[key] = got
        return got

    def _writes_of(self, row: Row, ch: str, loads: Any) -> bytes | None:
        if not row["write_task_ids"] or ch not in row["write_channels"]:
            return None
        key = (row["checkpoint_ns"], row["checkpoint_id"], ch)
        if key in self._writes:
            return self._writes[key]
        decoder = copies.Decoder(loads)
        ws = [
            (tid, c, decoder((typ, blob)))
            for tid, c, typ, blob in zip(
                row["write_task_ids"], row["write_channels"], row["write_types"],
                row["write_blobs"], strict=True,
            )
            if c == ch
        ]
        got = self._writes[key] = decoder.dumps(ws)
        return got

    def _chain(self, ns: str, cid: str | None, ch: str, loads: Any) -> _Chain | None:
        """The walk of ``ch`` from row ``cid`` down (the row included): its writes,
        the seed it stops at and the rows it visits; None when it leaves the listing.
        A history pass asks for the chain of every row, each one row above the last:
        every row's chain is kept, so each row is visited once per channel, not once
        per checkpoint above it."""
        path: list[tuple[str, Row]] = []
        below: _Chain | None
        limit = len(self.rows) + 1  # longer: a cycle (answer's depth guard says None)
        while True:
            if cid is None:
                below = _ROOT
                break
            got = self._chains.get((ns, cid, ch), _MISSING)
            if got is not _MISSING:
                below = got  # type: ignore[assignment]
                break
            row = self.rows.get((ns, cid))
            if row is None or len(path) >= limit:
                below = None  # below the listing (or a missing parent), or a cycle
                break
            path.append((cid, row))
            if self._seed_of(row, ch) is not self._NONE:
                below = _ROOT  # the seed row ends the walk (its writes count)
                break
            cid = row["parent_checkpoint_id"]
        for cid_, row in reversed(path):
            if below is not None:
                w = self._writes_of(row, ch, loads)
                seed = self._seed_of(row, ch)
                if seed is self._NONE:
                    seed = below.seed
                below = _Chain(
                    (w, below.writes) if w is not None else below.writes, seed,
                    below.depth + 1, below.writes_bytes + (len(w) if w is not None else 0),
                )
            self._chains[(ns, cid_, ch)] = below
        return below

    def answer(
        self, ns: str, checkpoint_id: str, channels: list[str], loads: Any
    ) -> dict[str, DeltaChannelHistory] | None:
        """The history of ``channels`` at ``checkpoint_id`` from the listed rows; None
        when the statement must answer (class docstring). Asked in the listing's order,
        it makes the answers of the next rows too (:meth:`_read_ahead`)."""
        key = (ns, checkpoint_id)
        target = self.rows.get(key)
        if target is None or self.broken:
            return None
        made = self._ahead.pop(key, {})
        result: dict[str, DeltaChannelHistory] = {}
        try:
            for ch in channels:
                entry = made.pop(ch, None) or self._entry(ns, target, ch, loads)
                if entry is None:
                    return None
                result[ch] = entry
        except copies.UNPICKLABLE:
            self.broken = True
            self._ahead.clear()
            return None
        try:
            self._read_ahead(key, channels, loads)
        except Exception:  # noqa: BLE001 - a row not asked yet: it fails when asked, if ever
            self._ahead.clear()
            self._ahead_end = len(self._keys)  # this listing reads ahead no more
        return result

    def _entry(
        self, ns: str, target: Row, ch: str, loads: Any
    ) -> DeltaChannelHistory | None:
        """The history of ``ch`` at ``target``, copies of its own; None when the
        statement must answer."""
        chain = self._chain(ns, target["parent_checkpoint_id"], ch, loads)
        if chain is None or chain.depth > min(self.max_depth, len(self.rows)):
            # below the listing, a missing parent, a cycle, or the walk's depth guard
            # would stop it with the channel still walking (it raises)
            return None
        parts: list[bytes] = []
        link = chain.writes
        while link is not None:
            parts.append(link[0])
            link = link[1]
        writes: list[PendingWrite] = []
        for data in reversed(parts):
            writes.extend(copies.loads(data, loads))
        entry: DeltaChannelHistory = {"writes": writes}
        seed = chain.seed
        if seed[0] == "b":
            entry["seed"] = copies.loads(seed[1], loads)
        elif seed[0] == "i":
            entry["seed"] = seed[1]
        return entry

    def _read_ahead(self, key: tuple[str, str], channels: list[str], loads: Any) -> None:
        """Asked for the row right after the one asked before (``get_state_history``
        asks for every listed row in order), and the answers made ahead used up: make
        the answers of the next rows of the listing, for the same channels, now, while
        the collector is paused (history.py). Each answer is thousands of new objects
        that the caller keeps: made one by one, each set off a young collection, and
        every eleventh of those a middle one, and every eleventh of those may run a full
        collection of all the caller keeps; made :data:`AHEAD_ROWS` at a time, far
        fewer. Bounded by :data:`AHEAD_ROWS` rows and :data:`AHEAD_BYTES` of pickles,
        weighed before anything is unpickled (a row past the budget is made when asked);
        a row whose walk leaves the listing is left to the statement."""
        at = self._order.get(key)
        if at is None:
            return
        sequential = self._last == at - 1
        self._last = at
        if not sequential or at < self._ahead_end:
            return
        self._ahead.clear()  # left over: rows or channels that were not asked
        self._ahead_end = at
        budget = AHEAD_BYTES
        for nxt in self._keys[at + 1: at + 1 + AHEAD_ROWS]:
            if nxt[0] != key[0]:
                break
            row = self.rows[nxt]
            size = self._pickled_size(nxt[0], row, channels, loads)
            if size is None or size > budget:
                break  # left to the statement, or made when asked
            budget -= size
            made: dict[str, DeltaChannelHistory] = {}
            for ch in channels:
                entry = self._entry(nxt[0], row, ch, loads)
                if entry is None:
                    break
                made[ch] = entry
            else:
                self._ahead[nxt] = made
            self._ahead_end = self._order[nxt]

    def _pickled_size(
        self, ns: str, row: Row, channels: list[str], loads: Any
    ) -> int | None:
        """The bytes of the pickles the answer of ``channels`` at ``row`` is made from
        (None: a walk leaves the listing)."""
        size = 0
        for ch in channels:
            chain = self._chain(ns, row["parent_checkpoint_id"], ch, loads)
            if chain is None:
                return None
            size += chain.writes_bytes + (len(chain.seed[1]) if chain.seed[0] == "b" else 0)
        return size


class _Chain(NamedTuple):
    """A walk of one channel from a listed row down: see :meth:`_Listed._chain`."""

    #: the pickled writes of each row that has some, newest first, as a linked list
    #: (``(part, rest)``, None at the end): a row's chain shares the one below it, so
    #: keeping every row's chain costs one link per row, not one per row below it
    writes: _Link | None
    seed: tuple[str, Any]  # where it stops (_Listed._NONE: at the root)
    depth: int  # rows visited
    writes_bytes: int  # the length of the writes' pickles (the read-ahead's budget)


_Link = tuple[bytes, "_Link | None"]
_ROOT = _Chain(None, _Listed._NONE, 0, 0)
_MISSING = object()
