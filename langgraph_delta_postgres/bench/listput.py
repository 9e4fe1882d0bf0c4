"""Writes and ``list``: per-invoke latency per snapshot_frequency, and ``list(limit=n)``
on a deep thread, ours against the official saver (direct connection, 0 ms RTT).

* **per-invoke**: for each snapshot_frequency, one ``messages`` thread per saver grows
  turn by turn, the two savers alternating (which one goes first flips every turn); the
  ratio ours/official is taken turn by turn, then its median. An invoke is what a
  graph step costs the caller: ``get_tuple`` + history at the start, then ``put`` /
  ``put_writes``.
* **list**: ``list({"thread_id": T}, limit=n)`` and ``list(None, limit=n)`` for
  n in (1, 10) on a thread of ``list_depth`` checkpoints written by the official saver
  (with ``put_writes``), interleaved rounds, ratio round by round.
* **list among many threads**: ``list(None, limit=n)`` after ``list_threads[i]`` small
  threads (copies of a 20-checkpoint thread written by the official saver) are in the
  database, interleaved rounds at each count (the database also holds the rows of the
  sections before this one, so the table's totals are reported).
* **big value**: one channel value of ``big_mb`` MB (random bytes, which TOAST cannot
  compress), as a ``_DeltaSnapshot``: ``put`` of it, ``get_tuple`` of that checkpoint,
  and the history call of its child (the value is the seed), interleaved rounds.

Both savers are opened by their ``from_conn_string`` (one connection each; the big
value's history by ours with ``cache_bytes=0``, opened the same way); the copies of
threads, ``ANALYZE`` and the counts run on a connection of the section's own.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from langgraph.checkpoint.base import empty_checkpoint

from .. import DeltaPostgresSaver
from .._compat import _DeltaSnapshot
from .._connect import DEFAULT_PREPARE_THRESHOLD
from .._local.workloads import build_graph, user_input
from .report.format import _ms, _x
from .rows import copy_threads, write_chain
from .savers import ONE_CONNECTION
from .timing import Interleaved, ratio_summary, summary

LIST_LIMITS = (1, 10)
#: how the section opens its savers (the "opened" field of its results)
OPENED = {"ours": f"DeltaPostgresSaver.{ONE_CONNECTION}",
          "official": f"PostgresSaver.{ONE_CONNECTION}",
          "ours_history_big_value": f"DeltaPostgresSaver.{ONE_CONNECTION}, cache_bytes=0"}


@dataclass(frozen=True)
class ListPutScale:
    turns: int
    freqs: tuple[int, ...]
    list_depth: int
    rounds: int
    big_mb: int
    big_rounds: int
    list_threads: tuple[int, ...]


SCALES = {
    "full": ListPutScale(turns=500, freqs=(1, 10, 50), list_depth=3000, rounds=31,
                         big_mb=50, big_rounds=7, list_threads=(300, 2000, 10_000)),
    "quick": ListPutScale(turns=60, freqs=(1, 10, 50), list_depth=500, rounds=21,
                          big_mb=5, big_rounds=5, list_threads=(300, 2000)),
    "tiny": ListPutScale(turns=6, freqs=(1, 50), list_depth=30, rounds=3,
                         big_mb=1, big_rounds=2, list_threads=(20,)),
}


@contextlib.contextmanager
def _opened(dsn: str) -> Iterator[tuple[dict[str, Any], psycopg.Connection[Any]]]:
    """Ours and the official saver as their ``from_conn_string`` opens them, and a raw
    connection of the section's own (copies of threads, ANALYZE, counts)."""
    from langgraph.checkpoint.postgres import PostgresSaver

    with DeltaPostgresSaver.from_conn_string(dsn) as ours, \
            PostgresSaver.from_conn_string(dsn) as official, \
            psycopg.connect(dsn, autocommit=True) as raw:
        yield {"ours": ours, "official": official}, raw


