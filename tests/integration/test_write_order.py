"""One saver runs its own put / put_writes of a thread and namespace one at a time.

Every put and put_writes locks the namespace's row of ``checkpoint_epochs`` until its
commit (migrations/0006), so two of them on one namespace at once make the second wait
in the database for the first one's commit (measured by ``langgraph-delta-pg bench
--only load``: most of our statement time under concurrent sessions). The saver orders
its own calls instead (_ops.write.namespace_key): a put_writes after the puts and put_writes
running there, a put after the put_writes. Calls on other namespaces still run at once,
and every write lands, as on the official saver.
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
    """Counts the calls running at once per thread id (the most seen)."""

    def __init__(self) -> None:
        self.now: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.most_all = 0  # calls running at once, all threads together
        self.lock = threading.Lock()

    def enter(self, thread_id: str) -> None:
        with self.lock:
            self.now[thread_id] += 1
            self.most[thread_id] = max(self.most[thread_id], self.now[thread_id])
            self.most_all = max(self.most_all, sum(self.now.values()))

    def leave(self, thread_id: str) -> None:
        with self.lock:
            self.now[thread_id] -= 1


def _thread_of(op: Any) -> str:
    return str(op.gi_frame.f_locals["config"]["configurable"]["thread_id"])


class _SyncProbe(DeltaPostgresSaver):
    overlap: _Overlap
    dsn_for_test: str

    def _run(self, op: Any, *, atomic: bool = False) -> Any:
        if op.__name__ not in ("_op_put", "_put_writes"):
            return super()._run(op, atomic=atomic)
        tid = _thread_of(op)
        self.overlap.enter(tid)
        try:
            out = super()._run(op, atomic=atomic)
            time.sleep(HOLD_S)
            return out
        finally:
            self.overlap.leave(tid)


class _AsyncProbe(AsyncDeltaPostgresSaver):
    overlap: _Overlap
    dsn_for_test: str

    async def _run(self, op: Any, *, atomic: bool = False) -> Any:
        if op.__name__ not in ("_op_put", "_put_writes"):
            return await super()._run(op, atomic=atomic)
        tid = _thread_of(op)
        self.overlap.enter(tid)
        try:
            out = await super()._run(op, atomic=atomic)
            await asyncio.sleep(HOLD_S)
            return out
        finally:
            self.overlap.leave(tid)


def _writes(n: int) -> list[tuple[str, list[tuple[str, Any]]]]:
    return [(f"task{k}", [("obj", k), ("num", 100 + k)]) for k in range(n)]


def _child(k: int) -> tuple[Any, Any, Any]:
    return make_checkpoint({"num": k}, {"num": f"{k:032}.0"}), {"source": "loop", "step": k}, {}


def _pending(tup: Any) -> list[tuple[str, str, Any]]:
    assert tup is not None
    return sorted((t, ch, v) for t, ch, v in tup.pending_writes)


async def _check(saver: Any, heads: dict[str, Any]) -> None:
    # one call at a time on each thread's namespace, while the two threads ran at once
    assert all(saver.overlap.most[t] == 1 for t in heads)
    assert saver.overlap.most_all >= 2
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
        saver.overlap.most.clear()
        saver.overlap.most_all = 0
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
        saver.overlap.most.clear()
        saver.overlap.most_all = 0
        calls: list[Any] = []
        for (task, w) in _writes(6):
            calls += [saver.aput_writes(heads[t], w, task, "~p") for t in heads]
        calls += [saver.aput(heads[t], *_child(9)) for t in heads]
        await asyncio.gather(*calls)
        await _check(saver, heads)
