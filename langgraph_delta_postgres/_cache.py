"""The saver's decoded-value cache for ``get_delta_channel_history``.

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
shares the message objects and so does not isolate), see ``docs/cache.md``.

**Memory.** ``cache_bytes`` bounds the bytes of the pickles plus a fixed per-entry
overhead; buckets are evicted least recently used first. Buckets are never trimmed
inside, so a chain is whole or gone.

**Buckets too big for the budget.** A bucket may hold at most ``MAX_SHARE`` of the
budget. A call whose rows would make its bucket larger (estimated from the blobs'
lengths, before anything is pickled) keeps nothing and marks the thread *outsized*: its
next plans ask the statement what a saver without a cache asks (no 'c' rows, nothing
held) and the saver answers the rows as one without a cache does, so such a thread costs
what it costs with ``cache_bytes=0``. Keeping it anyway cost 2.3x that (every call
pickled the whole chain, then dropped it, along with every other bucket, to get back
under the budget; ``scripts/small_cache_budget.py``, figures in docs/cache.md). The mark
goes when an answer's rows would fit again (a snapshot shortened the chain), when this
saver forgets the thread, or when it is the oldest of ``MAX_KNOWN`` remembered sizes.

**Admission.** Least-recently-used eviction alone thrashes when a worker loads, in turn,
more threads than the budget holds: each load evicts the bucket the next load needs and
pays for the 'c' rows and the pickling of a bucket that is gone before it is used again
(six ~4 MB threads with ``cache_bytes`` = 10 MiB: 2.37x the time of ``cache_bytes=0``).
So a thread without a bucket is only given one when that costs no other bucket, or when
it is asked for more often than every bucket it would evict (TinyLFU's rule, Einziger
et al. 2017, with an exact counter per (thread, namespace) instead of a sketch: one
per thread recently asked is small next to a bucket). The size it would take is what a
plan needs to know which buckets those are: a thread never seen is admitted only while
the cache has room for the largest bucket (``max_bucket``) without evicting anything;
otherwise it is answered as without a cache (no 'c' rows, nothing pickled) and the
rows' estimated size is remembered for its next call. Counts are halved every
``AGE_EVERY`` calls per bucket held (at least ``AGE_MIN``), so a thread that was hot
once does not hold its place forever. The exact pickled size is checked against the
same rule before a new bucket is kept. Figures: docs/cache.md, "Small budgets".

**A thread's first load.** get_tuple of a thread's latest checkpoint (what a resume or
``get_state`` asks, with the history read in the same statement) does not give a thread
this cache has never seen a bucket: it is answered as without a cache and its size is
remembered, so the thread's next call is admitted by the rule above. A bucket costs its
first call the walk's 'c' rows and the pickling of every value (a new saver's first
``get_state`` on a 150-turn deepagents session: 164 ms with the bucket built, 74 ms
without, the official saver 112 ms; ``langgraph-delta-pg bench --only agent``), which
pays only if the thread is loaded again; a history call (``get_state_history``, a page
makes one per entry) still builds it on its first call, as the next entries use it.
"""

from __future__ import annotations

import gc
import pickle
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import DeltaChannelHistory

#: Bytes counted per node and per cached group or seed, on top of the pickles' own
#: length: dict slots, the node object, the key strings (measured with tracemalloc on a
#: 1,000-turn thread, see tests/integration/test_cache.py).
NODE_OVERHEAD = 360
ENTRY_OVERHEAD = 120
BUCKET_OVERHEAD = 1024
#: How many recent chain tops a bucket offers the statement as held candidates.
MAX_TOPS = 4
#: The largest share of the budget one bucket may take (see "Buckets too big").
MAX_SHARE = 0.5
#: How many (thread, namespace) sizes (of threads without a bucket) are remembered,
#: least recent dropped.
MAX_KNOWN = 1024
#: Frequency counts are halved after ``AGE_EVERY`` calls per bucket held, and at least
#: ``AGE_MIN`` calls (TinyLFU resets its sketch after 10 samples per cached entry).
AGE_EVERY = 10
AGE_MIN = 256
SEP = "\x1f"

