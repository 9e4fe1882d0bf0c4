"""The multi-worker differential test of issue 34: Agent Server workers that write AND
read the same threads through routing savers of their own, while the standby lags.

``WORKERS`` OS processes (spawned), each with its own
``RoutingSaver.from_conn_string(dsn, replicas=[replica_dsn], ...)``, run LangGraph turns
(the ``coding_a`` workload: DeltaChannel ``messages`` and ``files``) on the same
``THREADS`` threads in alternation, as Agent Server workers do: turn ``k`` of thread ``j``
is run by worker ``(k + j) % WORKERS``. The parent assigns a turn, waits for its ack,
and only then assigns the next turn of that thread to the next worker; the threads'
turns run at the same time (one round: turn ``k`` of every thread, on distinct workers).
Around its turn a worker also reads the thread (``get_state``, pages of
``get_state_history``) and sometimes calls ``saver.token()``, as docs/replicas.md advises.

Meanwhile the parent pauses and resumes the standby's replay at random, with
``recovery_min_apply_delay`` 0 or 20 ms. Some pauses are set as a trap, right before a
round after a catch-up: the standby then has every thread's turn ``k - 1`` but not turn
``k``, and the worker that runs turn ``k + 1`` wrote the thread at turn
``k + 1 - WORKERS``, which the standby has. A saver that trusts its own old floor of the
thread reads the stale head there and writes turn ``k + 1`` on top of turn ``k - 1``:
turn ``k`` is lost.

At the end every thread's state, read on the primary by a plain saver, must equal an
``InMemorySaver`` replay of the acknowledged turns in their order: 0 turns lost.
"""

from __future__ import annotations

import multiprocessing
import queue
import random
import time
import traceback
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._local.standby import Standby
from langgraph_delta_postgres._local.workloads import build_graph
from langgraph_delta_postgres.replicas import RoutingSaver
from tests.graph._util import canon

WORKLOAD = "coding_a"
WORKERS = 3
THREADS = 3
TURNS = 10
#: chance that the parent sets a trap before a round (catch up, pause for two rounds)
TRAP = 0.5
#: chance of a pause or resume at a random moment of a round
TOGGLE = 0.3
#: seconds the parent waits for a worker's ack (or its start) before it gives up
ACK_TIMEOUT = 120.0


def _thread(j: int) -> str:
    return f"t{j}"


def _input(thread: str, k: int) -> dict[str, Any]:
    """The user input of turn ``k`` of ``thread``: distinct, so a lost turn shows."""
    return {"messages": [HumanMessage(content=f"{thread}-turn{k}", id=f"user-{thread}-{k}")]}


