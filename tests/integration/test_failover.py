"""A real failover: the primary crashes and its standby is promoted; the saver follows.

A cluster of our own (tests/plugins/cluster.py) is the primary P; S is a hot standby of
it (:func:`langgraph_delta_postgres._local.standby.standby_of`). The saver connects with
a multi-host DSN, ``host=<P>,<S> ... target_session_attrs=read-write``, as an
application does to follow a failover; ``pool_size=2`` and the default history cache.

To make the standby lack the last commits (asynchronous replication loses what the
standby had not received), S's WAL receiver is stopped before the last turn
(``primary_conninfo = ''``). The saver runs that turn on P and reads it, so its cache
holds it. Then P is crashed (``pg_ctl -m immediate stop``) and S promoted
(``pg_promote()``: timeline 2). After that, whatever the saver answers must be what a
fresh saver without a cache (``cache_bytes=0``) reads on S: states, state histories,
tuples and histories by id (of every checkpoint either server had), and a turn run after
the promotion must succeed. The first call on a pooled connection to the dead primary
may fail with ``psycopg.OperationalError``; the tests retry such a call once, and then
check that nothing partial was left: every thread's checkpoints on S form one chain from
its root, and every checkpoint is readable.

The saver: a ``DeltaPostgresSaver``; a ``RoutingSaver`` without replicas; one with S as
its replica (S stops being a standby: the primary answers).

``test_failover_during_live_runs``: graph turns run in a loop on two threads while P
crashes and S is promoted. Every run ends (returns or raises; none hangs), runs succeed
again after the promotion, and the state read through the saver then equals a fresh
uncached saver's on S.

``test_cache_after_failover_with_late_writes``: the cache case at the level of the
saver's API. A write added on P to a checkpoint that already had a child (allowed: see
docs/replicas.md), which S never received, is in the history the saver read and cached
below it; after the failover another worker adds its own late write there on S (so the
thread's late-write count, part of the cache's tokens, is the same on S as it was on P).
The histories read through the saver must be S's.

``test_a_run_across_the_failover_leaves_no_checkpoint_below_a_lost_one``: a run paused
in a node (deterministically) while S stops receiving, P crashes and S is promoted, then
resumed: it must either fail or leave S whole (no checkpoint whose parent S lacks; the
thread's earlier turns still in its state).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict, TypeVar

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.graph import END, START, StateGraph
from psycopg.conninfo import make_conninfo

from langgraph_delta_postgres import DeltaPostgresSaver, LostParentError, StaleServerError
from langgraph_delta_postgres._local.standby import Standby, standby_of
from langgraph_delta_postgres._local.workloads import build_graph, user_input
from langgraph_delta_postgres.replicas import RoutingSaver
from tests.graph._graphs import append_reducer
from tests.graph._util import canon, canon_history
from tests.integration._helpers import cfg, make_checkpoint
from tests.plugins.cluster import SUPERUSER, Cluster

T = TypeVar("T")

WORKLOAD = "coding_a"
CHANNELS = ["messages", "files"]
THREADS = ["f0", "f1", "f2"]
KINDS = ["saver", "router", "router_with_standby"]

pytestmark = pytest.mark.timeout(240)


@dataclass
class Pair:
    """P (a cluster of our own), S (a hot standby of it), the test database ``db``."""

    p: Cluster
    s: Standby
    db: str

    @property
    def p_dsn(self) -> str:
        return self.p.dsn_for(self.db)

    @property
    def s_dsn(self) -> str:
        return self.s.dsn_for(self.db)

    @property
    def multi_dsn(self) -> str:
        """Both servers; the one that accepts writes is used (libpq tries them in order)."""
        return make_conninfo(
            host=f"{self.p.directory},{self.s.directory}",
            port=f"{self.p.port},{self.s.plan.port}",
            dbname=self.db, user=SUPERUSER, target_session_attrs="read-write",
        )


@pytest.fixture
def pair(make_cluster: Callable[[], Cluster]) -> Iterator[Pair]:
    p = make_cluster()
    db = p.create_db()
    with standby_of(p.admin_dsn) as s:
        yield Pair(p, s, db)


@contextlib.contextmanager
def _saver(kind: str, pair: Pair) -> Iterator[DeltaPostgresSaver | RoutingSaver]:
    if kind == "saver":
        with DeltaPostgresSaver.from_conn_string(pair.multi_dsn, pool_size=2) as s:
            yield s
    elif kind == "router":
        with RoutingSaver.from_conn_string(pair.multi_dsn, replicas=[], pool_size=2) as r:
            yield r
    else:
        assert kind == "router_with_standby"
        with RoutingSaver.from_conn_string(
            pair.multi_dsn, replicas=[pair.s_dsn], pool_size=2
        ) as r:
            yield r


def _conf(thread: str, checkpoint_id: str | None = None) -> RunnableConfig:
    return cfg(thread, checkpoint_id=checkpoint_id)


# ---------------------------------------------------------------------------- servers


def _nudge(dsn: str) -> None:
    """A commit record on the primary, so that its insert position is past a record's end
    (a catch_up on an idle primary could otherwise wait for the next background record)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pg_current_xact_id()")


