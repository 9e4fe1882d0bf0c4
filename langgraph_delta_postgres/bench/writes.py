"""The write path under LangGraph's own concurrency (``langgraph-delta-pg bench --only
writes``): ours against the official saver, both opened as their users open them.

* **fan-out**: a turn of a graph whose first node sends ``TASKS`` tasks over ``NODES``
  parallel nodes (``Send``), each writing to a ``DeltaChannel`` and a plain list channel,
  then a node that joins them: 16 ``put_writes`` at once on one thread, then the next
  step's ``put``. Sync (``invoke``) and async (``ainvoke``), LangGraph's default
  durability. Each saver on its own thread, the turns alternating saver by saver; the
  per-turn ratio ours/official is taken pair by pair and its median reported. Savers
  opened by ``from_conn_string(dsn)`` (one connection, as the README's quickstart).
* **concurrent runs on one thread**: ``RUNS`` runs of that graph at once on one thread
  (threads / asyncio tasks), for ``SECONDS`` seconds per round, the two savers' rounds
  alternating: completed runs per second; the ratio ours/official pair by pair (above 1:
  ours served more). Savers on a pool of ``RUNS`` connections: ours
  ``from_conn_string(dsn, pool_size=RUNS)``, the official saver (whose
  ``from_conn_string`` opens one connection) on a ``ConnectionPool`` with the connection
  settings its documentation gives (autocommit, prepare_threshold=0, dict_row). Each
  part's results say how its savers were opened (``opened``).

* **trigger cost**: what migration 0007's triggers (``checkpoint_epochs`` kept by the
  database for every writer) add to our write path: blocks of ``TRIGGER_BLOCK`` steps
  (a ``put``, then a ``put_writes`` of two writes to it, as a LangGraph step makes), the
  triggers enabled and disabled block by block (``ALTER TABLE ... ENABLE / DISABLE
  TRIGGER``), one connection; the ratio enabled/disabled pair by pair.

Ours and the official saver each write in a scratch database of their own on the same
server (the official one made by its own ``setup()``), so each pays only for its own
schema.
"""

from __future__ import annotations

import asyncio
import contextlib
import operator
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypedDict

import psycopg
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from langgraph_delta_postgres import DeltaPostgresSaver

from .savers import ONE_CONNECTION, aopen_saver, official_pooled, open_saver, pooled
from .timing import run_threads

TASKS = 16
NODES = 8
RUNS = 4
TRIGGER_BLOCK = 50
_TRIGGERS = (("checkpoints", "lgdp_epochs_put"), ("checkpoint_writes", "lgdp_epochs_write"))
#: scale -> (fan-out turn pairs, warm-up turns, concurrent rounds per saver, seconds per
#: round, trigger block pairs)
SIZES = {
    "full": (60, 5, 4, 6.0, 20),
    "quick": (24, 3, 2, 4.0, 8),
    "tiny": (4, 1, 1, 1.0, 2),
}
SAVERS = ("ours", "official")


def _append(state: Sequence[Any], writes: Sequence[Any]) -> list[Any]:
    out = list(state)
    for w in writes:
        out.extend(w if isinstance(w, list) else [w])
    return out


class _State(TypedDict):
    messages: Annotated[list[str], DeltaChannel(_append, snapshot_frequency=50)]
    results: Annotated[list[str], operator.add]


class _Task(TypedDict):
    text: str
    i: int


