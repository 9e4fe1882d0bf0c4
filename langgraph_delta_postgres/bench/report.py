"""The Markdown report and the plots of a benchmark run (matplotlib, Agg backend)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

LABELS = {
    "ours": "ours (DeltaChannel)",
    "official": "official 3.2 (DeltaChannel)",
    "ours_full": "ours, full-snapshot fields",
    "inmemory": "InMemorySaver",
}


def _ms(s: dict[str, Any]) -> str:
    if not s or s.get("n", 0) == 0 or math.isnan(s["median_ms"]):
        return "n/a"
    return f"{s['median_ms']:.2f} ({s['min_ms']:.2f}-{s['max_ms']:.2f})"


def _x(r: dict[str, Any]) -> str:
    if not r or r.get("n", 0) == 0:
        return "n/a"
    return f"{r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f})"


def _mb(b: int | None) -> str:
    return "n/a" if b is None else f"{b / 1e6:.2f}"


def _saver_name(key: str, spec: dict[str, Any]) -> str:
    base = str(LABELS.get(spec["label"], spec["label"]))
    if spec["delta"] and spec["kind"] != "inmemory":
        f = spec["freq"]
        return f"{base}, snapshot_frequency={'default (100)' if f is None else f}"
    return base


def plots(res: dict[str, Any], img: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    img.mkdir(parents=True, exist_ok=True)
    out = []
    for wl, w in res.get("workloads", {}).items():
        turns = [p["turns"] for p in w["points"]]
        if len(turns) < 2:
            continue
        for what in ("storage", "resume"):
            fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
            for key, spec in w["savers"].items():
                if what == "storage":
                    if spec["kind"] == "inmemory":
                        continue
                    ys = [p["savers"][key].get("storage_bytes", 0) / 1e6 for p in w["points"]]
                else:
                    ys = [p["resume"]["0"].get(key, {}).get("median_ms", float("nan"))
                          for p in w["points"]]
                style = "--" if spec["label"] == "official" else "-"
                if spec["label"] == "ours_full":
                    style = ":"
                ax.plot(turns, ys, style, marker="o", label=_saver_name(key, spec))
            ax.set_xlabel("user turns")
            if what == "storage":
                ax.set_yscale("log")
                ax.set_ylabel("checkpoint storage, MB (log scale)")
                ax.set_title(f"{wl}: bytes on disk (3 tables, TOAST + indexes)")
            else:
                ax.set_ylabel("get_state on resume, ms (median, 0 ms RTT)")
                ax.set_title(f"{wl}: resume latency (new graph, get_state)")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
            fig.tight_layout()
            path = img / f"{wl}_{what}.png"
            fig.savefig(path)
            plt.close(fig)
            out.append(path)
    return out


def _history_table(rows: list[tuple[str, dict[str, Any]]], rtts: list[str]) -> list[str]:
    lines = [
        "| case | RTT | ours ms | official ms | official/ours | floor ms | ours/floor "
        "| bound ms | statements ours/official | round trips ours/official "
        "| bytes to client ours/official | equal |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in rows:
        c = m["counts"]
        for rtt in rtts:
            r = m["rtt"].get(rtt)
            if r is None:
                continue
            lines.append(
                f"| {name} | {rtt} ms | {_ms(r['ours'])} | {_ms(r['official'])} "
                f"| {_x(r['ratio_official_ours'])} | {_ms(r['floor'])} "
                f"| {_x(r['ratio_ours_floor'])} | {_ms(r.get('bound', {}))} "
                f"| {c['ours']['statements']} / {c['official']['statements']} "
                f"| {c['ours']['round_trips']} / {c['official']['round_trips']} "
                f"| {c['ours']['bytes_to_client']:,} / {c['official']['bytes_to_client']:,} "
                f"| {'yes' if m['results_equal'] else 'NO'} |"
            )
    return lines


TARGETS = {"a": 2.0, "b": 3.0}  # official/ours the issue asks for; ours/floor <= 1.4
FLOOR_TARGET = 1.4


def _targets(res: dict[str, Any]) -> list[str]:
    heads = res.get("micro", {}).get("headline", {})
    if not heads:
        return []
    L = ["", "Targets of the issue (medians of the pair-by-pair ratios above). The last two "
         "columns say what any saver could reach on these rows: *official/bound* is the "
         "official saver's time over the bound (reading the seed blobs by primary key in one "
         "statement + deserializing the returned values), the highest official/ours any "
         "such saver could reach; *bound/floor* is the lowest ours/floor possible.", "",
         "| thread | RTT | official/ours | target | met | ours/floor | target | met "
         "| official/bound | bound/floor |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for key, m in heads.items():
        want = TARGETS.get(key)
        for rtt, r in m["rtt"].items():
            ro = r["ratio_official_ours"]["median"]
            rf = r["ratio_ours_floor"]["median"]
            ob = r.get("ratio_official_bound", {}).get("median", math.nan)
            bf = r.get("bound", {}).get("median_ms", math.nan) / r["floor"]["median_ms"]
            L.append(
                f"| {m['workload']} {m['turns']} turns, snapshot {m['snapshot_frequency']} "
                f"| {rtt} ms | {ro:.2f}x | >= {want}x | {'yes' if want and ro >= want else 'no'} "
                f"| {rf:.2f}x | <= {FLOOR_TARGET}x | {'yes' if rf <= FLOOR_TARGET else 'no'} "
                f"| {ob:.2f}x | {bf:.2f}x |"
            )
    return L + [""]


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


def _met(value: float, want: float | None) -> str:
    if want is None:
        return "-"
    return f">= {want}x: {'yes' if value >= want else 'no'}"


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
        f"{_x(tl['ours_over_inmemory'])}.",
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


def _method_savers(res: dict[str, Any]) -> str:
    """The method's sentence on how the savers were opened."""
    if "opened" not in res.get("micro", {}):  # a run before the sections said so
        return ("Connections as each saver's `from_conn_string` opens them (official: "
                "`prepare_threshold=0`, `dict_row`).")
    return (
        "Every saver is opened as the README tells users to: ours by "
        "`DeltaPostgresSaver.from_conn_string(dsn)` (`pool_size=` where a section uses a "
        "pool), the official one by `PostgresSaver.from_conn_string(dsn)` (one connection; "
        "for a pool, which it does not open, a `ConnectionPool` with `prepare_threshold=0`, "
        "`dict_row`); sizes, copies of threads and `ANALYZE` use a connection of their own. "
        "A *new saver* is opened for each timed call on a new connection (opening it is "
        "not timed). Each section's JSON says how (`opened`)."
    )


