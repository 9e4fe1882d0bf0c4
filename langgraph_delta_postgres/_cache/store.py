"""The history cache's storage: what a bucket holds and how an answer gets its copies.

A checkpoint's rows never change once written, so what one history call fetched and
decoded can answer the next call on the same chain. The cache keeps, per thread and
namespace (a *bucket*):

* **nodes**: for each checkpoint a walk visited, its parent, the xmin of its row, and per
  channel the writes it holds for that channel (pickled);
* **chains**: per channel, the nodes whose chain down to the channel's seed (or the root)
  is complete in the bucket (``ok``), so a walk that reaches one can stop there;
* **seeds**: decoded seed values, keyed by channel, version and the blob row's xmin.

The history statement is told what the client holds (``held_ids`` / ``held_tokens`` /
``seed_tokens``): a channel's walk stops at the first held checkpoint and a held seed
blob is named but not sent, so a hit costs no blob transfer and no TOAST decompression.

**Staleness.** Every key carries the xmin of the row it came from; a thread deleted and
written again under the same ids (by this process or another) has new rows with new
xmins, so its tokens never match and the statement sends fresh rows. A checkpoint's
token also carries its namespace's late-write count (migrations/0006_checkpoint_epochs.sql),
which any process's put_writes bumps when it adds a write to a checkpoint that may have a
child, so a chain read before such a write no longer matches either. When a walk returns
a checkpoint whose token differs from the node's, the bucket is replaced. This saver's own
``delete_thread`` / ``prune`` / ``delete_for_runs`` / ``copy_thread`` drop the buckets of
the threads they touch (:meth:`HistoryCache.forget`).

**Isolation.** Values are kept pickled and every answer unpickles its own copies, so a
caller that mutates what it got back (appends to the list, edits a message object,
updates a dict) never changes a later answer. Measured against the alternatives (a fresh
serde decode, ``copy.deepcopy``, a shallow copy as ``DeltaChannel.copy()`` makes, which
shares the message objects and so does not isolate), see
``docs/design/history-cache.md``. A value of a type whose pickle copy is not proven to
be what serde gives is kept as its stored (type, blob) inside the pickle and decoded by
serde for every answer (:mod:`.copies`).

Which threads get a bucket and which buckets go: :mod:`.policy`.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import DeltaChannelHistory

from . import copies

#: Bytes counted per node and per cached group or seed, on top of the pickles' own
#: length: dict slots, the node object, the key strings (measured with tracemalloc on a
#: 1,000-turn thread, see tests/integration/test_cache.py).
NODE_OVERHEAD = 360
ENTRY_OVERHEAD = 120
BUCKET_OVERHEAD = 1024
#: How many recent chain tops a bucket offers the statement as held candidates.
MAX_TOPS = 4
SEP = "\x1f"

Row = tuple[Any, ...]
#: (checkpoint id, parent id, token, channels with writes there), as the walk's 'c' rows
Visited = tuple[str, str | None, str, list[str]]
#: channel -> (seed token, pickled seed if the cache held it, the seed value)
SeedAt = dict[str, tuple[str | None, bytes | None, Any]]
#: channel -> [(checkpoint id, [(task_id, channel, value)])] oldest first
NewWrites = dict[str, list[tuple[str, list[Any]]]]


#: the young-generation threshold gc_paused sets: no automatic collection starts while
#: it holds (a collection is due after this many more allocations than deallocations)
_PAUSED_THRESHOLD = 2**31 - 1
_pause_lock = threading.Lock()
#: calls inside gc_paused now (any thread), and the thresholds the first one found
_pause_depth = 0
_pause_saved: tuple[int, ...] | None = None


@contextmanager
def gc_paused() -> Iterator[None]:
    """No automatic cyclic garbage collection while an answer's objects are made.

    An answer is thousands of new container objects (messages, their dicts and lists).
    Made with the collector on, they trigger collection after collection, each scanning
    every object the process holds: measured on the benchmark's resume loop (45 answers
    kept alive, as a caller holding states does), the loop took twice as long with the
    collector on as with it off. Paused, they are scanned once, by the first collection
    after (the pause moves that collection, it does not remove it).

    Kept because it wins counted as a whole process, the moved collection included
    (``python scripts/gc_copies_whole_process.py --dsn <Postgres 15> --db NAME --ab 5``,
    the 150-turn deepagents session, new processes opened as the README says, load
    average about 1): two whole ``get_state_history`` passes and 10 warm ``get_state``
    took 1.93x as long without the pause (the process 1.78x); 10 more turns of the
    session (``--work turns``, 8 pairs) 0.98x, within the noise.

    It raises the young generation's threshold instead of calling ``gc.disable()``, so
    it never changes whether the collector is enabled: an application that turns it off
    (before or during the call) keeps it off, one that turns it on keeps it on. Calls
    overlap correctly across threads and tasks: the first one in saves the thresholds,
    the last one out restores them, unless the application set other thresholds
    meanwhile (then its own stay). An explicit ``gc.collect()`` still runs."""
    global _pause_depth, _pause_saved
    with _pause_lock:
        if _pause_depth == 0:
            saved = gc.get_threshold()
            if saved[0] != 0:  # 0: automatic collection is off already
                _pause_saved = saved
                gc.set_threshold(_PAUSED_THRESHOLD, *saved[1:])
        _pause_depth += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pause_depth -= 1
            if _pause_depth == 0 and _pause_saved is not None:
                if gc.get_threshold()[0] == _PAUSED_THRESHOLD:  # nobody set others since
                    gc.set_threshold(*_pause_saved)
                _pause_saved = None


@dataclass(slots=True, frozen=True)
class _Segment:
    """The writes of one channel along the stretch of chain one call fetched: a pickled
    list with one list of (task_id, channel, value) per checkpoint, oldest first. One
    pickle per stretch, not per checkpoint: unpickling shares the class lookups and key
    strings (measured ~2x faster per value than one pickle per checkpoint)."""

    data: bytes
    #: the pickled seed at the stretch's oldest checkpoint (None: no seed there)
    seed: bytes | None
    #: the parent of the oldest checkpoint: where the chain goes on (None: the root,
    #: or the seed is here)
    below: str | None


@dataclass(slots=True)
class _Node:
    parent: str | None
    xmin: str
    #: channel -> (the segment holding this checkpoint's writes of it, index there)
    groups: dict[str, tuple[_Segment, int]] = field(default_factory=dict)


@dataclass(slots=True)
class _Bucket:
    nodes: dict[str, _Node] = field(default_factory=dict)
    #: channel -> ids of nodes whose chain down to the seed or root is complete here
    ok: dict[str, set[str]] = field(default_factory=dict)
    #: seed token -> pickled seed value
    seeds: dict[str, bytes] = field(default_factory=dict)
    #: channel -> (token, pickled value or None) of the blob get_tuple last read for it
    #: (values of tuples, _ops/values.py: the pickle is kept from the second read on)
    values: dict[str, tuple[str, bytes | None]] = field(default_factory=dict)
    tops: list[str] = field(default_factory=list)
    nbytes: int = 0


@dataclass(slots=True)
class Plan:
    """What one call tells the statement it holds, and the bucket that holds it."""

    bucket: _Bucket | None
    key: tuple[str, str]
    held_ids: list[str]
    held_tokens: list[str]
    seed_tokens: list[str]
    seeds: dict[str, bytes]
    #: token -> pickled value, of the tuple blobs the statement need not send
    #: (``checkpoints.tuples_of``'s held_values: the bucket's seeds and values)
    held_values: dict[str, bytes] = field(default_factory=dict)
    #: channel -> token of the value get_tuple last read (a second read is kept)
    seen_values: dict[str, str] = field(default_factory=dict)
    #: the cache's generation when planned (a plan from before a clear() keeps nothing)
    generation: int = 0

    def params(self) -> dict[str, Any]:
        return {
            "held_ids": self.held_ids,
            "held_tokens": self.held_tokens,
            "seed_tokens": self.seed_tokens,
            "nodes": self.bucket is not None,
            "held_values": list(self.held_values),
        }


#: What a saver without a cache tells the statement (and a cache, for an outsized thread).
NO_PLAN = Plan(None, ("", ""), [], [], [], {})


def held_values(bucket: _Bucket) -> tuple[dict[str, bytes], dict[str, str]]:
    """What a bucket offers the tuple statement: token -> pickled value (its seeds and
    kept values), and channel -> token of the values get_tuple last read."""
    held = dict(bucket.seeds)
    seen: dict[str, str] = {}
    for ch, (token, data) in bucket.values.items():
        seen[ch] = token
        if data is not None:
            held[token] = data
    return held, seen


def chain(bucket: _Bucket, ch: str, top: str) -> tuple[list[tuple[bytes, int]], bytes | None]:
    """Where the writes of ``ch`` from its seed (or the root) up to ``top`` are:
    (segment pickle, how many of its checkpoints) oldest first, and the pickled seed
    (None: no seed)."""
    parts: list[tuple[bytes, int]] = []
    cid: str | None = top
    seed: bytes | None = None
    nodes = bucket.nodes
    while cid is not None:
        seg, i = nodes[cid].groups[ch]
        parts.append((seg.data, i + 1))
        if seg.seed is not None:
            seed = seg.seed
            break
        cid = seg.below
    parts.reverse()
    return parts, seed


def hand_out(
    channels: list[str],
    result: dict[str, DeltaChannelHistory],
    older: dict[str, tuple[list[tuple[bytes, int]], bytes | None]],
    seed_at: SeedAt,
    new_writes: NewWrites,
    decode: copies.Decode,
) -> None:
    """Fill the answer: the cached part unpickled (fresh copies; the values kept as
    blobs decoded by ``decode``, serde's), then the new part."""
    for ch in channels:
        entry = result[ch]
        writes = entry["writes"]
        if ch in older:
            parts, seed = older[ch]
            for data, upto in parts:
                for ws in copies.loads_writes(data, upto, decode):
                    writes.extend(ws)
            if seed is not None:
                entry["seed"] = copies.loads(seed, decode)
        elif ch in seed_at:
            entry["seed"] = seed_at[ch][2]
        for _, ws in new_writes[ch]:
            writes.extend(ws)


def segments(
    channels: list[str], visited: list[Visited], new_writes: NewWrites, seed_at: SeedAt,
    dumps: Callable[[Any], bytes],
) -> dict[str, tuple[list[str], _Segment]]:
    """Per channel, the stretch this call fetched (oldest first) and its segment, pickled
    by ``dumps`` (the call's :meth:`.copies.Decoder.dumps`; outside the lock)."""
    parent_of = {cid: parent for cid, parent, _, _ in visited}
    out: dict[str, tuple[list[str], _Segment]] = {}
    for ch in channels:
        ids = [v[0] for v in visited if ch in v[3]]
        if not ids:
            continue
        by_id = dict(new_writes[ch])
        seed = None
        if ch in seed_at:
            _, held, value = seed_at[ch]
            seed = held if held is not None else dumps(value)
        below = parent_of[ids[0]]
        data = dumps([by_id.get(cid, []) for cid in ids])
        out[ch] = (ids, _Segment(data, seed, None if seed is not None else below))
    return out


def add(
    bucket: _Bucket,
    visited: list[Visited],
    segs: dict[str, tuple[list[str], _Segment]],
    held_at: dict[str, str],
    seed_at: SeedAt,
) -> int:
    """Add one call's nodes, segments and seeds to the bucket (with the cache's lock
    held); returns the bytes added, overheads counted."""
    added = 0
    nodes = bucket.nodes
    for cid, parent, xmin, _ in visited:
        if cid not in nodes:
            nodes[cid] = _Node(parent, xmin)
            added += NODE_OVERHEAD
    for ch, (ids, seg) in segs.items():
        for i, cid in enumerate(ids):
            nodes[cid].groups.setdefault(ch, (seg, i))
        added += ENTRY_OVERHEAD * (1 + len(ids)) + len(seg.data) + len(seg.seed or b"")
        token = seed_at[ch][0] if ch in seed_at else None
        if token is not None and seg.seed is not None and token not in bucket.seeds:
            bucket.seeds[token] = seg.seed  # the same bytes: counted once, above
        # Complete down to the seed or the root? Then walks may stop here.
        if seg.seed is not None:
            complete = True
        elif ch in held_at:
            complete = seg.below == held_at[ch] and seg.below in bucket.ok.get(ch, ())
        else:
            complete = seg.below is None  # the root
        if complete:
            ok = bucket.ok.setdefault(ch, set())
            before = len(ok)
            ok.update(ids)
            added += ENTRY_OVERHEAD // 2 * (len(ok) - before)
    top = visited[-1][0]
    if top in bucket.tops:
        bucket.tops.remove(top)
    bucket.tops.append(top)
    del bucket.tops[:-MAX_TOPS]
    return added
