"""Loads as an agent server pays them: a resume loop and a history page.

Threads are written by the official ``PostgresSaver`` through the workload's real graph
(two ``DeltaChannel`` fields) into a database it set up itself, which this package's
migrations then adopt (the backfill fills the typed columns of those rows), so both
savers read exactly the same rows, as after a switch from the official saver.

* **resume loop**: at each of the thread's last 45 checkpoints, in chain order (oldest
  first), as successive resumes of a long-running agent do, what the saver is asked:
  ``get_tuple`` and the history of the two DeltaChannel fields; and the same loop as
  ``get_state`` through the graph (which adds the graph's own state building, the same
  for every saver);
* **history page**: ``get_state_history(limit=10)``, which LangGraph answers with one
  history call per entry (Agent Server's /history and Studio ask for it).

Per round, every saver opened by its ``from_conn_string``: ours new (a saver opened for
the round on a new connection, as a process that has not served the thread has: its
cache starts empty and its connection has prepared nothing, so the loop is timed from
cold), ours on one saver kept across rounds (warm: as a server that loaded the thread
before), ours with ``cache_bytes=0`` (kept), and the official saver both ways (new for
the round, and kept). Opening a new saver is not timed (its time is reported apart,
``open_ms``); a new saver of ours is compared with a new official one, a kept one with
the kept one (``pairs``). Rounds are interleaved and ratios taken round by round. Graphs
are compiled outside the timed call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from langchain_core.runnables import RunnableConfig

from .. import DeltaPostgresSaver
from .._local.workloads import build_graph, run_turns
from ..migrate import migrate
from .savers import NEW_CONNECTION, ONE_CONNECTION, NewSavers
from .timing import Interleaved

RESUME_LOOP = 45
PAGE = 10
CHANNELS = ["messages", "files"]  # the workloads' DeltaChannel fields


@dataclass(frozen=True)
class LoadThread:
    key: str
    workload: str
    turns: int
    freq: int


def threads_for(scale_name: str) -> list[LoadThread]:
    turns = {"full": (200, 1000), "quick": (30, 60), "tiny": (8, 10)}[scale_name]
    return [
        LoadThread(f"coding_a_{turns[0]}_k50", "coding_a", turns[0], 50),
        LoadThread(f"messages_{turns[1]}_k1000", "messages", turns[1], 1000),
    ]


def _cfg(thread_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _chain_tail(conn: psycopg.Connection[Any], thread_id: str, n: int) -> list[str]:
    """The last ``n`` checkpoints of the thread's head chain, oldest first."""
    rows = conn.execute(
        "WITH RECURSIVE c AS ("
        " (SELECT checkpoint_id, parent_checkpoint_id, 1 AS i FROM checkpoints"
        "  WHERE thread_id = %(t)s AND checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1)"
        " UNION ALL"
        " SELECT p.checkpoint_id, p.parent_checkpoint_id, c.i + 1 FROM c JOIN checkpoints p"
        "  ON p.thread_id = %(t)s AND p.checkpoint_ns = ''"
        "  AND p.checkpoint_id = c.parent_checkpoint_id"
        "  WHERE c.i < %(n)s)"
        " SELECT checkpoint_id FROM c ORDER BY i DESC",
        {"t": thread_id, "n": n},
    ).fetchall()
    return [r[0] for r in rows]


#: (prepare, timed call) for :meth:`.timing.Interleaved.run` (scripts/ab_versions.py
#: calls these of two checkouts alike: keep their signatures)
Timed = tuple[Callable[[], Any], Callable[[Any], Any]]
#: (make, finish): the saver a round reads through, and what runs after its call
Maker = tuple[Callable[[], Any], Callable[[Any], None]]
#: the savers the loads read through, in the order of the tables
READERS = ("ours", "ours_warm", "ours_nocache", "official", "official_new")


def _keep(_arg: Any) -> None:
    """A kept saver's finish: nothing to close."""


def _kept(saver: Any) -> Maker:
    """A saver kept across rounds."""
    return (lambda: saver, _keep)


def _fresh(new: NewSavers, name: str, cm: Callable[[], Any]) -> Maker:
    """A saver opened for each round (``cm()``: its ``from_conn_string``), closed after
    the round's call."""
    return (lambda: new.open(name, cm()), new.close)


def _loop(t: LoadThread, ids: Sequence[str], make: Callable[[], Any]) -> Timed:
    """Untimed: the saver and a new graph; timed: get_state at each checkpoint of
    ``ids``."""

    def prepare() -> Any:
        return build_graph(t.workload, make(), snapshot_frequency=t.freq)

    def call(g: Any) -> list[Any]:
        return [g.get_state(_cfg(t.key, cid)).values for cid in ids]

    return (prepare, call)


