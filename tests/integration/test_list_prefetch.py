"""list()'s prefetch (``_ops/listed.py``, ``_Listed``) reads exactly what the history walk reads.

After ``list`` of a thread, the history calls LangGraph makes for the listed checkpoints
(``get_state_history``) are answered from the listing's rows when each channel's chain
down to its seed is in them. For every checkpoint of threads made the way production
makes them (graph runs with DeltaChannels at snapshot_frequency 1 and >1, inline
primitives and inline nulls, forks and namespaces, rows the official saver wrote and
ours continued, pruned with each strategy, ``delete_for_runs``, orphan writes of failed
puts), the listing's answer must equal the statement's (``get_delta_channel_history``
with the prefetch cleared) and the official saver's on the same rows; sync and async,
with the cache and with ``cache_bytes=0``. The listing may decline (None: a chain leaves
it, the depth guard, a cycle); then the statement answers, and each test checks the
listing answered where it can. Two answers, and an answer and the listed tuples, never
share a mutable object.
"""

from __future__ import annotations

import builtins
import dataclasses
import operator
import random
from collections.abc import Sequence
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph

import langgraph_delta_postgres._ops.base as core
from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver, HistoryError
from tests.graph._graphs import append_reducer
from tests.graph._util import (
    ThreadGen,
    _put_args,
    apply_steps,
    canon,
    canon_history,
    cfg,
    insert_empty_rows,
    official_saver,
)
from tests.graph.test_delta_graphs import fanout_builder
from tests.graph.test_history_differential import CHANNELS as HCHANNELS
from tests.graph.test_history_differential import forks, linear, namespaces
from tests.graph.test_orphan_writes import PutFault, failing

GEN_CHANNELS = ["msgs", "files", "count", "never_written"]
NOTE_CHANNELS = ["items", "log", "n", "note", "never_written"]
FANOUT_CHANNELS = ["items", "turns", "never_written"]


class NoteState(TypedDict):
    items: Annotated[list[Any], DeltaChannel(append_reducer, snapshot_frequency=3)]
    log: Annotated[list[Any], DeltaChannel(append_reducer, snapshot_frequency=100)]
    n: Annotated[int, operator.add]  # an inline primitive
    note: str | None  # an inline null at every other node


def note_builder() -> StateGraph[Any]:
    def node(name: str) -> Any:
        def fn(s: Any) -> dict[str, Any]:
            return {
                "items": [f"{name}{s['n']}"], "log": [name], "n": 1,
                "note": None if name != "b" else f"b{s['n']}",
            }

        return fn

    b = StateGraph(NoteState)
    for name in ("a", "b", "c"):
        b.add_node(name, node(name))
    b.add_edge(START, "a")
    b.add_edge("a", "b")
    b.add_edge("b", "c")
    b.add_edge("c", END)
    return b


def RUN(thread: str, run_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}, "metadata": {"run_id": run_id}}


def _graph_runs(saver: Any, builder: StateGraph[Any], thread: str, runs: Sequence[str],
                inp: Any) -> None:
    """Runs ``runs`` on ``thread``; run ids are ``thread/run`` (delete_for_runs deletes a
    run id in every thread)."""
    g = builder.compile(checkpointer=saver)
    for r in runs:
        g.invoke(inp(r), RUN(thread, f"{thread}/{r}"))