def run_listput(dsn: str, scale_name: str, log: Callable[[str], None]) -> dict[str, Any]:
    scale = SCALES[scale_name]
    res: dict[str, Any] = {"scale": vars(scale).copy(), "invoke": {}, "list": {},
                           "opened": dict(OPENED)}
    log("  savers: " + "; ".join(f"{k} {v}" for k, v in OPENED.items()))
    with _opened(dsn) as (savers, raw):
        fc = savers["official"].conn
        assert isinstance(fc, psycopg.Connection)
        for freq in scale.freqs:
            t0 = time.perf_counter()
            graphs = {k: build_graph("messages", s, snapshot_frequency=freq)
                      for k, s in savers.items()}
            samples: dict[str, list[float]] = {"ours": [], "official": []}
            for t in range(scale.turns):
                order = ["ours", "official"] if t % 2 else ["official", "ours"]
                for k in order:
                    cfg = {"configurable": {"thread_id": f"invoke-{freq}-{k}"}}
                    a = time.perf_counter()
                    graphs[k].invoke(user_input("messages", t), cfg)
                    samples[k].append(time.perf_counter() - a)
            ratios = [a / b for a, b in zip(samples["ours"], samples["official"], strict=True)]
            half = scale.turns // 2
            entry: dict[str, Any] = {
                "snapshot_frequency": freq,
                "turns": scale.turns,
                "ours": summary(samples["ours"]),
                "official": summary(samples["official"]),
                "ratio_ours_official": ratio_summary(ratios),
                "ratio_ours_official_second_half": ratio_summary(ratios[half:]),
                "seconds": time.perf_counter() - t0,
            }
            res["invoke"][str(freq)] = entry
            log(f"  invoke, messages {scale.turns} turns, snapshot_frequency={freq}: ours "
                f"{entry['ours']['median_ms']:.2f} / official "
                f"{entry['official']['median_ms']:.2f} ms, ours/official "
                f"x{entry['ratio_ours_official']['median']:.2f}")

        t0 = time.perf_counter()
        tid = "list-deep"
        with fc.transaction():
            write_chain(savers["official"], tid, scale.list_depth, ("messages", "files"))
        raw.execute("ANALYZE checkpoints, checkpoint_blobs, checkpoint_writes")
        log(f"  list thread: {scale.list_depth} checkpoints written by the official saver "
            f"({time.perf_counter() - t0:.1f}s)")
        thread_cfg: Any = {"configurable": {"thread_id": tid}}
        cases: tuple[tuple[str, Any], ...] = (("thread", thread_cfg), ("all threads", None))
        for which, cfg in cases:
            for n in LIST_LIMITS:
                got = {k: [t.config for t in s.list(cfg, limit=n)] for k, s in savers.items()}
                iv = Interleaved()
                # Warm-up past psycopg's prepare_threshold: both savers' statements
                # prepared (the official connection prepares at once), steady state timed.
                iv.run({k: (lambda s=s, cfg=cfg, n=n: list(s.list(cfg, limit=n)))
                        for k, s in savers.items()}, scale.rounds,
                       warmup=DEFAULT_PREPARE_THRESHOLD + 1)
                key = f"{which}, limit={n}"
                res["list"][key] = {
                    "config": "thread" if cfg else "None",
                    "limit": n,
                    "depth": scale.list_depth,
                    "ours": iv.stats("ours"),
                    "official": iv.stats("official"),
                    "ratio_ours_official": iv.ratio("ours", "official"),
                    "results_equal": got["ours"] == got["official"],
                }
                m = res["list"][key]
                log(f"  list({which}, limit={n}) at depth {scale.list_depth}: ours "
                    f"{m['ours']['median_ms']:.2f} / official {m['official']['median_ms']:.2f} "
                    f"ms, ours/official x{m['ratio_ours_official']['median']:.2f}"
                    + ("" if m["results_equal"] else "  !! RESULTS DIFFER"))
        res["many_threads"] = _many_threads(savers, raw, scale, log)
        with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as nocache:
            res["big"] = _big_value(savers, nocache, scale, log)
    return res