def _saver_loop(t: LoadThread, ids: Sequence[str], make: Callable[[], Any]) -> Timed:
    """Untimed: the saver; timed: what a resume asks of the saver at each checkpoint of
    ``ids`` (get_tuple, then the history of the DeltaChannel fields with a version and no
    value stored there, as LangGraph's channels_from_checkpoint asks), without the
    graph's own work of building the state (the same for every saver)."""

    def call(saver: Any) -> list[Any]:
        out = []
        for cid in ids:
            tup = saver.get_tuple(_cfg(t.key, cid))
            cp = tup.checkpoint
            replay = [
                c for c in CHANNELS if c in cp["channel_versions"] and c not in cp["channel_values"]
            ]
            out.append(tup)
            if replay:
                out.append(saver.get_delta_channel_history(config=tup.config, channels=replay))
        return out

    return (make, call)


def _page(t: LoadThread, ids: Sequence[str], make: Callable[[], Any]) -> Timed:
    """Untimed: the saver and a new graph; timed: one get_state_history page."""

    def prepare() -> Any:
        return build_graph(t.workload, make(), snapshot_frequency=t.freq)

    def call(g: Any) -> list[Any]:
        return [s.values for s in g.get_state_history(_cfg(t.key), limit=PAGE)]

    return (prepare, call)


def _timed(fn: Callable[[LoadThread, Sequence[str], Callable[[], Any]], Timed],
           t: LoadThread, ids: Sequence[str], maker: Maker
           ) -> tuple[Callable[[], Any], Callable[[Any], Any], Callable[[Any], None]]:
    """``fn``'s (prepare, call) on ``maker``'s saver, and what runs after the call."""
    make, finish = maker
    return (*fn(t, ids, make), finish)


def handout_options(writes: Sequence[Any], serde: Any, rounds: int) -> dict[str, Any]:
    """How an answer's values can be handed out, timed on one real answer (the writes of
    a history call): a fresh serde decode (what a saver without a cache does), one
    pickle per checkpoint, one pickle per fetched stretch (what the cache keeps),
    ``copy.deepcopy``, and a shallow copy of the lists as ``DeltaChannel.copy()`` makes
    (shares the message objects: a caller editing one changes later answers)."""
    import copy
    import pickle

    typed = [serde.dumps_typed(w[2]) for w in writes]
    per_value = [pickle.dumps([w], protocol=5) for w in writes]
    stretch = pickle.dumps([list(writes)], protocol=5)
    fns: dict[str, Callable[[], Any]] = {
        "serde_decode": lambda: [serde.loads_typed(t) for t in typed],
        "pickle_per_checkpoint": lambda: [pickle.loads(p) for p in per_value],
        "pickle_per_stretch": lambda: pickle.loads(stretch),
        "deepcopy": lambda: copy.deepcopy(list(writes)),
        "shallow_copy": lambda: [
            (a, b, list(v) if isinstance(v, list) else v) for a, b, v in writes
        ],
    }
    iv = Interleaved()
    iv.run(fns, rounds)
    return {
        "values": len(writes),
        "stats": {k: iv.stats(k) for k in fns},
        "serde_over": {k: iv.ratio("serde_decode", k) for k in fns if k != "serde_decode"},
        "isolates": {k: k != "shallow_copy" for k in fns},
    }


#: how the section opens its savers (the "opened" field of its results)
OPENED = {
    "ours": f"DeltaPostgresSaver.{NEW_CONNECTION}",
    "ours_warm": f"DeltaPostgresSaver.{ONE_CONNECTION}, kept across rounds",
    "ours_nocache": f"DeltaPostgresSaver.{ONE_CONNECTION}, cache_bytes=0, kept across rounds",
    "official": f"PostgresSaver.{ONE_CONNECTION}, kept across rounds",
    "official_new": f"PostgresSaver.{NEW_CONNECTION}",
}
#: the saver each of ours is compared with: a new saver with a new one, a kept one with
#: a kept one
PAIRS = {"ours": "official_new", "ours_warm": "official", "ours_nocache": "official"}


