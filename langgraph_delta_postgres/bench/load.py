"""How many agents one Postgres serves: N concurrent sessions on one server.

Each session is an agent conversation on its own thread: per turn, ``invoke`` of the
workload's real graph (two ``DeltaChannel`` fields) with a user input, then
``get_state``; on one turn in ``HISTORY_EVERY`` (staggered across sessions) also a
``get_state_history(limit=10)`` page, as a UI polling the thread would. Sessions start on
threads that already hold ``prior`` (+ a ``stagger`` offset) turns (copies, made in SQL, of
template threads that saver wrote through the same graph), so every read reconstructs a
real history; each runs ``SESSION_WARM_TURNS`` untimed turns before the clock starts.
The sessions run in up to ``CLIENT_PROCS`` client processes (``run_procs``).

Two modes, each at every concurrency of the scale (1, 4, 16, 64 sessions):

* ``asyncio``: an event loop per client process, ``ainvoke`` / ``aget_state`` on an
  ``AsyncConnectionPool``, ``AsyncDeltaPostgresSaver`` against the official ``AsyncPostgresSaver``;
* ``threads``: one thread per session, ``invoke`` / ``get_state`` on a ``ConnectionPool``,
  ``DeltaPostgresSaver`` against the official ``PostgresSaver``.

Pools hold ``min(N, POOL_CAP)`` connections, split among the client processes, all opened
and warmed before the clock starts. Each saver's pool is the one its users get: ours
opened by ``from_conn_string(dsn, pool_size=n)`` (the pool that checks a connection idle
a while before lending it), the official saver, whose ``from_conn_string`` opens one
connection, on a ``ConnectionPool`` / ``AsyncConnectionPool`` with the connection
settings its documentation gives (``autocommit``, ``prepare_threshold=0``, ``dict_row``).
Ours and the official saver each run in their own scratch database on the same server,
on rows they wrote themselves, one after the other, the order alternating level by level
and repetition by repetition so a noisy neighbour hits both; ratios are taken pair by
pair.

What the database paid, per turn (a history page counts in the turn that asked for it):

* ``pg_stat_statements`` (when the server preloads it): execution time, shared buffers
  (hit + read) and calls of the statements the run's database executed;
* CPU time of the pool's server backends (``utime + stime`` of ``/proc/<pid>/stat``, when
  the server runs on this machine): everything a backend did (parse, plan, execute,
  commit, send), whatever the extension says;
* bytes the server sent and received, counted by a loopback proxy in a separate, untimed
  pass of one session (the proxy would cost the client CPU in the timed runs);
* wait events of the pool's backends, sampled from ``pg_stat_activity`` during the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from langgraph_delta_postgres._local.workloads import build_graph, run_turns, user_input

from .savers import (
    OFFICIAL_POOL_KWARGS,
    ONE_CONNECTION,
    aopen_saver,
    official_pooled,
    open_saver,
    pooled,
)

HISTORY_EVERY = 10
PAGE = 10
POOL_CAP = 32
#: Client processes at most per run: the sessions (and the pool's connections) are split
#: among them, so one saturated Python process does not leave the server waiting to send
#: (``ClientWrite``) inside both savers' statements. 1: every session in this process.
CLIENT_PROCS = 4
WARM_TURNS = 6  # per pool connection, before the clock starts (> the prepare threshold)
#: Untimed turns of every session on its own thread before the clock starts: the process
#: has served the conversation before, as a running server has (a saver's first read of
#: a thread, a fixed cost per session, would otherwise weigh 100 turns at 1 session and
#: 6 at 64; the cold read is the loads section's subject).
SESSION_WARM_TURNS = 1
MODES = ("asyncio", "threads")
SAVERS = ("ours", "official")


@dataclass(frozen=True)
class LoadScale:
    sessions: tuple[int, ...]
    turns: dict[int, int]  # sessions -> turns per session
    reps: int
    prior: int  # turns already on every session's thread (the fewest: see stagger)
    workload: str = "coding_a"
    meter_turns: int = 10
    client_procs: int = CLIENT_PROCS
    #: Session i starts on a thread holding prior + stagger[i % len(stagger)] turns. A
    #: DeltaChannel writes its _DeltaSnapshot every 100 updates (about 30 coding_a
    #: turns); had every session started on copies of one thread, every session would
    #: write one in the same turn of its run (a fixed cost per session, spread over a
    #: run's 100 turns at 1 session but over 6 at 64). Starting points
    #: spread over one such cycle put the snapshots where a real thread has them.
    stagger: tuple[int, ...] = (0,)


SCALES = {
    # at least 100 turns per run: the p99 of fewer is the run's single slowest turn (one
    # garbage collection or one snapshot write decides it); of 100, the second slowest
    "full": LoadScale((1, 4, 16, 64), {1: 100, 4: 25, 16: 10, 64: 6}, reps=2, prior=30,
                      stagger=(0, 5, 10, 15, 20, 25)),
    "quick": LoadScale((1, 4, 16), {1: 20, 4: 10, 16: 5}, reps=2, prior=20,
                       stagger=(0, 10, 20)),
    "tiny": LoadScale((1, 4), {1: 4, 4: 3}, reps=1, prior=5, meter_turns=3, client_procs=2,
                      stagger=(0, 2)),
}


def _cfg(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def _pages_at(session: int, turn: int) -> bool:
    """Whether ``session`` asks for a history page after its ``turn``-th turn (staggered:
    one turn in HISTORY_EVERY, not all sessions at once)."""
    return (turn + session) % HISTORY_EVERY == HISTORY_EVERY - 1


# ---------------------------------------------------------------- database side


@dataclass
class Server:
    """Facts of the server and the meter connection (on the admin database)."""

    admin_dsn: str
    meter: psycopg.Connection[Any]
    pgss: bool
    max_connections: int
    proc: bool

    @classmethod
    def open(cls, admin_dsn: str) -> Server:
        meter = psycopg.connect(admin_dsn, autocommit=True)
        pgss = False
        with contextlib.suppress(psycopg.Error):
            pre = str(_one(meter, "SHOW shared_preload_libraries"))
            if "pg_stat_statements" in pre:
                meter.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                meter.execute("SELECT count(*) FROM pg_stat_statements")
                pgss = True
        maxc = int(_one(meter, "SHOW max_connections"))
        pid = int(_one(meter, "SELECT pg_backend_pid()"))
        proc = _cpu_ticks([pid]) is not None
        return cls(admin_dsn, meter, pgss, maxc, proc)

    def close(self) -> None:
        self.meter.close()

    def dbid(self, dsn: str) -> int:
        with psycopg.connect(dsn, autocommit=True) as c:
            return int(_one(c, "SELECT oid FROM pg_database WHERE datname = current_database()"))

    def reset(self, dbid: int) -> None:
        if self.pgss:
            self.meter.execute("SELECT pg_stat_statements_reset(0, %s, 0)", (dbid,))

    def statements(self, dbid: int) -> dict[str, Any] | None:
        if not self.pgss:
            return None
        rows = self.meter.cursor(row_factory=dict_row).execute(
            "SELECT queryid, left(regexp_replace(query, '\\s+', ' ', 'g'), 160) AS query, "
            "calls, total_exec_time, rows, shared_blks_hit + shared_blks_read AS blks, "
            "shared_blks_dirtied + shared_blks_written AS blks_dirtied_written "
            "FROM pg_stat_statements WHERE dbid = %s AND query NOT LIKE '%%pg_stat%%' "
            "ORDER BY total_exec_time DESC",
            (dbid,),
        ).fetchall()
        return {
            "exec_ms": sum(r["total_exec_time"] for r in rows),
            "calls": sum(r["calls"] for r in rows),
            "shared_blks": sum(r["blks"] for r in rows),
            "blks_dirtied_written": sum(r["blks_dirtied_written"] for r in rows),
            "top": [
                {"query": r["query"], "calls": r["calls"], "exec_ms": r["total_exec_time"],
                 "rows": r["rows"], "shared_blks": r["blks"]}
                for r in rows[:8]
            ],
        }


def _one(conn: psycopg.Connection[Any], q: str) -> Any:
    row = conn.execute(q).fetchone()
    assert row is not None
    return row[0]


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_ticks(pids: list[int]) -> int | None:
    """utime + stime of ``pids`` (None: not readable, e.g. the server is elsewhere)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        total += int(fields[11]) + int(fields[12])  # fields 14, 15 of proc(5)
    return total


