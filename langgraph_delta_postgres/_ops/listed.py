"""The list prefetch: the rows of a ``list`` call of a thread answer the history calls
LangGraph makes next on its checkpoints (``get_state_history``), by the walk's rule
(``sql/delta_history.sql``), with no statement when a chain is whole in the listing."""

from __future__ import annotations

import pickle
from typing import Any, NamedTuple

from langgraph.checkpoint.base import DeltaChannelHistory, PendingWrite

from .._cache.copies import dumps
from .values import RowValues

Row = dict[str, Any]  # a row of checkpoints.select_tuples, by column name


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
    a mutable object (the cache's isolation rule, _cache/store.py). Inline seeds are str, int,
    float or bool: immutable."""

    __slots__ = (
        "saver", "thread_id", "max_depth", "rows", "values", "_writes", "_seeds", "_chains",
        "broken",
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
        #: a value that does not pickle: this listing answers nothing more
        self.broken = False

    def _seed_of(self, row: Row, ch: str, loads: Any) -> tuple[str, Any]:
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
        ws = [
            (tid, c, loads((typ, blob)))
            for tid, c, typ, blob in zip(
                row["write_task_ids"], row["write_channels"], row["write_types"],
                row["write_blobs"], strict=True,
            )
            if c == ch
        ]
        got = self._writes[key] = dumps(ws)
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
            if self._seed_of(row, ch, loads) is not self._NONE:
                below = _ROOT  # the seed row ends the walk (its writes count)
                break
            cid = row["parent_checkpoint_id"]
        for cid_, row in reversed(path):
            if below is not None:
                w = self._writes_of(row, ch, loads)
                seed = self._seed_of(row, ch, loads)
                if seed is self._NONE:
                    seed = below.seed
                below = _Chain(
                    (w, below.writes) if w is not None else below.writes, seed,
                    below.depth + 1,
                )
            self._chains[(ns, cid_, ch)] = below
        return below

    def answer(
        self, ns: str, checkpoint_id: str, channels: list[str], loads: Any
    ) -> dict[str, DeltaChannelHistory] | None:
        """The history of ``channels`` at ``checkpoint_id`` from the listed rows; None
        when the statement must answer (class docstring)."""
        target = self.rows.get((ns, checkpoint_id))
        if target is None or self.broken:
            return None
        limit = min(self.max_depth, len(self.rows))
        result: dict[str, DeltaChannelHistory] = {}
        try:
            for ch in channels:
                chain = self._chain(ns, target["parent_checkpoint_id"], ch, loads)
                if chain is None or chain.depth > limit:
                    # below the listing, a missing parent, a cycle, or the walk's depth
                    # guard would stop it with the channel still walking (it raises)
                    return None
                parts: list[bytes] = []
                link = chain.writes
                while link is not None:
                    parts.append(link[0])
                    link = link[1]
                writes: list[PendingWrite] = []
                for data in reversed(parts):
                    writes.extend(pickle.loads(data))
                entry: DeltaChannelHistory = {"writes": writes}
                seed = chain.seed
                if seed[0] == "b":
                    entry["seed"] = pickle.loads(seed[1])
                elif seed[0] == "i":
                    entry["seed"] = seed[1]
                result[ch] = entry
        except (pickle.PicklingError, TypeError, AttributeError):
            self.broken = True
            return None
        return result


class _Chain(NamedTuple):
    """A walk of one channel from a listed row down: see :meth:`_Listed._chain`."""

    #: the pickled writes of each row that has some, newest first, as a linked list
    #: (``(part, rest)``, None at the end): a row's chain shares the one below it, so
    #: keeping every row's chain costs one link per row, not one per row below it
    writes: _Link | None
    seed: tuple[str, Any]  # where it stops (_Listed._NONE: at the root)
    depth: int  # rows visited


_Link = tuple[bytes, "_Link | None"]
_ROOT = _Chain(None, _Listed._NONE, 0)
_MISSING = object()
