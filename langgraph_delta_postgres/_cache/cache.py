"""The history cache's calls: what a history call tells the statement it holds (``plan``)
and the answer built from the statement's rows and the bucket (``answer``), which keeps
what the rows brought. The storage and the copies are :mod:`.store`'s, which threads get
a bucket and which buckets go :mod:`.policy`'s."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.checkpoint.base import DeltaChannelHistory

from . import copies
from .policy import Budget, estimate
from .store import (
    BUCKET_OVERHEAD,
    ENTRY_OVERHEAD,
    NODE_OVERHEAD,
    SEP,
    NewWrites,
    Plan,
    Row,
    SeedAt,
    Visited,
    _Bucket,
    add,
    chain,
    gc_paused,
    hand_out,
    held_values,
    segments,
)


class HistoryCache(Budget):
    """One per saver object. Thread-safe; the statement runs outside the lock."""

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
            held, seen = held_values(bucket)
        return Plan(bucket, key, held_ids, held_tokens, list(seeds), seeds, held, seen,
                    self.generation)

    def values_of(self, thread_id: str, ns: str) -> tuple[dict[str, bytes], dict[str, str]]:
        """What the thread's bucket offers a tuple statement (see :func:`.store.held_values`;
        empty without a bucket). Not a call on the thread for admission: list and get_tuple
        by id only read what is there."""
        with self._lock:
            bucket = self._buckets.get((thread_id, ns))
            if bucket is None:
                return {}, {}
            return held_values(bucket)

    def keep_values(
        self, plan: Plan, seen: dict[str, str], keep: dict[str, tuple[str, bytes]],
        sent: int,
    ) -> None:
        """After a get_tuple through ``plan``: remember the token of each value it
        decoded (``seen``: channel -> token) and keep the pickles of the values read a
        second time (``keep``: channel -> (token, pickle)); one value per channel, a newer
        token replaces the older (_ops/values.py). A thread without a bucket (its first
        load) is remembered with the bytes it was ``sent``, so that its next load is
        admitted like a history call's thread (see "Admission")."""
        bucket = plan.bucket
        if not seen:
            return
        if bucket is None:
            with self._lock:
                if plan.key not in self._buckets and plan.key not in self._sizes:
                    self._remember(plan.key, BUCKET_OVERHEAD + sent)
            return
        with self._lock:
            current = self._buckets.get(plan.key)
            size = sum(ENTRY_OVERHEAD + len(d) for _, d in keep.values())
            size += ENTRY_OVERHEAD * len(seen)
            added = 0
            if current is None and bucket.nbytes == 0:
                if not self._register(plan, size):
                    return
                added += BUCKET_OVERHEAD
            elif current is not bucket:
                return  # forgotten (or replaced) meanwhile
            values = bucket.values
            for ch, token in seen.items():
                old = values.get(ch)
                got = keep.get(ch)
                if got is not None and bucket.nbytes + added + len(got[1]) > self.max_bucket:
                    got = None  # not worth marking the thread outsized for
                if old is not None:
                    if old[0] == token and (got is None or old[1] is not None):
                        continue
                    added -= ENTRY_OVERHEAD + len(old[1] or b"")
                values[ch] = got if got is not None else (token, None)
                added += ENTRY_OVERHEAD + (len(got[1]) if got is not None else 0)
            bucket.nbytes += added
            self.nbytes += added
            self._evict()

    def _register(self, plan: Plan, size: int) -> bool:
        """A new bucket of ``size`` bytes (overheads apart) for ``plan``'s thread, if
        admission lets it in (the lock held)."""
        if plan.generation != self.generation:
            return False  # planned before clear(): rows of a server no longer used
        total = BUCKET_OVERHEAD + size
        if not self._admit(plan.key, total):
            self._remember(plan.key, total)
            return False
        self._sizes.pop(plan.key, None)
        assert plan.bucket is not None
        self._buckets[plan.key] = plan.bucket
        return True

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
        visited: list[Visited] = []  # oldest first
        held_at: dict[str, str] = {}
        seed_at: SeedAt = {}
        new_writes: NewWrites = {ch: [] for ch in channels}
        seed_hits = 0
        decoder = copies.Decoder(loads)  # remembers each value's blob, for _keep
        with gc_paused():  # every value decoded or unpickled below
            for kind, channel, task_id, type_, blob, inline, checkpoint_id, ref in rows:
                if kind == "w":
                    per = new_writes[channel]
                    if not per or per[-1][0] != checkpoint_id:
                        per.append((checkpoint_id, []))
                    per[-1][1].append((task_id, channel, decoder((type_, blob))))
                elif kind == "c":
                    visited.append((checkpoint_id, task_id, ref, inline))
                elif kind == "s":
                    token = f"{channel}{SEP}{ref}" if ref is not None else None
                    if type_ is not None and blob is None:
                        seed_hits += 1
                        data = plan.seeds[f"{channel}{SEP}{ref}"]
                        seed_at[channel] = (token, data, copies.loads(data, loads))
                    else:
                        value = decoder((type_, blob)) if type_ else inline
                        seed_at[channel] = (token, None, value)
                elif kind == "h":
                    held_at[channel] = checkpoint_id
                else:
                    on_error((kind, channel, task_id, type_, blob, inline, checkpoint_id, ref))
            # Older part first: what the cache holds below a held stop.
            with self._lock:
                older = {ch: chain(bucket, ch, cid) for ch, cid in held_at.items()}
                self.chain_hits += len(held_at)
                self.misses += len(channels) - len(held_at)
                self.seed_hits += seed_hits
            hand_out(channels, result, older, seed_at, new_writes, loads)
        size = estimate(rows, len(visited))
        if bucket.nbytes + size > self.max_bucket:
            self._mark_outsized(plan, bucket.nbytes + size)
            return result
        try:
            self._keep(plan, channels, visited, new_writes, held_at, seed_at, decoder.dumps)
        except copies.UNPICKLABLE:
            # A part that neither pickles nor is a value decoded here (those are kept
            # as their blobs, copies.Decoder.dumps): answered, not cached.
            self.forget([plan.key[0]])
        return result

    def _keep(
        self,
        plan: Plan,
        channels: list[str],
        visited: list[Visited],
        new_writes: NewWrites,
        held_at: dict[str, str],
        seed_at: SeedAt,
        dumps: Callable[[Any], bytes],
    ) -> None:
        if not visited:
            return
        segs = segments(channels, visited, new_writes, seed_at, dumps)
        exact = NODE_OVERHEAD * len(visited) + sum(
            len(seg.data) + len(seg.seed or b"") for _, seg in segs.values()
        )
        if plan.bucket is not None and plan.bucket.nbytes + exact > self.max_bucket:
            self._mark_outsized(plan, plan.bucket.nbytes + exact)  # the estimate was low
            return
        added = 0
        with self._lock:
            bucket = plan.bucket
            assert bucket is not None
            current = self._buckets.get(plan.key)
            if current is None and bucket.nbytes == 0:
                # a new bucket: the exact size has the last word on admission
                if not self._register(plan, exact):
                    return
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
                added = BUCKET_OVERHEAD
            added += add(bucket, visited, segs, held_at, seed_at)
            bucket.nbytes += added
            self.nbytes += added
            self._evict()