def _many_threads(savers: dict[str, Any], raw: psycopg.Connection[Any], scale: ListPutScale,
                  log: Callable[[str], None]) -> list[dict[str, Any]]:
    """``list(None, limit=n)`` as small threads are added, up to each of ``list_threads``
    (``raw``: the section's own connection, for the copies)."""
    with savers["official"].conn.transaction():
        write_chain(savers["official"], "small-tpl", 20, ("messages", "files"), seed=11)
    out: list[dict[str, Any]] = []
    have = 0
    for count in scale.list_threads:
        t0 = time.perf_counter()
        copy_threads(raw, "small-tpl", count - have, f"small-{count}-")
        have = count
        row = raw.execute("SELECT count(DISTINCT thread_id), count(*) FROM checkpoints").fetchone()
        assert row is not None
        threads, rows = row
        log(f"  list: {count} small threads copied ({time.perf_counter() - t0:.1f}s); "
            f"{threads} threads, {rows} checkpoints in the table")
        for n in LIST_LIMITS:
            # the copies share their checkpoint ids: ties in checkpoint_id order are
            # returned in any order by either saver, so the ids are compared, in order
            got = {k: [t.config["configurable"]["checkpoint_id"] for t in s.list(None, limit=n)]
                   for k, s in savers.items()}
            iv = Interleaved()
            iv.run({k: (lambda s=s, n=n: list(s.list(None, limit=n))) for k, s in savers.items()},
                   scale.rounds, warmup=DEFAULT_PREPARE_THRESHOLD + 1)
            m = {"small_threads": count, "threads": threads, "checkpoints": rows, "limit": n,
                 "ours": iv.stats("ours"), "official": iv.stats("official"),
                 "ratio_ours_official": iv.ratio("ours", "official"),
                 "results_equal": got["ours"] == got["official"]}
            out.append(m)
            log(f"  list(None, limit={n}) among {threads} threads ({rows} checkpoints): ours "
                f"{m['ours']['median_ms']:.2f} / official {m['official']['median_ms']:.2f} ms, "
                f"ours/official x{m['ratio_ours_official']['median']:.2f}"
                + ("" if m["results_equal"] else "  !! RESULTS DIFFER"))
    return out


def _big_value(savers: dict[str, Any], nocache: DeltaPostgresSaver, scale: ListPutScale,
               log: Callable[[str], None]) -> dict[str, Any]:
    value = [os.urandom(1000) for _ in range(scale.big_mb * 1000)]
    n = {k: 0 for k in savers}
    last: dict[str, Any] = {}

    def put(k: str) -> Callable[[], Any]:
        def call() -> None:
            s = savers[k]
            n[k] += 1
            cp = empty_checkpoint()
            version = s.get_next_version(None, None)
            cp["channel_values"] = {"big": _DeltaSnapshot(value)}
            cp["channel_versions"] = {"big": version}
            cfg = {"configurable": {"thread_id": f"big-{k}-{n[k]}", "checkpoint_ns": ""}}
            cfg = s.put(cfg, cp, {"source": "loop", "step": 0, "parents": {}}, {"big": version})
            child = empty_checkpoint()
            child["channel_versions"] = {"big": version}
            last[k] = (cfg, s.put(cfg, child, {"source": "loop", "step": 1, "parents": {}}, {}))
        return call

    # the history call is the same call repeated: ours reads without its cache (a saver
    # from_conn_string(cache_bytes=0) opened), so the figure is the read of the value
    # (with the cache, every repeat is a copy from memory)
    readers = {"ours": nocache, "official": savers["official"]}
    iv = Interleaved()
    iv.run({f"put:{k}": put(k) for k in savers}, scale.big_rounds)
    iv.run({f"get_tuple:{k}": (lambda k=k: savers[k].get_tuple(last[k][0])) for k in savers}
           | {f"history:{k}": (lambda k=k: readers[k].get_delta_channel_history(
               config=last[k][1], channels=["big"])) for k in savers}, scale.big_rounds)
    got = {k: savers[k].get_delta_channel_history(config=last[k][1], channels=["big"])
           for k in savers}
    out: dict[str, Any] = {"mb": scale.big_mb, "results_equal": got["ours"] == got["official"]}
    for call in ("put", "get_tuple", "history"):
        out[call] = {
            "ours": iv.stats(f"{call}:ours"),
            "official": iv.stats(f"{call}:official"),
            "ratio_ours_official": iv.ratio(f"{call}:ours", f"{call}:official"),
        }
        m = out[call]
        log(f"  {call} of a {scale.big_mb} MB value: ours {m['ours']['median_ms']:.0f} / "
            f"official {m['official']['median_ms']:.0f} ms, ours/official "
            f"x{m['ratio_ours_official']['median']:.2f}")
    return out


def headline(res: dict[str, Any]) -> dict[str, Any]:
    """Entries of the run's headline: ours/official per invoke and per list call."""
    lp = res.get("listput")
    if not lp:
        return {}
    h: dict[str, Any] = {}
    for f, e in lp["invoke"].items():
        h[f"invoke_snapshot_frequency_{f}"] = {
            "turns": e["turns"], "ours_over_official": e["ratio_ours_official"]["median"]}
    for key, m in lp["list"].items():
        h["list_" + key.replace(", ", "_").replace("=", "").replace(" ", "_")] = {
            "depth": m["depth"], "ours_over_official": m["ratio_ours_official"]["median"]}
    for m in lp.get("many_threads", []):
        h[f"list_None_limit{m['limit']}_{m['small_threads']}_small_threads"] = {
            "threads": m["threads"], "checkpoints": m["checkpoints"],
            "ours_over_official": m["ratio_ours_official"]["median"]}
    if big := lp.get("big"):
        for call in ("put", "get_tuple", "history"):
            h[f"big_value_{call}"] = {
                "mb": big["mb"], "ours_over_official": big[call]["ratio_ours_official"]["median"]}
    return h


