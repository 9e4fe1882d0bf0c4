"""The replicas section's turn-loss part: workers, each with its own routing saver,
alternating on shared threads while the standby's replay lags."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._local.standby import Standby
from langgraph_delta_postgres._local.workloads import build_graph, user_input

from .rounds import WORKLOAD, _routing

#: scale -> (workers, threads, turns per thread) of the turn-loss section
LOSS_TURNS = {"full": (3, 4, 30), "quick": (3, 3, 12), "tiny": (3, 2, 4)}



def turn_loss(dsn: str, replica: str, standby: Standby, size: tuple[int, int, int],
              log: Callable[[str], None]) -> dict[str, Any]:
    """Several workers, each with its own routing saver, run the turns of shared threads
    in alternation (turn k of a thread on worker k mod workers, as Agent Server's workers
    do), threads in parallel, with the standby's replay delayed by 20 ms
    (``recovery_min_apply_delay``, about a standby on another host). Counted: turns whose
    input is missing from the thread's final state on the primary."""
    workers, n_threads, turns = size
    threads = [f"loss{i}" for i in range(n_threads)]
    with standby.admin() as c:
        c.execute("ALTER SYSTEM SET recovery_min_apply_delay = '20ms'")
        c.execute("SELECT pg_reload_conf()")
    try:
        with contextlib.ExitStack() as stack:
            graphs = []
            for _ in range(workers):
                graphs.append(build_graph(WORKLOAD, stack.enter_context(_routing(dsn, replica))))
            started = time.perf_counter()
            for k in range(turns):
                errors: list[BaseException] = []

                def turn(j: int, t: str, k: int = k,
                         errors: list[BaseException] = errors) -> None:
                    try:
                        graphs[(k + j) % workers].invoke(
                            user_input(WORKLOAD, k), {"configurable": {"thread_id": t}})
                    except BaseException as e:  # noqa: BLE001  # raised below
                        errors.append(e)

                ts = [threading.Thread(target=turn, args=(j, t)) for j, t in enumerate(threads)]
                for th in ts:
                    th.start()
                for th in ts:
                    th.join()
                if errors:
                    raise errors[0]
            seconds = time.perf_counter() - started
    finally:
        with standby.admin() as c:
            c.execute("ALTER SYSTEM RESET recovery_min_apply_delay")
            c.execute("SELECT pg_reload_conf()")
    lost = 0
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as ref:
        g = build_graph(WORKLOAD, ref)
        want = [_human(user_input(WORKLOAD, k)) for k in range(turns)]
        for t in threads:
            msgs = g.get_state({"configurable": {"thread_id": t}}).values.get("messages", [])
            got = [m.content for m in msgs if getattr(m, "type", "") == "human"]
            lost += sum(1 for w in want if w not in got) if got != want else 0
    total = turns * n_threads
    log(f"replicas: {workers} workers alternating turns on {n_threads} threads, replay "
        f"delayed 20 ms: {lost} of {total} turns lost ({seconds:.1f} s)")
    return {"workers": workers, "threads": n_threads, "turns": total, "lost": lost,
            "seconds": round(seconds, 1)}


def _human(inp: Any) -> Any:
    """The content of the human message of a turn's input."""
    msgs = inp["messages"] if isinstance(inp, dict) else inp
    return msgs[-1].content if hasattr(msgs[-1], "content") else msgs[-1][1]