#: Where ``write_report`` puts the per-section detail, relative to the summary page.
DETAIL = "design/benchmarks-detail.md"


def _run_line(res: dict[str, Any]) -> str:
    return (
        f"Scale `{res['scale']}`, started {res['started_at']}, took {res['seconds']:.0f} s, "
        f"on {res['database']['source']} ({res['database']['scratch']}, dropped afterwards). "
        "Raw numbers: the JSON written by `--json`."
    )


def markdown(res: dict[str, Any], img_rel: str, images: list[Path]) -> str:
    """The summary page (``DIR/benchmarks.md``): the loads, the agent session, the
    headline and its targets, the load section, the machine and the method. The rest of
    the same run is :func:`detail_markdown`'s page."""
    L: list[str] = []
    mach = res["machine"]
    L += [
        "# Benchmarks",
        "",
        "Every figure on this page was produced by one run of:",
        "",
        "```sh",
        res["command"],
        "```",
        "",
        _run_line(res),
        "",
        "The same run's per-section detail (every history micro-benchmark, the workloads' "
        "storage and resume tables and plots, writes and `list`, the plans) is on "
        f"[{DETAIL}]({DETAIL}).",
        "",
        *loads_section(res),
        *agent_section(res),
        *_headline(res),
    ]
    from .load import markdown as load_markdown

    L += load_markdown(res, img_rel)
    L += [
        "## Machine",
        "",
        f"- CPU: {mach['cpu_model']}, {mach['cpu_cores']} cores; memory {mach['memory_mb']} MB; "
        f"{mach['platform']}",
        f"- Python {mach['python']}; Postgres {mach['postgres'].get('server_version')} "
        f"(shared_buffers {mach['postgres'].get('shared_buffers')}, synchronous_commit "
        f"{mach['postgres'].get('synchronous_commit')}, jit {mach['postgres'].get('jit')}, "
        f"default_toast_compression {mach['postgres'].get('default_toast_compression')})",
        "- Packages: " + ", ".join(f"{k} {v}" for k, v in mach["packages"].items() if v),
        "",
        "## Method",
        "",
        "- One scratch database; every saver writes its own thread(s). Savers: **ours** "
        "(`DeltaPostgresSaver`, `DeltaChannel` fields), **official** (`PostgresSaver` 3.2, the "
        "same `DeltaChannel` fields), **ours, full-snapshot fields** (`add_messages` and a "
        "dict-merge reducer: the O(N^2) baseline) and **InMemorySaver** (latency reference). "
        + _method_savers(res),
        "- Workloads are real compiled graphs from `langgraph_delta_postgres._local.workloads` "
        "(deterministic, no model). The threads grow in lockstep to each turn count; at each "
        "point: storage, per-invoke latency of the segment, resume latency.",
        "- **Storage** = growth of `pg_total_relation_size` (heap + TOAST + indexes) of "
        "`checkpoints`, `checkpoint_blobs`, `checkpoint_writes` while that saver's thread "
        "grew (savers run one at a time; autovacuum off on these tables). **Payload** = sum of "
        "`pg_column_size` of the thread's rows (compressed size, no page/index overhead).",
        "- **Resume** = `get_state` of the thread on a newly compiled graph (compiling is not "
        "timed).",
        "- **History micro-benchmarks** call `get_delta_channel_history` directly with the "
        "target's `checkpoint_id`, both savers on the same rows. Synthetic rows are written "
        "with the saver's own `put`/`put_writes`, shaped like a `DeltaChannel` thread between "
        "snapshots (channel absent from `channel_values`, one ~200-char message write per "
        "channel per checkpoint); headline threads are written by real graphs on our saver.",
        "- **Floor** = deserializing exactly the blobs our statement returns "
        "(`serde.loads_typed`, the values kept in a list as a caller keeps them) + one "
        "`SELECT 1` on the same connection, timed in the same rounds. `ours/floor` near 1 "
        "means nothing is left to win but the deserialization.",
        "- **Bound** = the same deserialization + one statement that reads only the returned "
        "seed blobs by primary key (decompression and transfer included), on the same "
        "connection: a time no saver that reads these values from the database can beat, "
        "whatever its walk (it leaves out the walk and the transfer of the writes).",
        "- **Statements** are counted at the driver (a counting cursor class); **round trips** "
        "and **bytes** on the wire by the proxy (server answers that follow a client "
        "message; bytes server->client), steady state (after one warm-up call).",
        "- **Network**: `0 ms` is the direct (unix socket) connection; other RTTs go through a "
        "loopback TCP proxy that delays each direction by RTT/2. Measured `SELECT 1` round "
        "trip: " + ", ".join(
            f"{k} ms -> {_ms(v)} ms" for k, v in res["select1_rtt"].items()) + ".",
        "- Timings: median (min-max) in ms over interleaved rounds (the order rotates every "
        "round); ratios are taken round by round in the same run, then their median (min-max). "
        "Each timed call starts right after `gc.collect()` (not timed), so no call pays a full "
        "collection that the garbage of earlier calls made due; collections a call triggers "
        "itself are in its time. What the process held before a comparison began is frozen "
        "out of collection (`gc.freeze`) for that comparison, the same for every saver.",
        "",
    ]
    return "\n".join(L) + "\n"