def _catch_up(pair: Pair) -> None:
    _nudge(pair.p.admin_dsn)
    pair.s.catch_up(timeout=60)


def _stop_receiving(s: Standby) -> None:
    """S receives no more WAL from P (it still serves reads and can be promoted)."""
    with s.admin() as c:
        c.execute("ALTER SYSTEM SET primary_conninfo = ''")
        c.execute("SELECT pg_reload_conf()")
        deadline = time.monotonic() + 30
        while c.execute("SELECT count(*) FROM pg_stat_wal_receiver").fetchone() != (0,):
            assert time.monotonic() < deadline, "the WAL receiver did not stop"
            time.sleep(0.05)


def _crash_and_promote(pair: Pair) -> None:
    pair.p.stop("immediate")
    with pair.s.admin() as c:
        assert c.execute("SELECT pg_promote()").fetchone() == (True,)
        assert c.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)


def _ids(dsn: str) -> dict[str, set[str]]:
    """Checkpoint ids by thread, straight from the table."""
    out: dict[str, set[str]] = {}
    with psycopg.connect(dsn, autocommit=True) as c:
        for t, cid in c.execute("SELECT thread_id, checkpoint_id FROM checkpoints"):
            out.setdefault(t, set()).add(cid)
    return out


# ---------------------------------------------------------------------------- reads


def _retry_once(fn: Callable[[], T], errors: list[BaseException]) -> T:
    """``fn()``, again once if it failed with an OperationalError (a pooled connection
    to the dead primary); the error goes to ``errors``."""
    try:
        return fn()
    except psycopg.OperationalError as e:
        errors.append(e)
        return fn()


def tup(t: CheckpointTuple | None) -> Any:
    if t is None:
        return None
    return canon((t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes))


def _outcome(fn: Callable[[], Any]) -> Any:
    """What ``fn()`` answers, or the type of what it raises (compared, not re-raised:
    e.g. the history of a checkpoint the server lacks)."""
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001
        return ("raised", type(e).__name__)


def _snap(s: Any) -> Any:
    return canon((s.values, s.next, s.config, s.parent_config, s.metadata))


def _observe(graph: Any, saver: Any, thread: str, ids: set[str]) -> dict[str, Any]:
    """Everything a user can read of ``thread``: its state, its state history, and, for
    each checkpoint id of ``ids``, the state, the tuple and the channels' history."""
    out: dict[str, Any] = {
        "state": _snap(graph.get_state(_conf(thread))),
        "history": [_snap(s) for s in graph.get_state_history(_conf(thread))],
    }
    for cid in sorted(ids):
        c = _conf(thread, cid)
        out[cid] = (
            _outcome(functools.partial(lambda c: _snap(graph.get_state(c)), c)),
            _outcome(functools.partial(lambda c: tup(saver.get_tuple(c)), c)),
            _outcome(functools.partial(lambda c: canon_history(
                saver.get_delta_channel_history(config=c, channels=CHANNELS)), c)),
        )
    return out


def _check_chain(
    fresh: DeltaPostgresSaver, thread: str, graph: Any = None, channel: str = "messages"
) -> int:
    """Nothing partial on the server: the thread's checkpoints form one chain from the
    head to the root, each readable (tuple, history, state), and the values of
    ``channel`` never get fewer along it. ``graph``: the graph on ``fresh`` (default: the
    workload's). Returns the chain's length."""
    graph = graph if graph is not None else build_graph(WORKLOAD, fresh)
    tuples = list(fresh.list(_conf(thread)))
    assert tuples, f"thread {thread} has no checkpoint"
    by_id = {t.config["configurable"]["checkpoint_id"]: t for t in tuples}
    chain = []
    at: CheckpointTuple | None = tuples[0]  # the newest
    while at is not None:
        chain.append(at.config["configurable"]["checkpoint_id"])
        parent = at.parent_config
        if parent is None:
            break
        pid = parent["configurable"]["checkpoint_id"]
        assert pid in by_id, f"{thread}: checkpoint {chain[-1]} has a parent {pid} not stored"
        at = by_id[pid]
    assert sorted(chain) == sorted(by_id), f"{thread}: the checkpoints are not one chain"
    counts = []
    for cid in reversed(chain):  # root first
        c = _conf(thread, cid)
        assert fresh.get_tuple(c) is not None
        fresh.get_delta_channel_history(config=c, channels=[channel])
        snap = graph.get_state(c)
        counts.append(len(snap.values.get(channel, [])))
    assert counts == sorted(counts), f"{thread}: {channel} lost along the chain: {counts}"
    return len(chain)


