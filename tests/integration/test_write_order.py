"""One saver orders its own put / put_writes per checkpoint (_order.py): a put after the
put_writes to its parent that arrived before it; put_writes to a checkpoint together
(the database lets them: migrations/0007), after its put. Calls on other checkpoints run
at once, and every write lands, as on the official saver.

The probe watches every statement-running operation whose config names a thread and
counts them, so an operation renamed or a call that skips ``_run`` fails the count
instead of passing unobserved.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from psycopg_pool import AsyncConnectionPool, ConnectionPool

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver
from langgraph_delta_postgres._connect import connect_kwargs
from tests.graph._util import official_saver
from tests.integration._helpers import Uniform, make_checkpoint, put_chain

HOLD_S = 0.05  # each call holds its connection this much longer, to widen any overlap


class _Overlap:
    """The calls running at once per thread id: the most put_writes seen together, puts
    that overlapped another call of their thread, and the order calls started in."""

    def __init__(self) -> None:
        self.now: Counter[str] = Counter()
        self.puts_now: Counter[str] = Counter()
        self.most_writes: Counter[str] = Counter()
        self.put_overlaps = 0
        self.most_all = 0  # calls running at once, all threads together
        self.started: list[tuple[str, str]] = []  # (thread, "put" | "writes")
        self.lock = threading.Lock()

    def clear(self) -> None:
        self.most_writes.clear()
        self.started.clear()
        self.most_all = self.put_overlaps = 0

    def enter(self, thread_id: str, kind: str) -> None:
        with self.lock:
            if self.puts_now[thread_id] or (kind == "put" and self.now[thread_id]):
                self.put_overlaps += 1
            self.now[thread_id] += 1
            if kind == "put":
                self.puts_now[thread_id] += 1
            else:
                self.most_writes[thread_id] = max(
                    self.most_writes[thread_id], self.now[thread_id]
                )
            self.most_all = max(self.most_all, sum(self.now.values()))
            self.started.append((thread_id, kind))

    def leave(self, thread_id: str, kind: str) -> None:
        with self.lock:
            self.now[thread_id] -= 1
            if kind == "put":
                self.puts_now[thread_id] -= 1


def _watched(op: Any) -> tuple[str, str] | None:
    """(thread, "put" | "writes") of a put or put_writes operation, None for others."""
    local = op.gi_frame.f_locals
    config = local.get("config")
    if not isinstance(config, dict) or "thread_id" not in config.get("configurable", {}):
        return None
    if "checkpoint" in local and "new_versions" in local:
        return str(config["configurable"]["thread_id"]), "put"
    if "writes" in local and "task_id" in local:
        return str(config["configurable"]["thread_id"]), "writes"
    return None


class _SyncProbe(DeltaPostgresSaver):
    overlap: _Overlap
    dsn_for_test: str

    def _run(self, op: Any, *, atomic: bool = False, **kw: Any) -> Any:
        if (seen := _watched(op)) is None:
            return super()._run(op, atomic=atomic, **kw)
        self.overlap.enter(*seen)
        try:
            out = super()._run(op, atomic=atomic, **kw)
            time.sleep(HOLD_S)
            return out
        finally:
            self.overlap.leave(*seen)


class _AsyncProbe(AsyncDeltaPostgresSaver):
    overlap: _Overlap
    dsn_for_test: str

    async def _run(self, op: Any, *, atomic: bool = False, **kw: Any) -> Any:
        if (seen := _watched(op)) is None:
            return await super()._run(op, atomic=atomic, **kw)
        self.overlap.enter(*seen)
        try:
            out = await super()._run(op, atomic=atomic, **kw)
            await asyncio.sleep(HOLD_S)
            return out
        finally:
            self.overlap.leave(*seen)


def _writes(n: int) -> list[tuple[str, list[tuple[str, Any]]]]:
    return [(f"task{k}", [("obj", k), ("num", 100 + k)]) for k in range(n)]


def _child(k: int) -> tuple[Any, Any, Any]:
    return make_checkpoint({"num": k}, {"num": f"{k:032}.0"}), {"source": "loop", "step": k}, {}


def _pending(tup: Any) -> list[tuple[str, str, Any]]:
    assert tup is not None
    return sorted((t, ch, v) for t, ch, v in tup.pending_writes)


async def _check(saver: Any, heads: dict[str, Any]) -> None:
    ov = saver.overlap
    # every call was watched: 6 put_writes and a put per thread
    assert Counter(ov.started) == Counter(
        {(t, k): n for t in heads for k, n in (("writes", 6), ("put", 1))}
    ), ov.started
    assert ov.put_overlaps == 0, "a put ran beside another call of its namespace"
    assert all(ov.most_writes[t] >= 2 for t in heads), "put_writes never ran together"
    assert ov.most_all >= 2
    with official_saver(dsn_of(saver)) as off:
        want = {t: _pending(off.get_tuple(heads[t])) for t in heads}
    assert all(len(v) == 12 for v in want.values())  # every write landed
    if isinstance(saver, AsyncDeltaPostgresSaver):
        got = {t: _pending(await saver.aget_tuple(heads[t])) for t in heads}
    else:
        got = {t: _pending(saver.get_tuple(heads[t])) for t in heads}
    assert got == want


def dsn_of(saver: Any) -> str:
    return str(saver.dsn_for_test)


async def test_sync_saver_orders_its_calls_per_namespace(dsn: str) -> None:
    with ConnectionPool(dsn, min_size=4, max_size=4, kwargs=connect_kwargs(dsn, 5)) as pool:
        saver = _SyncProbe(pool)
        saver.overlap, saver.dsn_for_test = _Overlap(), dsn
        heads = {t: (await put_chain(Uniform(saver), t, 2))[-1] for t in ("wo-a", "wo-b")}
        saver.overlap.clear()
        jobs: list[Any] = []
        for (task, w) in _writes(6):  # the two threads' calls interleaved
            jobs += [(saver.put_writes, heads[t], w, task, "~p") for t in heads]
        jobs += [(saver.put, heads[t], *_child(9)) for t in heads]
        with ThreadPoolExecutor(len(jobs)) as ex:
            for f in [ex.submit(*j) for j in jobs]:
                f.result(timeout=60)
        await _check(saver, heads)


async def test_async_saver_orders_its_calls_per_namespace(dsn: str) -> None:
    async with AsyncConnectionPool(dsn, min_size=4, max_size=4, open=False,
                                   kwargs=connect_kwargs(dsn, 5)) as pool:
        saver = _AsyncProbe(pool)
        saver.overlap, saver.dsn_for_test = _Overlap(), dsn
        heads = {t: (await put_chain(Uniform(saver), t, 2))[-1] for t in ("wo-c", "wo-d")}
        saver.overlap.clear()
        calls: list[Any] = []
        for (task, w) in _writes(6):
            calls += [saver.aput_writes(heads[t], w, task, "~p") for t in heads]
        calls += [saver.aput(heads[t], *_child(9)) for t in heads]
        await asyncio.gather(*calls)
        # the puts arrived last: each started after its thread's put_writes (FIFO)
        for t in heads:
            mine = [k for th, k in saver.overlap.started if th == t]
            assert mine[-1] == "put", mine
        await _check(saver, heads)


def _batched_statements(rec: Any) -> list[Any]:
    return [s for s in rec.take() if "checkpoint_writes" in s.query and "INSERT" in s.query]


async def test_queued_put_writes_run_as_one_statement(dsn: str) -> None:
    """On one connection, put_writes that queued while it was busy (parallel tasks'
    writes) run as one statement (WriteBatch); a call whose write the database refuses
    gets its own error, and the others are written (the batch runs again call by call)."""
    from tests.integration._explain import Recorder

    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        head = (await put_chain(Uniform(saver), "batch", 2))[-1]
        rec = Recorder()
        rec.attach(saver.conn)  # type: ignore[arg-type]
        results: dict[int, Any] = {}

        def call(k: int) -> None:
            channel = "bad\x00" if k == 3 else "obj"  # jsonb refuses \u0000
            try:
                saver.put_writes(head, [(channel, k), ("num", 100 + k)], f"task{k}", "~p")
                results[k] = None
            except Exception as e:  # noqa: BLE001 - the test looks at it
                results[k] = e

        with saver.lock:  # the connection is busy: the calls queue
            calls = [threading.Thread(target=call, args=(k,)) for k in range(8)]
            for c in calls:
                c.start()
            deadline = time.monotonic() + 30
            assert saver._batch is not None
            while len(saver._batch._queue) < 8:
                assert time.monotonic() < deadline, "the calls never queued"
                time.sleep(0.01)
        for c in calls:
            c.join(30)
        assert [k for k, e in results.items() if e is not None] == [3], results
        statements = _batched_statements(rec)
        # one batch statement (refused as a whole), then the eight calls one by one
        assert len(statements) == 9 and "WITH ORDINALITY" in statements[0].query
        with official_saver(dsn) as off:
            want = _pending(off.get_tuple(head))
        assert _pending(saver.get_tuple(head)) == want
        assert sorted({t for t, _, _ in want}) == [f"task{k}" for k in range(8) if k != 3]

        # all good: one statement for all of them
        head2 = (await put_chain(Uniform(saver), "batch2", 2))[-1]
        rec.take()
        with saver.lock:
            calls = [threading.Thread(target=saver.put_writes,
                                      args=(head2, [("obj", k)], f"t{k}", "~p")) for k in range(6)]
            for c in calls:
                c.start()
            while len(saver._batch._queue) < 6:
                time.sleep(0.01)
        for c in calls:
            c.join(30)
        assert len(_batched_statements(rec)) == 1
        tup2 = saver.get_tuple(head2)
        assert tup2 is not None and tup2.pending_writes is not None
        assert len(tup2.pending_writes) == 6


async def test_async_queued_put_writes_run_as_one_statement(dsn: str) -> None:
    async with AsyncDeltaPostgresSaver.from_conn_string(dsn) as saver:
        head = (await put_chain(Uniform(saver), "abatch", 2))[-1]
        async with saver.lock:  # the connection is busy: the calls queue
            tasks = [asyncio.ensure_future(saver.aput_writes(head, [("obj", k)], f"t{k}", "~p"))
                     for k in range(6)]
            assert saver._batch is not None
            while len(saver._batch._queue) < 6:
                await asyncio.sleep(0.01)
        await asyncio.gather(*tasks)
        tup = await saver.aget_tuple(head)
        assert tup is not None and tup.pending_writes is not None
        assert sorted(t for t, _, _ in tup.pending_writes) == [
            f"t{k}" for k in range(6)
        ]