def fan_out_graph() -> StateGraph[Any]:
    """``plan`` sends TASKS tasks over NODES nodes; ``join`` runs after all of them."""
    g: StateGraph[Any] = StateGraph(_State)
    names = [f"work{k}" for k in range(NODES)]

    def plan(state: _State) -> dict[str, Any]:
        return {"results": ["planned"]}

    def send(state: _State) -> list[Send]:
        text = state["messages"][-1] if state.get("messages") else "?"
        return [Send(names[i % NODES], {"text": text, "i": i}) for i in range(TASKS)]

    def work(state: Any) -> dict[str, Any]:  # a _Task
        return {"messages": [f"{state['text']}/{state['i']}"], "results": [str(state["i"])]}

    def join(state: _State) -> dict[str, Any]:
        return {"results": [f"joined {len(state['messages'])}"]}

    g.add_node("plan", plan)
    for n in names:
        g.add_node(n, work)
        g.add_edge(n, "join")
    g.add_node("join", join)
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", send, names)
    g.add_edge("join", END)
    return g


def _opened(pool: int | None, asynchronous: bool = False) -> dict[str, str]:
    """How :func:`_sync_saver` / :func:`_async_saver` open the savers (the "opened" field
    of each part's results)."""
    ours = ("AsyncDeltaPostgresSaver" if asynchronous else "DeltaPostgresSaver") + "."
    off = "AsyncPostgresSaver" if asynchronous else "PostgresSaver"
    if pool is None:
        return {"ours": ours + ONE_CONNECTION, "official": f"{off}.{ONE_CONNECTION}"}
    pool_cls = "AsyncConnectionPool" if asynchronous else "ConnectionPool"
    return {"ours": ours + pooled(pool),
            "official": f"{off} on " + official_pooled(pool).replace("ConnectionPool", pool_cls)}