Row = tuple[Any, ...]


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector paused while an answer's objects are made.

    An answer is thousands of new container objects (messages, their dicts and lists).
    Made with the collector on, they trigger collection after collection, each scanning
    every object the process holds: measured on the benchmark's resume loop (45 answers
    kept alive, as a caller holding states does), the loop took twice as long with the
    collector on as with it off. Paused, they are scanned once, by the first collection
    after. Only resumed if it was on (an application that turned it off keeps it off);
    process-wide, so another thread allocating meanwhile just collects a little later."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


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

    def params(self) -> dict[str, Any]:
        return {
            "held_ids": self.held_ids,
            "held_tokens": self.held_tokens,
            "seed_tokens": self.seed_tokens,
            "nodes": self.bucket is not None,
        }


#: What a saver without a cache tells the statement (and a cache, for an outsized thread).
NO_PLAN = Plan(None, ("", ""), [], [], [], {})


def estimate(rows: Sequence[Row], checkpoints: int) -> int:
    """What keeping these history rows would add to a bucket, before anything is
    pickled: the blobs' lengths stand in for the pickles' (measured on the benchmark's
    threads, the pickles plus overheads came to 1.1x to 2.4x the blobs: the estimate is
    low rather than high, and the exact count in ``_keep`` has the last word)."""
    blob = sum(len(r[4]) for r in rows if r[4] is not None)
    return BUCKET_OVERHEAD + blob + checkpoints * NODE_OVERHEAD