# ---------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("kind", KINDS)
def test_failover_to_a_standby_that_lacks_the_last_turn(kind: str, pair: Pair) -> None:
    errors: list[BaseException] = []
    with _saver(kind, pair) as saver:
        graph = build_graph(WORKLOAD, saver)
        for thread in THREADS:
            for turn in range(2):
                graph.invoke(user_input(WORKLOAD, turn), _conf(thread))
        _catch_up(pair)
        _stop_receiving(pair.s)
        # the turn S will lack, read through the saver (its cache holds it)
        graph.invoke(user_input(WORKLOAD, 2), _conf("f0"))
        before = _observe(graph, saver, "f0", set())
        with DeltaPostgresSaver.from_conn_string(pair.p_dsn, cache_bytes=0) as on_primary:
            assert before == _observe(build_graph(WORKLOAD, on_primary), on_primary, "f0",
                                      set())
        on_p = _ids(pair.p_dsn)
        _crash_and_promote(pair)
        on_s = _ids(pair.s_dsn)
        lost = on_p["f0"] - on_s["f0"]
        assert len(lost) >= 3, "S has the last turn: the trap is not set"
        assert all(on_p[t] == on_s[t] for t in THREADS[1:])

        with DeltaPostgresSaver.from_conn_string(pair.s_dsn, cache_bytes=0) as fresh:
            ref = build_graph(WORKLOAD, fresh)
            assert _snap(ref.get_state(_conf("f0"))) != before["state"]  # S lacks the turn
            for thread in THREADS:
                ids = on_p[thread] | on_s[thread]
                got = _retry_once(functools.partial(_observe, graph, saver, thread, ids), errors)
                assert got == _observe(ref, fresh, thread, ids), f"thread {thread}"
            # a turn after the promotion, on every thread
            for thread in THREADS:
                _retry_once(functools.partial(
                    lambda t: graph.invoke(user_input(WORKLOAD, 3), _conf(t)), thread), errors)
            after = _ids(pair.s_dsn)
            for thread in THREADS:
                ids = after[thread] | on_p[thread]
                assert _observe(graph, saver, thread, ids) == \
                    _observe(ref, fresh, thread, ids), f"thread {thread} after a new turn"
                assert _check_chain(fresh, thread) >= 12  # 3 turns of 4 checkpoints, at least
            # the new turn of f0 follows S's history, not the lost turn
            msgs = ref.get_state(_conf("f0")).values["messages"]
            assert [m.id for m in msgs if m.id and m.id.startswith("user-")] == \
                ["user-0", "user-1", "user-3"]
    assert len(errors) <= 2, errors  # at most one per connection of the pool