class WaitSampler:
    """Samples what the given backends are doing every ``every`` seconds."""

    def __init__(self, dsn: str, pids: list[int], every: float = 0.05) -> None:
        self.pids = pids
        self.every = every
        self.samples: Counter[str] = Counter()
        self.n = 0
        self._stop = threading.Event()
        self._conn = psycopg.connect(dsn, autocommit=True)
        self._t = threading.Thread(target=self._run, daemon=True, name="lgdp-load-waits")

    def _run(self) -> None:
        q = (
            "SELECT state, wait_event_type, wait_event FROM pg_stat_activity "
            "WHERE pid = ANY(%s)"
        )
        while not self._stop.is_set():
            for state, wtype, wevent in self._conn.execute(q, (self.pids,)).fetchall():
                if state == "active":
                    self.samples[f"{wtype}:{wevent}" if wtype else "CPU"] += 1
                elif state == "idle in transaction":
                    self.samples["idle in transaction"] += 1
            self.n += 1
            self._stop.wait(self.every)

    def __enter__(self) -> WaitSampler:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(timeout=5)
        self._conn.close()

    def summary(self) -> dict[str, Any]:
        n = max(self.n, 1)
        return {
            "samples": self.n,
            # mean number of the pool's backends in each state per sample
            "per_sample": {k: v / n for k, v in self.samples.most_common()},
        }


#: the tables a copy of a thread is made of (checkpoint_epochs: kept by the tables' triggers,
#: migrations/0007)
_THREAD_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


def clone_threads(conn: psycopg.Connection[Any], template: str, ids: list[str]) -> None:
    """Copies of ``template``'s rows (any saver's tables) under the thread ids ``ids``."""
    for table in _THREAD_TABLES:
        cols = [
            r[0] for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                "AND table_schema = ANY(current_schemas(false)) AND column_name <> 'thread_id' "
                "ORDER BY ordinal_position",
                (table,),
            ).fetchall()
        ]
        if not cols:
            continue
        c = sql.SQL(", ").join(map(sql.Identifier, cols))
        conn.execute(
            sql.SQL(
                "INSERT INTO {t} (thread_id, {c}) SELECT n, {c} FROM {t} "
                "CROSS JOIN unnest(%(ids)s::text[]) AS n WHERE thread_id = %(src)s"
            ).format(t=sql.Identifier(table), c=c),
            {"ids": ids, "src": template},
        )
    # inserted in no causal order: every write to a copy counts as late until new puts
    # (sql/maintenance.sql, forget_recent); the official saver's database has no such table
    if _one(conn, "SELECT to_regclass('checkpoint_epochs') IS NOT NULL"):
        conn.execute("UPDATE checkpoint_epochs SET recent = NULL, parents = NULL "
                     "WHERE thread_id = ANY(%s)", (ids,))
    conn.execute("ANALYZE")


# ---------------------------------------------------------------- savers and pools


def opened(saver: str, mode: str, size: int | None) -> str:
    """How :func:`_open_sync` / :func:`_open_async` open ``saver`` (the "opened" field)."""
    if saver == "ours":
        cls = "AsyncDeltaPostgresSaver" if mode == "asyncio" else "DeltaPostgresSaver"
        return f"{cls}." + (ONE_CONNECTION if size is None else pooled(size))
    cls = "AsyncPostgresSaver" if mode == "asyncio" else "PostgresSaver"
    if size is None:
        return f"{cls}.{ONE_CONNECTION}"
    return f"{cls} on " + official_pooled(size).replace(
        "ConnectionPool", "AsyncConnectionPool" if mode == "asyncio" else "ConnectionPool")