def build_threads(dsn: str) -> dict[str, list[str]]:
    """Every thread of the tests below: name -> the channels asked at each checkpoint."""
    threads: dict[str, list[str]] = {}

    def notes_in(r: str) -> dict[str, Any]:
        return {"items": [f"u-{r}"], "log": [], "n": 0, "note": None}

    def fan_in(r: str) -> dict[str, Any]:
        return {"items": [f"u-{r}"]}

    with psycopg.connect(dsn, autocommit=True) as conn, official_saver(dsn) as off:
        ours = DeltaPostgresSaver(conn)
        # generated histories (inline seeds incl. null, snapshots, 'empty' rows, forks,
        # namespaces), by ours and by the official saver (stored_channels NULL) with ours
        # continuing on top (an adopted thread)
        for shape, make in (("linear", linear), ("forks", forks), ("ns", namespaces)):
            steps = make(random.Random(f"listed-{shape}"))
            apply_steps(ours, f"gen-{shape}", steps)
            insert_empty_rows(dsn, f"gen-{shape}", steps)
            threads[f"gen-{shape}"] = GEN_CHANNELS
        g = ThreadGen(random.Random("listed-adopted"), GEN_CHANNELS[:3], "t")
        last = None
        for _ in range(30):
            last = g.step(last, seed_p=0.3)
        apply_steps(off, "gen-adopted", g.steps[:18])
        apply_steps(ours, "gen-adopted", g.steps[18:])
        insert_empty_rows(dsn, "gen-adopted", g.steps)
        threads["gen-adopted"] = GEN_CHANNELS
        # stale claims: the official saver (a worker not migrated yet) puts again
        # checkpoints ours wrote, with an inline value where ours stored none; its
        # upsert keeps our stored_channels, which do not claim it: the walk reads no
        # value there (only claimed channels count), the official saver does
        g = ThreadGen(random.Random("listed-stale"), GEN_CHANNELS[:3], "t")
        last = None
        for _ in range(20):
            last = g.step(last, seed_p=0.1, write_p=0.9)
        apply_steps(ours, "stale-claims", g.steps)
        restated = 0
        for st in g.steps[2::3]:
            if "count" in st.channel_values:
                continue
            conf, cp, md, _ = _put_args("stale-claims", st)
            cp["channel_values"]["count"] = 7
            off.put(conf, cp, md, {})
            restated += 1
        assert restated > 0
        threads["stale-claims"] = GEN_CHANNELS
        # the same generated shape, then pruned (keep_latest: its own chain only)
        steps = linear(random.Random("listed-pruned-gen"), 40, seed_p=0.3)
        apply_steps(ours, "gen-pruned", steps)
        ours.prune(["gen-pruned"], strategy="keep_latest", keep_last=12)
        threads["gen-pruned"] = GEN_CHANNELS
        # graph runs: snapshot_frequency 1 and 4 (fan-out: several tasks' writes per
        # checkpoint), 3 (inline primitive and inline null channels)
        for freq in (1, 4):
            _graph_runs(ours, fanout_builder(freq), f"fan-{freq}", ["r0", "r1", "r2"], fan_in)
            threads[f"fan-{freq}"] = FANOUT_CHANNELS
        _graph_runs(ours, note_builder(), "notes", ["r0", "r1", "r2", "r3"], notes_in)
        threads["notes"] = NOTE_CHANNELS
        # adopted: the official saver ran the first runs, ours the next
        _graph_runs(off, note_builder(), "notes-adopted", ["r0", "r1"], notes_in)
        _graph_runs(ours, note_builder(), "notes-adopted", ["r2", "r3"], notes_in)
        threads["notes-adopted"] = NOTE_CHANNELS
        # pruned: keep_latest, keep_latest with keep_last, on ours and adopted rows
        for name, builder, chans, inp, keep_last in (
            ("notes-pruned", note_builder(), NOTE_CHANNELS, notes_in, None),
            ("notes-keep5", note_builder(), NOTE_CHANNELS, notes_in, 5),
            ("fan-4-pruned", fanout_builder(4), FANOUT_CHANNELS, fan_in, None),
            ("fan-1-keep3", fanout_builder(1), FANOUT_CHANNELS, fan_in, 3),
        ):
            _graph_runs(ours, builder, name, ["r0", "r1", "r2", "r3"], inp)
            ours.prune([name], strategy="keep_latest", keep_last=keep_last)
            threads[name] = chans
        _graph_runs(off, note_builder(), "adopted-pruned", ["r0", "r1"], notes_in)
        _graph_runs(ours, note_builder(), "adopted-pruned", ["r2"], notes_in)
        ours.prune(["adopted-pruned"], strategy="keep_latest", keep_last=2)
        threads["adopted-pruned"] = NOTE_CHANNELS
        # compacted (prune with the graph): the listed chain is whole again
        _graph_runs(ours, note_builder(), "notes-compacted", ["r0", "r1", "r2"], notes_in)
        ours.prune(["notes-compacted"], keep_last=4, graph=note_builder().compile())
        threads["notes-compacted"] = NOTE_CHANNELS
        # delete_for_runs: a middle run (what later runs need is kept) and the last run
        _graph_runs(ours, fanout_builder(100), "fan-runs", ["r0", "r1", "r2", "r3"], fan_in)
        ours.delete_for_runs(["fan-runs/r1"])
        ours.delete_for_runs(["fan-runs/r3"])
        threads["fan-runs"] = FANOUT_CHANNELS
        _graph_runs(ours, note_builder(), "notes-runs", ["x0", "x1", "x2"], notes_in)
        ours.delete_for_runs(["notes-runs/x0", "notes-runs/x2"])
        threads["notes-runs"] = NOTE_CHANNELS
        # orphan writes: puts that failed under durability="async" after the next
        # step's writes landed
        bad = failing(DeltaPostgresSaver)(conn)
        bad.fail_on, bad.puts = {3, 9, 14}, 0
        gb = note_builder().compile(checkpointer=bad)
        for i in range(4):
            try:
                gb.invoke(notes_in(f"o{i}"), {"configurable": {"thread_id": "orphans"}},
                          durability="async")
            except PutFault:
                pass
        threads["orphans"] = NOTE_CHANNELS
        # a thread deleted by prune(strategy="delete"): listing it lists nothing
        _graph_runs(ours, note_builder(), "deleted", ["r0"], notes_in)
        ours.prune(["deleted"], strategy="delete")
        threads["deleted"] = NOTE_CHANNELS
    with psycopg.connect(dsn) as c:
        row = c.execute(
            "SELECT count(*) FROM checkpoint_writes AS w WHERE w.thread_id = 'orphans' AND "
            "NOT EXISTS (SELECT 1 FROM checkpoints AS c WHERE c.thread_id = w.thread_id "
            "AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id)"
        ).fetchone()
        assert row is not None and row[0] > 0, "the faults left no orphan write"
        nulls = c.execute(
            "SELECT count(*) FROM checkpoints WHERE stored_channels IS NULL"
        ).fetchone()
        assert nulls is not None and nulls[0] > 0, "no adopted row (stored_channels NULL)"
        inline_null = c.execute(
            "SELECT count(*) FROM checkpoints AS c, jsonb_each(c.checkpoint -> 'channel_values')"
            " AS v WHERE jsonb_typeof(v.value) = 'null'"
        ).fetchone()
        assert inline_null is not None and inline_null[0] > 0, "no inline null"
    return threads