def markdown(res: dict[str, Any]) -> list[str]:
    """The report's section (empty when the run has none)."""
    lp = res.get("listput")
    if not lp:
        return []
    L = ["## Writes and list (ours vs official, 0 ms RTT)", "",
         "Per-invoke latency of the `messages` graph, one thread per saver, the savers "
         "alternating turn by turn; ours/official taken turn by turn (target <= 1.0x):", "",
         "| snapshot_frequency | turns | ours ms | official ms | ours/official "
         "| ours/official, 2nd half |",
         "|---|---|---|---|---|---|"]
    for f, e in lp["invoke"].items():
        L.append(f"| {f} | {e['turns']} | {_ms(e['ours'])} | {_ms(e['official'])} "
                 f"| {_x(e['ratio_ours_official'])} "
                 f"| {_x(e['ratio_ours_official_second_half'])} |")
    L += ["", "`list(config, limit=n)` on a thread written by the official saver, interleaved "
          "rounds, ratio round by round (target: within 1.5x):", "",
          "| call | checkpoints in the thread | ours ms | official ms | ours/official "
          "| equal |", "|---|---|---|---|---|---|"]
    for _key, m in lp["list"].items():
        cfg = '{"thread_id": T}' if m["config"] == "thread" else "None"
        L.append(f"| list({cfg}, limit={m['limit']}) | {m['depth']} | {_ms(m['ours'])} "
                 f"| {_ms(m['official'])} | {_x(m['ratio_ours_official'])} "
                 f"| {'yes' if m['results_equal'] else 'NO'} |")
    if many := lp.get("many_threads"):
        L += ["", "`list(None, limit=n)` as small threads (copies of a 20-checkpoint thread "
              "written by the official saver) are added; the table also holds the rows of "
              "the sections before (target <= 1.0x):", "",
              "| call | small threads added | threads | checkpoints | ours ms | official ms "
              "| ours/official | equal ids |", "|---|---|---|---|---|---|---|---|"]
        for m in many:
            L.append(f"| list(None, limit={m['limit']}) | {m['small_threads']:,} "
                     f"| {m['threads']:,} | {m['checkpoints']:,} | {_ms(m['ours'])} "
                     f"| {_ms(m['official'])} | {_x(m['ratio_ours_official'])} "
                     f"| {'yes' if m['results_equal'] else 'NO'} |")
    if big := lp.get("big"):
        L += ["", f"One {big['mb']} MB value (random bytes) as a `_DeltaSnapshot`: `put`, "
              "`get_tuple` of its checkpoint, the history call of its child (the value is the "
              f"seed; equal: {'yes' if big['results_equal'] else 'NO'}):", "",
              "| call | ours ms | official ms | ours/official |", "|---|---|---|---|"]
        for call in ("put", "get_tuple", "history"):
            m = big[call]
            L.append(f"| {call} | {_ms(m['ours'])} | {_ms(m['official'])} "
                     f"| {_x(m['ratio_ours_official'])} |")
    return L + [""]


def main(argv: list[str] | None = None) -> None:
    """``python -m langgraph_delta_postgres.bench.listput [full|quick|tiny]``: the
    many-threads ``list`` part alone, on an embedded Postgres (a scratch database)."""
    import sys
    import uuid

    from .._local.embedded import embedded_postgres
    from ..migrate import migrate
    from .databases import freeze_autovacuum, scratch_database

    args = sys.argv[1:] if argv is None else argv
    scale = SCALES[args[0] if args else "full"]
    with embedded_postgres() as server, scratch_database(server, uuid.uuid4().hex[:10]) as (
        dsn, _
    ):
        with psycopg.connect(dsn, autocommit=True) as meter:
            migrate(meter)
            freeze_autovacuum(meter)
        with _opened(dsn) as (savers, raw):
            _many_threads(savers, raw, scale, print)


if __name__ == "__main__":
    main()