@dataclass
class RunSpec:
    mode: str
    saver: str
    dsn: str
    dbid: int
    sessions: int
    turns: int
    prior: int
    workload: str
    prefix: str
    stagger: tuple[int, ...] = (0,)

    def thread(self, i: int) -> str:
        return f"{self.prefix}-{i:03}"

    def prior_of(self, i: int) -> int:
        """Turns on session ``i``'s thread when it starts."""
        return self.prior + self.stagger[i % len(self.stagger)]


@dataclass
class Timings:
    turns: list[float]
    pages: list[float]
    wall: float


def _session_sync(g: Any, spec: RunSpec, i: int, out: Timings) -> None:
    cfg = _cfg(spec.thread(i))
    for k in range(spec.turns):
        t0 = time.perf_counter()
        g.invoke(user_input(spec.workload, spec.prior_of(i) + SESSION_WARM_TURNS + k), cfg)
        g.get_state(cfg)
        out.turns.append(time.perf_counter() - t0)
        if _pages_at(i, k):
            t0 = time.perf_counter()
            [s.values for s in g.get_state_history(cfg, limit=PAGE)]
            out.pages.append(time.perf_counter() - t0)


async def _session_async(g: Any, spec: RunSpec, i: int, out: Timings) -> None:
    cfg = _cfg(spec.thread(i))
    for k in range(spec.turns):
        t0 = time.perf_counter()
        await g.ainvoke(user_input(spec.workload, spec.prior_of(i) + SESSION_WARM_TURNS + k), cfg)
        await g.aget_state(cfg)
        out.turns.append(time.perf_counter() - t0)
        if _pages_at(i, k):
            t0 = time.perf_counter()
            [s.values async for s in g.aget_state_history(cfg, limit=PAGE)]
            out.pages.append(time.perf_counter() - t0)


def _first_turns_sync(g: Any, spec: RunSpec, sessions: list[int]) -> None:
    """SESSION_WARM_TURNS untimed turns of each of ``sessions``, all at once."""
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> None:
        for k in range(SESSION_WARM_TURNS):
            g.invoke(user_input(spec.workload, spec.prior_of(i) + k), _cfg(spec.thread(i)))
            g.get_state(_cfg(spec.thread(i)))

    with ThreadPoolExecutor(len(sessions)) as ex:
        for f in [ex.submit(one, i) for i in sessions]:
            f.result()


async def _first_turns_async(g: Any, spec: RunSpec, sessions: list[int]) -> None:
    """:func:`_first_turns_sync` on the event loop."""

    async def one(i: int) -> None:
        for k in range(SESSION_WARM_TURNS):
            await g.ainvoke(user_input(spec.workload, spec.prior_of(i) + k),
                            _cfg(spec.thread(i)))
            await g.aget_state(_cfg(spec.thread(i)))

    await asyncio.gather(*(one(i) for i in sessions))


def _warm_sync(saver: Any, spec: RunSpec, size: int, warm0: int) -> list[int]:
    """A long-lived pool's state: the saver's pool holds ``size`` connections (ours' pool
    opens them as they are asked for), and each has run every statement of a session
    more often than the prepare threshold (ours prepares a statement on its 5th use; until
    then each use plans it afresh). Each connection in turn is the only one the pool can
    lend (the others checked out here) while WARM_TURNS turns run through the saver on a
    warm-up thread of its own (``warm0 + j``). The connections' backend pids."""
    pool = saver.conn
    held = [pool.getconn() for _ in range(size)]
    pids = [c.info.backend_pid for c in held]
    g = build_graph(spec.workload, saver)
    try:
        for j in range(size):
            pool.putconn(held.pop(j))
            cfg = _cfg(f"{spec.prefix}-warm-{warm0 + j:03}")
            for k in range(WARM_TURNS):
                g.invoke(user_input(spec.workload, spec.prior + k), cfg)
                g.get_state(cfg)
                list(g.get_state_history(cfg, limit=PAGE))
            held.insert(j, pool.getconn())
    finally:
        for c in held:
            pool.putconn(c)
    return pids


async def _warm_async(saver: Any, spec: RunSpec, size: int, warm0: int) -> list[int]:
    """:func:`_warm_sync` for an async saver."""
    pool = saver.conn
    held = [await pool.getconn() for _ in range(size)]
    pids = [c.info.backend_pid for c in held]
    g = build_graph(spec.workload, saver)
    try:
        for j in range(size):
            await pool.putconn(held.pop(j))
            cfg = _cfg(f"{spec.prefix}-warm-{warm0 + j:03}")
            for k in range(WARM_TURNS):
                await g.ainvoke(user_input(spec.workload, spec.prior + k), cfg)
                await g.aget_state(cfg)
                [s async for s in g.aget_state_history(cfg, limit=PAGE)]
            held.insert(j, await pool.getconn())
    finally:
        for c in held:
            await pool.putconn(c)
    return pids


def _measured(
    server: Server, spec: RunSpec, pids: list[int], go: Callable[[], Timings]
) -> dict[str, Any]:
    """Run ``go`` (the sessions) with the database's meters around it."""
    server.reset(spec.dbid)
    cpu0 = _cpu_ticks(pids)
    with WaitSampler(server.admin_dsn, pids) as waits:
        tm = go()
    cpu1 = _cpu_ticks(pids)
    n = len(tm.turns)
    res: dict[str, Any] = {
        "turns": n,
        "pages": len(tm.pages),
        "wall_s": tm.wall,
        "turns_per_s": n / tm.wall,
        "turn_ms": _pcts(tm.turns),
        "page_ms": _pcts(tm.pages),
        "waits": waits.summary(),
        "backend_cpu_ms_per_turn": (
            (cpu1 - cpu0) * 1000 / _TICK / n if cpu0 is not None and cpu1 is not None else None
        ),
    }
    st = server.statements(spec.dbid)
    if st is not None:
        res["statements"] = st
        res["exec_ms_per_turn"] = st["exec_ms"] / n
        res["shared_blks_per_turn"] = st["shared_blks"] / n
        res["calls_per_turn"] = st["calls"] / n
    return res


