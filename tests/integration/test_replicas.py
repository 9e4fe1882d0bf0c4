"""The routing saver on a real primary and a real streaming hot standby (tests/plugins/
standby.py): every answer it gives equals the primary's, with replay paused on purpose
(the two traps), a standby stopped mid-run, a thread deleted while the standby lags, a
recovery conflict cancelling a query on the standby, and a generated workload with lag.

Each test also shows that the replica did answer when it could (the routing counters),
and, for the traps, that the replica read alone would have given a wrong answer (so the
trap really was set)."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver
from langgraph_delta_postgres._local.standby import Standby
from langgraph_delta_postgres._local.workloads import build_graph, user_input
from langgraph_delta_postgres.replicas import (
    READ_AFTER_KEY,
    AsyncRoutingSaver,
    RoutingSaver,
    _guard,
    parse_token,
)
from tests.graph._util import canon, canon_history
from tests.integration._helpers import cfg, make_checkpoint

WORKLOAD = "coding_a"


def tup(t: CheckpointTuple | None) -> Any:
    if t is None:
        return None
    return canon((t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes))


@pytest.fixture
def primary(dsn: str) -> Iterator[DeltaPostgresSaver]:
    """A plain saver on the primary: the reference every routed answer is compared to."""
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as s:
        yield s


@pytest.fixture
def router(dsn: str, replica_dsn: str) -> Iterator[RoutingSaver]:
    with RoutingSaver.from_conn_string(dsn, replicas=[replica_dsn], pool_size=2,
                                       retry_after=0.5) as r:
        yield r


@pytest.fixture
def reader(dsn: str, replica_dsn: str) -> Iterator[RoutingSaver]:
    """A second routing saver: another process that wrote nothing."""
    with RoutingSaver.from_conn_string(dsn, replicas=[replica_dsn], pool_size=2,
                                       retry_after=0.5) as r:
        yield r


@pytest.fixture
def patient(dsn: str, replica_dsn: str) -> Iterator[RoutingSaver]:
    """A routing saver whose guard waits up to 0.4 s for the standby, for the tests that
    expect a caught-up standby to answer a latest read: the floor is the cluster's insert
    position, which the other tests of the run (other databases, the other xdist worker)
    move on, and a standby on a loaded 2-core machine can lag it by more than the default
    50 ms (seen on a loaded run: 'behind'). Below the test standby's
    max_standby_streaming_delay (500 ms): a guard that waits holds its snapshot, and a
    replayed cleanup record cancels it after that delay ('conflict', seen with 2 s)."""
    with RoutingSaver.from_conn_string(dsn, replicas=[replica_dsn], pool_size=2,
                                       retry_after=0.5, replica_wait=0.4,
                                       replica_query_timeout=10) as r:
        yield r


def _from_replica(r: RoutingSaver, read: Any, tries: int = 3) -> Any:
    """``read()``, asserting that the replica answered it within ``tries``: a caught-up
    standby may still refuse one read to a recovery conflict (the primary's autovacuum,
    replayed, cancels a standby query: 'conflict'), which the router rightly answers
    from the primary; what is asserted is that the replica answers when it can."""
    for _ in range(tries):
        before = r.routing_stats().replica_reads
        got = read()
        if r.routing_stats().replica_reads > before:
            return got
    raise AssertionError(f"the replica answered none of {tries} reads: {r.routing_stats()}")


def _chain(saver: Any, thread: str, n: int, parent: RunnableConfig | None = None,
           writes: bool = True) -> list[RunnableConfig]:
    """``n`` checkpoints of one thread, each with a write of the channel ``log`` (a
    DeltaChannel-style history) and of a blob channel; returns their configs."""
    out = []
    cfg_ = parent or cfg(thread)
    versions: dict[str, Any] = {}
    for i in range(n):
        vals = {"obj": {"i": i, "pad": "x" * 50}}
        nv = {}
        for k in vals:
            versions[k] = saver.get_next_version(versions.get(k), None)
            nv[k] = versions[k]
        cp = make_checkpoint(vals, dict(versions))
        cfg_ = saver.put(cfg_, cp, {"source": "loop", "step": i}, nv)
        if writes:
            saver.put_writes(cfg_, [("log", f"w{i}"), ("obj", {"j": i})], f"task-{i}")
        out.append(cfg_)
    return out


def _raw_replica(replica_dsn: str) -> Any:
    return DeltaPostgresSaver.from_conn_string(replica_dsn, cache_bytes=0)


# ---------------------------------------------------------------------------- the traps


def test_trap1_history_of_a_checkpoint_the_standby_lacks(
    router: RoutingSaver, reader: RoutingSaver, primary: DeltaPostgresSaver,
    standby: Standby, replica_dsn: str,
) -> None:
    chain = _chain(router, "t1", 5)
    standby.catch_up()
    standby.pause()
    more = _chain(router, "t1", 3, parent=chain[-1])
    target = more[-1]
    want = canon_history(primary.get_delta_channel_history(config=target, channels=["log"]))
    assert want["log"]["writes"], "the primary has a history for it"
    with _raw_replica(replica_dsn) as raw:  # the trap: the standby alone reads it as empty
        assert canon_history(raw.get_delta_channel_history(config=target, channels=["log"])) \
            != want
    for r in (reader, router):
        got = r.get_delta_channel_history(config=target, channels=["log"])
        assert canon_history(got) == want
    assert reader.routing_stats().replica_reads == 0
    assert reader.routing_stats().replica_misses == {"absent": 1}
    # a checkpoint the standby has: its history is served there, and equals
    old = chain[-1]
    want_old = canon_history(primary.get_delta_channel_history(config=old, channels=["log"]))
    got_old = reader.get_delta_channel_history(config=old, channels=["log"])
    assert canon_history(got_old) == want_old
    assert reader.routing_stats().replica_reads == 1


def test_trap2_pending_writes_of_a_head_checkpoint(
    router: RoutingSaver, reader: RoutingSaver, primary: DeltaPostgresSaver,
    standby: Standby, replica_dsn: str, patient: RoutingSaver,
) -> None:
    chain = _chain(router, "t2", 4, writes=False)
    head = chain[-1]
    router.put_writes(head, [("log", "first")], "task-a")
    standby.catch_up()
    standby.pause()
    router.put_writes(head, [("log", "second")], "task-b")  # the standby lacks it
    want = tup(primary.get_tuple(head))
    head_tup = primary.get_tuple(head)
    assert head_tup is not None and head_tup.pending_writes is not None
    assert len(head_tup.pending_writes) == 2
    with _raw_replica(replica_dsn) as raw:  # the trap: fewer writes on the standby
        assert tup(raw.get_tuple(head)) != want
    assert tup(reader.get_tuple(head)) == want
    assert reader.routing_stats().primary_reads.get("replica_miss") == 1
    assert reader.routing_stats().replica_misses == {"head": 1}
    # the checkpoint before it has a child: its row and writes are final, read there
    sealed = chain[-2]
    assert tup(reader.get_tuple(sealed)) == tup(primary.get_tuple(sealed))
    assert reader.routing_stats().replica_reads == 1
    # the writer itself: the head by id and the latest, on the primary while behind
    assert tup(router.get_tuple(head)) == want
    assert tup(router.get_tuple(cfg("t2"))) == tup(primary.get_tuple(cfg("t2")))
    assert router.routing_stats().replica_reads == 0
    standby.resume()
    standby.catch_up()
    # caught up: the replica answers (a router that waits for it: see `patient`)
    want_latest = tup(primary.get_tuple(cfg("t2")))
    assert _from_replica(patient, lambda: tup(patient.get_tuple(cfg("t2")))) == want_latest


def test_history_page_with_a_branch_head_the_standby_lacks_writes_of(
    router: RoutingSaver, reader: RoutingSaver, primary: DeltaPostgresSaver,
    standby: Standby, replica_dsn: str,
) -> None:
    """A page of older checkpoints can hold the head of an abandoned branch (a fork made
    from an earlier checkpoint): it has no child, so its pending writes are not final.
    With replay paused, a write to it; the page read on the standby alone lacks it, the
    routing saver's page equals the primary's."""
    chain = _chain(router, "t8", 5, writes=False)
    fork = _chain(router, "t8", 1, parent=chain[2], writes=False)[0]  # child of chain[2]
    standby.catch_up()
    standby.pause()
    router.put_writes(chain[4], [("log", "resumed")], "task-late")  # the old branch's head
    want = [tup(x) for x in primary.list(cfg("t8"), before=fork, limit=3)]
    assert any(len(x.pending_writes or ()) for x in primary.list(cfg("t8"), before=fork, limit=3))
    with _raw_replica(replica_dsn) as raw:  # the trap: the page without the write
        assert [tup(x) for x in raw.list(cfg("t8"), before=fork, limit=3)] != want
    assert [tup(x) for x in reader.list(cfg("t8"), before=fork, limit=3)] == want
    assert reader.routing_stats().replica_reads == 0
    assert reader.routing_stats().replica_misses == {"unsealed_page": 1}
    # a page of sealed checkpoints only: the standby answers
    assert [tup(x) for x in reader.list(cfg("t8"), before=chain[3], limit=2)] == \
        [tup(x) for x in primary.list(cfg("t8"), before=chain[3], limit=2)]
    assert reader.routing_stats().replica_reads == 1


# ---------------------------------------------------------------- read your writes, tokens


def test_latest_reads_and_tokens_across_processes(
    router: RoutingSaver, patient: RoutingSaver, primary: DeltaPostgresSaver,
    standby: Standby,
) -> None:
    reader = patient
    _chain(router, "t3", 3)
    standby.catch_up()
    # another process without a token: the latest on a replica that has replayed past
    # the primary's position when the read began (asked in one statement)
    want0 = tup(primary.get_tuple(cfg("t3")))
    assert _from_replica(reader, lambda: tup(reader.get_tuple(cfg("t3")))) == want0
    standby.pause()
    _chain(router, "t3", 1, parent=router.get_tuple(cfg("t3")).config)  # type: ignore[union-attr]
    # behind: the primary answers, with or without a token
    served = reader.routing_stats().replica_reads
    # (counted from here: the caught-up read above may have taken more than one try)
    behind = reader.routing_stats().replica_misses.get("behind", 0)
    assert tup(reader.get_tuple(cfg("t3"))) == tup(primary.get_tuple(cfg("t3")))
    assert reader.routing_stats().replica_misses.get("behind", 0) == behind + 1
    _chain(router, "t3", 2, parent=router.get_tuple(cfg("t3")).config)  # type: ignore[union-attr]
    token = router.token()
    parse_token(token)
    want = tup(primary.get_tuple(cfg("t3")))
    with reader.read_after(token):  # behind the token: the primary answers
        assert tup(reader.get_tuple(cfg("t3"))) == want
    conf = cfg("t3")
    conf["configurable"][READ_AFTER_KEY] = token
    assert tup(reader.get_tuple(conf)) == want
    assert reader.routing_stats().replica_reads == served  # never the lagging standby
    standby.resume()
    standby.catch_up()
    with reader.read_after(token):  # replayed past the token: the replica answers
        assert _from_replica(reader, lambda: tup(reader.get_tuple(cfg("t3")))) == want
        page = _from_replica(reader, lambda: [tup(t) for t in reader.list(cfg("t3"), limit=3)])
    assert page == [tup(t) for t in primary.list(cfg("t3"), limit=3)]
    with pytest.raises(ValueError):
        parse_token("0/0")


def test_get_tuple_and_its_history_come_from_one_server(
    patient: RoutingSaver, primary: DeltaPostgresSaver, standby: Standby,
) -> None:
    """The graph's load: get_tuple of the latest, then the history of that checkpoint,
    answered by the server that answered the tuple (its prefetch: one statement)."""
    router = patient
    graph = build_graph(WORKLOAD, router)
    ref = build_graph(WORKLOAD, primary)
    conf: RunnableConfig = {"configurable": {"thread_id": "t4"}}
    for turn in range(4):
        graph.invoke(user_input(WORKLOAD, turn), conf)
    standby.catch_up()
    for _ in range(3):  # a recovery conflict may send one load to the primary (as it should)
        before = router.routing_stats()
        state = graph.get_state(conf)
        assert canon(state.values) == canon(ref.get_state(conf).values)
        after = router.routing_stats()
        if after.replica_reads == before.replica_reads + 2:  # the tuple and its history
            break
    else:
        raise AssertionError(f"no load served by the replica: {router.routing_stats()}")
    replica = router.replicas[0]
    assert replica.stats().walk.prefetch_hits >= 1


# ---------------------------------------------------------------------------- faults


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_write_racing_a_read_on_one_saver_never_lowers_its_floor(
    dsn: str, replica_dsn: str, primary: DeltaPostgresSaver, standby: Standby, kind: str,
) -> None:
    """One routing saver writes a thread while it reads the thread's latest checkpoint
    (a graph's background writes beside a get_state): every read began after another
    worker's turn had committed, so every read must see it, whatever the interleaving
    of the saver's own write with its read. Before, a read that met the write half
    done saw the thread's floor pending and let a replica that lacked the other
    worker's turn answer (182 of 300 stale on the async saver)."""
    chain = _chain(primary, "race", 3)
    standby.catch_up()
    standby.pause()  # the standby lacks everything below
    other = primary.put(chain[-1], make_checkpoint({"obj": {"i": 99}}, {"obj": "99"}),
                        {"source": "loop", "step": 99}, {"obj": "99"})  # another worker
    want = other["configurable"]["checkpoint_id"]
    seen: list[str | None] = []

    def reads(r: Any) -> None:
        for _ in range(60):
            got = r.get_tuple(cfg("race"))
            seen.append(got.config["configurable"]["checkpoint_id"] if got else None)

    def writes(r: Any) -> None:
        for i in range(60):
            r.put_writes(other, [("log", f"mine{i}")], f"mine-{i}")

    try:
        if kind == "sync":
            with RoutingSaver.from_conn_string(dsn, replicas=[replica_dsn],
                                               pool_size=4) as r:
                r.put_writes(chain[-1], [("log", "own")], "own")  # a write of its own first
                ts = [threading.Thread(target=f, args=(r,)) for f in (reads, writes, reads)]
                for th in ts:
                    th.start()
                for th in ts:
                    th.join(120)
        else:
            async def main() -> None:
                async with AsyncRoutingSaver.from_conn_string(
                    dsn, replicas=[replica_dsn], pool_size=4
                ) as r:
                    await r.aput_writes(chain[-1], [("log", "own")], "own")

                    async def areads() -> None:
                        for _ in range(60):
                            got = await r.aget_tuple(cfg("race"))
                            seen.append(got.config["configurable"]["checkpoint_id"]
                                        if got else None)

                    async def awrites() -> None:
                        for i in range(60):
                            await r.aput_writes(other, [("log", f"mine{i}")], f"mine-{i}")

                    await asyncio.gather(areads(), awrites(), areads())

            asyncio.run(main())
    finally:
        standby.resume()
    assert len(seen) == 120
    stale = [s for s in seen if s != want]
    assert not stale, f"{len(stale)} of {len(seen)} latest reads older than the read's start"


def test_a_user_pool_in_repeatable_read_never_reads_the_guards_snapshot(
    primary: DeltaPostgresSaver, standby: Standby, replica_dsn: str,
) -> None:
    """A replica pool the caller made (psycopg's default: not autocommit) on a session
    whose default isolation is REPEATABLE READ: the guard must not open a transaction
    whose snapshot, taken before its wait, then serves the read. Replay resumes while
    the guard waits; every routed latest read has the write made before it began.
    (On the first version of this design, 5 of 5 reads missed it: a reviewer's find.)"""
    from psycopg_pool import ConnectionPool

    head = _chain(primary, "rr", 1, writes=False)[-1]
    standby.catch_up()
    with ConnectionPool(replica_dsn, min_size=1, max_size=2, open=True, kwargs={
        "options": "-c default_transaction_isolation=repeatable\\ read"}) as pool:
        r = RoutingSaver(primary, [pool], replica_wait=0.4, replica_query_timeout=10)
        try:
            assert r.get_tuple(cfg("rr")) is not None
            for trial in range(4):
                standby.pause()
                primary.put_writes(head, [("log", f"w{trial}")], f"task-{trial}")
                threading.Timer(0.05, standby.resume).start()
                got = r.get_tuple(cfg("rr"))
                want = primary.get_tuple(cfg("rr"))
                assert got is not None and want is not None
                assert got.pending_writes is not None and want.pending_writes is not None
                assert len(got.pending_writes) == len(want.pending_writes) == trial + 1
                standby.catch_up()
            assert r.routing_stats().replica_reads >= 1
        finally:
            r.close()


def test_thread_deleted_on_the_primary_while_the_standby_lags(
    router: RoutingSaver, reader: RoutingSaver, primary: DeltaPostgresSaver,
    standby: Standby,
) -> None:
    chain = _chain(router, "t5", 5)
    standby.catch_up()
    standby.pause()
    router.delete_thread("t5")  # raises the router's maintenance floor
    token = router.token()
    for r, ctx in ((router, None), (reader, token)):
        with r.read_after(ctx):
            assert r.get_tuple(chain[1]) is None
            assert r.get_tuple(cfg("t5")) is None
            assert list(r.list(cfg("t5"), before=chain[3], limit=2)) == []
            assert canon_history(r.get_delta_channel_history(config=chain[3], channels=["log"])) \
                == {"log": {"writes": []}}
    assert primary.get_tuple(chain[1]) is None
    assert router.routing_stats().replica_reads == 0
    assert reader.routing_stats().replica_reads == 0
    # the latest: the primary's head statement finds no checkpoint ("empty"); the rest
    # is behind the router's maintenance floor, or the reader's token
    assert router.routing_stats().replica_misses == {"behind": 3}
    assert reader.routing_stats().replica_misses == {"behind": 3}
    assert router.routing_stats().primary_reads["empty"] == 1


def test_copy_thread_while_the_standby_lags(
    router: RoutingSaver, reader: RoutingSaver, primary: DeltaPostgresSaver,
    standby: Standby,
) -> None:
    """copy_thread to a thread the router had written before (so an old floor of its own
    would have let a lagging standby answer it): the copy is read whole, by the router
    and by another process, while the standby lacks it."""
    _chain(router, "src", 4)
    _chain(router, "dst", 2)  # the target had a history of its own, replaced below
    router.delete_thread("dst")
    standby.catch_up()
    standby.pause()
    router.copy_thread("src", "dst")
    want = tup(primary.get_tuple(cfg("dst")))
    assert want is not None
    for r in (router, reader):
        assert tup(r.get_tuple(cfg("dst"))) == want
        assert [tup(x) for x in r.list(cfg("dst"))] == [tup(x) for x in primary.list(cfg("dst"))]
    assert router.routing_stats().replica_reads == 0
    assert reader.routing_stats().replica_reads == 0


def test_standby_stopped_mid_run(
    router: RoutingSaver, reader: RoutingSaver, primary: DeltaPostgresSaver, standby: Standby,
) -> None:
    """A graph runs and a UI pages its history while the standby is stopped: no error,
    the same answers; the replica is left alone awhile, then used again once back."""
    graph = build_graph(WORKLOAD, router)
    ui = build_graph(WORKLOAD, reader)  # the UI: another process, no token
    ref = build_graph(WORKLOAD, primary)
    conf: RunnableConfig = {"configurable": {"thread_id": "t6"}}
    for turn in range(3):
        graph.invoke(user_input(WORKLOAD, turn), conf)
    standby.catch_up()

    def pages() -> list[Any]:
        return [canon((s.values, s.next, s.config)) for s in ui.get_state_history(conf, limit=4)]

    def ref_pages() -> list[Any]:
        return [canon((s.values, s.next, s.config)) for s in ref.get_state_history(conf, limit=4)]

    assert pages() == ref_pages()
    served = reader.routing_stats().replica_reads
    assert served > 0
    standby.stop()
    for turn in range(3, 6):
        graph.invoke(user_input(WORKLOAD, turn), conf)
        assert pages() == ref_pages()
        assert canon(graph.get_state(conf).values) == canon(ref.get_state(conf).values)
    stats = reader.routing_stats()
    assert stats.primary_reads.get("down", 0) > 0
    standby.start()
    standby.catch_up()
    deadline = time.monotonic() + 60  # the pool reconnects with its own backoff
    while reader.routing_stats().replica_reads == stats.replica_reads:
        assert time.monotonic() < deadline, "the replica was never used again"
        time.sleep(0.2)
        assert pages() == ref_pages()


def _flush_wal(dsn: str) -> None:
    """Send the WAL of an open transaction's lock to the standby now: a commit (of a
    transaction with an xid) flushes the WAL before it, the lock's record included."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pg_current_xact_id()")


def test_recovery_conflict_cancels_the_standby_query(
    router: RoutingSaver, primary: DeltaPostgresSaver, standby: Standby, dsn: str,
    replica_dsn: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A query on the standby holds a lock that the replay of an ACCESS EXCLUSIVE lock
    taken on the primary needs: after max_standby_streaming_delay the standby cancels it
    ("conflict with recovery"); the routing saver answers from the primary. (The
    reader's replica sessions wait for locks longer than the default lock_timeout, so
    that its query is still waiting when the conflict comes.)"""
    monkeypatch.setattr(_guard, "LOCK_TIMEOUT_S", 30.0)
    reader = RoutingSaver.from_conn_string(dsn, replicas=[replica_dsn], pool_size=2,
                                           retry_after=0.5, replica_query_timeout=30)
    with reader as r:
        _conflict(r, router, primary, standby, dsn, replica_dsn)


def test_a_lock_held_by_the_replay_costs_a_read_its_lock_timeout(
    router: RoutingSaver, reader: RoutingSaver, primary: DeltaPostgresSaver,
    standby: Standby, dsn: str,
) -> None:
    """A lock taken on the primary is held on the standby until its end is replayed
    (a recovery_min_apply_delay postpones it; here, replay paused just after the lock):
    a routed read waits for it at most the replica sessions' lock_timeout, then the
    primary answers (before, such a read waited as long as the lock was held)."""
    chain = _chain(router, "t7b", 3)
    standby.catch_up()
    want = tup(primary.get_tuple(chain[1]))
    hold = psycopg.connect(dsn)
    hold.execute("LOCK TABLE checkpoints IN ACCESS EXCLUSIVE MODE")
    _flush_wal(dsn)
    standby.catch_up()  # the standby holds the lock
    standby.pause()
    hold.rollback()  # released on the primary; on the standby, not before replay resumes
    hold.close()
    try:
        started = time.monotonic()
        assert tup(reader.get_tuple(chain[1])) == want
        took = time.monotonic() - started
    finally:
        standby.resume()
    assert took < _guard.LOCK_TIMEOUT_S + 1.5, took
    assert reader.routing_stats().replica_misses == {"conflict": 1}
    assert reader.routing_stats().replica_reads == 0


def _conflict(
    reader: RoutingSaver, router: RoutingSaver, primary: DeltaPostgresSaver,
    standby: Standby, dsn: str, replica_dsn: str,
) -> None:
    chain = _chain(router, "t7", 4)
    standby.catch_up()
    want = tup(primary.get_tuple(chain[1]))
    with psycopg.connect(replica_dsn, autocommit=True) as sc:
        before = sc.execute(
            "SELECT confl_lock + confl_deadlock + confl_snapshot + confl_bufferpin "
            "FROM pg_stat_database_conflicts WHERE datname = current_database()"
        ).fetchone()[0]  # type: ignore[index]
    hold = psycopg.connect(dsn)  # holds checkpoint_writes: the standby's query waits there
    hold.execute("LOCK TABLE checkpoint_writes IN ACCESS EXCLUSIVE MODE")
    _flush_wal(dsn)
    standby.catch_up()
    result: dict[str, Any] = {}

    def read() -> None:
        try:
            result["got"] = tup(reader.get_tuple(chain[1]))
        except BaseException as e:  # noqa: BLE001  # reported below
            result["error"] = e

    t = threading.Thread(target=read)
    t.start()
    # wait until the standby query holds checkpoints and waits for checkpoint_writes
    deadline = time.monotonic() + 60
    with psycopg.connect(replica_dsn, autocommit=True) as sc:
        while True:
            row = sc.execute(
                "SELECT count(*) FROM pg_locks AS l JOIN pg_stat_activity AS a USING (pid) "
                "WHERE a.datname = current_database() AND a.wait_event_type = 'Lock' "
                "AND l.granted AND l.relation = 'checkpoints'::regclass"
            ).fetchone()
            if row is not None and row[0] > 0:
                break
            assert time.monotonic() < deadline, "the standby query never waited there"
            time.sleep(0.02)
    conflict = psycopg.connect(dsn)
    conflict.execute("LOCK TABLE checkpoints IN ACCESS EXCLUSIVE MODE")  # replayed: conflict
    _flush_wal(dsn)
    # max_standby_streaming_delay is 500 ms on the test standby: wait for the cancel
    # (the routing saver counts it as soon as the standby's error reaches it)
    deadline = time.monotonic() + 60
    while not reader.routing_stats().replica_misses and time.monotonic() < deadline:
        time.sleep(0.05)
    conflict.rollback()
    hold.rollback()
    t.join(30)
    conflict.close()
    hold.close()
    assert "error" not in result, result.get("error")
    assert result["got"] == want
    # the standby's own count (its backends report it when idle: within about 10 s)
    deadline = time.monotonic() + 30
    with psycopg.connect(replica_dsn, autocommit=True) as sc:
        while True:
            sc.execute("SELECT pg_stat_clear_snapshot()")
            after = sc.execute(
                "SELECT confl_lock + confl_deadlock + confl_snapshot + confl_bufferpin "
                "FROM pg_stat_database_conflicts WHERE datname = current_database()"
            ).fetchone()[0]  # type: ignore[index]
            if after > before or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    assert after > before, "no recovery conflict happened"
    assert reader.routing_stats().primary_reads.get("replica_miss") == 1
    assert reader.routing_stats().replica_misses == {"conflict": 1}


# ---------------------------------------------------------------------------- differential


def test_every_routed_answer_equals_the_primarys(
    router: RoutingSaver, reader: RoutingSaver, primary: DeltaPostgresSaver,
    standby: Standby,
) -> None:
    """A generated workload: graph turns on several threads through the routing saver,
    replay paused and resumed at random; after each step, every read (latest and by id,
    histories, history pages, state and state history through the graph), by the writer,
    by another process without a token and by one with a token, is compared to the
    primary's, with no write in between. 0 differences; the replica answered some."""
    rng = random.Random(26)
    graph = build_graph(WORKLOAD, router)
    rgraph = build_graph(WORKLOAD, reader)
    ref = build_graph(WORKLOAD, primary)
    threads = [f"d{i}" for i in range(3)]
    turns = dict.fromkeys(threads, 0)
    paused = False
    compared = 0
    for step in range(24):
        t = rng.choice(threads)
        graph.invoke(user_input(WORKLOAD, turns[t]), {"configurable": {"thread_id": t}})
        turns[t] += 1
        if rng.random() < 0.3:
            (standby.resume if paused else standby.pause)()
            paused = not paused
        if step % 5 == 4:
            router.delete_thread(t) if rng.random() < 0.2 else None
        token = router.token() if rng.random() < 0.5 else None
        for th in threads:
            conf: RunnableConfig = {"configurable": {"thread_id": th, "checkpoint_ns": ""}}
            want_hist = [canon((s.values, s.next, s.config, s.parent_config))
                         for s in ref.get_state_history(conf)]
            all_tuples = list(primary.list(conf))
            for g, who in ((graph, router), (rgraph, reader)):
                with who.read_after(token if who is reader else None):
                    assert canon(g.get_state(conf).values) == canon(ref.get_state(conf).values)
                    got = [canon((s.values, s.next, s.config, s.parent_config))
                           for s in g.get_state_history(conf)]
                    assert got == want_hist
                    for pg in range(0, len(all_tuples), 3):
                        before = all_tuples[pg].config
                        assert [tup(x) for x in who.list(conf, before=before, limit=3)] == \
                            [tup(x) for x in primary.list(conf, before=before, limit=3)]
                    for x in all_tuples[::2]:
                        assert tup(who.get_tuple(x.config)) == tup(primary.get_tuple(x.config))
                        assert canon_history(who.get_delta_channel_history(
                            config=x.config, channels=["messages", "files"])) == canon_history(
                            primary.get_delta_channel_history(
                                config=x.config, channels=["messages", "files"]))
                        compared += 2
    standby.resume()
    assert compared > 100
    assert router.routing_stats().replica_reads > 0
    assert reader.routing_stats().replica_reads > 0
    misses = {k for s in (router, reader) for k in s.routing_stats().primary_reads}
    assert "replica_miss" in misses, "the lag never sent a read back to the primary"


# ---------------------------------------------------------------------------- async


def test_async_routing_saver(dsn: str, replica_dsn: str, standby: Standby) -> None:
    async def main() -> None:
        async with AsyncRoutingSaver.from_conn_string(
            dsn, replicas=[replica_dsn], pool_size=2
        ) as r, AsyncRoutingSaver.from_conn_string(
            dsn, replicas=[replica_dsn], pool_size=2
        ) as r2, AsyncDeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as p:
            graph = build_graph(WORKLOAD, r)
            ref = build_graph(WORKLOAD, p)
            conf: RunnableConfig = {"configurable": {"thread_id": "a1"}}
            for turn in range(3):
                await graph.ainvoke(user_input(WORKLOAD, turn), conf)
            await asyncio.to_thread(standby.catch_up)
            tuples = [x async for x in p.alist(conf)]
            await asyncio.to_thread(standby.pause)
            await graph.ainvoke(user_input(WORKLOAD, 3), conf)
            head = await p.aget_tuple(conf)
            assert head is not None
            served = r.routing_stats().replica_reads  # the runs' own reads
            # trap 1 and 2 on the async path: the new head by id, its history
            assert tup(await r.aget_tuple(head.config)) == tup(head)
            assert canon_history(await r.aget_delta_channel_history(
                config=head.config, channels=["messages"])) == canon_history(
                await p.aget_delta_channel_history(config=head.config, channels=["messages"]))
            assert r.routing_stats().replica_reads == served
            # sealed checkpoints, the writer and another process alike: on the replica,
            # equal (final: they have a child there)
            for x in tuples[1:]:
                assert tup(await r2.aget_tuple(x.config)) == tup(await p.aget_tuple(x.config))
                assert tup(await r.aget_tuple(x.config)) == tup(await p.aget_tuple(x.config))
            assert r2.routing_stats().replica_reads == len(tuples) - 1
            assert r.routing_stats().replica_reads == served + len(tuples) - 1
            served = r.routing_stats().replica_reads
            assert canon((await graph.aget_state(conf)).values) == \
                canon((await ref.aget_state(conf)).values)
            hist = [canon((s.values, s.config)) async for s in graph.aget_state_history(conf)]
            want = [canon((s.values, s.config)) async for s in ref.aget_state_history(conf)]
            assert hist == want
            token = await r.atoken()
            await asyncio.to_thread(standby.resume)
            await asyncio.to_thread(standby.catch_up)
            with r.read_after(token):
                assert tup(await r.aget_tuple(conf)) == tup(await p.aget_tuple(conf))
            assert r.routing_stats().replica_reads > served

    asyncio.run(main())


def test_token_is_an_lsn_string(router: RoutingSaver) -> None:
    token = router.token()
    assert token.startswith("lgdp-lsn:")
    assert parse_token(token) > 0


def test_bench_section_runs(dsn: str, replica_dsn: str, standby: Standby) -> None:
    """``bench --only replicas`` at its tiny scale, on the test database and standby: it
    completes, the readers' pages were served, and with the replica the readers' reads
    went to it (the figures themselves come from the bench, not from this test)."""
    from langgraph_delta_postgres.bench.replicas.section import run_replicas

    res = run_replicas(dsn, dsn, "tiny", lambda m: None, standby)
    (pair,) = res["rounds"]
    assert pair["primary"]["pages"] > 0 and pair["replica"]["pages"] > 0
    assert pair["replica"]["replica_reads"] > 0
    assert pair["primary"]["writer_turns"] > 0 and pair["replica"]["writer_turns"] > 0
    assert pair["replica"]["latest_reads"] > 0
    assert res["latency"]["page"]["ratio"] > 0 and res["latency"]["latest"]["ratio"] > 0
    assert res["latency"]["routing"]["replica_reads"] > 0
    assert res["turn_loss"]["turns"] == 8 and res["turn_loss"]["lost"] == 0