def run_loads(dsn: str, scale_name: str, rounds: int, log: Callable[[str], None]
              ) -> dict[str, Any]:
    """``dsn``: an empty database (the official saver sets it up, ours adopts it)."""
    from langgraph.checkpoint.postgres import PostgresSaver

    specs = threads_for(scale_name)
    out: dict[str, Any] = {"rounds": rounds, "threads": {},
                           "opened": dict(OPENED), "pairs": dict(PAIRS)}
    log("  loads: savers " + "; ".join(f"{k} {v}" for k, v in OPENED.items()))
    with PostgresSaver.from_conn_string(dsn) as writer:
        writer.setup()
        for t in specs:
            log(f"  loads: writing {t.key} with the official saver ({t.turns} turns)")
            g = build_graph(t.workload, writer, snapshot_frequency=t.freq)
            run_turns(g, t.workload, t.key, t.turns)
    with psycopg.connect(dsn, autocommit=True) as admin:
        migrate(admin)  # adopt: the official saver's database becomes ours
        admin.execute("ANALYZE")
        tails = {t.key: _chain_tail(admin, t.key, RESUME_LOOP) for t in specs}

    new = NewSavers()
    with contextlib.ExitStack() as stack:
        stack.callback(new.close)
        # one saver for every round: a server's
        warm = stack.enter_context(DeltaPostgresSaver.from_conn_string(dsn))
        nocache = stack.enter_context(DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0))
        official = stack.enter_context(PostgresSaver.from_conn_string(dsn))
        kept = {"ours_warm": warm, "ours_nocache": nocache, "official": official}
        fresh = {
            "ours": lambda: DeltaPostgresSaver.from_conn_string(dsn),
            "official_new": lambda: PostgresSaver.from_conn_string(dsn),
        }

        def savers() -> dict[str, Maker]:
            """name -> (make, finish): the saver a round reads through, and what closes
            it after the round's call (the new savers' connections)."""
            made = {k: _kept(s) for k, s in kept.items()}
            made.update({k: _fresh(new, k, cm) for k, cm in fresh.items()})
            return {k: made[k] for k in READERS}

        for t in specs:
            entry: dict[str, Any] = {"workload": t.workload, "turns": t.turns, "freq": t.freq}
            ids = tails[t.key]

            # the answers agree before anything is timed
            same = {}
            for name, maker in savers().items():
                prep, call, finish = _timed(_loop, t, ids, maker)
                g = prep()
                try:
                    same[name] = call(g)
                finally:
                    finish(g)
            entry["states_equal"] = all(v == same["official"] for v in same.values())
            del same  # not held while timing: a larger heap makes every full collection dearer
            for what, fn in (
                ("resume_loop", _saver_loop),
                ("resume_loop_graph", _loop),
                ("history_page", _page),
            ):
                iv = Interleaved()
                new.open_s.clear()
                iv.run({name: _timed(fn, t, ids, maker) for name, maker in savers().items()},
                       rounds)
                entry[what] = {
                    "stats": {name: iv.stats(name) for name in READERS},
                    # a new saver of ours against a new official one (each on a connection
                    # of its own, opened for the round), a kept one against a kept one
                    "official_over_ours": iv.ratio(PAIRS["ours"], "ours"),
                    "official_over_ours_nocache": iv.ratio(PAIRS["ours_nocache"], "ours_nocache"),
                    "official_over_ours_warm": iv.ratio(PAIRS["ours_warm"], "ours_warm"),
                    # the kept official saver against its new one: what a new connection
                    # costs it
                    "official_new_over_official": iv.ratio("official_new", "official"),
                    "open_ms": new.open_ms(),
                    "calls": PAGE if what == "history_page" else len(ids),
                }
                r = entry[what]
                log(
                    f"  {t.key} {what}: official/ours new saver "
                    f"{r['official_over_ours']['median']:.2f}x, "
                    f"official/ours(cache_bytes=0) "
                    f"{r['official_over_ours_nocache']['median']:.2f}x, warm "
                    f"{r['official_over_ours_warm']['median']:.2f}x "
                    f"(ours new {r['stats']['ours']['median_ms']:.1f} ms, "
                    f"nocache {r['stats']['ours_nocache']['median_ms']:.1f} ms, "
                    f"official new {r['stats']['official_new']['median_ms']:.1f} ms, "
                    f"official {r['stats']['official']['median_ms']:.1f} ms)"
                )
            if t.workload == "messages":
                hist = nocache.get_delta_channel_history(
                    config=_cfg(t.key, ids[-1]), channels=CHANNELS
                )
                writes = [w for ch in CHANNELS for w in hist[ch]["writes"]]
                out["handout"] = handout_options(writes, official.serde, max(rounds, 5))
                h = out["handout"]["serde_over"]
                log(
                    "  hand-out of "
                    f"{len(writes)} values, serde decode / option: "
                    + ", ".join(f"{k} {v['median']:.2f}x" for k, v in h.items())
                )
            out["threads"][t.key] = entry
    return out