def _cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def _fan_out_sync(dsns: dict[str, str], pairs: int, warm: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {s: [] for s in SAVERS}
    with contextlib.ExitStack() as stack:
        graphs = {s: fan_out_graph().compile(
            checkpointer=stack.enter_context(open_saver(s, dsns[s], None))) for s in SAVERS}
        for k in range(warm + pairs):
            order = SAVERS if k % 2 == 0 else SAVERS[::-1]
            for s in order:
                t0 = time.perf_counter()
                graphs[s].invoke({"messages": [f"turn{k}"]}, _cfg("fan-sync"))
                if k >= warm:
                    times[s].append(time.perf_counter() - t0)
    return _pairs(times, False)


async def _fan_out_async(dsns: dict[str, str], pairs: int, warm: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {s: [] for s in SAVERS}
    async with contextlib.AsyncExitStack() as stack:
        graphs = {s: fan_out_graph().compile(
            checkpointer=await stack.enter_async_context(aopen_saver(s, dsns[s], None)))
            for s in SAVERS}
        for k in range(warm + pairs):
            order = SAVERS if k % 2 == 0 else SAVERS[::-1]
            for s in order:
                t0 = time.perf_counter()
                await graphs[s].ainvoke({"messages": [f"turn{k}"]}, _cfg("fan-async"))
                if k >= warm:
                    times[s].append(time.perf_counter() - t0)
    return _pairs(times, True)


def _pairs(times: dict[str, list[float]], asynchronous: bool) -> dict[str, Any]:
    ratios = [a / b for a, b in zip(times["ours"], times["official"], strict=True)]
    return {
        "turn_ms_p50": {s: statistics.median(times[s]) * 1000 for s in SAVERS},
        "ratio": statistics.median(ratios),
        "pairs": len(ratios),
        "opened": _opened(None, asynchronous),
    }


def _concurrent_sync(name: str, dsn: str, seconds: float, tag: str) -> float:
    """Completed runs per second of RUNS threads invoking the graph on one thread."""
    with open_saver(name, dsn, RUNS) as saver:
        graph = fan_out_graph().compile(checkpointer=saver)
        graph.invoke({"messages": ["warm"]}, _cfg(tag))
        stop = threading.Event()
        done = [0] * RUNS
        errors: list[BaseException] = []

        def loop(i: int) -> None:
            try:
                while not stop.is_set():
                    graph.invoke({"messages": [f"r{i}"]}, _cfg(tag))
                    done[i] += 1
            except BaseException as e:  # noqa: BLE001 - re-raised below
                errors.append(e)

        workers = [threading.Thread(target=loop, args=(i,)) for i in range(RUNS)]
        elapsed = run_threads(workers, seconds, stop)
    if errors:
        raise errors[0]
    return sum(done) / elapsed


async def _concurrent_async(name: str, dsn: str, seconds: float, tag: str) -> float:
    async with aopen_saver(name, dsn, RUNS) as saver:
        graph = fan_out_graph().compile(checkpointer=saver)
        await graph.ainvoke({"messages": ["warm"]}, _cfg(tag))
        done = [0] * RUNS
        deadline = time.perf_counter() + seconds

        async def loop(i: int) -> None:
            while time.perf_counter() < deadline:
                await graph.ainvoke({"messages": [f"r{i}"]}, _cfg(tag))
                done[i] += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(loop(i) for i in range(RUNS)))
        elapsed = time.perf_counter() - t0
    return sum(done) / elapsed


def _concurrent(dsns: dict[str, str], rounds: int, seconds: float,
                run: Callable[[str, str, float, str], float], asynchronous: bool
                ) -> dict[str, Any]:
    per: dict[str, list[float]] = {s: [] for s in SAVERS}
    for r in range(rounds):
        for s in (SAVERS if r % 2 == 0 else SAVERS[::-1]):
            per[s].append(run(s, dsns[s], seconds, f"conc-{r}"))
    ratios = [a / b for a, b in zip(per["ours"], per["official"], strict=True)]
    return {
        "runs_per_s": {s: statistics.median(per[s]) for s in SAVERS},
        "ratio": statistics.median(ratios),
        "rounds": rounds,
        "opened": _opened(RUNS, asynchronous),
    }


def _set_triggers(conn: psycopg.Connection[Any], on: bool) -> None:
    from psycopg import sql

    for table, trigger in _TRIGGERS:
        conn.execute(sql.SQL("ALTER TABLE {} {} TRIGGER {}").format(
            sql.Identifier(table), sql.SQL("ENABLE" if on else "DISABLE"),
            sql.Identifier(trigger)))


def _trigger_cost(dsn: str, pairs: int) -> dict[str, Any]:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    times: dict[bool, list[float]] = {True: [], False: []}
    with psycopg.connect(dsn, autocommit=True) as admin, \
            DeltaPostgresSaver.from_conn_string(dsn) as saver:
        cfg: Any = {"configurable": {"thread_id": "trigger-cost", "checkpoint_ns": ""}}
        version = None

        def block() -> float:
            nonlocal cfg, version
            t0 = time.perf_counter()
            for _ in range(TRIGGER_BLOCK):
                cp = empty_checkpoint()
                cp["id"] = str(uuid6())
                version = saver.get_next_version(version, None)
                cp["channel_versions"] = {"n": version}
                cp["channel_values"] = {"n": 1}
                cfg = saver.put(cfg, cp, {"source": "loop", "step": 1, "parents": {}},
                                {"n": version})
                saver.put_writes(cfg, [("n", 1), ("m", "x")], str(uuid6()))
            return (time.perf_counter() - t0) / TRIGGER_BLOCK

        try:
            block()  # warm: prepared statements, caches
            for k in range(pairs):
                for on in ((True, False) if k % 2 == 0 else (False, True)):
                    _set_triggers(admin, on)
                    times[on].append(block())
        finally:
            _set_triggers(admin, True)
    ratios = [a / b for a, b in zip(times[True], times[False], strict=True)]
    return {
        "step_ms_p50": {"triggers": statistics.median(times[True]) * 1000,
                        "no_triggers": statistics.median(times[False]) * 1000},
        "ratio": statistics.median(ratios),
        "pairs": len(ratios),
        # the triggers are switched on a connection of the section's own
        "opened": {"ours": "DeltaPostgresSaver." + ONE_CONNECTION},
    }


def run_writes(dsns: dict[str, str], scale: str, log: Callable[[str], None]) -> dict[str, Any]:
    pairs, warm, rounds, seconds, trigger_pairs = SIZES[scale]
    out: dict[str, Any] = {"tasks": TASKS, "nodes": NODES, "runs": RUNS}
    for part, pool, asynchronous in (("fan-out", None, False), ("fan-out async", None, True),
                                     ("concurrent", RUNS, False),
                                     ("concurrent async", RUNS, True)):
        log(f"writes: {part} savers: " + "; ".join(
            f"{k} {v}" for k, v in _opened(pool, asynchronous).items()))
    out["trigger_cost"] = _trigger_cost(dsns["ours"], trigger_pairs)
    tc = out["trigger_cost"]
    log(f"writes: a put + put_writes step with the 0007 triggers / without: {tc['ratio']:.3f} "
        f"({tc['step_ms_p50']['triggers']:.3f} / {tc['step_ms_p50']['no_triggers']:.3f} ms)")
    out["fan_out_sync"] = _fan_out_sync(dsns, pairs, warm)
    log(f"writes: fan-out turn (sync) ours/official {out['fan_out_sync']['ratio']:.2f}")
    out["fan_out_async"] = asyncio.run(_fan_out_async(dsns, pairs, warm))
    log(f"writes: fan-out turn (async) ours/official {out['fan_out_async']['ratio']:.2f}")
    out["concurrent_sync"] = _concurrent(dsns, rounds, seconds, _concurrent_sync, False)
    log(f"writes: {RUNS} runs on one thread (threads) throughput ours/official "
        f"{out['concurrent_sync']['ratio']:.2f}")
    out["concurrent_async"] = _concurrent(
        dsns, rounds, seconds, lambda *a: asyncio.run(_concurrent_async(*a)), True)
    log(f"writes: {RUNS} runs on one thread (asyncio) throughput ours/official "
        f"{out['concurrent_async']['ratio']:.2f}")
    return out


def run_alone(
    args: Any, scale: str, server: Callable[[str | None], Any], command: str
) -> dict[str, Any]:
    """``langgraph-delta-pg bench --only writes``: two scratch databases (ours migrated,
    the official saver's by its ``setup()``), the two parts; prints the summary."""
    import uuid

    from langgraph.checkpoint.postgres import PostgresSaver

    from .databases import scratch_database, section_database
    from .machine import loadavg

    with section_database(args, scale, server, command) as (res, dsn, server_dsn), \
            scratch_database(server_dsn, uuid.uuid4().hex[:10]) as (off_dsn, _):
        with PostgresSaver.from_conn_string(off_dsn) as off:
            off.setup()
        res["load_before"] = loadavg()
        res["writes"] = run_writes({"ours": dsn, "official": off_dsn}, scale,
                                   lambda m: print(m, flush=True))
        res["load_after"] = loadavg()
    w = res["writes"]
    print(
        f"writes ({command}; load average {res['load_before']} -> {res['load_after']}): "
        f"a {TASKS}-task Send fan-out turn ours/official {w['fan_out_sync']['ratio']:.2f} sync, "
        f"{w['fan_out_async']['ratio']:.2f} async (median of {w['fan_out_sync']['pairs']} pair "
        f"ratios; p50 ours {w['fan_out_sync']['turn_ms_p50']['ours']:.1f} / official "
        f"{w['fan_out_sync']['turn_ms_p50']['official']:.1f} ms sync, "
        f"{w['fan_out_async']['turn_ms_p50']['ours']:.1f} / "
        f"{w['fan_out_async']['turn_ms_p50']['official']:.1f} ms async); {RUNS} runs at once "
        f"on one thread, throughput ours/official {w['concurrent_sync']['ratio']:.2f} threads, "
        f"{w['concurrent_async']['ratio']:.2f} asyncio; a put + put_writes step with the 0007 "
        f"triggers takes {w['trigger_cost']['ratio']:.3f}x the time without",
        flush=True,
    )
    return res
