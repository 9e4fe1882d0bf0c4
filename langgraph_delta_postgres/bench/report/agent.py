"""The agent section's part of the report (a deepagents session)."""

from __future__ import annotations

from typing import Any

from .format import _met, _ms, _x

#: Issue targets of the agent section (floors of official/ours; ceilings marked "<=").
AGENT_TARGETS = {
    ("get_state", "ours_warm"): 2.0,
    ("get_state", "ours"): 1.2,
    ("get_state", "ours_nocache"): 1.2,
    ("history_all", "ours_warm"): 4.0,
    ("history_all", "ours"): 4.0,
    ("history_all", "ours_nocache"): 4.0,
}
AGENT_READERS = {
    "ours_warm": "ours, warm (the saver that ran the session)",
    "ours": "ours, a new saver (its first call)",
    "ours_nocache": "ours, cache_bytes=0",
    "official": "official 3.2",
    "official_new": "official 3.2, a new saver (its first call)",
    "inmemory": "InMemorySaver",
}
AGENT_LOADS = {
    "get_state": "get_state (head)",
    "history_page": "history page (limit=10)",
    "history_all": "whole history pass",
}


def _floor(tl: dict[str, Any]) -> str:
    """The per-turn floor (bench/agent/floor.py), in runs that measured it."""
    return (
        f" The floor, InMemorySaver plus one `SELECT 1` round trip per `put` / `put_writes` "
        f"(the least a saver that writes each call to Postgres adds), "
        f"{_ms(tl['stats']['floor'])} ms: floor/InMemorySaver {_x(tl['floor_over_inmemory'])} "
        f"(first 30 turns {_x(tl['floor_over_inmemory_first_30'])}), ours/floor "
        f"{_x(tl['ours_over_floor'])} (first 30 turns {_x(tl['ours_over_floor_first_30'])}, "
        f"second half {_x(tl['ours_over_floor_2nd_half'])})."
    )


def agent_section(res: dict[str, Any]) -> list[str]:
    a = res.get("agent")
    if not a:
        return []
    tl, st = a["turn_latency"], a["state"]
    calls = a["model_calls"]["ours"]
    L = [
        "## A real agent: a deepagents session",
        "",
        "Measured by `langgraph-delta-pg bench --only agent` (also the agent section of the "
        "full run; needs the `agent` extra).",
        "",
        f"`deepagents.create_deep_agent` driven by a scripted chat model (no network, "
        f"deterministic; `langgraph_delta_postgres.bench.scripted_model`): {a['turns']} user "
        "turns of a coding session with `write_file` / `read_file` / `edit_file` / `ls` / "
        "`write_todos` calls, a subagent (`task`) every tenth turn and deepagents' "
        f"summarization middleware (context window {a['max_input_tokens']} tokens). Its state: "
        + ", ".join(f"`{k}` {v}" for k, v in a["channels"].items())
        + f". Model calls: {calls.get('main', 0)} main, {calls.get('subagent', 0)} subagent, "
        f"{calls.get('summary', 0)} summaries. The head holds {st['messages']} messages and "
        f"{st['files']} files; {a['history_entries']} checkpoints in the history. Each saver ran "
        "the session on its own thread, turn by turn interleaved (turn *i* on every saver "
        "before turn *i+1*). Final states equal across savers (generated ids and timestamps "
        f"normalized): **{a['states_equal']}**; whole histories equal: "
        f"**{a['histories_equal']}**.",
        "",
        f"Per turn (`invoke`): ours {_ms(tl['stats']['ours'])} ms, official "
        f"{_ms(tl['stats']['official'])} ms, InMemorySaver {_ms(tl['stats']['inmemory'])} ms; "
        f"ours/official {_x(tl['ours_over_official'])} (target <= 0.8x: "
        f"{'yes' if tl['ours_over_official']['median'] <= 0.8 else 'no'}; second half of the "
        f"session {_x(tl['ours_over_official_2nd_half'])}), ours/InMemorySaver "
        f"{_x(tl['ours_over_inmemory'])}." + (_floor(tl) if "ours_over_floor" in tl else ""),
        "",
        f"Loads through the graph, {a['rounds']} interleaved rounds ({a['history_rounds']} for "
        "the whole pass), medians with [min-max]; official/x is the median of the "
        "round-by-round ratios (higher: ours faster)." + (
            " Every saver is opened by its `from_conn_string`; a new saver (ours and the "
            "official one) is opened for each round on a connection of its own, as a new "
            "process has (opening it is not timed), and is compared with the other new "
            "saver; the others are compared with the official saver that ran the session."
            if "opened" in a else ""),
        "",
        "| load | saver | ms | official/x | target | x/InMemorySaver |",
        "|---|---|---|---|---|---|",
    ]
    for what, name in AGENT_LOADS.items():
        r = a[what]
        for n, label in AGENT_READERS.items():
            if n not in r["stats"]:
                continue  # a run before the new official saver was measured
            ratio = r["official_over"].get(n)
            want = AGENT_TARGETS.get((what, n))
            inmem = ""
            if n == "ours_warm":
                inmem = _x(r["ours_warm_over_inmemory"])
                if what == "get_state":
                    m = r["ours_warm_over_inmemory"]["median"]
                    inmem += f" (<= 1.1x: {'yes' if m <= 1.1 else 'no'})"
            L.append(
                f"| {name} | {label} | {_ms(r['stats'][n])} | "
                f"{_x(ratio) if ratio else '1.00x'} | "
                f"{_met(ratio['median'], want) if ratio else '-'} | {inmem} |"
            )
    return L + [""]
