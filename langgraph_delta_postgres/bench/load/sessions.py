"""How the load section's sessions run: in threads on a ``ConnectionPool``, on an event
loop on an ``AsyncConnectionPool``, or split among client processes; pools warmed before
the clock starts; what a run measured (turn and page latencies, the server's meters)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langgraph_delta_postgres._local.workloads import build_graph, user_input

from ..savers import ONE_CONNECTION, aopen_saver, official_pooled, open_saver, pooled
from .scale import PAGE, POOL_CAP, SESSION_WARM_TURNS, WARM_TURNS, _cfg, _pages_at
from .server import _TICK, Server, WaitSampler, _cpu_ticks


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