@pytest.mark.parametrize("kind", ["saver", "router_with_standby"])
def test_failover_during_live_runs(kind: str, pair: Pair) -> None:
    """Turns run in a loop on two threads while P crashes and S is promoted."""
    threads = ["live0", "live1"]
    outcomes: list[tuple[str, float, BaseException | None]] = []  # thread, start, error
    lock = threading.Lock()
    stop = threading.Event()
    with _saver(kind, pair) as saver:
        graph = build_graph(WORKLOAD, saver)

        def loop(thread: str) -> None:
            turn = 0
            while not stop.is_set():
                started = time.monotonic()
                err: BaseException | None = None
                try:
                    graph.invoke(user_input(WORKLOAD, turn), _conf(thread))
                except Exception as e:  # noqa: BLE001  # a run may fail: counted
                    err = e
                with lock:
                    outcomes.append((thread, started, err))
                turn += 1
                if err is not None:
                    time.sleep(0.1)

        def ok_since(t0: float) -> int:
            with lock:
                return sum(1 for _, s, e in outcomes if e is None and s >= t0)

        def wait_for(n: int, since: float, what: str) -> None:
            deadline = time.monotonic() + 60
            while ok_since(since) < n:
                if time.monotonic() > deadline:
                    stop.set()
                    with lock:
                        said = [(t, repr(e)) for t, _, e in outcomes]
                    pytest.fail(f"{what}: {ok_since(since)} runs succeeded; {said[-10:]}")
                time.sleep(0.05)

        workers = [threading.Thread(target=loop, args=(t,), daemon=True) for t in threads]
        for w in workers:
            w.start()
        try:
            wait_for(6, 0.0, "before the failover")
            _crash_and_promote(pair)
            promoted = time.monotonic()
            wait_for(4, promoted, "after the promotion")
        finally:
            stop.set()
            for w in workers:
                w.join(60)
        assert not any(w.is_alive() for w in workers), "a run never ended (hung)"
        failed = [e for _, _, e in outcomes if e is not None]
        assert all(isinstance(e, Exception) for e in failed)

        with lock:
            runs = [(t, round(s - promoted, 2), repr(e)[:120] if e else "ok")
                    for t, s, e in outcomes]  # start relative to the promotion
        errors: list[BaseException] = []
        on_s = _ids(pair.s_dsn)
        with DeltaPostgresSaver.from_conn_string(pair.s_dsn, cache_bytes=0) as fresh:
            ref = build_graph(WORKLOAD, fresh)
            for thread in threads:
                ids = on_s[thread]
                got = _retry_once(functools.partial(_observe, graph, saver, thread, ids), errors)
                assert got == _observe(ref, fresh, thread, ids), f"thread {thread}"
                for cid in ids:  # every checkpoint readable
                    c = _conf(thread, cid)
                    assert fresh.get_tuple(c) is not None, (cid, runs)
                    ref.get_state(c)
                # and one whole chain: a run across the failover whose parent S never
                # received fails at its put (LostParentError) instead of writing under it
                _check_chain(fresh, thread)
        assert len(errors) <= 2, errors  # at most one per connection of the pool


def test_cache_after_failover_with_late_writes(pair: Pair) -> None:
    """A write added to a checkpoint that already has a child (a task's write landing
    after the next checkpoint's put under ``durability="async"``, a resume of an older
    interrupted checkpoint: see docs/replicas.md), which S never received. The saver read
    the history below it before the failover (its cache holds that chain, write
    included). After it, another worker adds a late write of its own to that checkpoint
    on S. Every history and tuple read through the saver is S's: with S's late write,
    without P's. A checkpoint written after the promotion is read right too."""
    errors: list[BaseException] = []
    with DeltaPostgresSaver.from_conn_string(pair.multi_dsn, pool_size=2) as saver:
        versions: dict[str, Any] = {}

        def put(parent: RunnableConfig, i: int) -> RunnableConfig:
            versions["obj"] = saver.get_next_version(versions.get("obj"), None)
            cp = make_checkpoint({"obj": {"i": i}}, dict(versions))
            conf = saver.put(parent, cp, {"source": "loop", "step": i},
                             {"obj": versions["obj"]})
            saver.put_writes(conf, [("log", f"w{i}")], f"task-{i}")
            return conf

        chain = [put(cfg("r"), 0)]
        for i in range(1, 5):
            chain.append(put(chain[-1], i))
        _catch_up(pair)
        _stop_receiving(pair.s)
        saver.put_writes(chain[1], [("log", "late")], "task-late")  # chain[1] has a child
        for c in chain[2:]:  # into the cache, the late write in the history of each
            got = saver.get_delta_channel_history(config=c, channels=["log"])
            assert "late" in [v for _, _, v in got["log"]["writes"]]
        _crash_and_promote(pair)

        with DeltaPostgresSaver.from_conn_string(pair.s_dsn, cache_bytes=0) as fresh:
            # another worker, on S, adds a late write of its own to the same checkpoint:
            # the thread's late-write count on S is now what it was on P, so a token of
            # the chain cached from P matches S's rows again
            fresh.put_writes(chain[1], [("log", "late-on-S")], "task-late-s")
            def same(c: RunnableConfig) -> None:
                want = canon_history(fresh.get_delta_channel_history(config=c,
                                                                     channels=["log"]))
                got = _retry_once(lambda: canon_history(saver.get_delta_channel_history(
                    config=c, channels=["log"])), errors)
                assert got == want, c["configurable"]["checkpoint_id"]
                assert tup(saver.get_tuple(c)) == tup(fresh.get_tuple(c))

            on_s = [w[2][1] for w in canon_history(fresh.get_delta_channel_history(
                config=chain[-1], channels=["log"]))["log"]["writes"]]
            assert "late" not in on_s and "late-on-S" in on_s, on_s
            for c in reversed(chain):
                same(c)
            after = _retry_once(lambda: put(chain[-1], 5), errors)
            same(after)
            assert tup(saver.get_tuple(cfg("r"))) == tup(fresh.get_tuple(cfg("r")))
    assert len(errors) <= 2, errors