def _conf(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


# ------------------------------------------------------------------------ the workers


def _read(graph: Any, conf: RunnableConfig) -> None:
    """What a worker (or the UI it serves) reads of a thread: its state, the first page
    of its history and the page after it."""
    graph.get_state(conf)
    page = list(graph.get_state_history(conf, limit=3))
    if len(page) == 3:
        list(graph.get_state_history(conf, before=page[-1].config, limit=3))


def _worker(index: int, dsn: str, replica_dsn: str, tasks: Any, acks: Any) -> None:
    """One worker process: runs the turns the parent assigns, on its own routing saver.

    A task is ``(thread, turn, read_before, token_after)``; ``None`` ends the worker,
    which then sends its routing counters. Every ack is ``(index, thread, turn, error)``
    (``error``: a traceback, or None)."""
    try:
        with RoutingSaver.from_conn_string(dsn, replicas=[replica_dsn], pool_size=2,
                                           retry_after=0.2) as saver:
            graph = build_graph(WORKLOAD, saver)
            acks.put(("ready", index))
            while (task := tasks.get()) is not None:
                thread, k, read_before, token_after = task
                conf = _conf(thread)
                try:
                    if read_before:
                        _read(graph, conf)
                    graph.invoke(_input(thread, k), conf)
                    if token_after:
                        saver.token()
                    _read(graph, conf)
                    error = None
                except Exception:  # noqa: BLE001  # reported by the parent
                    error = traceback.format_exc()
                acks.put((index, thread, k, error))
            stats = saver.routing_stats()
            acks.put(("stats", index, stats.replica_reads, dict(stats.primary_reads),
                      dict(stats.replica_misses)))
    except Exception:  # noqa: BLE001  # the parent fails the test with it
        acks.put(("crashed", index, traceback.format_exc()))


# ------------------------------------------------------------------------ the standby


def _set_apply_delay(standby: Standby, ms: int) -> None:
    """Set ``recovery_min_apply_delay`` on the standby (0: back to its default)."""
    with standby.admin() as c:
        if ms:
            c.execute(f"ALTER SYSTEM SET recovery_min_apply_delay = '{int(ms)}ms'")
        else:
            c.execute("ALTER SYSTEM RESET recovery_min_apply_delay")
        c.execute("SELECT pg_reload_conf()")
        deadline = time.monotonic() + 10
        want = f"{int(ms)}ms" if ms else "0"
        while True:
            row = c.execute("SHOW recovery_min_apply_delay").fetchone()
            if row is not None and row[0] == want:
                return
            assert time.monotonic() < deadline, f"recovery_min_apply_delay is {row}"
            time.sleep(0.02)


@pytest.fixture
def apply_delay(request: pytest.FixtureRequest, standby: Standby,
                replica_dsn: str) -> Iterator[int]:
    ms = int(request.param)
    _set_apply_delay(standby, ms)
    try:
        yield ms
    finally:
        standby.resume()
        _set_apply_delay(standby, 0)


class _Replay:
    """The parent's control of the standby's replay."""

    def __init__(self, standby: Standby) -> None:
        self.standby = standby
        self.paused = False
        self.pauses = 0
        self.traps = 0

    def pause(self) -> None:
        self.standby.pause()
        self.paused = True
        self.pauses += 1

    def resume(self) -> None:
        self.standby.resume()
        self.paused = False

    def toggle(self) -> None:
        self.resume() if self.paused else self.pause()

    def trap(self) -> None:
        """The standby has everything written so far, and nothing after it."""
        self.resume()
        self.standby.catch_up()
        self.pause()
        self.traps += 1


# ------------------------------------------------------------------------ the test


def _ack(acks: Any, procs: list[Any]) -> tuple[Any, ...]:
    deadline = time.monotonic() + ACK_TIMEOUT
    while True:
        try:
            msg: tuple[Any, ...] = acks.get(timeout=1.0)
        except queue.Empty:
            dead = [p.pid for p in procs if not p.is_alive()]
            assert not dead, f"worker processes {dead} died"
            assert time.monotonic() < deadline, "no ack from the workers"
            continue
        if msg[0] == "crashed":
            pytest.fail(f"worker {msg[1]} crashed:\n{msg[2]}")
        return msg


def _human_turns(values: Any) -> list[str]:
    return [str(m.content) for m in values.get("messages", []) if isinstance(m, HumanMessage)]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("apply_delay", [0, 20], indirect=True, ids=lambda ms: f"delay{ms}ms")
def test_workers_alternating_on_threads_lose_no_turn(
    dsn: str, replica_dsn: str, standby: Standby, apply_delay: int,
) -> None:
    rng = random.Random(34_000 + apply_delay)
    ctx = multiprocessing.get_context("spawn")
    acks = ctx.Queue()
    tasks = [ctx.Queue() for _ in range(WORKERS)]
    procs = [ctx.Process(target=_worker, args=(i, dsn, replica_dsn, tasks[i], acks),
                         daemon=True) for i in range(WORKERS)]
    replay = _Replay(standby)
    threads = [_thread(j) for j in range(THREADS)]
    acked: dict[str, list[int]] = {t: [] for t in threads}
    errors: list[str] = []
    stats: dict[int, tuple[Any, ...]] = {}
    started = time.monotonic()
    ended = False
    for p in procs:
        p.start()
    try:
        for _ in procs:
            assert _ack(acks, procs)[0] == "ready"
        hold = 0  # rounds a trap keeps replay paused for
        for k in range(TURNS):
            # between rounds: a trap (turn k - 1 on the standby, turn k never, while the
            # worker of turn k + 1 loads), or a random resume
            if hold:
                hold -= 1
            elif replay.paused:
                if rng.random() < 0.7:
                    replay.resume()
            elif WORKERS - 1 <= k <= TURNS - 2 and rng.random() < TRAP:
                replay.trap()
                hold = 1
            for j, t in enumerate(threads):
                tasks[(k + j) % WORKERS].put((t, k, rng.random() < 0.3, rng.random() < 0.4))
            if not hold and rng.random() < TOGGLE:  # at a random moment of the round
                time.sleep(rng.uniform(0.0, 0.08))
                replay.toggle()
            for _ in threads:
                _i, t, turn, error = _ack(acks, procs)
                if error is not None:
                    errors.append(f"{t} turn {turn}:\n{error}")
                else:
                    acked[t].append(turn)
        for q in tasks:
            q.put(None)
        ended = True
        for _ in procs:
            msg = _ack(acks, procs)
            assert msg[0] == "stats", msg
            stats[msg[1]] = msg[2:]
    finally:
        replay.resume()
        if not ended:
            for q in tasks:
                q.put(None)
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join(5)
    elapsed = time.monotonic() - started
    assert not errors, "turns failed:\n" + "\n".join(errors)

    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as primary:
        on_primary = build_graph(WORKLOAD, primary)
        lost: dict[str, list[str]] = {}
        differs: list[str] = []
        for t in threads:
            got = on_primary.get_state(_conf(t)).values
            ref = build_graph(WORKLOAD, InMemorySaver())
            for k in acked[t]:
                ref.invoke(_input(t, k), _conf(t))
            want = ref.get_state(_conf(t)).values
            have = set(_human_turns(got))
            missing = [m for m in _human_turns(want) if m not in have]
            if missing:
                lost[t] = missing
            if canon(got) != canon(want):
                differs.append(t)
    n_acked = sum(len(v) for v in acked.values())
    n_lost = sum(len(v) for v in lost.values())
    replica_reads = sum(s[0] for s in stats.values())
    summary = (
        f"recovery_min_apply_delay={apply_delay}ms: {n_lost} of {n_acked} acknowledged turns "
        f"lost {lost}; states differing from the InMemorySaver replay: {differs}; "
        f"{replay.traps} traps, {replay.pauses} pauses; {elapsed:.1f} s; routing per worker "
        f"(replica reads, primary reads, replica misses): {stats}"
    )
    print(summary)
    assert n_acked == THREADS * TURNS, summary
    assert n_lost == 0 and not differs, summary
    assert replica_reads > 0, "the replica never answered: " + summary
