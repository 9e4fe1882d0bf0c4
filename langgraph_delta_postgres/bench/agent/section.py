"""The agent section: the session run turn by turn on every saver (sync and async), the
loads timed in interleaved rounds, the comparisons, the headline, and
``bench --only agent``."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from ... import DeltaPostgresSaver
from ...migrate import migrate
from ..savers import NEW_CONNECTION, ONE_CONNECTION, NewSavers
from ..timing import Interleaved, ratio_summary, summary
from .floor import RoundTripSaver
from .session import SCALES, _cfg, _turn_inputs, build_agent, normalized

PAGE = 10

SAVERS_RUN = ("ours", "official", "inmemory", "floor")
#: the same session through ``ainvoke`` on the async savers (turn latency only)
ASYNC_RUN = ("ours_async", "official_async")
SAVERS_READ = ("ours_warm", "ours", "ours_nocache", "official", "official_new", "inmemory")
#: how the section opens its savers (the "opened" field of its results)
OPENED = {
    "ours_warm": f"DeltaPostgresSaver.{ONE_CONNECTION}, the saver that ran the session",
    "ours": f"DeltaPostgresSaver.{NEW_CONNECTION}",
    "ours_nocache": f"DeltaPostgresSaver.{ONE_CONNECTION}, cache_bytes=0, kept across rounds",
    "official": f"PostgresSaver.{ONE_CONNECTION}, the saver that ran the session",
    "official_new": f"PostgresSaver.{NEW_CONNECTION}",
    "ours_async": f"AsyncDeltaPostgresSaver.{ONE_CONNECTION}",
    "official_async": f"AsyncPostgresSaver.{ONE_CONNECTION}",
    "floor": "InMemorySaver plus a SELECT 1 per put / put_writes on a psycopg.connect of "
             "its own (.floor.RoundTripSaver; the session only)",
}
#: the official reader each of ours is compared with in ``official_over``: a new saver
#: with a new one, a kept one with the one that ran the session
PAIRS = {"ours_warm": "official", "ours": "official_new", "ours_nocache": "official",
         "official_new": "official", "inmemory": "official"}

def run_agent(dsn: str, scale_name: str, log: Callable[[str], None]) -> dict[str, Any]:
    """``dsn``: an empty database (migrated here; both Postgres savers share it)."""
    import asyncio
    import contextlib

    import psycopg
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    from ... import AsyncDeltaPostgresSaver

    sc = SCALES[scale_name]
    with psycopg.connect(dsn, autocommit=True) as admin:
        migrate(admin)
    out: dict[str, Any] = {
        "turns": sc.turns, "max_input_tokens": sc.max_input_tokens, "rounds": sc.rounds,
        "history_rounds": sc.history_rounds, "opened": dict(OPENED), "pairs": dict(PAIRS),
    }
    log("  agent: savers " + "; ".join(f"{k} {v}" for k, v in OPENED.items()))
    loop = asyncio.new_event_loop()
    astack = contextlib.AsyncExitStack()
    stack = contextlib.ExitStack()
    new = NewSavers()
    stack.callback(new.close)
    try:
        warm = stack.enter_context(DeltaPostgresSaver.from_conn_string(dsn))
        nocache = stack.enter_context(DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0))
        run_savers: dict[str, Any] = {
            "ours": warm, "official": stack.enter_context(PostgresSaver.from_conn_string(dsn)),
            "inmemory": InMemorySaver(),
            "floor": RoundTripSaver(dsn),
        }
        stack.callback(run_savers["floor"].close)
        async_savers = {
            "ours_async": loop.run_until_complete(
                astack.enter_async_context(AsyncDeltaPostgresSaver.from_conn_string(dsn))),
            "official_async": loop.run_until_complete(
                astack.enter_async_context(AsyncPostgresSaver.from_conn_string(dsn))),
        }
        built = {k: build_agent(s, sc.max_input_tokens)
                 for k, s in {**run_savers, **async_savers}.items()}
        graphs = {k: g for k, (g, _) in built.items()}
        threads = {k: f"agent-{k}" for k in SAVERS_RUN + ASYNC_RUN}
        out["channels"] = {
            k: type(c).__name__ for k, c in graphs["ours"].channels.items()
            if not k.startswith(("branch:", "__"))
        }

        # -------- the session, turn by turn, interleaved across savers
        log(f"  agent: {sc.turns} turns on {', '.join(SAVERS_RUN)} (interleaved)")
        lat: dict[str, list[float]] = {k: [] for k in SAVERS_RUN + ASYNC_RUN}
        names = list(SAVERS_RUN + ASYNC_RUN)
        for i in range(sc.turns):
            order = names[i % len(names):] + names[: i % len(names)]
            for k in order:
                gc.collect()
                t0 = time.perf_counter()
                if k in ASYNC_RUN:
                    loop.run_until_complete(
                        graphs[k].ainvoke(_turn_inputs(i), _cfg(threads[k])))
                else:
                    graphs[k].invoke(_turn_inputs(i), _cfg(threads[k]))
                lat[k].append(time.perf_counter() - t0)
            if (i + 1) % 25 == 0 or i + 1 == sc.turns:
                log(f"    turn {i + 1}: " + ", ".join(
                    f"{k} {lat[k][-1] * 1000:.0f} ms" for k in SAVERS_RUN))

        def turn_ratio(a: str, b: str, part: slice = slice(None)) -> dict[str, float]:
            """a's turn over b's, turn by turn (the turns ``part`` takes)."""
            return ratio_summary([x / y for x, y in zip(lat[a], lat[b], strict=True)][part])

        # the first 30 turns: a 30-turn session of the same agent (issue 37's figure); the
        # second half: the turns where the thread is long (the loads that grow)
        first_30, second_half = slice(30), slice(sc.turns // 2, None)
        out["turn_latency"] = {
            "stats": {k: summary(v) for k, v in lat.items()},
            "total_s": {k: sum(v) for k, v in lat.items()},
            "ours_over_official": turn_ratio("ours", "official"),
            "ours_over_inmemory": turn_ratio("ours", "inmemory"),
            "ours_over_inmemory_first_30": turn_ratio("ours", "inmemory", first_30),
            "ours_over_inmemory_2nd_half": turn_ratio("ours", "inmemory", second_half),
            "ours_over_official_2nd_half": turn_ratio("ours", "official", second_half),
            # the floor (.floor): what a round trip per write call adds at the least
            "ours_over_floor": turn_ratio("ours", "floor"),
            "ours_over_floor_first_30": turn_ratio("ours", "floor", first_30),
            "ours_over_floor_2nd_half": turn_ratio("ours", "floor", second_half),
            "floor_over_inmemory": turn_ratio("floor", "inmemory"),
            "floor_over_inmemory_first_30": turn_ratio("floor", "inmemory", first_30),
            "floor_over_inmemory_2nd_half": turn_ratio("floor", "inmemory", second_half),
            # the async savers: ours async against ours sync (turn by turn) and against the
            # official async saver
            "ours_async_over_ours": turn_ratio("ours_async", "ours"),
            "ours_async_over_ours_2nd_half": turn_ratio("ours_async", "ours", second_half),
            "ours_async_over_official_async": turn_ratio("ours_async", "official_async"),
            "ours_async_over_official_async_2nd_half": turn_ratio(
                "ours_async", "official_async", second_half),
        }
        # model calls by kind (main / subagent / summary): subagents and summarization ran
        out["model_calls"] = {k: dict(m.calls) for k, (_, m) in built.items()}

        # -------- the state each saver ends with
        finals = {k: graphs[k].get_state(_cfg(threads[k])) for k in SAVERS_RUN}
        finals.update({
            k: loop.run_until_complete(graphs[k].aget_state(_cfg(threads[k])))
            for k in ASYNC_RUN
        })
        head = finals["ours"].values
        out["state"] = {
            "messages": len(head.get("messages", [])),
            "files": len(head.get("files", {})),
            "summarized": head.get("_summarization_event") is not None,
            # of the root namespace (the subagent's runs checkpoint in their own)
            "checkpoints": {
                k: sum(1 for _ in run_savers[k].list(
                    {"configurable": {"thread_id": threads[k], "checkpoint_ns": ""}}
                )) for k in SAVERS_RUN
            },
        }
        norm = {k: normalized(f.values) for k, f in finals.items()}
        out["states_equal"] = all(v == norm["inmemory"] for v in norm.values())
        del finals, norm, head

        nocache_graph = graphs["ours"].copy({"checkpointer": nocache})

        def reader(name: str) -> Callable[[], Any]:
            """Untimed: the graph whose saver the timed call reads through (the new
            savers: opened for the call, closed after it by ``new.close``)."""
            if name == "ours_warm":
                return lambda: graphs["ours"]
            if name == "ours":
                return lambda: graphs["ours"].copy(
                    {"checkpointer": new.open(name, DeltaPostgresSaver.from_conn_string(dsn))})
            if name == "ours_nocache":
                return lambda: nocache_graph
            if name == "official":
                return lambda: graphs["official"]
            if name == "official_new":
                return lambda: graphs["official"].copy(
                    {"checkpointer": new.open(name, PostgresSaver.from_conn_string(dsn))})
            return lambda: graphs["inmemory"]

        def finish(_graph: Any) -> None:
            new.close()

        def thread_of(name: str) -> str:
            return threads["ours" if name.startswith("ours") else
                           "official" if name.startswith("official") else name]

        # the whole histories agree before anything is timed (ours without the cache at
        # the smaller scales: at 150 turns a whole pass takes minutes per saver)
        checked = ("ours_warm", "official", "inmemory") + (
            ("ours_nocache",) if sc.turns <= 30 else ())
        hist = {
            n: [normalized(s.values) for s in reader(n)().get_state_history(_cfg(thread_of(n)))]
            for n in checked
        }
        new.close()
        out["histories_equal"] = all(hist[n] == hist["ours_warm"] for n in checked)
        out["history_entries"] = len(hist["ours_warm"])
        del hist

        # (the timed call, rounds, warm-up calls): a whole pass is long and warmed by the
        # check above
        ops: dict[str, tuple[Callable[[Any, str], Any], int, int]] = {
            "get_state": (lambda g, t: g.get_state(_cfg(t)).values, sc.rounds, 1),
            "history_page": (
                lambda g, t: [s.values for s in g.get_state_history(_cfg(t), limit=PAGE)],
                sc.rounds, 1,
            ),
            "history_all": (
                lambda g, t: [s.values for s in g.get_state_history(_cfg(t))],
                sc.history_rounds, 0,
            ),
        }
        for what, (op, rounds, warmup) in ops.items():
            iv = Interleaved()
            new.open_s.clear()
            iv.run(
                {
                    n: (reader(n), lambda g, n=n, op=op: op(g, thread_of(n)), finish)
                    for n in SAVERS_READ
                },
                rounds,
                warmup=warmup,
            )
            out[what] = {
                "stats": {n: iv.stats(n) for n in SAVERS_READ},
                # a new saver of ours against a new official one (each on a connection of
                # its own, opened for the round), a kept one against the kept official one
                "official_over": {n: iv.ratio(PAIRS[n], n) for n in SAVERS_READ
                                  if n != "official"},
                "ours_warm_over_inmemory": iv.ratio("ours_warm", "inmemory"),
                "open_ms": new.open_ms(),
            }
            r = out[what]
            over = r["official_over"]
            log(
                f"  agent {what}: official/ours warm {over['ours_warm']['median']:.2f}x, "
                f"new saver (official new/ours new) {over['ours']['median']:.2f}x, "
                f"cache_bytes=0 {over['ours_nocache']['median']:.2f}x, "
                f"ours warm/InMemorySaver {r['ours_warm_over_inmemory']['median']:.2f}x "
                f"(ours warm {r['stats']['ours_warm']['median_ms']:.1f} ms, "
                f"official {r['stats']['official']['median_ms']:.1f} ms, ours new "
                f"{r['stats']['ours']['median_ms']:.1f} ms, official new "
                f"{r['stats']['official_new']['median_ms']:.1f} ms)"
            )
        tl = out["turn_latency"]
        log(
            f"  agent turns: ours/official {tl['ours_over_official']['median']:.2f}x "
            f"(2nd half {tl['ours_over_official_2nd_half']['median']:.2f}x), "
            f"ours/InMemorySaver {tl['ours_over_inmemory']['median']:.2f}x (first 30 "
            f"{tl['ours_over_inmemory_first_30']['median']:.2f}x, 2nd half "
            f"{tl['ours_over_inmemory_2nd_half']['median']:.2f}x); floor/InMemorySaver "
            f"{tl['floor_over_inmemory']['median']:.2f}x (first 30 "
            f"{tl['floor_over_inmemory_first_30']['median']:.2f}x), ours/floor "
            f"{tl['ours_over_floor']['median']:.2f}x (first 30 "
            f"{tl['ours_over_floor_first_30']['median']:.2f}x); async: ours "
            f"async/ours sync {tl['ours_async_over_ours']['median']:.2f}x (2nd half "
            f"{tl['ours_async_over_ours_2nd_half']['median']:.2f}x), ours async/official "
            f"async {tl['ours_async_over_official_async']['median']:.2f}x (2nd half "
            f"{tl['ours_async_over_official_async_2nd_half']['median']:.2f}x); "
            f"states equal: {out['states_equal']}, histories equal: {out['histories_equal']}"
        )
    finally:
        loop.run_until_complete(astack.aclose())
        loop.close()
        stack.close()
    if not out["states_equal"] or not out["histories_equal"]:
        raise AssertionError(
            "agent workload: the savers' states differ "
            f"(final {out['states_equal']}, history {out['histories_equal']})"
        )
    return out



def run_alone(
    args: Any, scale: str, server: Callable[[str | None], Any], command: str
) -> dict[str, Any]:
    """``langgraph-delta-pg bench --only agent``: this part alone, on a scratch database
    of the same server the full run uses."""
    from ..databases import section_database

    with section_database(args, scale, server, command, migrated=False) as (res, dsn, _):
        t0 = time.perf_counter()
        res["agent"] = run_agent(dsn, scale, lambda m: print(m, flush=True))
        res["agent"]["seconds"] = time.perf_counter() - t0
    return res


def headline(res: dict[str, Any]) -> dict[str, Any]:
    """The headline line of the agent section (none when it did not run)."""
    a = res.get("agent")
    if not a:
        return {}
    gs, ha = a["get_state"], a["history_all"]
    return {
        "agent": {
            "turns": a["turns"],
            "get_state_official_over_ours_warm": gs["official_over"]["ours_warm"]["median"],
            "get_state_official_over_ours_new": gs["official_over"]["ours"]["median"],
            "get_state_official_over_ours_nocache": gs["official_over"]["ours_nocache"]["median"],
            "get_state_ours_warm_over_inmemory": gs["ours_warm_over_inmemory"]["median"],
            "history_all_official_over_ours_warm": ha["official_over"]["ours_warm"]["median"],
            "history_all_official_over_ours_new": ha["official_over"]["ours"]["median"],
            "turn_ours_over_official": a["turn_latency"]["ours_over_official"]["median"],
            "turn_ours_async_over_ours": a["turn_latency"]
            .get("ours_async_over_ours", {}).get("median"),
            "states_equal": a["states_equal"],
        }
    }