def mutable_ids(obj: Any) -> set[int]:
    """The ids of every mutable object reachable from ``obj`` (containers, objects with
    attributes); tuples are walked, not counted (immutable, and never shared anyway)."""
    out: set[int] = set()
    seen: set[int] = set()
    stack = [obj]
    while stack:
        o = stack.pop()
        if o is None or isinstance(o, str | bytes | int | float | bool) or id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, tuple | frozenset):
            stack.extend(o)
            continue
        out.add(id(o))
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, list | set):
            stack.extend(o)
        else:
            if hasattr(o, "__dict__"):
                stack.extend(vars(o).values())
            for cls in type(o).__mro__:
                for name in getattr(cls, "__slots__", ()):
                    if hasattr(o, name):
                        stack.append(getattr(o, name))
    return out


#: threads where the official saver reads a value the walk does not (see "stale claims")
OFFICIAL_DIFFERS = {"stale-claims"}


class Reader:
    """One API over a sync or async saver and the official saver (sync) on its rows."""

    def __init__(self, saver: DeltaPostgresSaver | AsyncDeltaPostgresSaver,
                 off: PostgresSaver) -> None:
        self.saver, self.off = saver, off
        self.is_async = isinstance(saver, AsyncDeltaPostgresSaver)

    async def list(self, config: Any, **kw: Any) -> builtins.list[Any]:
        if isinstance(self.saver, AsyncDeltaPostgresSaver):
            return [t async for t in self.saver.alist(config, **kw)]
        return list(self.saver.list(config, **kw))

    async def history(self, config: Any, channels: builtins.list[str]) -> Any:
        if isinstance(self.saver, AsyncDeltaPostgresSaver):
            return await self.saver.aget_delta_channel_history(config=config, channels=channels)
        return self.saver.get_delta_channel_history(config=config, channels=channels)

    def stats(self) -> Any:
        return self.saver.stats().walk