class _GateState(TypedDict):
    log: Annotated[list[str], DeltaChannel(append_reducer)]


def test_a_run_across_the_failover_leaves_no_checkpoint_below_a_lost_one(
    pair: Pair,
) -> None:
    """A run in flight when P crashes: its last checkpoint on P (S never received it) is
    the parent of the next one it writes, after the promotion, on S. Either the run fails
    there, or what S holds is still whole: no checkpoint whose parent S lacks (its state
    would read as a history cut at the gap), every earlier turn in the thread's state.

    Deterministic: node ``b`` waits (``durability="sync"``: every checkpoint before it is
    committed on P) while S stops receiving, P crashes and S is promoted; then it
    returns and the run goes on, on S."""
    entered, gate = threading.Event(), threading.Event()

    def a(state: Any) -> dict[str, Any]:
        return {"log": ["a"]}

    def b(state: Any) -> dict[str, Any]:
        entered.set()
        gate.wait(60)
        return {"log": ["b"]}

    builder: StateGraph[Any] = StateGraph(_GateState)
    builder.add_node("a", a)
    builder.add_node("b", b)
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", END)
    conf = _conf("gated")
    with DeltaPostgresSaver.from_conn_string(pair.multi_dsn, pool_size=2) as saver:
        graph = builder.compile(checkpointer=saver)
        gate.set()
        for turn in range(2):
            graph.invoke({"log": [f"in{turn}"]}, conf, durability="sync")
        gate.clear()
        entered.clear()
        _catch_up(pair)
        _stop_receiving(pair.s)
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["out"] = graph.invoke({"log": ["in2"]}, conf, durability="sync")
            except Exception as e:  # noqa: BLE001  # an allowed outcome
                box["error"] = e

        th = threading.Thread(target=run, daemon=True)
        th.start()
        assert entered.wait(30), "node b never ran"
        _crash_and_promote(pair)
        gate.set()
        th.join(60)
        assert not th.is_alive(), "the run never ended"
        assert box, "the run neither returned nor raised"

    outcome = f"(the run {'raised ' + repr(box['error'])[:300] if 'error' in box else 'returned'})"
    # the saver saw the server change, and refused the put under the lost parent: at
    # once (LostParentError), or, when the put's pooled connection to P broke first, its
    # second try found the server changed since the put was planned (StaleServerError,
    # nothing written; the next put checks its parent)
    assert isinstance(box.get("error"), LostParentError | StaleServerError), outcome
    with DeltaPostgresSaver.from_conn_string(pair.s_dsn, cache_bytes=0) as fresh:
        on_s = builder.compile(checkpointer=fresh)
        log = on_s.get_state(conf).values.get("log", [])
        assert log[:6] == ["in0", "a", "b", "in1", "a", "b"], f"{log} {outcome}"
        try:
            _check_chain(fresh, "gated", graph=on_s, channel="log")
        except AssertionError as e:
            raise AssertionError(f"{e} {outcome}") from None


def test_an_idle_primary_at_a_page_boundary_still_routes_latest_reads(pair: Pair) -> None:
    """After a WAL switch on an idle primary, its insert position is just past the new
    segment's page header while its standby's replay stops before it, at the end of the
    switch record: a floor of the raw insert position was never reached (until the next
    record, up to 15 s later), so every latest read waited replica_wait and went to the
    primary. The floor is taken before the header (sql/replicas.sql, primary_lsn).
    A cluster of our own: nothing else writes WAL there."""
    with DeltaPostgresSaver.from_conn_string(pair.p_dsn) as p:
        p.setup()
        graph = build_graph(WORKLOAD, p)
        graph.invoke(user_input(WORKLOAD, 0), {"configurable": {"thread_id": "idle"}})
    with psycopg.connect(pair.p.admin_dsn, autocommit=True) as c:
        c.execute("SELECT pg_switch_wal()")
        raw = c.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert raw is not None and raw[0].endswith("000028"), raw  # segment start + 40
    pair.s.catch_up(timeout=10)  # the normalized floor: reached at once
    with RoutingSaver.from_conn_string(pair.p_dsn, replicas=[pair.s_dsn]) as r:
        started = time.monotonic()
        for _ in range(5):
            assert r.get_tuple({"configurable": {"thread_id": "idle"}}) is not None
        took = time.monotonic() - started
        stats = r.routing_stats()
    assert stats.replica_reads == 5, stats
    assert took < 2.0, took