def _headline(res: dict[str, Any]) -> list[str]:
    L: list[str] = []
    h = res.get("headline", {})
    L += ["## Headline", ""]
    for m in res.get("micro", {}).get("headline", {}).values():
        L.append(
            f"- History call, {m['workload']} thread of {m['turns']} turns "
            f"({m['checkpoints']} checkpoints), 2 channels, snapshot_frequency="
            f"{m['snapshot_frequency']}: official/ours "
            + ", ".join(f"**{_x(r['ratio_official_ours'])}** at {rtt} ms"
                        for rtt, r in m["rtt"].items())
            + "; ours/floor " + ", ".join(f"{_x(r['ratio_ours_floor'])} at {rtt} ms"
                                         for rtt, r in m["rtt"].items()) + "."
        )
    L += _targets(res)
    for k, v in h.items():
        if k.startswith("storage_"):
            L.append(
                f"- Storage, {k[8:]} at {v['turns']} turns: full-snapshot fields "
                f"{_mb(v['full_snapshot_bytes'])} MB vs DeltaChannel (ours, default snapshot "
                f"frequency) {_mb(v['delta_bytes'])} MB: **{v['full_over_delta']:.1f}x** smaller."
            )
    L.append("")
    return L


def detail_markdown(res: dict[str, Any], img_rel: str, images: list[Path]) -> str:
    """The detail page (``DIR/design/benchmarks-detail.md``) of the run
    :func:`markdown` summarizes: the history micro-benchmarks, the workloads, writes and
    ``list``, and the plans. ``img_rel`` is the plots' directory relative to this page."""
    rtts = list(res["select1_rtt"])
    back = "../" * DETAIL.count("/") + "benchmarks.md"
    L: list[str] = [
        "# Benchmarks: per-section detail",
        "",
        "Every figure on this page was produced by one run of:",
        "",
        "```sh",
        res["command"],
        "```",
        "",
        _run_line(res),
        "",
        f"The summary of the same run, its machine and its method: [{back}]({back}).",
        "",
    ]
    L += ["## History call (micro-benchmarks)", ""]
    micro = res.get("micro", {})
    rows: list[tuple[str, dict[str, Any]]] = []
    for key, m in micro.get("headline", {}).items():
        rows.append((f"headline {key}: {m['workload']} {m['turns']} turns, "
                     f"snapshot {m['snapshot_frequency']}", m))
    for m in micro.get("depth", []):
        rows.append((f"depth {m['depth']}, 2 channels", m))
    for m in micro.get("channels", []):
        rows.append((f"{m['n_channels']} channel(s), depth {m['depth']}", m))
    if "official_written" in micro:
        m = micro["official_written"]
        rows.append((f"rows written by the official saver, depth {m['depth']}, 2 channels", m))
    if "forks" in micro:
        m = micro["forks"]
        rows.append((f"{m['forks']} forks of {m['fork_len']} (interleaved), main depth "
                     f"{m['depth']}", m))
    mt = micro.get("many_threads", {})
    for k in ("deep2", "headline_a"):
        if k in mt:
            rows.append((f"{k} among {mt['other_threads']:,} other threads", mt[k]))
    L += _history_table(rows, rtts)
    L += ["", "`equal`: both savers returned identical histories.", ""]

    for wl, w in res.get("workloads", {}).items():
        L += [f"## Workload `{wl}`", ""]
        L += [f"{len(w['savers'])} threads, {w['seconds']:.0f} s.", ""]
        L += ["| saver | turns | storage MB | payload MB | invoke ms (segment) "
              "| resume ms @0 | resume statements / round trips |",
              "|---|---|---|---|---|---|---|"]
        for key, spec in w["savers"].items():
            for p in w["points"]:
                e = p["savers"][key]
                rc = p.get("resume_counts", {}).get(key)
                rcs = "n/a" if rc is None else f"{rc['statements']} / {rc['round_trips']}"
                L.append(
                    f"| {_saver_name(key, spec)} | {p['turns']} | "
                    f"{_mb(e.get('storage_bytes'))} | {_mb(e.get('payload_bytes'))} | "
                    f"{_ms(e['invoke'])} | {_ms(p['resume']['0'].get(key, {}))} | "
                    f"{rcs} |"
                )
        L += ["", "Resume latency (get_state, ms) by RTT, at the largest turn count:", ""]
        last = w["points"][-1]
        L += ["| saver | " + " | ".join(f"{r} ms RTT" for r in rtts) + " |",
              "|---|" + "---|" * len(rtts)]
        for key, spec in w["savers"].items():
            L.append(f"| {_saver_name(key, spec)} | " + " | ".join(
                _ms(last["resume"].get(r, {}).get(key, {})) for r in rtts) + " |")
        ratios = [(k, r) for k, r in last["resume"].get("0", {}).items()
                  if k.startswith("ratio_official_ours")]
        if ratios:
            L += ["", "Resume official/ours, pair by pair, at the largest turn count: "
                  + "; ".join(
                      f"snapshot_frequency={k.split(':')[1].replace('None', 'default')}: "
                      + ", ".join(
                          f"{_x(last['resume'][r].get(k, {}))} at {r} ms" for r in rtts)
                      for k, _ in ratios) + "."]
        if not all(p["states_equal"] for p in w["points"]):
            L += ["", "**Warning: the savers' states differed at some point.**"]
        else:
            L += ["", "All savers' `get_state` values were equal at every point."]
        for path in images:
            if path.name.startswith(wl + "_"):
                L += ["", f"![{path.stem}]({img_rel}/{path.name})"]
        L.append("")

    from .listput import markdown as listput_markdown

    L += listput_markdown(res)
    if res.get("explain"):
        L += ["## EXPLAIN (ANALYZE, BUFFERS) of our statement on the headline targets", ""]
        if "opened" in res.get("micro", {}):
            L += ["On a connection `DeltaPostgresSaver.from_conn_string` opened (its planner "
                  "settings, see the README's Connection requirements).", ""]
        for k, text in res["explain"].items():
            L += [f"Headline {k}:", "", "```", text, "```", ""]
    return "\n".join(L) + "\n"


