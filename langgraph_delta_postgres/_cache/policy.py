"""The history cache's policy: the budget, which threads get a bucket, and ageing.

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
under the budget; ``scripts/small_cache_budget.py``, figures in
docs/design/history-cache.md). The mark goes when an answer's rows would fit again (a
snapshot shortened the chain), when this saver forgets the thread, or when it is the
oldest of ``MAX_KNOWN`` remembered sizes.

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
same rule before a new bucket is kept. Figures: docs/design/history-cache.md, "Small budgets".

**A thread's first load.** get_tuple of a thread's latest checkpoint (what a resume or
``get_state`` asks, with the history read in the same statement) does not give a thread
this cache has never seen a bucket: it is answered as without a cache and its size is
remembered, so the thread's next call is admitted by the rule above. A bucket costs its
first call the walk's 'c' rows and the pickling of every value (a new saver's first
``get_state`` on a 150-turn deepagents session: 164 ms with the bucket built, 74 ms
without, the official saver 112 ms; ``langgraph-delta-pg bench --only agent``), which
pays only if the thread is loaded again; a history call (``get_state_history``, a page
makes one per entry) still builds it on its first call, as the next entries use it.

What a bucket holds and how answers are copied out of it: :mod:`.store`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from .store import BUCKET_OVERHEAD, NODE_OVERHEAD, Plan, Row, _Bucket

#: The largest share of the budget one bucket may take (see "Buckets too big").
MAX_SHARE = 0.5
#: How many (thread, namespace) sizes (of threads without a bucket) are remembered,
#: least recent dropped.
MAX_KNOWN = 1024
#: Frequency counts are halved after ``AGE_EVERY`` calls per bucket held, and at least
#: ``AGE_MIN`` calls (TinyLFU resets its sketch after 10 samples per cached entry).
AGE_EVERY = 10
AGE_MIN = 256


def estimate(rows: Sequence[Row], checkpoints: int) -> int:
    """What keeping these history rows would add to a bucket, before anything is
    pickled: the blobs' lengths stand in for the pickles' (measured on the benchmark's
    threads, the pickles plus overheads came to 1.1x to 2.4x the blobs: the estimate is
    low rather than high, and the exact count in ``_keep`` has the last word)."""
    blob = sum(len(r[4]) for r in rows if r[4] is not None)
    return BUCKET_OVERHEAD + blob + checkpoints * NODE_OVERHEAD


class Budget:
    """The buckets, the budget, admission and ageing, and the counters; the subclass
    :class:`~.cache.HistoryCache` adds one call's plan and answer. Thread-safe."""

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
        #: bumped by clear(): a plan made before is not kept (a call in flight during a
        #: failover must not bring the old server's rows back)
        self.generation = 0

    # ------------------------------------------------------------------ bookkeeping

    def forget(self, thread_ids: Sequence[str]) -> None:
        """Drop every bucket of these threads (all namespaces)."""
        drop = {str(t) for t in thread_ids}
        with self._lock:
            for key in [k for k in self._buckets if k[0] in drop]:
                self.nbytes -= self._buckets.pop(key).nbytes
            for key in [k for k in self._sizes if k[0] in drop]:
                del self._sizes[key]

    def clear(self) -> None:
        """Drop everything; what a call planned before is not kept (``generation``)."""
        with self._lock:
            self.generation += 1
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

    def _evict(self) -> None:
        while self.nbytes > self.max_bytes and self._buckets:
            self._drop(next(iter(self._buckets)))
            self.evictions += 1