def _pcts(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {"p50": float("nan"), "p99": float("nan"), "n": 0}
    s = sorted(xs)
    p99 = s[max(0, math.ceil(0.99 * len(s)) - 1)]  # nearest rank
    return {"p50": statistics.median(s) * 1000, "p99": p99 * 1000, "max": s[-1] * 1000,
            "n": len(s)}


def run_threads(server: Server, spec: RunSpec) -> dict[str, Any]:
    from concurrent.futures import ThreadPoolExecutor

    size = min(spec.sessions, POOL_CAP)
    with open_saver(spec.saver, spec.dsn, size) as saver:
        pids = _warm_sync(saver, spec, size, 0)
        g = build_graph(spec.workload, saver)
        _first_turns_sync(g, spec, list(range(spec.sessions)))

        def go() -> Timings:
            tm = Timings([], [], 0.0)
            with ThreadPoolExecutor(spec.sessions) as ex:
                t0 = time.perf_counter()
                futs = [ex.submit(_session_sync, g, spec, i, tm) for i in range(spec.sessions)]
                for f in futs:
                    f.result()
                tm.wall = time.perf_counter() - t0
            return tm

        res = _measured(server, spec, pids, go)
    res["pool_size"] = size
    res["opened"] = opened(spec.saver, spec.mode, size)
    return res


def run_asyncio(server: Server, spec: RunSpec) -> dict[str, Any]:
    size = min(spec.sessions, POOL_CAP)

    async def main() -> dict[str, Any]:
        async with aopen_saver(spec.saver, spec.dsn, size) as saver:
            pids = await _warm_async(saver, spec, size, 0)
            g = build_graph(spec.workload, saver)
            await _first_turns_async(g, spec, list(range(spec.sessions)))
            box: dict[str, Any] = {}

            async def sessions() -> Timings:
                tm = Timings([], [], 0.0)
                t0 = time.perf_counter()
                await asyncio.gather(
                    *(_session_async(g, spec, i, tm) for i in range(spec.sessions))
                )
                tm.wall = time.perf_counter() - t0
                return tm

            # the meters are blocking calls: run them around the sessions off the loop
            loop = asyncio.get_running_loop()

            def go() -> Timings:
                return asyncio.run_coroutine_threadsafe(sessions(), loop).result()

            box["res"] = await loop.run_in_executor(None, _measured, server, spec, pids, go)
            box["res"]["pool_size"] = size
            box["res"]["opened"] = opened(spec.saver, spec.mode, size)
            return box["res"]  # type: ignore[no-any-return]

    return asyncio.run(main())


def run_procs(server: Server, spec: RunSpec, procs: int) -> dict[str, Any]:
    """The sessions split among ``procs`` client processes (round robin), each with its
    share of the ``min(N, POOL_CAP)`` connections, warmed as in one process; the clock
    runs from the first process's start to the last one's end, and the meters are read
    around all of them (the pools stay open until then)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")  # no fork of a process that holds connections
    size = min(spec.sessions, POOL_CAP)
    parts = [list(range(p, spec.sessions, procs)) for p in range(procs)]
    sizes = [size // procs + (p < size % procs) for p in range(procs)]
    children: list[tuple[Any, Any]] = []
    try:
        for p in range(procs):
            here, there = ctx.Pipe()
            proc = ctx.Process(target=_client_proc, daemon=True, name=f"lgdp-load-client-{p}",
                               args=(spec, parts[p], sizes[p], sum(sizes[:p]), there))
            proc.start()
            children.append((proc, here))
        pids = [pid for _, pipe in children for pid in _recv(pipe)]

        def go() -> Timings:
            for _, pipe in children:
                pipe.send("go")
            outs = [_recv(pipe) for _, pipe in children]
            return Timings([t for o in outs for t in o[0]], [t for o in outs for t in o[1]],
                           max(o[3] for o in outs) - min(o[2] for o in outs))

        res = _measured(server, spec, pids, go)
    finally:
        for _, pipe in children:
            with contextlib.suppress(OSError):
                pipe.send("close")
        for proc, _ in children:
            proc.join(timeout=60)
            if proc.is_alive():
                proc.terminate()
    res["pool_size"] = size
    res["client_procs"] = procs
    # each client process opens its saver on its share of the pool
    res["opened"] = [opened(spec.saver, spec.mode, n) for n in sizes]
    return res


def _recv(pipe: Any) -> Any:
    msg = pipe.recv()
    if isinstance(msg, tuple) and msg and msg[0] == "error":
        raise RuntimeError(f"load client process failed:\n{msg[1]}")
    return msg


def _client_proc(spec: RunSpec, sessions: list[int], size: int, warm0: int, pipe: Any) -> None:
    """One client process of :func:`run_procs`: sends its backends' pids once warm, runs
    its sessions on "go", sends (turn times, page times, start, end), and closes its
    pool on "close"."""
    import traceback

    try:
        if spec.mode == "threads":
            _client_threads(spec, sessions, size, warm0, pipe)
        else:
            asyncio.run(_client_async(spec, sessions, size, warm0, pipe))
    except BaseException:
        pipe.send(("error", traceback.format_exc()))
        raise


def _client_threads(spec: RunSpec, sessions: list[int], size: int, warm0: int,
                    pipe: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with open_saver(spec.saver, spec.dsn, size) as saver:
        pids = _warm_sync(saver, spec, size, warm0)
        g = build_graph(spec.workload, saver)
        _first_turns_sync(g, spec, sessions)
        pipe.send(pids)
        pipe.recv()
        tm = Timings([], [], 0.0)
        with ThreadPoolExecutor(len(sessions)) as ex:
            t0 = time.monotonic()
            futs = [ex.submit(_session_sync, g, spec, i, tm) for i in sessions]
            for f in futs:
                f.result()
            t1 = time.monotonic()
        pipe.send((tm.turns, tm.pages, t0, t1))
        pipe.recv()


async def _client_async(spec: RunSpec, sessions: list[int], size: int, warm0: int,
                        pipe: Any) -> None:
    loop = asyncio.get_running_loop()
    async with aopen_saver(spec.saver, spec.dsn, size) as saver:
        pids = await _warm_async(saver, spec, size, warm0)
        g = build_graph(spec.workload, saver)
        await _first_turns_async(g, spec, sessions)
        pipe.send(pids)
        await loop.run_in_executor(None, pipe.recv)
        tm = Timings([], [], 0.0)
        t0 = time.monotonic()
        await asyncio.gather(*(_session_async(g, spec, i, tm) for i in sessions))
        t1 = time.monotonic()
        pipe.send((tm.turns, tm.pages, t0, t1))
        await loop.run_in_executor(None, pipe.recv)


# ---------------------------------------------------------------- setup and bytes


@dataclass
class SaverDb:
    saver: str
    dsn: str
    dbid: int
    template: str


def _setup(saver: str, dsn: str, server: Server, ls: LoadScale) -> SaverDb:
    """The saver's tables in its own database and its template threads (``prior`` turns,
    written by that saver through the workload's graph, and one per ``stagger`` offset: a
    copy of the previous one with the turns in between added)."""
    with open_saver(saver, dsn, None) as s:
        s.setup()
        g = build_graph(ls.workload, s)
        run_turns(g, ls.workload, "template", ls.prior)
        done = 0
        for off in sorted(set(ls.stagger) - {0}):
            with psycopg.connect(dsn, autocommit=True) as c:
                clone_threads(c, _template(done), [_template(off)])
            run_turns(g, ls.workload, _template(off), off - done, start=ls.prior + done)
            done = off
    with psycopg.connect(dsn, autocommit=True) as conn:
        from .databases import freeze_autovacuum

        freeze_autovacuum(conn)
    return SaverDb(saver, dsn, server.dbid(dsn), "template")


def _template(offset: int) -> str:
    """The template thread holding ``prior + offset`` turns."""
    return "template" if offset == 0 else f"template+{offset}"


def _bytes_per_turn(db: SaverDb, ls: LoadScale, mode: str) -> dict[str, Any]:
    """One session behind a counting loopback proxy (untimed): bytes the server sent and
    received, and wire round trips, per turn (history pages included at their rate),
    counted after WARM_TURNS turns on the same connection (statements prepared)."""
    from .proxy import LatencyProxy, upstream_of

    tid = f"meter-{mode}"
    with psycopg.connect(db.dsn, autocommit=True) as c:
        clone_threads(c, db.template, [tid])
    turns = ls.meter_turns
    with LatencyProxy(upstream_of(db.dsn), 0.0) as proxy:
        pdsn = proxy.dsn(db.dsn)
        pages = 0
        if mode == "threads":
            with open_saver(db.saver, pdsn, 1) as saver:
                g = build_graph(ls.workload, saver)
                for k in range(WARM_TURNS + turns):
                    if k == WARM_TURNS:  # counted once the statements are prepared
                        before = proxy.counts()
                    g.invoke(user_input(ls.workload, ls.prior + k), _cfg(tid))
                    g.get_state(_cfg(tid))
                    if _pages_at(0, k) or k < WARM_TURNS:
                        pages += k >= WARM_TURNS
                        list(g.get_state_history(_cfg(tid), limit=PAGE))
        else:
            box: dict[str, Any] = {}

            async def main() -> int:
                n = 0
                async with aopen_saver(db.saver, pdsn, 1) as saver:
                    g = build_graph(ls.workload, saver)
                    for k in range(WARM_TURNS + turns):
                        if k == WARM_TURNS:
                            box["before"] = proxy.counts()
                        await g.ainvoke(user_input(ls.workload, ls.prior + k), _cfg(tid))
                        await g.aget_state(_cfg(tid))
                        if _pages_at(0, k) or k < WARM_TURNS:
                            n += k >= WARM_TURNS
                            [s async for s in g.aget_state_history(_cfg(tid), limit=PAGE)]
                return n

            pages = asyncio.run(main())
            before = box["before"]
        d = proxy.counts() - before
    return {
        "turns": turns, "pages": pages,
        "sent_bytes_per_turn": d.down_bytes / turns,
        "received_bytes_per_turn": d.up_bytes / turns,
        "round_trips_per_turn": d.round_trips / turns,
    }


def _final_states_equal(dbs: dict[str, SaverDb], ls: LoadScale, threads: list[str]) -> bool:
    states = {}
    for name, db in dbs.items():
        with open_saver(name, db.dsn, None) as saver:
            g = build_graph(ls.workload, saver)
            states[name] = [g.get_state(_cfg(t)).values for t in threads]
    return bool(states["ours"] == states["official"])


# ---------------------------------------------------------------- the section


def run_load(admin_dsn: str, scale_name: str, log: Callable[[str], None]) -> dict[str, Any]:
    """``admin_dsn``: a server where two scratch databases are made (ours, official)."""
    import uuid

    from .databases import scratch_database

    ls = SCALES[scale_name]
    server = Server.open(admin_dsn)
    tag = uuid.uuid4().hex[:8]
    out: dict[str, Any] = {
        "workload": ls.workload, "sessions": list(ls.sessions),
        "turns_per_session": {str(k): v for k, v in ls.turns.items()}, "reps": ls.reps,
        "prior_turns": ls.prior, "stagger": list(ls.stagger),
        "history_every": HISTORY_EVERY, "page": PAGE,
        "pool_cap": POOL_CAP, "max_connections": server.max_connections,
        "session_warm_turns": SESSION_WARM_TURNS,
        "client_procs": ls.client_procs,
        "opened": {
            "ours": f"DeltaPostgresSaver (threads) / AsyncDeltaPostgresSaver (asyncio) "
                    f".from_conn_string(pool_size=n), n: min(N, {POOL_CAP}) split among the "
                    "client processes",
            "official": "PostgresSaver / AsyncPostgresSaver on a ConnectionPool / "
                        "AsyncConnectionPool(min_size=n, max_size=n, kwargs: "
                        f"{OFFICIAL_POOL_KWARGS}) (its from_conn_string opens one "
                        "connection), n as ours",
            "setup_and_final_states": ONE_CONNECTION + " (each saver's own)",
        },
        "measures": {
            "db_time": "pg_stat_statements total_exec_time" if server.pgss else None,
            "backend_cpu": "utime+stime of the pool's backends (/proc)" if server.proc else None,
            "bytes": "loopback proxy, one session, untimed pass",
        },
    }
    log(
        f"load: {ls.workload}, sessions {list(ls.sessions)}, modes {list(MODES)}; "
        f"pg_stat_statements: {'yes' if server.pgss else 'no (not preloaded)'}; backend CPU "
        f"from /proc: {'yes' if server.proc else 'no'}; max_connections "
        f"{server.max_connections}, pools of min(N, {POOL_CAP})"
    )
    log("load: savers " + "; ".join(f"{k} {v}" for k, v in out["opened"].items()))
    try:
        with scratch_database(admin_dsn, f"{tag}o") as (ours_dsn, ours_where), scratch_database(
            admin_dsn, f"{tag}f"
        ) as (off_dsn, off_where):
            out["scratch"] = {"ours": ours_where, "official": off_where}
            dbs = {
                "ours": _setup("ours", ours_dsn, server, ls),
                "official": _setup("official", off_dsn, server, ls),
            }
            if dbs["ours"].dbid == dbs["official"].dbid:  # schema fallback: one database
                out["measures"]["db_time"] = None
                server.pgss = False
            out["bytes"] = {
                mode: {name: _bytes_per_turn(db, ls, mode) for name, db in dbs.items()}
                for mode in MODES
            }
            levels: dict[str, dict[str, Any]] = {m: {} for m in MODES}
            checked: list[str] = []
            for rep in range(ls.reps):
                for li, n in enumerate(ls.sessions):
                    for mode in MODES:
                        order = list(SAVERS) if (rep + li) % 2 == 0 else list(SAVERS)[::-1]
                        entry = levels[mode].setdefault(str(n), {"runs": []})
                        pair: dict[str, Any] = {"order": order, "loadavg": _loadavg()}
                        prefix = f"{mode[0]}{n}r{rep}"
                        for name in order:
                            db = dbs[name]
                            spec = RunSpec(mode, name, db.dsn, db.dbid, n, ls.turns[n],
                                           ls.prior, ls.workload, prefix, ls.stagger)
                            ids = {off: [spec.thread(i) for i in range(n)
                                         if spec.prior_of(i) == ls.prior + off]
                                   for off in set(ls.stagger)}
                            ids[0] += [f"{prefix}-warm-{i:03}" for i in range(min(n, POOL_CAP))]
                            with psycopg.connect(db.dsn, autocommit=True) as c:
                                for off, some in ids.items():
                                    if some:
                                        clone_threads(c, _template(off), some)
                            procs = min(n, ls.client_procs)
                            if procs > 1:
                                pair[name] = run_procs(server, spec, procs)
                            else:
                                run = run_asyncio if mode == "asyncio" else run_threads
                                pair[name] = run(server, spec)
                                pair[name]["client_procs"] = 1
                        if rep == 0:
                            checked += [f"{prefix}-{i:03}" for i in range(n)]
                        entry["runs"].append(pair)
                        log("  " + _line(mode, n, rep, pair))
            out["levels"] = levels
            for mode in MODES:
                for e in levels[mode].values():
                    e["summary"] = _summarize(e["runs"])
            out["states_equal"] = _final_states_equal(dbs, ls, checked)
            log(f"  final states of both savers equal: {out['states_equal']}")
    finally:
        server.close()
    return out


def _loadavg() -> float | None:
    """The machine's 1-minute load average (None where the OS does not say)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _line(mode: str, n: int, rep: int, pair: dict[str, Any]) -> str:
    o, f = pair["ours"], pair["official"]
    s = (f"{mode} {n:>2} sessions (rep {rep}): turns/s ours {o['turns_per_s']:.1f} official "
         f"{f['turns_per_s']:.1f}; p50/p99 ms ours {o['turn_ms']['p50']:.0f}/"
         f"{o['turn_ms']['p99']:.0f} official {f['turn_ms']['p50']:.0f}/{f['turn_ms']['p99']:.0f}")
    if "exec_ms_per_turn" in o:
        s += (f"; db exec ms/turn ours {o['exec_ms_per_turn']:.2f} official "
              f"{f['exec_ms_per_turn']:.2f}")
    if o["backend_cpu_ms_per_turn"] is not None:
        s += (f"; backend cpu ms/turn ours {o['backend_cpu_ms_per_turn']:.2f} official "
              f"{f['backend_cpu_ms_per_turn']:.2f}")
    return s


