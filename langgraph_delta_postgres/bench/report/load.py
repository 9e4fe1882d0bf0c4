"""The load section's part of the report: its Markdown (tables, targets, where the
statement time goes) and its plot."""

from __future__ import annotations

from typing import Any

from ..load.scale import SAVERS

TARGETS = {"db_official_over_ours": 3.0, "throughput": 1.0, "throughput_at_64": 1.5}



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
