"""``langgraph-delta-pg inspect``'s report as text (:func:`render_text`, and the
``--load`` section, :func:`render_load`); :func:`human_bytes` for sizes (the ``demo``
command's table uses it too)."""

from __future__ import annotations

from typing import Any


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def render_text(rep: dict[str, Any]) -> str:
    lines: list[str] = []
    where = f' in schema "{rep["schema"]}"' if rep["schema"] else ""
    lines.append(f"thread {rep['thread_id']!r}{where}")
    lines.append("")
    lines.append("namespaces")
    for n in rep["namespaces"]:
        roots = f", {n['roots']} roots" if n["roots"] != 1 else ""
        lines.append(
            f"  {n['checkpoint_ns']!r:<24} {n['checkpoints']:>7} checkpoints{roots}, "
            f"latest {n['latest_checkpoint_id']} (step {n['latest_step']})"
        )
    lines.append("")
    if rep["forks"]:
        k = len(rep["forks"])
        lines.append(f"forks: {k} checkpoint{'s' if k > 1 else ''} with more than one child")
        for f in rep["forks"][:20]:
            lines.append(
                f"  {f['checkpoint_ns']!r:<24} {f['checkpoint_id']}  {f['children']} children"
            )
        if len(rep["forks"]) > 20:
            lines.append(f"  ... {len(rep['forks']) - 20} more (see --json)")
    else:
        lines.append("forks: none (a single line of checkpoints)")
    lines.append("")
    latest = rep["latest"]
    lines.append(
        f"latest checkpoint in {rep['checkpoint_ns']!r}: {latest['checkpoint_id']} "
        f"(step {latest['step']})"
    )
    if rep["delta_channels"]:
        head = (
            f"  {'delta channel':<20} {'updates':>8} {'supersteps':>11} {'walk depth':>11}  "
            f"{'stops at':<26} {'replays':>20}"
        )
        lines.append(head)
        for c in rep["delta_channels"]:
            stop = c["walk_stops_at"] or "?"
            if stop == "seed":
                stop = f"{c['seed_kind']} seed"
            replay = (
                f"{c['replay_writes']} writes, {human_bytes(c['replay_bytes'])}"
                if c["replay_writes"] is not None
                else "?"
            )
            lines.append(
                f"  {c['channel']:<20} {c['updates_since_snapshot']:>8} "
                f"{c['supersteps_since_snapshot']:>11} {c['walk_depth']!s:>11}  "
                f"{stop:<26} {replay:>20}"
            )
        sources = {c["counters_from"] for c in rep["delta_channels"]}
        lines.append(
            "  (updates / supersteps since the channel's last snapshot, from "
            + ", ".join(sorted(sources))
            + "; walk depth: ancestors a load visits to reach its seed)"
        )
    else:
        lines.append("  no DeltaChannel: every value is stored in the checkpoints themselves")
    lines.append("")
    lines.append("stored bytes (after TOAST compression; indexes not counted)")
    by_channel: dict[str, dict[str, int]] = {"blobs": {}, "writes": {}}
    for r in rep["storage"]:
        if r["channel"] is not None:
            d = by_channel[r["table"]]
            d[r["channel"]] = d.get(r["channel"], 0) + r["bytes"]
    for t in ("checkpoints", "blobs", "writes"):
        detail = ""
        if t in by_channel and by_channel[t]:
            top = sorted(by_channel[t].items(), key=lambda kv: -kv[1])[:4]
            detail = "  (" + ", ".join(f"{ch} {human_bytes(b)}" for ch, b in top)
            detail += ", ...)" if len(by_channel[t]) > 4 else ")"
        lines.append(
            f"  {t:<12} {rep['rows'][t]:>8} rows {human_bytes(rep['bytes'][t]):>11}{detail}"
        )
    if "load" in rep:
        lines += [""] + render_load(rep["load"])
    return "\n".join(lines)


def render_load(load: dict[str, Any]) -> list[str]:
    """The ``--load`` section: one line per load, then what the cache holds."""
    chans = ", ".join(load["channels"]) or "no DeltaChannel"
    lines = [f"load of the latest checkpoint (get_tuple + history of {chans}), saver counters"]
    for d in load["loads"]:
        lines.append(
            f"  {d['load']:<5} {d['walk_statements']} statement(s), {d['walk_rows']:>6} rows, "
            f"{d['walk_checkpoints']:>5} checkpoints walked, "
            f"{d['walk_prefetch_hits']} of {d['walk_history_calls']} history call(s) from "
            f"get_tuple's prefetch, cache {d.get('cache_hits', 0)} hit(s) / "
            f"{d.get('cache_misses', 0)} miss(es), {d['ms']:.1f} ms"
        )
    st = load["stats"]
    if "cache_bytes" in st:
        lines.append(
            f"  cache after: {st['cache_buckets']} bucket(s), {human_bytes(st['cache_bytes'])} "
            f"of {human_bytes(st['cache_max_bytes'])}"
        )
    return lines
