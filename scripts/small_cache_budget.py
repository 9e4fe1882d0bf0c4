"""Time loads of several long threads with a cache budget too small for one of them.

    python scripts/small_cache_budget.py [--dsn DSN] [--threads 6] [--depth 3000]
        [--rounds 15] [--budget 1048576] [--load latest|loop] [--share 0.5]
        [--admit tinylfu|doorkeeper|always]

Writes one DeltaChannel thread of ``--depth`` checkpoints (``bench.rows.write_chain``:
two channels, one ~200-character message each per checkpoint, no snapshot, so a walk
goes to the root; 3,000 checkpoints is a 1,000-turn agent run) and clones it into
``--threads`` threads. Then, per round, each saver loads every thread once, one after
the other (a server resuming several long threads in turn): ``--load latest`` is what a
run or get_state asks (``get_tuple`` of the latest checkpoint, then the history of both
channels), ``--load loop`` the same at the last 10 checkpoints of each thread. Savers:
one object each, kept across rounds, with ``cache_bytes`` = ``--budget``, 0 and the
default (``--share`` sets ``_cache.policy.MAX_SHARE``, the largest share of the budget one
bucket may take, and ``--admit`` the rule for giving a thread without a bucket one:
``tinylfu``, the saver's, see _cache/policy.py "Admission"; ``doorkeeper``, from its second
call on, least recently used evicted; ``always``, every thread that fits MAX_SHARE, as
before admission existed, to compare admission rules); rounds are interleaved
(``bench.timing.Interleaved``) and the ratio to ``cache_bytes=0`` is taken round by
round. Without --dsn it uses the embedded Postgres.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable
from typing import Any

import psycopg

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._connect import DEFAULT_CACHE_BYTES
from langgraph_delta_postgres._local.embedded import embedded_postgres
from langgraph_delta_postgres.bench.rows import copy_threads, write_chain
from langgraph_delta_postgres.bench.savers import connect_ours
from langgraph_delta_postgres.bench.timing import Interleaved
from langgraph_delta_postgres.migrate import migrate

CHANNELS = ["messages", "files"]
LOOP = 10


def _cfg(thread_id: str, checkpoint_id: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _resume(saver: DeltaPostgresSaver, thread_id: str, checkpoint_id: str | None) -> Any:
    tup = saver.get_tuple(_cfg(thread_id, checkpoint_id))
    assert tup is not None
    return tup, saver.get_delta_channel_history(config=tup.config, channels=CHANNELS)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn")
    ap.add_argument("--threads", type=int, default=6)
    ap.add_argument("--depth", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--budget", type=int, default=1 << 20)
    ap.add_argument("--load", choices=("latest", "loop"), default="latest")
    ap.add_argument("--share", type=float)
    ap.add_argument("--admit", choices=("tinylfu", "doorkeeper", "always"), default="tinylfu")
    args = ap.parse_args()
    from langgraph_delta_postgres import _cache

    if args.share is not None:
        _cache.policy.MAX_SHARE = args.share
    if args.admit != "tinylfu":
        doorkeeper = args.admit == "doorkeeper"

        def admit(self: _cache.HistoryCache, key: tuple[str, str], size: int | None) -> bool:
            return not doorkeeper or self._freq.get(key, 0) >= 2

        _cache.HistoryCache._admit = admit  # type: ignore[method-assign, assignment]
    with contextlib.ExitStack() as stack:
        dsn = args.dsn or stack.enter_context(embedded_postgres())
        with psycopg.connect(dsn, autocommit=True) as admin:
            migrate(admin)
        conn = stack.enter_context(connect_ours(dsn))
        chain = write_chain(DeltaPostgresSaver(conn, cache_bytes=0), "t0", args.depth, CHANNELS)
        copy_threads(conn, "t0", args.threads - 1, "t")
        threads = [f"t{i}" for i in range(args.threads)]
        targets: list[str | None] = [None]
        if args.load == "loop":
            targets = [c for c in chain.ids[-LOOP:]]
        budgets = {"small": args.budget, "off": 0, "default": DEFAULT_CACHE_BYTES}
        savers = {k: DeltaPostgresSaver(conn, cache_bytes=b) for k, b in budgets.items()}

        def load(saver: DeltaPostgresSaver) -> Callable[[], Any]:
            return lambda: [_resume(saver, t, c) for t in threads for c in targets]

        answers = {k: load(s)() for k, s in savers.items()}
        assert answers["small"] == answers["off"] == answers["default"], "answers differ"
        del answers
        iv = Interleaved()
        iv.run({k: load(s) for k, s in savers.items()}, args.rounds)
        for k, b in budgets.items():
            st = iv.stats(k)
            cache = savers[k].history_cache
            held = (
                "no cache"
                if cache is None
                else f"{cache.nbytes:>10,} B, {len(cache)} buckets, {cache.refused} refused"
            )
            line = f"cache_bytes={b:>10,}: median {st['median_ms']:8.1f} ms ({held})"
            if k != "off":
                r = iv.ratio(k, "off")
                line += (
                    f"; /cache_bytes=0 median {r['median']:.3f}x "
                    f"(min {r['min']:.3f}, max {r['max']:.3f}, n {r['n']})"
                )
            print(line, flush=True)


if __name__ == "__main__":
    main()