def _med(xs: list[float]) -> float:
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def _summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the repetitions, ratios pair by pair."""

    def ratio(get: Callable[[dict[str, Any]], float | None], a: str, b: str) -> float:
        xs = []
        for p in runs:
            x, y = get(p[a]), get(p[b])
            if x is not None and y is not None and y > 0:
                xs.append(x / y)
        return _med(xs)

    def med(get: Callable[[dict[str, Any]], float | None], who: str) -> float:
        return _med([v for p in runs if (v := get(p[who])) is not None])

    getters: dict[str, Callable[[dict[str, Any]], Any]] = {
        "turns_per_s": lambda r: r["turns_per_s"],
        "turn_p50_ms": lambda r: r["turn_ms"]["p50"],
        "turn_p99_ms": lambda r: r["turn_ms"]["p99"],
        "page_p50_ms": lambda r: r["page_ms"]["p50"],
        "exec_ms_per_turn": lambda r: r.get("exec_ms_per_turn"),
        "shared_blks_per_turn": lambda r: r.get("shared_blks_per_turn"),
        "calls_per_turn": lambda r: r.get("calls_per_turn"),
        "backend_cpu_ms_per_turn": lambda r: r.get("backend_cpu_ms_per_turn"),
    }
    s: dict[str, Any] = {k: {w: med(g, w) for w in SAVERS} for k, g in getters.items()}
    s["throughput_ours_over_official"] = ratio(getters["turns_per_s"], "ours", "official")
    s["exec_official_over_ours"] = ratio(getters["exec_ms_per_turn"], "official", "ours")
    s["cpu_official_over_ours"] = ratio(getters["backend_cpu_ms_per_turn"], "official", "ours")
    s["blks_official_over_ours"] = ratio(getters["shared_blks_per_turn"], "official", "ours")
    s["p99_ours_over_official"] = ratio(getters["turn_p99_ms"], "ours", "official")
    s["p50_ours_over_official"] = ratio(getters["turn_p50_ms"], "ours", "official")
    s["pairs"] = len(runs)
    return s


# ---------------------------------------------------------------- report


TARGETS = {"db_official_over_ours": 3.0, "throughput": 1.0, "throughput_at_64": 1.5}


def headline(res: dict[str, Any]) -> dict[str, Any]:
    ld = res.get("load")
    if not ld or "levels" not in ld:
        return {}
    h: dict[str, Any] = {}
    for mode, levels in ld["levels"].items():
        top = max(levels, key=int)
        s = levels[top]["summary"]
        h[f"load_{mode}_{top}_sessions"] = {
            "throughput_ours_over_official": s["throughput_ours_over_official"],
            "db_exec_official_over_ours": s["exec_official_over_ours"],
            "backend_cpu_official_over_ours": s["cpu_official_over_ours"],
            "p99_ours_over_official": s["p99_ours_over_official"],
        }
    return h


def _f(x: Any, fmt: str = ".2f") -> str:
    return "n/a" if x is None or x != x else format(x, fmt)


def markdown(res: dict[str, Any], img_rel: str = "img") -> list[str]:
    ld = res.get("load")
    if not ld or "levels" not in ld:
        return []
    m = ld["measures"]
    L = [
        "## Load: how many agents one Postgres serves", "",
        "Measured by `langgraph-delta-pg bench` (its load section; alone: `--only load`). "
        f"N concurrent sessions, each on its own `{ld['workload']}` thread holding "
        f"{_held(ld)} turns: per turn `invoke` + `get_state`, and on one turn in "
        f"{ld['history_every']} a `get_state_history(limit={ld['page']})` page. Ours and the "
        "official saver each in their own scratch database on the same server, on rows they "
        f"wrote; pools of min(N, {ld['pool_cap']}) connections (server max_connections "
        f"{ld['max_connections']}); {ld['reps']} repetition(s), the order alternating; "
        "values are medians over repetitions, ratios pair by pair. Per turn, a history page "
        "counts in the turn that asked for it; turn latency is `invoke` + `get_state`.", "",
        f"The sessions run in min(N, {ld.get('client_procs', 1)}) client processes (each "
        "with its share of the pool), so that one saturated Python process does not leave "
        "the server waiting to send (`ClientWrite`) inside both savers' statements. Before "
        f"the clock starts each session runs {ld.get('session_warm_turns', 0)} untimed "
        "turn(s) on its thread, as a server that has been serving the conversation has (a "
        "saver's first read of a thread is a fixed cost per session, which would weigh all "
        "of a run's turns at 1 session and 6 at 64). The threads' lengths are spread over "
        f"{len(ld.get('stagger', [0]))} starting points, so DeltaChannel snapshots "
        "(every 100 updates, about 30 turns) fall where a real thread has them rather than "
        "in every session's first turn.", "",
        f"Database time: {m['db_time'] or 'pg_stat_statements not available'}; backend CPU: "
        f"{m['backend_cpu'] or 'not available (server not on this machine)'}; bytes: "
        f"{m['bytes']}. Final states of both savers equal: "
        f"{'yes' if ld.get('states_equal') else 'NO'}.{_load_note(ld)}", "",
        "Database execution time is wall-clock time inside the statements: besides the "
        "work it holds every wait inside a statement (locks, sending rows to a client that "
        "is not reading), and on a machine whose cores are all busy it stretches with the "
        "CPU a statement needs, more for the saver whose statements need more (compare "
        "the backend CPU columns, which count only the work).", "",
        "| mode | sessions | turns/s ours | turns/s official | ours/official (>= 1.0; 1.5 at 64) "
        "| db exec ms/turn ours | official | official/ours (>= 3) | backend CPU ms/turn ours "
        "| official | official/ours | shared blks/turn ours | official | turn p50 ms ours "
        "| official | turn p99 ms ours | official |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, levels in ld["levels"].items():
        for n, e in sorted(levels.items(), key=lambda kv: int(kv[0])):
            s = e["summary"]
            L.append(
                f"| {mode} | {n} | {_f(s['turns_per_s']['ours'], '.1f')} "
                f"| {_f(s['turns_per_s']['official'], '.1f')} "
                f"| {_f(s['throughput_ours_over_official'])}x "
                f"| {_f(s['exec_ms_per_turn']['ours'])} | {_f(s['exec_ms_per_turn']['official'])} "
                f"| {_f(s['exec_official_over_ours'])}x "
                f"| {_f(s['backend_cpu_ms_per_turn']['ours'])} "
                f"| {_f(s['backend_cpu_ms_per_turn']['official'])} "
                f"| {_f(s['cpu_official_over_ours'])}x "
                f"| {_f(s['shared_blks_per_turn']['ours'], '.0f')} "
                f"| {_f(s['shared_blks_per_turn']['official'], '.0f')} "
                f"| {_f(s['turn_p50_ms']['ours'], '.0f')} "
                f"| {_f(s['turn_p50_ms']['official'], '.0f')} "
                f"| {_f(s['turn_p99_ms']['ours'], '.0f')} "
                f"| {_f(s['turn_p99_ms']['official'], '.0f')} |"
            )
    L += ["", "Bytes per turn (one session behind a counting loopback proxy):", "",
          "| mode | saver | sent by the server | received | round trips |", "|---|---|---|---|---|"]
    for mode, per in ld.get("bytes", {}).items():
        for name, b in per.items():
            L.append(f"| {mode} | {name} | {b['sent_bytes_per_turn']:,.0f} "
                     f"| {b['received_bytes_per_turn']:,.0f} | {b['round_trips_per_turn']:.1f} |")
    L += ["", *_targets(ld), "", *_where_time_goes(ld)]
    L += ["", f"![load]({img_rel}/load.png)", ""]
    return L


def _targets(ld: dict[str, Any]) -> list[str]:
    """Which of issue 22's load targets this run meets (pair medians, every level)."""
    rows = [(mode, int(n), e["summary"]) for mode, levels in ld["levels"].items()
            for n, e in levels.items()]
    top = max(n for _, n, _ in rows)

    def verdict(ok: bool) -> str:
        return "met" if ok else "**not met**"

    thr = [s["throughput_ours_over_official"] for _, _, s in rows]
    at_top = [s["throughput_ours_over_official"] for _, n, s in rows if n == top]
    p99 = [s["p99_ours_over_official"] for _, _, s in rows]
    thr_ok = min(thr) >= TARGETS["throughput"] and min(at_top) >= TARGETS["throughput_at_64"]
    L = [
        "Targets (issue 22), on the pair medians above:", "",
        "| target | this run | verdict |", "|---|---|---|",
        f"| throughput ours/official >= {TARGETS['throughput']} at every level, "
        f">= {TARGETS['throughput_at_64']} at {top} | {_f(min(thr))}x lowest; "
        f"{_f(min(at_top))}x lowest at {top} | "
        f"{verdict(thr_ok)} |",
        f"| turn p99 ours <= official at every level | ours/official {_f(max(p99))} highest "
        f"| {verdict(max(p99) <= 1.0)} |",
    ]
    if ld["measures"]["db_time"]:
        ex = [s["exec_official_over_ours"] for _, _, s in rows]
        L.append(
            f"| database execution time official/ours >= {TARGETS['db_official_over_ours']} "
            f"at every level | {_f(min(ex))}x lowest, {_f(max(ex))}x highest "
            f"| {verdict(min(ex) >= TARGETS['db_official_over_ours'])} |"
        )
    return L


