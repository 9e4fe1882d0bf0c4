"""Benchmark of retention: what ``prune`` frees on the coding workload, and how many
threads a second it prunes.

* storage: one ``coding_a`` thread of ``turns`` turns (DeltaChannel fields, at the
  library's default snapshot_frequency, 100, and at 50) measured before and after
  ``prune(keep_latest)``, ``prune(keep_last=10)`` and ``prune(keep_last=10, graph=...)``
  (compaction); each checkpoint left listed read before and after, through ours and the
  official saver: rows and payload bytes
  (``pg_column_size``, i.e. as stored, compressed; pages and indexes are given back to the
  table's free space, on disk only by VACUUM FULL). Whether the official saver's
  ``prune(strategy="keep_latest")`` accepts the same thread is recorded as it answers.
* throughput: ``threads`` copies of a short DeltaChannel thread (and as many full-snapshot
  ones, which the official saver can prune too), pruned in chunks (the DeltaChannel ones
  twice: without and with the graph, i.e. compaction); ours and the official
  saver alternate chunk by chunk on the full-snapshot threads, and the ratio is the
  median of the per-chunk ratios (the machine is shared: a noisy neighbour slows both
  sides of a pair alike).

Both savers are opened by their ``from_conn_string`` (one connection each); sizes, row
counts, the copies of threads and ``ANALYZE`` run on a connection of the section's own.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg
from langchain_core.runnables import RunnableConfig
from psycopg import sql

from langgraph_delta_postgres import DeltaPostgresSaver, PruneStats
from langgraph_delta_postgres._local.workloads import build_graph, run_turns

from .databases import TABLES, thread_payload_bytes
from .savers import ONE_CONNECTION

#: scale name -> (turns of the storage thread, threads of the throughput run)
SIZES = {"full": (200, 10_000), "quick": (30, 500), "tiny": (16, 40)}
CHUNK = {"full": 500, "quick": 100, "tiny": 10}
#: snapshot_frequency of the storage thread besides the library's default (100); the
#: files field is updated once a turn, so it snapshots every K turns
FREQ = {"full": 50, "quick": 10, "tiny": 5}
#: how the section opens its savers (the "opened" field of its results); the sizes,
#: copies and ANALYZE run on a connection of the section's own
OPENED = {"ours": f"DeltaPostgresSaver.{ONE_CONNECTION}",
          "official": f"PostgresSaver.{ONE_CONNECTION}"}

_COPY = {
    "checkpoints": (
        "checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata, "
        "stored_channels, delta_channels, delta_updates, delta_supersteps"
    ),
    "checkpoint_blobs": "checkpoint_ns, channel, version, type, blob",
    "checkpoint_writes": (
        "checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob"
    ),
}


def _rows(conn: psycopg.Connection[Any], thread_id: str) -> dict[str, int]:
    out = {}
    for t in TABLES:
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE thread_id = %s").format(sql.Identifier(t)),
            (thread_id,),
        ).fetchone()
        out[t] = int(row[0]) if row else 0
    return out


def _prefix_bytes(conn: psycopg.Connection[Any], prefix: str) -> int:
    """Payload bytes (as stored) of every thread whose id starts with ``prefix``."""
    total = 0
    for t, cols in (("checkpoints", "pg_column_size(checkpoint) + pg_column_size(metadata)"),
                    ("checkpoint_writes", "coalesce(pg_column_size(blob), 0)"),
                    ("checkpoint_blobs", "coalesce(pg_column_size(blob), 0)")):
        row = conn.execute(
            sql.SQL("SELECT coalesce(sum({c}), 0) FROM {t} WHERE thread_id LIKE %s").format(
                c=sql.SQL(cols), t=sql.Identifier(t)
            ),
            (prefix + "%",),
        ).fetchone()
        total += int(row[0]) if row else 0
    return total


def _measure(conn: psycopg.Connection[Any], thread_id: str) -> dict[str, Any]:
    return {"rows": _rows(conn, thread_id), "payload_bytes": thread_payload_bytes(conn, thread_id)}


def _clone(conn: psycopg.Connection[Any], template: str, prefix: str, n: int) -> list[str]:
    """``n`` copies of ``template`` (same rows, thread ids ``prefix000001``...), in bulk."""
    for table, cols in _COPY.items():
        conn.execute(
            sql.SQL(
                "INSERT INTO {t} (thread_id, {c}) "
                "SELECT %(p)s || lpad(g::text, 6, '0'), {c} FROM {t} "
                "CROSS JOIN generate_series(1, %(n)s) AS g WHERE thread_id = %(src)s"
            ).format(t=sql.Identifier(table), c=sql.SQL(cols)),
            {"p": prefix, "n": n, "src": template},
        )
    return [f"{prefix}{g:06}" for g in range(1, n + 1)]


def run_retention(dsn: str, scale: str, log: Callable[[str], None]) -> dict[str, Any]:
    from langgraph.checkpoint.postgres import PostgresSaver

    turns, n_threads = SIZES[scale]
    chunk = CHUNK[scale]
    res: dict[str, Any] = {"turns": turns, "threads": n_threads, "chunk": chunk,
                           "opened": dict(OPENED)}
    log("retention: savers " + "; ".join(f"{k} {v}" for k, v in OPENED.items()))
    with DeltaPostgresSaver.from_conn_string(dsn) as ours, \
            PostgresSaver.from_conn_string(dsn) as official, \
            psycopg.connect(dsn, autocommit=True) as meter:

        # ------------------------------------------------------------ storage
        log(f"retention: storage of a {turns}-turn coding_a thread before/after prune")
        storage: dict[str, Any] = {}
        for label, freq in (("default", None), (f"k{FREQ[scale]}", FREQ[scale])):
            g = build_graph("coding_a", ours, delta=True, snapshot_frequency=freq)
            for variant, keep_last in (
                ("keep_latest", None), ("keep_last_10", 10), ("compacted_keep_last_10", 10)
            ):
                tid = f"ret-{label}-{variant}"
                run_turns(g, "coding_a", tid, turns)
                before = _measure(meter, tid)
                state_before = g.get_state({"configurable": {"thread_id": tid}}).values
                conf: RunnableConfig = {"configurable": {"thread_id": tid}}
                kept_before = {
                    t.config["configurable"]["checkpoint_id"]: g.get_state(t.config).values
                    for t in list(ours.list(conf))
                }
                try:
                    official.prune([tid], strategy="keep_latest")
                    official_answer = "pruned"
                except Exception as e:  # noqa: BLE001 - recorded as the official saver answers
                    official_answer = f"{type(e).__name__}"
                t0 = time.perf_counter()
                compact = g if variant.startswith("compacted") else None
                stats = ours.prune([tid], keep_last=keep_last, graph=compact)
                seconds = time.perf_counter() - t0
                after = _measure(meter, tid)
                after["visible"] = len(list(ours.list(conf)))
                # every checkpoint left visible reads as before, through ours and official
                same = g.get_state(conf).values == state_before and all(
                    g.get_state(t.config).values == kept_before.get(
                        t.config["configurable"]["checkpoint_id"]
                    )
                    for t in list(ours.list(conf))
                )
                g_off = build_graph("coding_a", official, delta=True, snapshot_frequency=freq)
                official_listed = list(official.list(conf))
                after["official_listed"] = len(official_listed)
                official_same = sum(
                    g_off.get_state(t.config).values
                    == kept_before.get(t.config["configurable"]["checkpoint_id"])
                    for t in official_listed
                )
                storage[f"{label}/{variant}"] = {
                    "snapshot_frequency": freq,
                    "keep_last": keep_last or 1,
                    "before": before,
                    "after": after,
                    "freed": _stats(stats),
                    "payload_ratio": before["payload_bytes"] / max(after["payload_bytes"], 1),
                    "seconds": seconds,
                    "state_unchanged": same,
                    "official_listed_reading_as_before": official_same,
                    "official_keep_latest": official_answer,
                }
                log(
                    f"  {label}/{variant}: {before['rows']['checkpoints']} -> "
                    f"{after['rows']['checkpoints']} checkpoints ({after['visible']} listed), "
                    f"payload {before['payload_bytes'] / 1e6:.2f} -> "
                    f"{after['payload_bytes'] / 1e6:.2f} MB (every listed reads as before: ours "
                    f"{same}; official: {official_same} of {after['official_listed']} listed "
                    f"do; official keep_latest: {official_answer})"
                )
        res["storage"] = storage

        # ------------------------------------------------------------ throughput
        log(f"retention: prune throughput on {n_threads:,} threads")
        g_delta = build_graph("messages", ours, delta=True, snapshot_frequency=5)
        g_full = build_graph("messages", ours, delta=False)
        run_turns(g_delta, "messages", "ret-tpl-delta", 8)
        run_turns(g_full, "messages", "ret-tpl-full", 8)
        delta_ids = _clone(meter, "ret-tpl-delta", "ret-d-", n_threads)
        full_ids = _clone(meter, "ret-tpl-full", "ret-f-", 2 * n_threads)
        meter.execute("ANALYZE")
        bytes_before = _prefix_bytes(meter, "ret-d-")
        freed = PruneStats()
        t0 = time.perf_counter()
        for i in range(0, len(delta_ids), chunk):
            freed += ours.prune(delta_ids[i : i + chunk])
        delta_s = time.perf_counter() - t0
        res["delta_threads_per_s"] = n_threads / delta_s
        res["delta_freed"] = _stats(freed)
        res["delta_bytes"] = {"before": bytes_before, "after": _prefix_bytes(meter, "ret-d-")}
        # the same threads again, pruned with the graph (compaction)
        compact_ids = _clone(meter, "ret-tpl-delta", "ret-c-", n_threads)
        meter.execute("ANALYZE")
        bytes_before = _prefix_bytes(meter, "ret-c-")
        freed_c = PruneStats()
        t0 = time.perf_counter()
        for i in range(0, len(compact_ids), chunk):
            freed_c += ours.prune(compact_ids[i : i + chunk], graph=g_delta)
        res["compacted_threads_per_s"] = n_threads / (time.perf_counter() - t0)
        res["compacted_freed"] = _stats(freed_c)
        res["compacted_bytes"] = {"before": bytes_before, "after": _prefix_bytes(meter, "ret-c-")}
        log(
            f"  ours with the graph (compaction): {res['compacted_threads_per_s']:,.0f} "
            f"threads/s, payload {res['compacted_bytes']['before'] / 1e6:.1f} -> "
            f"{res['compacted_bytes']['after'] / 1e6:.1f} MB ({freed_c.checkpoints:,} "
            f"checkpoints deleted, {freed_c.hidden:,} kept as seeds only)"
        )
        ours_ids, off_ids = full_ids[0::2], full_ids[1::2]
        ratios, ours_t, off_t = [], 0.0, 0.0
        for i in range(0, n_threads, chunk):
            t0 = time.perf_counter()
            ours.prune(ours_ids[i : i + chunk])
            t_ours = time.perf_counter() - t0
            t0 = time.perf_counter()
            official.prune(off_ids[i : i + chunk], strategy="keep_latest")
            t_off = time.perf_counter() - t0
            ours_t, off_t = ours_t + t_ours, off_t + t_off
            ratios.append(t_off / t_ours)
        res["full_threads_per_s"] = {"ours": n_threads / ours_t, "official": n_threads / off_t}
        res["full_official_over_ours_median"] = statistics.median(ratios)
        res["full_ratio_chunks"] = len(ratios)
        log(
            f"  ours on DeltaChannel threads: {res['delta_threads_per_s']:,.0f} threads/s, "
            f"payload {res['delta_bytes']['before'] / 1e6:.1f} -> "
            f"{res['delta_bytes']['after'] / 1e6:.1f} MB "
            f"({freed.checkpoints:,} checkpoints deleted, {freed.hidden:,} kept as seeds only); "
            f"full-snapshot threads: ours {res['full_threads_per_s']['ours']:,.0f}/s, official "
            f"{res['full_threads_per_s']['official']:,.0f}/s (official/ours time, median of "
            f"{len(ratios)} chunk pairs: {res['full_official_over_ours_median']:.2f}x)"
        )
    return res


def _stats(stats: Any) -> dict[str, int]:
    return {
        k: getattr(stats, k)
        for k in ("threads", "checkpoints", "writes", "blobs", "bytes", "hidden")
    }


def run_alone(
    args: Any, scale: str, server: Callable[[str | None], Any], command: str
) -> dict[str, Any]:
    """``langgraph-delta-pg bench --only retention``: this part alone, on a scratch
    database of the same server the full run uses."""
    from .databases import section_database

    with section_database(args, scale, server, command, frozen=True) as (res, dsn, _):
        res["retention"] = run_retention(dsn, scale, lambda m: print(m, flush=True))
    return res
