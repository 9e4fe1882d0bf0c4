"""The loads section's part of the report (resume loop, history page, the cache's
hand-out)."""

from __future__ import annotations

from typing import Any

from .format import _met, _ms, _x

#: Issue targets for the loads section: official/ours at least this (cache on, cache off).
LOAD_TARGETS = {
    ("resume_loop", "coding_a"): (3.0, 1.5),
    ("resume_loop", "messages"): (3.0, 2.0),
    ("history_page", "coding_a"): (4.0, None),
    ("history_page", "messages"): (4.0, None),
}
LOAD_NAMES = {
    "resume_loop": "resume loop: get_tuple + history",
    "resume_loop_graph": "resume loop: get_state",
    "history_page": "history page",
}



def _loads_savers(loads: dict[str, Any]) -> str:
    """How the loads' savers were opened (runs before the "opened" field had a new
    official saver, and opened ours' new saver on the warm saver's connection)."""
    if "opened" not in loads:
        return (
            "Ours runs on a new saver object each round (its cache starts empty: the loop "
            "or page is timed from cold), on one saver kept across rounds (*warm*, as a "
            "server that served the thread before), and with `cache_bytes=0`; "
        )
    return (
        "Every saver is opened by its `from_conn_string`. Ours runs on a new saver each "
        "round (*ours*: opened for the round on a connection of its own, as a new process "
        "has; its cache starts empty and its connection has prepared nothing, so the loop "
        "or page is timed from cold; opening it is not timed), on one saver kept across "
        "rounds (*warm*, as a server that served the thread before), and with "
        "`cache_bytes=0` (kept); the official saver is kept across rounds and also opened "
        "for each round as ours (*new saver*). *official/ours* compares the two new "
        "savers, the other ratios the kept ones; "
    )


def loads_section(res: dict[str, Any]) -> list[str]:
    loads = res.get("loads")
    if not loads:
        return []
    new = "opened" in loads
    L = [
        "## Loads: resume loop and history page",
        "",
        "Threads written by the official saver through the workload's real graph (two "
        "`DeltaChannel` fields) into a database it set up, then adopted by this package's "
        "migrations; every saver reads the same rows. **Resume loop**: at each of the last "
        "45 checkpoints of the thread, in chain order, what a resume asks of the saver "
        "(`get_tuple` and the history of the two fields), and the same loop as `get_state` "
        "through the graph, which adds LangGraph's own state building (the same work for "
        "every saver). **History page**: "
        "`get_state_history(limit=10)`. " + _loads_savers(loads)
        + f"{loads['rounds']} interleaved rounds, 0 ms RTT, medians with [min-max]; ratios "
        "are medians of the round-by-round ratios.",
        "",
        "| thread | load | ours ms | ours cache_bytes=0 ms | official ms "
        + ("| official, new saver ms " if new else "")
        + "| official/ours | target | official/ours (cache_bytes=0) | target "
        "| official/ours (warm) |",
        "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if new else ""),
    ]
    for e in loads["threads"].values():
        for what in ("resume_loop", "resume_loop_graph", "history_page"):
            r = e[what]
            st = r["stats"]
            on, off = r["official_over_ours"], r["official_over_ours_nocache"]
            want_on, want_off = LOAD_TARGETS.get((what, e["workload"]), (None, None))
            L.append(
                f"| {e['workload']} {e['turns']} turns, snapshot {e['freq']} "
                f"| {LOAD_NAMES[what]} ({r['calls']} states) "
                f"| {_ms(st['ours'])} | {_ms(st['ours_nocache'])} | {_ms(st['official'])} "
                + (f"| {_ms(st.get('official_new', {}))} " if new else "")
                + f"| {_x(on)} | {_met(on['median'], want_on)} "
                f"| {_x(off)} | {_met(off['median'], want_off)} "
                f"| {_x(r.get('official_over_ours_warm', {}))} |"
            )
    h = loads.get("handout")
    if h:
        L += [
            "",
            f"How the cache hands out values: one real answer ({h['values']} values of the "
            "messages thread), each way timed interleaved; *serde/x* is the fresh serde "
            "decode's time over that way's (higher is faster). Only ways that give the "
            "caller objects no later answer shares keep the isolation guarantee.",
            "",
            "| way | ms | serde/x | isolates |",
            "|---|---|---|---|",
        ]
        for k, st in h["stats"].items():
            ratio = _x(h["serde_over"][k]) if k in h["serde_over"] else "1.00x"
            L.append(f"| {k} | {_ms(st)} | {ratio} | {'yes' if h['isolates'][k] else 'no'} |")
    return L + [""]