def _where_time_goes(ld: dict[str, Any], levels: tuple[int, ...] = (16, 64)) -> list[str]:
    """Per saver at the top levels (first repetition): the statements that took the most
    execution time and what the pool's backends were doing when sampled."""
    L = [
        "Where the statement time goes (first repetition; ms and calls per turn of the "
        "three statements that took the most execution time; the mean number of the "
        "pool's backends in each state, sampled from `pg_stat_activity` every 50 ms):", "",
        "| mode | sessions | saver | top statements: ms/turn (calls/turn) | backends sampled |",
        "|---|---|---|---|---|",
    ]
    any_row = False
    for mode, lv in ld["levels"].items():
        for n in levels:
            e = lv.get(str(n))
            if not e or not e["runs"]:
                continue
            pair = e["runs"][0]
            for who in SAVERS:
                r = pair[who]
                st = r.get("statements")
                if st is None:
                    continue
                any_row = True
                top = "; ".join(
                    f"`{_short(q['query'])}` {q['exec_ms'] / r['turns']:.2f} "
                    f"({q['calls'] / r['turns']:.1f})"
                    for q in st["top"][:3]
                )
                waits = ", ".join(
                    f"{k} {v:.2f}" for k, v in list(r["waits"]["per_sample"].items())[:4]
                )
                L.append(f"| {mode} | {n} | {who} | {top} | {waits} |")
    return L if any_row else []