class HistoryCache:
    """One per saver object. Thread-safe; the statement runs outside the lock."""

    def __init__(self, max_bytes: int) -> None:
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0:
            raise ValueError("cache_bytes must be a non-negative int (0 turns the cache off)")
        self.max_bytes = max_bytes
        #: the most one bucket may hold (see "Buckets too big for the budget")
        self.max_bucket = int(max_bytes * MAX_SHARE)
        self._buckets: OrderedDict[tuple[str, str], _Bucket] = OrderedDict()
        #: (thread, ns) without a bucket -> the bytes its bucket would take (estimated
        #: from a cache-off answer's rows, or what it held when evicted); more than
        #: max_bucket: the thread is *outsized*
        self._sizes: OrderedDict[tuple[str, str], int] = OrderedDict()
        #: (thread, ns) -> calls lately (halved every so often, see "Admission")
        self._freq: dict[tuple[str, str], int] = {}
        self._calls = 0
        self._lock = threading.Lock()
        self.nbytes = 0
        #: channel answers that reused a held chain, and seeds served from the cache
        self.chain_hits = 0
        self.seed_hits = 0
        #: calls answered without the cache because admission refused the thread a bucket
        self.refused = 0
        #: channel answers through a bucket that reused no held chain; buckets evicted
        #: to get back under the budget (see _stats.CacheStats)
        self.misses = 0
        self.evictions = 0

    # ------------------------------------------------------------------ bookkeeping

    def forget(self, thread_ids: Sequence[str]) -> None:
        """Drop every bucket of these threads (all namespaces)."""
        drop = {str(t) for t in thread_ids}
        with self._lock:
            for key in [k for k in self._buckets if k[0] in drop]:
                self.nbytes -= self._buckets.pop(key).nbytes
            for key in [k for k in self._sizes if k[0] in drop]:
                del self._sizes[key]

    def touched(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        """This saver wrote to a checkpoint (put again, or writes added): when a walk
        visited it before, what the cache holds of its thread may be out of date (writes
        can be added to a checkpoint that already has children when a run resumes or
        forks from it: a fork through update_state did so on LangGraph 1.2.0)."""
        with self._lock:
            bucket = self._buckets.get((thread_id, ns))
            if bucket is not None and checkpoint_id in bucket.nodes:
                self._drop((thread_id, ns))

    def clear(self) -> None:
        with self._lock:
            self._buckets.clear()
            self._sizes.clear()
            self._freq.clear()
            self.nbytes = 0

    def outsized(self, thread_id: str, ns: str) -> bool:
        """Whether this thread's history is answered without the cache (too big)."""
        with self._lock:
            return self._sizes.get((thread_id, ns), 0) > self.max_bucket

    def __len__(self) -> int:
        return len(self._buckets)

    def counters(self) -> dict[str, int]:
        """A consistent snapshot of the counters (the fields of _stats.CacheStats)."""
        with self._lock:
            return {
                "hits": self.chain_hits, "misses": self.misses, "seed_hits": self.seed_hits,
                "refused": self.refused, "evictions": self.evictions, "bytes": self.nbytes,
                "buckets": len(self._buckets), "max_bytes": self.max_bytes,
            }

    # ------------------------------------------------------------------ one call

    def plan(
        self, thread_id: str, ns: str, checkpoint_id: str | None, channels: list[str] | None,
        *, admit_unseen: bool = True,
    ) -> Plan:
        """``channels`` None: not known yet (get_tuple's prefetch derives them in the
        statement), so offer what the bucket holds for any channel. ``admit_unseen``
        False: a thread this cache has never seen gets no bucket on this call (see
        "Admission": get_tuple's first load of a thread)."""
        key = (thread_id, ns)
        with self._lock:
            self._count(key)
            bucket = self._buckets.get(key)
            if bucket is None:
                size = self._sizes.get(key)
                if size is not None:
                    self._sizes.move_to_end(key)
                    if size > self.max_bucket:
                        return Plan(None, key, [], [], [], {})  # outsized: as without a cache
                if (size is None and not admit_unseen) or not self._admit(key, size):
                    self.refused += 1
                    return Plan(None, key, [], [], [], {})  # as without a cache
                bucket = _Bucket()  # registered by _keep once it holds something
            else:
                self._buckets.move_to_end(key)
            candidates: list[str] = []
            if checkpoint_id is not None:
                node = bucket.nodes.get(checkpoint_id)
                if node is not None and node.parent is not None:
                    candidates.append(node.parent)
            candidates += [t for t in reversed(bucket.tops) if t not in candidates]
            if channels is None:
                channels = list(bucket.ok)
            held_ids: list[str] = []
            held_tokens: list[str] = []
            for cid in candidates:
                node = bucket.nodes.get(cid)
                if node is None:
                    continue
                tokens = [
                    f"{ch}{SEP}{cid}{SEP}{node.xmin}"
                    for ch in channels
                    if cid in bucket.ok.get(ch, ())
                ]
                if tokens:
                    held_ids.append(cid)
                    held_tokens += tokens
            seeds = {t: d for t, d in bucket.seeds.items() if t.split(SEP, 1)[0] in channels}
        return Plan(bucket, key, held_ids, held_tokens, list(seeds), seeds)

    def answer(
        self,
        plan: Plan,
        channels: list[str],
        rows: list[Row],
        loads: Callable[[tuple[str, bytes]], Any],
        on_error: Callable[[Row], None],
    ) -> dict[str, DeltaChannelHistory]:
        """Build the answer from the statement's rows and what the plan held, then keep
        what this call fetched."""
        bucket = plan.bucket
        assert bucket is not None
        result: dict[str, DeltaChannelHistory] = {ch: {"writes": []} for ch in channels}
        visited: list[tuple[str, str | None, str, list[str]]] = []  # oldest first
        held_at: dict[str, str] = {}
        seed_at: dict[str, tuple[str | None, bytes | None, Any]] = {}
        new_writes: dict[str, list[tuple[str, list[Any]]]] = {ch: [] for ch in channels}
        seed_hits = 0
        with gc_paused():  # every value decoded or unpickled below
            for kind, channel, task_id, type_, blob, inline, checkpoint_id, ref in rows:
                if kind == "w":
                    per = new_writes[channel]
                    if not per or per[-1][0] != checkpoint_id:
                        per.append((checkpoint_id, []))
                    per[-1][1].append((task_id, channel, loads((type_, blob))))
                elif kind == "c":
                    visited.append((checkpoint_id, task_id, ref, inline))
                elif kind == "s":
                    token = f"{channel}{SEP}{ref}" if ref is not None else None
                    if type_ is not None and blob is None:
                        seed_hits += 1
                        data = plan.seeds[f"{channel}{SEP}{ref}"]
                        seed_at[channel] = (token, data, pickle.loads(data))
                    else:
                        value = loads((type_, blob)) if type_ else inline
                        seed_at[channel] = (token, None, value)
                elif kind == "h":
                    held_at[channel] = checkpoint_id
                else:
                    on_error((kind, channel, task_id, type_, blob, inline, checkpoint_id, ref))
            # Older part first: what the cache holds below a held stop.
            with self._lock:
                older = {ch: self._chain(bucket, ch, cid) for ch, cid in held_at.items()}
                self.chain_hits += len(held_at)
                self.misses += len(channels) - len(held_at)
                self.seed_hits += seed_hits
            self._hand_out(channels, result, older, seed_at, new_writes)
        size = estimate(rows, len(visited))
        if bucket.nbytes + size > self.max_bucket:
            self._mark_outsized(plan, bucket.nbytes + size)
            return result
        try:
            self._keep(plan, channels, visited, new_writes, held_at, seed_at)
        except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
            # A value that cannot be pickled is answered, not cached.
            self.forget([plan.key[0]])
        return result

    def answered_without(self, plan: Plan, rows: Sequence[Row]) -> None:
        """A thread's answer was built from these rows without the cache (it is outsized,
        or admission refused it a bucket): remember the size its bucket would take, for
        its next plan (an outsized thread whose rows fit now, because a snapshot shortened
        the chain, goes through the cache again when admitted)."""
        if plan.bucket is not None:
            return
        size = estimate(rows, len({r[6] for r in rows if r[0] == "w"}))
        with self._lock:
            if plan.key not in self._buckets:
                self._remember(plan.key, size)

    def _mark_outsized(self, plan: Plan, size: int) -> None:
        """Keep nothing of this thread, and answer its next calls without the cache."""
        with self._lock:
            bucket = self._buckets.get(plan.key)
            if bucket is not None and bucket is plan.bucket:
                self.nbytes -= self._buckets.pop(plan.key).nbytes
            self._remember(plan.key, size)

    # ------------------------------------------------------------------ admission
    # (all called with the lock held)

    def _count(self, key: tuple[str, str]) -> None:
        """One more call on this thread; every so often all counts are halved."""
        self._freq[key] = self._freq.get(key, 0) + 1
        self._calls += 1
        if self._calls >= max(AGE_MIN, AGE_EVERY * len(self._buckets)):
            self._calls = 0
            self._freq = {k: n // 2 for k, n in self._freq.items() if n > 1}

    def _admit(self, key: tuple[str, str], size: int | None) -> bool:
        """Whether a thread without a bucket gets one of ``size`` bytes (None: not known):
        yes when nothing need be evicted for it, or when it was asked for more often
        lately than every bucket that would be evicted for it (least recent first)."""
        if size is None:  # never seen: only while there is room for the largest bucket
            return self.nbytes + self.max_bucket <= self.max_bytes
        need = self.nbytes + size - self.max_bytes
        if need <= 0:
            return True
        freq = self._freq.get(key, 0)
        freed = 0
        for victim, bucket in self._buckets.items():  # least recently used first
            if victim == key or self._freq.get(victim, 0) >= freq:
                return False
            freed += bucket.nbytes
            if freed >= need:
                return True
        return True

    def _remember(self, key: tuple[str, str], size: int) -> None:
        self._sizes[key] = size
        self._sizes.move_to_end(key)
        while len(self._sizes) > MAX_KNOWN:
            self._sizes.popitem(last=False)

    def _drop(self, key: tuple[str, str]) -> None:
        """Evict one bucket, remembering its size for the thread's next plan."""
        bucket = self._buckets.pop(key)
        self.nbytes -= bucket.nbytes
        self._remember(key, bucket.nbytes)

    @staticmethod
    def _hand_out(
        channels: list[str],
        result: dict[str, DeltaChannelHistory],
        older: dict[str, tuple[list[tuple[bytes, int]], bytes | None]],
        seed_at: dict[str, tuple[str | None, bytes | None, Any]],
        new_writes: dict[str, list[tuple[str, list[Any]]]],
    ) -> None:
        """Fill the answer: the cached part unpickled (fresh copies), then the new part."""
        for ch in channels:
            entry = result[ch]
            writes = entry["writes"]
            if ch in older:
                parts, seed = older[ch]
                for data, upto in parts:
                    for ws in pickle.loads(data)[:upto]:
                        writes.extend(ws)
                if seed is not None:
                    entry["seed"] = pickle.loads(seed)
            elif ch in seed_at:
                entry["seed"] = seed_at[ch][2]
            for _, ws in new_writes[ch]:
                writes.extend(ws)

    # ------------------------------------------------------------------ internals

    @staticmethod
    def _chain(bucket: _Bucket, ch: str, top: str) -> tuple[list[tuple[bytes, int]], bytes | None]:
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

    def _keep(
        self,
        plan: Plan,
        channels: list[str],
        visited: list[tuple[str, str | None, str, list[str]]],
        new_writes: dict[str, list[tuple[str, list[Any]]]],
        held_at: dict[str, str],
        seed_at: dict[str, tuple[str | None, bytes | None, Any]],
    ) -> None:
        if not visited:
            return
        dumps = pickle.dumps
        parent_of = {cid: parent for cid, parent, _, _ in visited}
        # Per channel, the stretch this call fetched (oldest first) and its segment.
        segments: dict[str, tuple[list[str], _Segment]] = {}
        for ch in channels:
            ids = [v[0] for v in visited if ch in v[3]]
            if not ids:
                continue
            by_id = dict(new_writes[ch])
            seed = None
            if ch in seed_at:
                _, held, value = seed_at[ch]
                seed = held if held is not None else dumps(value, protocol=5)
            below = parent_of[ids[0]]
            data = dumps([by_id.get(cid, []) for cid in ids], protocol=5)
            segments[ch] = (ids, _Segment(data, seed, None if seed is not None else below))
        exact = NODE_OVERHEAD * len(visited) + sum(
            len(seg.data) + len(seg.seed or b"") for _, seg in segments.values()
        )
        if plan.bucket is not None and plan.bucket.nbytes + exact > self.max_bucket:
            self._mark_outsized(plan, plan.bucket.nbytes + exact)  # the estimate was low
            return
        added = 0
        with self._lock:
            bucket = plan.bucket
            assert bucket is not None
            current = self._buckets.get(plan.key)
            if current is None and not bucket.nodes:
                # a new bucket: the exact size has the last word on admission
                total = BUCKET_OVERHEAD + exact
                if not self._admit(plan.key, total):
                    self._remember(plan.key, total)
                    return
                self._sizes.pop(plan.key, None)
                self._buckets[plan.key] = bucket
                added += BUCKET_OVERHEAD
            elif current is not bucket:
                return  # forgotten (or replaced) while the statement ran
            nodes = bucket.nodes
            if any(
                (node := nodes.get(cid)) is not None and node.xmin != xmin
                for cid, _, xmin, _ in visited
            ):
                # A token changed: the thread was written again under the same ids, or a
                # write was added to a checkpoint that has a child (the late-write count
                # in the token moved). Start over, before adding any of this call's nodes.
                self.nbytes -= bucket.nbytes
                bucket = _Bucket()
                self._buckets[plan.key] = bucket
                nodes = bucket.nodes
                added = BUCKET_OVERHEAD
            for cid, parent, xmin, _ in visited:
                if cid not in nodes:
                    nodes[cid] = _Node(parent, xmin)
                    added += NODE_OVERHEAD
            for ch, (ids, seg) in segments.items():
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
            bucket.nbytes += added
            self.nbytes += added
            self._evict()

    def _evict(self) -> None:
        while self.nbytes > self.max_bytes and self._buckets:
            self._drop(next(iter(self._buckets)))
            self.evictions += 1
