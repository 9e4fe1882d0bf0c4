"""A replica behind a silent network partition: ``replica_query_timeout``.

The routing saver reaches the hot standby (tests/plugins/standby.py) through a loopback
TCP proxy (tests/integration/_partition.py). Once a read has been served by the replica
through it (so the replica's pool holds a live connection that goes through the proxy),
the proxy falls silent: it forwards nothing and closes nothing, so the kernel still ACKs
every byte and TCP keepalive sees a healthy peer. Only a timeout of the saver's own can
end a read then. With ``replica_query_timeout=1.0``:

* a read the replica would answer (``get_tuple`` by id of a checkpoint that has a child,
  by a saver that wrote nothing: routed, see docs/replicas.md), started after the proxy
  fell silent, returns the primary's answer in about 3 s (asserted: under 5 s), and the
  replica miss is counted (``timeout``, or ``down``);
* the replica is then left alone for ``retry_after``: the next reads go straight to the
  primary (no replica attempt, no new miss), each in under 0.5 s.

Sync (the constructor and ``from_conn_string``) and async. A read that hangs does not hang
the test: it runs in a thread (a task) that the test stops waiting for after
:data:`HANG_S`, and closing the proxy then ends it (EOF on its socket).
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver
from langgraph_delta_postgres._local.standby import Standby
from langgraph_delta_postgres.bench.proxy import upstream_of
from langgraph_delta_postgres.replicas import AsyncRoutingSaver, RoutingSaver
from tests.graph._util import canon
from tests.integration._helpers import cfg, make_checkpoint
from tests.integration._partition import PartitionProxy

T = TypeVar("T")

#: the replica read's own bound in these tests
QUERY_TIMEOUT = 1.0
#: the first read after the partition must be answered within this (~3 s expected)
FIRST_READ_S = 5.0
#: each later read (the replica left alone) within this
LATER_READ_S = 0.5
#: how long the test waits for a read before calling it hung
HANG_S = 20.0
#: long enough that every read of the test falls inside it
RETRY_AFTER = 120.0

pytestmark = pytest.mark.timeout(120)


def tup(t: CheckpointTuple | None) -> Any:
    if t is None:
        return None
    return canon((t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes))


def _chain(saver: DeltaPostgresSaver, thread: str, n: int) -> list[RunnableConfig]:
    """``n`` checkpoints of one thread, each with a pending write; their configs."""
    out = []
    conf: RunnableConfig = cfg(thread)
    versions: dict[str, Any] = {}
    for i in range(n):
        versions["obj"] = saver.get_next_version(versions.get("obj"), None)
        cp = make_checkpoint({"obj": {"i": i, "pad": "x" * 200}}, dict(versions))
        conf = saver.put(conf, cp, {"source": "loop", "step": i}, {"obj": versions["obj"]})
        saver.put_writes(conf, [("obj", {"j": i})], f"task-{i}")
        out.append(conf)
    return out


@pytest.fixture
def written(dsn: str, standby: Standby, replica_dsn: str) -> list[RunnableConfig]:
    """A thread of 8 checkpoints written by another saver, replayed on the standby: all
    but the last have a child there, so a reader without a floor reads them by id on
    the replica."""
    with DeltaPostgresSaver.from_conn_string(dsn) as w:
        chain = _chain(w, "part", 8)
    standby.catch_up()
    return chain


@pytest.fixture
def proxy(replica_dsn: str) -> Iterator[PartitionProxy]:
    with PartitionProxy(upstream_of(replica_dsn)) as p:
        yield p


def _timed(fn: Callable[[], T], proxy: PartitionProxy) -> tuple[T, float]:
    """(``fn()``, seconds it took), run in a thread; fails the test if it has not
    returned after HANG_S (closing the proxy then ends the read)."""
    box: dict[str, Any] = {}

    def run() -> None:
        t0 = time.monotonic()
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001  # re-raised in the test's thread
            box["error"] = e
        box["took"] = time.monotonic() - t0

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(HANG_S)
    if th.is_alive():
        proxy.close()
        th.join(10)
        pytest.fail(f"the read did not return in {HANG_S} s behind a silent replica (hung)")
    if "error" in box:
        raise box["error"]
    return box["value"], box["took"]


def _misses(s: RoutingSaver | AsyncRoutingSaver) -> int:
    return sum(s.routing_stats().replica_misses.values())


def _timed_out(s: RoutingSaver | AsyncRoutingSaver) -> int:
    m = s.routing_stats().replica_misses
    return m.get("timeout", 0) + m.get("down", 0)


# ---------------------------------------------------------------------------- sync


@pytest.fixture(params=["constructor", "from_conn_string"])
def router(
    request: pytest.FixtureRequest, dsn: str, replica_dsn: str, proxy: PartitionProxy
) -> Iterator[RoutingSaver]:
    """A routing saver whose one replica is the standby, reached through ``proxy``."""
    behind = proxy.dsn(replica_dsn)
    try:
        if request.param == "constructor":
            with DeltaPostgresSaver.from_conn_string(dsn, pool_size=2) as primary:
                r = RoutingSaver(primary, [behind], pool_size=2, retry_after=RETRY_AFTER,
                                 replica_query_timeout=QUERY_TIMEOUT)
                try:
                    yield r
                finally:
                    proxy.close()  # first: nothing of the saver waits on a silent socket
                    r.close()
        else:
            with RoutingSaver.from_conn_string(
                dsn, replicas=[behind], pool_size=2, retry_after=RETRY_AFTER,
                replica_query_timeout=QUERY_TIMEOUT,
            ) as r:
                try:
                    yield r
                finally:
                    proxy.close()
    finally:
        proxy.close()


def test_silent_replica_sync(
    router: RoutingSaver, written: list[RunnableConfig], dsn: str, proxy: PartitionProxy
) -> None:
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as ref:
        want = [tup(ref.get_tuple(c)) for c in written]
    # the replica answers through the proxy (its pool now holds a connection through it)
    assert tup(router.get_tuple(written[0])) == want[0]
    assert router.routing_stats().replica_reads == 1, router.routing_stats()
    proxy.silence()
    got, took = _timed(lambda: tup(router.get_tuple(written[1])), proxy)
    assert got == want[1]
    assert took < FIRST_READ_S, f"the first read behind the partition took {took:.2f} s"
    assert _timed_out(router) >= 1, router.routing_stats()
    misses = _misses(router)
    for i in range(2, 6):  # within retry_after: straight to the primary, fast
        got, took = _timed(functools.partial(lambda i: tup(router.get_tuple(written[i])), i), proxy)
        assert got == want[i]
        assert took < LATER_READ_S, f"read {i} took {took:.2f} s with the replica left alone"
    stats = router.routing_stats()
    assert _misses(router) == misses, stats  # no replica was tried again
    assert stats.replica_reads == 1, stats


# ---------------------------------------------------------------------------- async


async def _atimed(coro: Any, proxy: PartitionProxy) -> tuple[Any, float]:
    """The async twin of :func:`_timed`."""
    t0 = time.monotonic()
    task = asyncio.ensure_future(coro)
    done, _ = await asyncio.wait({task}, timeout=HANG_S)
    if not done:
        proxy.close()
        task.cancel()
        await asyncio.wait({task}, timeout=10)
        pytest.fail(f"the read did not return in {HANG_S} s behind a silent replica (hung)")
    return task.result(), time.monotonic() - t0


def test_silent_replica_async(
    dsn: str, replica_dsn: str, written: list[RunnableConfig], proxy: PartitionProxy
) -> None:
    async def main() -> None:
        async with AsyncRoutingSaver.from_conn_string(
            dsn, replicas=[proxy.dsn(replica_dsn)], pool_size=2, retry_after=RETRY_AFTER,
            replica_query_timeout=QUERY_TIMEOUT,
        ) as router, AsyncDeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as ref:
            try:
                want = [tup(await ref.aget_tuple(c)) for c in written]
                assert tup(await router.aget_tuple(written[0])) == want[0]
                assert router.routing_stats().replica_reads == 1, router.routing_stats()
                proxy.silence()
                got, took = await _atimed(router.aget_tuple(written[1]), proxy)
                assert tup(got) == want[1]
                assert took < FIRST_READ_S, f"the first read took {took:.2f} s"
                assert _timed_out(router) >= 1, router.routing_stats()
                misses = _misses(router)
                for i in range(2, 6):
                    got, took = await _atimed(router.aget_tuple(written[i]), proxy)
                    assert tup(got) == want[i]
                    assert took < LATER_READ_S, f"read {i} took {took:.2f} s"
                stats = router.routing_stats()
                assert _misses(router) == misses, stats
                assert stats.replica_reads == 1, stats
            finally:
                proxy.close()

    asyncio.run(main())