def _short(query: str) -> str:
    """A statement's first words, enough to tell which it is."""
    words = query.replace("`", "").split()
    return " ".join(words[:6]) + (" ..." if len(words) > 6 else "")


def _load_note(ld: dict[str, Any]) -> str:
    """The machine's load average when the pairs started, if the run recorded it."""
    xs = [p["loadavg"] for lv in ld["levels"].values() for e in lv.values()
          for p in e["runs"] if p.get("loadavg") is not None]
    if not xs:
        return ""
    return (f" Load average (1 min) of the machine when each pair started: "
            f"{min(xs):.1f} to {max(xs):.1f}.")


def _held(ld: dict[str, Any]) -> str:
    """How many turns the sessions' threads hold when they start."""
    offs = ld.get("stagger") or [0]
    lo, hi = ld["prior_turns"] + min(offs), ld["prior_turns"] + max(offs)
    return str(lo) if lo == hi else f"{lo} to {hi}"


def plot(res: dict[str, Any], img: Any) -> list[Any]:
    ld = res.get("load")
    if not ld or "levels" not in ld:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    img.mkdir(parents=True, exist_ok=True)
    key = "exec_ms_per_turn" if ld["measures"]["db_time"] else "backend_cpu_ms_per_turn"
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.5), dpi=110)
    for mode, levels in ld["levels"].items():
        ns = sorted(levels, key=int)
        xs = [int(n) for n in ns]
        for who, style in (("ours", "-"), ("official", "--")):
            label = f"{'ours' if who == 'ours' else 'official 3.2'}, {mode}"
            a.plot(xs, [levels[n]["summary"]["turns_per_s"][who] for n in ns], style,
                   marker="o", label=label)
            b.plot(xs, [levels[n]["summary"][key][who] for n in ns], style, marker="o",
                   label=label)
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent sessions")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    a.set_ylabel("turns/s (median)")
    a.set_title("throughput")
    b.set_ylabel(("pg_stat_statements exec" if key == "exec_ms_per_turn" else "backend CPU")
                 + " ms per turn")
    b.set_title("database time per turn")
    fig.suptitle(res.get("command", ""), fontsize=8)
    fig.tight_layout()
    path = img / "load.png"
    fig.savefig(path)
    plt.close(fig)
    return [path]


def run_alone(
    args: Any, scale: str, server: Callable[[str | None], Any], command: str
) -> dict[str, Any]:
    """``langgraph-delta-pg bench --only load``: this part alone, on the same server the
    full run uses (two scratch databases)."""
    res: dict[str, Any] = {"command": command, "scale": scale}
    t0 = time.perf_counter()
    with server(args.dsn) as (server_dsn, source):
        res["database"] = {"source": source, "scratch": "two scratch databases"}
        with psycopg.connect(server_dsn, autocommit=True) as meter:
            from .machine import machine_facts

            res["machine"] = machine_facts(meter)
        res["load"] = run_load(server_dsn, scale, lambda m: print(m, flush=True))
    res["seconds"] = time.perf_counter() - t0
    return res