def write_agent_report(res: dict[str, Any], out: Path) -> Path:
    """``--only agent --out DIR``: DIR/agent.md, the agent section alone."""
    mach = res["machine"]
    L = [
        "# Benchmark: a real agent workload",
        "",
        "Every figure on this page was produced by one run of:",
        "",
        "```sh",
        res["command"],
        "```",
        "",
        f"Scale `{res['scale']}`, took {res['agent']['seconds']:.0f} s, on "
        f"{res['database']['source']} ({res['database']['scratch']}, dropped afterwards); "
        f"{mach['cpu_model']}, {mach['cpu_cores']} cores; Python {mach['python']}; Postgres "
        f"{mach['postgres'].get('server_version')}. Packages: "
        + ", ".join(f"{k} {v}" for k, v in mach["packages"].items() if v) + ".",
        "",
        *agent_section(res),
    ]
    out.mkdir(parents=True, exist_ok=True)
    path = out / "agent.md"
    path.write_text("\n".join(L).rstrip() + "\n")
    return path


def write_report(res: dict[str, Any], out: Path) -> list[Path]:
    """``bench --out DIR``: DIR/benchmarks.md (the summary), DIR/design/benchmarks-detail.md
    (the rest of the run) and DIR/img/*.png (the plots)."""
    out.mkdir(parents=True, exist_ok=True)
    from .load import plot as load_plot

    images = plots(res, out / "img") + load_plot(res, out / "img")
    md = out / "benchmarks.md"
    md.write_text(markdown(res, "img", images))
    detail = out / DETAIL
    detail.parent.mkdir(parents=True, exist_ok=True)
    detail.write_text(detail_markdown(res, "../" * DETAIL.count("/") + "img", images))
    return [md, detail, *images]


def write_load_report(res: dict[str, Any], out: Path) -> list[Path]:
    """``bench --only load --out DIR``: DIR/benchmarks-load.md and DIR/img/load.png."""
    from .load import markdown as load_markdown
    from .load import plot as load_plot

    out.mkdir(parents=True, exist_ok=True)
    images = load_plot(res, out / "img")
    mach = res["machine"]
    L = ["# Benchmarks: load", "", "Every figure on this page was produced by one run of:", "",
         "```sh", res["command"], "```", "",
         f"Scale `{res['scale']}`, took {res['seconds']:.0f} s, on "
         f"{res['database']['source']} ({res['database']['scratch']}, dropped afterwards); "
         f"{mach['cpu_model']}, {mach['cpu_cores']} cores; Postgres "
         f"{mach['postgres'].get('server_version')}. Raw numbers: the JSON written by `--json`.",
         "", *load_markdown(res, "img")]
    md = out / "benchmarks-load.md"
    md.write_text("\n".join(L) + "\n")
    return [md, *images]