async def check_thread(r: Reader, thread: str, channels: list[str]) -> tuple[int, int]:
    """Every listed checkpoint of ``thread``: the listing's answer (when it gives one)
    equals the statement's, which equals the official saver's; the public path after a
    list gives the statement's answers too. Returns (answered by the listing, listed)."""
    core._PREFETCH.set(None)
    tuples = await r.list({"configurable": {"thread_id": thread}})
    listed = core._PREFETCH.get()
    if not tuples:
        assert listed is None
        return 0, 0
    assert isinstance(listed, core._Listed)
    loads = r.saver.serde.loads_typed
    held = [(t.checkpoint, t.pending_writes) for t in tuples]  # alive: ids stay theirs
    tuple_ids = mutable_ids(held)
    walks: dict[tuple[str, str], Any] = {}
    answered = 0
    for t in tuples:
        conf = t.config
        ns, cid = conf["configurable"]["checkpoint_ns"], conf["configurable"]["checkpoint_id"]
        where = f"{thread} {ns!r} {cid}"
        got = listed.answer(ns, cid, channels, loads)
        again = listed.answer(ns, cid, channels, loads)
        core._PREFETCH.set(None)
        walk = await r.history(conf, channels)
        official = r.off.get_delta_channel_history(config=conf, channels=channels)
        if thread not in OFFICIAL_DIFFERS:
            assert canon_history(walk) == canon_history(official), f"walk != official at {where}"
        walks[(ns, cid)] = canon_history(walk)
        if got is not None:
            answered += 1
            assert again is not None
            assert canon_history(got) == canon_history(walk), f"listing != walk at {where}"
            assert canon_history(again) == canon_history(got)
            ids_got, ids_again = mutable_ids(got), mutable_ids(again)
            assert not ids_got & ids_again, f"two answers share objects at {where}"
            assert not ids_got & tuple_ids, f"an answer shares objects with a tuple at {where}"
            assert not ids_got & mutable_ids(walk)
        else:
            assert again is None
    # the public path: list, then one history call per entry (as get_state_history)
    core._PREFETCH.set(None)
    before = r.stats()
    tuples = await r.list({"configurable": {"thread_id": thread}})
    for t in tuples:
        conf = t.config
        key = (conf["configurable"]["checkpoint_ns"], conf["configurable"]["checkpoint_id"])
        assert canon_history(await r.history(conf, channels)) == walks[key], (thread, key)
    after = r.stats()
    assert after.prefetch_hits - before.prefetch_hits == answered, thread
    assert after.history_calls - before.history_calls == len(tuples)
    # a listing keeps the walk of every row it has walked (_Listed._chain) and later
    # answers start from those: asked oldest first, or in a shuffled order, a fresh
    # listing answers the same checkpoints, with the same histories
    for order in ("oldest first", "shuffled"):
        core._PREFETCH.set(None)
        again_listed = await r.list({"configurable": {"thread_id": thread}})
        fresh = core._PREFETCH.get()
        assert isinstance(fresh, core._Listed)
        seq = (again_listed[::-1] if order == "oldest first"
               else random.Random(len(again_listed)).sample(again_listed, len(again_listed)))
        n = 0
        for t in seq:
            key = (t.config["configurable"]["checkpoint_ns"],
                   t.config["configurable"]["checkpoint_id"])
            got = fresh.answer(*key, channels, loads)
            if got is not None:
                n += 1
                assert canon_history(got) == walks[key], (thread, order, key)
        assert n == answered, (thread, order)
    # asked in the listing's order, the listing makes the next rows' answers ahead
    # (_Listed._read_ahead) for the channels asked last: asked for other channels, for
    # a row twice, or with rows skipped, and with every answer mutated by its caller,
    # each answer is still the walk's
    core._PREFETCH.set(None)
    again_listed = await r.list({"configurable": {"thread_id": thread}})
    fresh = core._PREFETCH.get()
    assert isinstance(fresh, core._Listed)
    rng = random.Random(thread)
    n = made_ahead = 0
    for i, t in enumerate(again_listed):
        if rng.random() < 0.1:
            continue  # skipped
        key = (t.config["configurable"]["checkpoint_ns"],
               t.config["configurable"]["checkpoint_id"])
        asked = channels if rng.random() < 0.7 else rng.sample(channels, rng.randint(1, 2))
        made_ahead += key in fresh._ahead
        for _ in range(2 if rng.random() < 0.1 else 1):
            got = fresh.answer(*key, asked, loads)
            if got is None:
                continue
            n += 1
            want = {ch: walks[key][ch] for ch in asked}
            assert canon_history(got) == want, (thread, "in order", i, asked)
            for entry in got.values():  # a caller that edits what it got
                entry["writes"].append(("edited", "x", ["edited"]))
                if isinstance(entry.get("seed"), list):
                    entry["seed"].append("edited")
    assert n >= answered * 0.6 or len(again_listed) < 10, (thread, n, answered)
    if thread in WHOLE and len(again_listed) > 20:
        assert made_ahead > 0, thread
    # pages (limit, before) and a filtered list: chains reach below the listing there;
    # the listing answers what it holds whole and declines the rest
    for kw in ({"limit": 7}, {"before": tuples[len(tuples) // 2].config, "limit": 5},
               {"filter": {"source": "loop"}}):
        core._PREFETCH.set(None)
        page = await r.list({"configurable": {"thread_id": thread}}, **kw)
        listed = core._PREFETCH.get()
        assert isinstance(listed, core._Listed) or not page
        for t in page:
            assert isinstance(listed, core._Listed)  # as asserted above: page is not empty
            key = (t.config["configurable"]["checkpoint_ns"],
                   t.config["configurable"]["checkpoint_id"])
            got = listed.answer(*key, channels, loads) if listed is not None else None
            if got is not None:
                assert canon_history(got) == walks[key], (thread, kw, key)
            assert canon_history(await r.history(t.config, channels)) == walks[key]
    core._PREFETCH.set(None)
    return answered, len(tuples)


#: threads where every listed checkpoint's chain is in the listing (nothing was deleted)
WHOLE = {"gen-linear", "gen-forks", "gen-ns", "gen-adopted", "stale-claims", "fan-1", "fan-4",
         "notes", "notes-adopted"}


@pytest.mark.parametrize("cache_bytes", [0, None], ids=["cache_bytes=0", "cache"])
@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_listing_answers_what_the_walk_and_the_official_saver_answer(
    dsn: str, mode: str, cache_bytes: int | None
) -> None:
    threads = build_threads(dsn)
    kw: dict[str, Any] = {} if cache_bytes is None else {"cache_bytes": cache_bytes}
    totals: dict[str, tuple[int, int]] = {}
    with official_saver(dsn) as off:
        if mode == "sync":
            with psycopg.connect(dsn, autocommit=True) as conn:
                r = Reader(DeltaPostgresSaver(conn, **kw), off)
                for thread, channels in threads.items():
                    totals[thread] = await check_thread(r, thread, channels)
        else:
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
                r = Reader(AsyncDeltaPostgresSaver(aconn, **kw), off)
                for thread, channels in threads.items():
                    totals[thread] = await check_thread(r, thread, channels)
    for thread in WHOLE:
        answered, listed = totals[thread]
        assert listed > 0 and answered == listed, (thread, totals[thread])
    # pruned threads and deleted runs: a listed entry whose chain reaches checkpoints
    # kept as seeds only (not listed) is answered by the statement (check_thread
    # compares every answer with the statement's and the official saver's)
    for thread in set(threads) - WHOLE - {"deleted"}:
        answered, listed = totals[thread]
        assert listed > 0, (thread, totals[thread])
    assert totals["deleted"] == (0, 0)


async def test_listing_declines_past_the_depth_guard_and_on_a_cycle(dsn: str) -> None:
    """The walk raises past max_history_depth and on a cycle; the listing then answers
    None (the statement raises), and answers what the statement answers below the guard."""
    with psycopg.connect(dsn, autocommit=True) as conn, official_saver(dsn) as off:
        ours = DeltaPostgresSaver(conn)
        _graph_runs(ours, fanout_builder(100), "deep", ["r0", "r1"], lambda r: {"items": [r]})
        ours.max_history_depth = 4
        r = Reader(ours, off)
        tuples = await r.list({"configurable": {"thread_id": "deep"}})
        listed = core._PREFETCH.get()
        assert isinstance(listed, core._Listed)
        raised = answered = 0
        for t in tuples:
            cid = t.config["configurable"]["checkpoint_id"]
            got = listed.answer("", cid, ["items"], ours.serde.loads_typed)
            core._PREFETCH.set(None)
            try:
                walk = ours.get_delta_channel_history(config=t.config, channels=["items"])
            except HistoryError:
                raised += 1
                assert got is None, cid
                continue
            if got is not None:
                answered += 1
                assert canon_history(got) == canon_history(walk)
        assert raised > 0 and answered > 0
        # a missing parent (a row deleted by hand): the walk answers the reachable chain,
        # as the official saver does; the listing declines what passes the gap
        ours.max_history_depth = 1_000_000
        ours.copy_thread("deep", "gap")
        conn.execute(
            "DELETE FROM checkpoints WHERE thread_id = 'gap' AND checkpoint_id = %s",
            (tuples[len(tuples) // 2].config["configurable"]["checkpoint_id"],),
        )
        gap = await r.list({"configurable": {"thread_id": "gap"}})
        listed = core._PREFETCH.get()
        assert isinstance(listed, core._Listed)
        declined = 0
        for t in gap:
            cid = t.config["configurable"]["checkpoint_id"]
            got = listed.answer("", cid, ["items"], ours.serde.loads_typed)
            core._PREFETCH.set(None)
            walk = ours.get_delta_channel_history(config=t.config, channels=["items"])
            official = off.get_delta_channel_history(config=t.config, channels=["items"])
            assert canon_history(walk) == canon_history(official), cid
            if got is None:
                declined += 1
            else:
                assert canon_history(got) == canon_history(walk), cid
        assert declined > 0
        # a cycle: the root's parent pointer set to the newest checkpoint
        ours.copy_thread("deep", "loop")
        newest, root = tuples[0].config["configurable"]["checkpoint_id"], tuples[-1]
        conn.execute(
            "UPDATE checkpoints SET parent_checkpoint_id = %s WHERE thread_id = 'loop' "
            "AND checkpoint_id = %s",
            (newest, root.config["configurable"]["checkpoint_id"]),
        )
        tuples = await r.list({"configurable": {"thread_id": "loop"}})
        listed = core._PREFETCH.get()
        assert isinstance(listed, core._Listed)
        for t in tuples:
            cid = t.config["configurable"]["checkpoint_id"]
            assert listed.answer("", cid, ["items"], ours.serde.loads_typed) is None, cid
            core._PREFETCH.set(None)
            with pytest.raises(HistoryError, match="cycle"):
                ours.get_delta_channel_history(
                    config=cfg("loop", "", cid), channels=["items"]
                )


def test_get_state_history_with_the_listing_equals_the_official_saver(dsn: str) -> None:
    """Through the graph: every state of get_state_history (answered from the listing)
    equals the official saver's on the same rows, for the pruned, adopted and orphaned
    threads too."""
    build_threads(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn, official_saver(dsn) as off:
        ours = DeltaPostgresSaver(conn)
        for thread, builder in (
            ("notes", note_builder()), ("notes-adopted", note_builder()),
            ("notes-pruned", note_builder()), ("notes-keep5", note_builder()),
            ("adopted-pruned", note_builder()), ("orphans", note_builder()),
            ("notes-runs", note_builder()), ("fan-4-pruned", fanout_builder(4)),
            ("fan-runs", fanout_builder(100)), ("fan-1-keep3", fanout_builder(1)),
            ("notes-compacted", note_builder()),
        ):
            c: RunnableConfig = {"configurable": {"thread_id": thread}}
            before = ours.stats().walk
            mine = [(canon(s.values), s.next, s.config["configurable"]["checkpoint_id"])
                    for s in builder.compile(checkpointer=ours).get_state_history(c)]
            after = ours.stats().walk
            pruned = thread.endswith(("pruned", "keep5", "keep3", "runs", "compacted"))
            if after.history_calls > before.history_calls and not pruned:
                # a state to rebuild, from the listing (after a prune, an entry whose
                # chain reaches checkpoints kept as seeds only is read by the statement)
                assert after.prefetch_hits > before.prefetch_hits, thread
            theirs = [(canon(s.values), s.next, s.config["configurable"]["checkpoint_id"])
                      for s in builder.compile(checkpointer=off).get_state_history(c)]
            # the official saver also lists what prune kept as seeds only (it does not
            # know the mark): every entry ours lists, it reads the same
            ids = {m[2] for m in mine}
            assert mine == [t for t in theirs if t[2] in ids], thread
            if not thread.endswith(("pruned", "keep5", "keep3", "runs")):
                assert mine == theirs, thread


# ------------------------------------------------ a listing answers only its own rows


def twin_threads(saver: Any) -> list[str]:
    """Rows whose keys differ only in the thread or only in the namespace: thread "twin"
    holds the same checkpoint ids in namespaces "" and "sub" (as a subgraph's), and thread
    "twin-b" holds them in "" too (as copy_thread makes them), each with other values and
    writes (two generated linear histories, the second given the first's ids), their
    channels named DeltaChannels in the metadata (get_tuple prefetches their history).
    Returns the ids, oldest first."""
    first = linear(random.Random("twin-1"), 12, seed_p=0.1)
    second = linear(random.Random("twin-2"), 12, seed_p=0.1)
    for a, b in zip(first, second, strict=True):
        b.checkpoint_id, b.parent_id = a.checkpoint_id, a.parent_id
    for st in first + second:
        st.metadata["counters_since_delta_snapshot"] = {
            ch: [1, 1] for ch in HCHANNELS if ch in st.channel_versions
        }
    apply_steps(saver, "twin", first)
    apply_steps(saver, "twin", [dataclasses.replace(st, ns="sub") for st in second])
    apply_steps(saver, "twin-b", second)
    return [st.checkpoint_id for st in first]


TWIN_KEYS = (("twin", ""), ("twin", "sub"), ("twin-b", ""))


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_listing_answers_only_its_own_thread_and_namespace(
    dsn: str, mode: str
) -> None:
    """After a listing, the history calls on another thread's or another namespace's
    checkpoint of the same id (a subgraph's, read interleaved with the parent's, or a
    copied thread's) are that checkpoint's, not the listed row's of that id: the
    listing's rows are keyed by namespace and checkpoint, and it serves its own thread."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = twin_threads(DeltaPostgresSaver(conn))
        plain = DeltaPostgresSaver(conn, cache_bytes=0)
        want: dict[tuple[str, str, str], Any] = {}
        for thread, ns in TWIN_KEYS:
            for cid in ids:
                core._PREFETCH.set(None)
                want[(thread, ns, cid)] = canon_history(plain.get_delta_channel_history(
                    config=cfg(thread, ns, cid), channels=HCHANNELS
                ))
    # the twins really differ: a wrong row answers a wrong history
    for cid in ids[1:]:
        assert want[("twin", "", cid)] != want[("twin", "sub", cid)], cid
        assert want[("twin", "", cid)] != want[("twin-b", "", cid)], cid
    async def check(r: Reader) -> None:
        # every namespace listed ("" and "sub" rows of each id in one listing), then "" only
        for listing, listed_ns in (({"thread_id": "twin"}, ("", "sub")),
                                   ({"thread_id": "twin", "checkpoint_ns": ""}, ("",))):
            core._PREFETCH.set(None)
            tuples = await r.list({"configurable": listing})
            assert len(tuples) == len(ids) * len(listed_ns)
            before = r.stats()
            for cid in reversed(ids):  # as get_state_history asks: newest first
                for thread, ns in TWIN_KEYS:  # interleaved
                    got = await r.history(cfg(thread, ns, cid), HCHANNELS)
                    assert canon_history(got) == want[(thread, ns, cid)], (
                        listing, thread, ns, cid
                    )
                    assert isinstance(core._PREFETCH.get(), core._Listed)
            hits = r.stats().prefetch_hits - before.prefetch_hits
            # the listing answered its own rows (all of them: each chain is whole in it)
            assert hits == len(ids) * len(listed_ns), (listing, hits)

    with official_saver(dsn) as off:
        if mode == "sync":
            with psycopg.connect(dsn, autocommit=True) as c:
                await check(Reader(DeltaPostgresSaver(c, cache_bytes=0), off))
        else:
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as ac:
                await check(Reader(AsyncDeltaPostgresSaver(ac, cache_bytes=0), off))
