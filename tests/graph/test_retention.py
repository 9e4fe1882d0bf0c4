"""Retention: the keep-set against an independent parent walk, and prune (keep_latest,
keep_last, dry_run, before, delete_all) proved on generated histories and real graphs.

After a prune the latest state of every namespace must read the same through our saver
and through the official ``PostgresSaver`` as an unpruned copy of the thread does, and the
thread must then continue exactly like that copy.
"""

from __future__ import annotations

import functools
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple
from unittest import mock

import psycopg
import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.base import id as idmod
from langgraph.checkpoint.base.id import uuid6
from langgraph.graph import StateGraph
from langgraph.types import Command

from langgraph_delta_postgres import (
    AsyncDeltaPostgresSaver,
    DeltaPostgresSaver,
    HistoryError,
    PrunedValueError,
    PruneStats,
)
from tests.graph._graphs import observe_snapshot
from tests.graph._util import (
    Step,
    ThreadGen,
    apply_steps,
    canon_history,
    cfg,
    insert_empty_rows,
    official_saver,
)
from tests.graph.test_delta_graphs import chat_builder, fanout_builder, subgraph_builder
from tests.graph.test_history_differential import CHANNELS, forks, linear, namespaces
from tests.graph.test_maintenance_race import _graph as _race_graph

QUERY_CHANNELS: list[list[str]] = [CHANNELS, ["msgs"], ["never_written", "count"], []]


# ----------------------------------------------------------------------------- shapes


def uuid6_at(nanoseconds: int, clock_seq: int) -> str:
    """uuid6 as a worker whose clock reads ``nanoseconds`` makes it (its monotonic guard
    reset, as in a fresh process)."""
    idmod._last_v6_timestamp = None
    with mock.patch.object(time, "time_ns", lambda: nanoseconds):  # id.py's `time`
        return str(uuid6(clock_seq=clock_seq))


def skewed(rng: random.Random, n: int = 40) -> list[Step]:
    """A chain continued by workers whose clocks disagree: ids are uuid6 of a clock that
    jumps an hour back and forth, so children often sort below their parents."""
    steps = linear(rng, n)
    now = time.time_ns()
    ids: dict[str, str] = {}
    offset = 0
    for st in steps:
        if rng.random() < 0.3:
            offset = rng.choice([0, -3600, 3600])
        ids[st.checkpoint_id] = uuid6_at(now + (offset + len(ids)) * 1_000_000_000, len(ids))
    for st in steps:
        st.checkpoint_id = ids[st.checkpoint_id]
        st.parent_id = ids[st.parent_id] if st.parent_id else None
    assert any(st.parent_id and st.checkpoint_id < st.parent_id for st in steps)
    return steps


SHAPES: dict[str, Callable[[random.Random], list[Step]]] = {
    "linear": linear,
    "forks": forks,
    "namespaces": namespaces,
    "skewed": skewed,
    "linear-seedless": lambda rng: linear(rng, 30, seed_p=0.0),
    "linear-seedy": lambda rng: linear(rng, 30, seed_p=0.6),
}


def with_counters(steps: list[Step]) -> list[Step]:
    """Mark the channels as DeltaChannels the way LangGraph does: counters in metadata
    for every channel with a version (prune finds the channels it must keep from them)."""
    for st in steps:
        st.metadata["counters_since_delta_snapshot"] = {
            ch: [1, 1] for ch in CHANNELS if ch in st.channel_versions
        }
    return steps


def blob_values(steps: Sequence[Step]) -> set[tuple[str, str, str]]:
    """(namespace, channel, version) of every value stored as a blob (not inline)."""
    return {
        (s.ns, ch, s.channel_versions[ch])
        for s in steps
        for ch, v in s.channel_values.items()
        if v is not None and not isinstance(v, str | int | float | bool)
    }


def py_keepset(steps: Sequence[Step], target: str, channels: Sequence[str]) -> set[str]:
    """An independent parent walk: the target, plus per channel every ancestor back to
    and including the nearest checkpoint that stores a value for it: a non-null inline
    value, or a blob behind its version (a snapshot written by an ancestor and left
    behind an unchanged version counts: its blob is there)."""
    by_id = {st.checkpoint_id: st for st in steps}
    blobs = blob_values(steps)
    if target not in by_id:
        return set()
    keep = {target}
    for ch in channels:
        cur: str | None = target
        while cur is not None and cur in by_id:
            keep.add(cur)
            if stored_at(by_id[cur], ch, blobs):
                break
            cur = by_id[cur].parent_id
    return keep


def latest_by_ns(steps: Sequence[Step]) -> dict[str, Step]:
    out: dict[str, Step] = {}
    for st in steps:
        if st.ns not in out or st.checkpoint_id > out[st.ns].checkpoint_id:
            out[st.ns] = st
    return out


def write_thread(dsn: str, saver: BaseCheckpointSaver[Any], thread: str, steps: list[Step]) -> None:
    apply_steps(saver, thread, steps)
    insert_empty_rows(dsn, thread, steps)


# ----------------------------------------------------------------------------- keep-set


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("seed", [1, 2])
def test_keepset_equals_an_independent_parent_walk(dsn: str, shape: str, seed: int) -> None:
    steps = SHAPES[shape](random.Random(f"{shape}-{seed}"))
    with psycopg.connect(dsn, autocommit=True) as conn, official_saver(dsn) as off:
        ours = DeltaPostgresSaver(conn)
        write_thread(dsn, ours, "T", steps)
        write_thread(dsn, off, "T-off", steps)  # rows without stored_channels
        checked = 0
        for thread in ("T", "T-off"):
            for st in steps:
                for chans in QUERY_CHANNELS:
                    got = ours.get_delta_channel_keepset(
                        config=cfg(thread, st.ns, st.checkpoint_id), channels=chans
                    )
                    ns_steps = [s for s in steps if s.ns == st.ns]
                    assert got == py_keepset(ns_steps, st.checkpoint_id, chans), (
                        thread, st.checkpoint_id, chans
                    )
                    checked += 1
            for ns, st in latest_by_ns(steps).items():  # no checkpoint_id: the latest
                got = ours.get_delta_channel_keepset(config=cfg(thread, ns), channels=CHANNELS)
                assert got == py_keepset(steps, st.checkpoint_id, CHANNELS)
        assert checked == 2 * len(steps) * len(QUERY_CHANNELS)
        missing = cfg("T", "", "nope")
        assert ours.get_delta_channel_keepset(config=missing, channels=CHANNELS) == set()
        assert ours.get_delta_channel_keepset(config=cfg("no-thread"), channels=[]) == set()


def test_keepset_of_a_value_stored_at_the_target_is_the_target(dsn: str) -> None:
    rng = random.Random(5)
    g = ThreadGen(rng, CHANNELS, "t")
    last = None
    for _ in range(10):
        last = g.step(last, seed_p=0.0)
    assert last is not None
    top = g.step(last, seed_p=1.0, allow_none=False)  # every channel stored here
    with psycopg.connect(dsn, autocommit=True) as conn:
        ours = DeltaPostgresSaver(conn)
        write_thread(dsn, ours, "T", g.steps)
        got = ours.get_delta_channel_keepset(config=cfg("T"), channels=CHANNELS)
        assert got == {top.checkpoint_id}
        # its parent stores nothing: the walk goes to the root
        parent_cfg = cfg("T", "", last.checkpoint_id)
        assert len(ours.get_delta_channel_keepset(config=parent_cfg, channels=["msgs"])) == 10


def test_keepset_and_prune_stop_on_a_parent_cycle_within_a_lap(dsn: str) -> None:
    steps = linear(random.Random(9), 30, seed_p=0.0)
    with psycopg.connect(dsn, autocommit=True) as conn:
        ours = DeltaPostgresSaver(conn)
        write_thread(dsn, ours, "T", with_counters(steps))
        # the 5th checkpoint's parent becomes the 20th: 20 -> ... -> 5 -> 20
        conn.execute(
            "UPDATE checkpoints SET parent_checkpoint_id = %s "
            "WHERE thread_id = 'T' AND checkpoint_id = %s",
            (steps[19].checkpoint_id, steps[4].checkpoint_id),
        )
        # the cycle check, not the depth guard (max_history_depth=1e6): by message
        with pytest.raises(HistoryError, match="corrupt .*: a cycle of parent_checkpoint_id"):
            ours.get_delta_channel_keepset(config=cfg("T"), channels=["never_written"])
        rows = conn.execute("SELECT count(*) FROM checkpoints").fetchone()
        with pytest.raises(
            HistoryError, match=r"nothing of this thread was deleted.*\(a cycle of parent"
        ):
            ours.prune(["T"])
        assert conn.execute("SELECT count(*) FROM checkpoints").fetchone() == rows
        # a self-loop
        conn.execute(
            "UPDATE checkpoints SET parent_checkpoint_id = checkpoint_id "
            "WHERE thread_id = 'T' AND checkpoint_id = %s",
            (steps[29].checkpoint_id,),
        )
        with pytest.raises(HistoryError, match="a cycle of parent_checkpoint_id"):
            ours.get_delta_channel_keepset(config=cfg("T"), channels=["never_written"])


def test_keepset_depth_guard(dsn: str) -> None:
    steps = linear(random.Random(3), 12, seed_p=0.0)
    with psycopg.connect(dsn, autocommit=True) as conn:
        ours = DeltaPostgresSaver(conn)
        write_thread(dsn, ours, "T", steps)
        ours.max_history_depth = 5
        with pytest.raises(HistoryError, match="deeper than max_history_depth=5"):
            ours.get_delta_channel_keepset(config=cfg("T"), channels=["never_written"])
        assert len(ours.get_delta_channel_keepset(config=cfg("T"), channels=[])) == 1


# ----------------------------------------------------------------------------- prune


def stored_at(st: Step, ch: str, blobs: set[tuple[str, str, str]]) -> bool:
    return st.channel_values.get(ch) is not None or (
        (st.ns, ch, st.channel_versions.get(ch)) in blobs
    )


def read_all(
    saver: BaseCheckpointSaver[Any], thread: str, targets: Sequence[Step], steps: Sequence[Step]
) -> list[Any]:
    """What loading each target reads: its tuple (checkpoint, metadata, pending writes)
    and the history of every channel it does not store (LangGraph asks for no other)."""
    blobs = blob_values(steps)
    out = []
    for st in targets:
        c = cfg(thread, st.ns, st.checkpoint_id)
        t = saver.get_tuple(c)
        assert t is not None, st.checkpoint_id
        wanted = [ch for ch in CHANNELS + ["never_written"] if not stored_at(st, ch, blobs)]
        hist = saver.get_delta_channel_history(config=c, channels=wanted)
        out.append(
            (
                t.checkpoint["channel_versions"],
                repr(sorted(t.checkpoint["channel_values"].items())),
                sorted(repr(w) for w in t.pending_writes or []),
                canon_history(hist),
            )
        )
    return out


def chain_of(steps: Sequence[Step], st: Step, n: int) -> list[Step]:
    by_id = {s.checkpoint_id: s for s in steps}
    out = [st]
    while len(out) < n and out[-1].parent_id in by_id:
        out.append(by_id[out[-1].parent_id])
    return out


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("keep_last", [1, 3])
def test_prune_keeps_what_the_head_needs(dsn: str, shape: str, keep_last: int) -> None:
    """Written by ours and by the official saver; pruned by ours; the N latest of every
    namespace read the same through both savers as before, exactly the keep-set is left,
    and dry_run counted exactly what went."""
    steps = with_counters(SHAPES[shape](random.Random(f"prune-{shape}")))
    heads = latest_by_ns(steps)
    targets = [s for h in heads.values() for s in chain_of(steps, h, keep_last)]
    with psycopg.connect(dsn, autocommit=True) as conn, official_saver(dsn) as off:
        ours = DeltaPostgresSaver(conn)
        for thread, writer in (("T", ours), ("T-off", off)):
            write_thread(dsn, writer, thread, steps)
            readers = (("ours", ours), ("off", off))
            before = {name: read_all(s, thread, targets, steps) for name, s in readers}
            expected_keep = set()
            for h in heads.values():
                ns_steps = [s for s in steps if s.ns == h.ns]
                oldest = chain_of(steps, h, keep_last)[-1]
                expected_keep |= py_keepset(ns_steps, oldest.checkpoint_id, CHANNELS)
                expected_keep |= {s.checkpoint_id for s in chain_of(steps, h, keep_last)}
            n_rows = conn.execute(
                "SELECT count(*) FROM checkpoints WHERE thread_id = %s", (thread,)
            ).fetchone()
            dry = ours.prune([thread], keep_last=keep_last, dry_run=True)
            assert conn.execute(
                "SELECT count(*) FROM checkpoints WHERE thread_id = %s", (thread,)
            ).fetchone() == n_rows
            done = ours.prune([thread], keep_last=keep_last)
            assert done == dry
            left = {
                r[0]
                for r in conn.execute(
                    "SELECT checkpoint_id FROM checkpoints WHERE thread_id = %s", (thread,)
                )
            }
            assert left == expected_keep
            assert done.checkpoints == len(steps) - len(left)
            for name, s in readers:
                assert read_all(s, thread, targets, steps) == before[name], (thread, name)
            assert read_all(ours, thread, targets, steps) == read_all(off, thread, targets, steps)
            # idempotent: a second prune finds nothing more to delete
            again = ours.prune([thread], keep_last=keep_last)
            assert (again.checkpoints, again.writes, again.blobs) == (0, 0, 0)


def expected_keep(steps: Sequence[Step], keep_last: int) -> set[str]:
    """What prune(keep_last=...) keeps of ``steps``: per namespace the keep_last latest of
    the head's chain and the keep-set of the oldest of them."""
    keep: set[str] = set()
    for h in latest_by_ns(steps).values():
        ns_steps = [s for s in steps if s.ns == h.ns]
        chain = chain_of(steps, h, keep_last)
        keep |= py_keepset(ns_steps, chain[-1].checkpoint_id, CHANNELS)
        keep |= {s.checkpoint_id for s in chain}
    return keep


def expected_visible(steps: Sequence[Step], keep_last: int) -> set[str]:
    """What prune(keep_last=...) leaves visible (listed, loadable) of ``steps``: per
    namespace the keep_last latest of the head's chain. The rest of expected_keep stays
    in the table only as seeds (seed_only: every read path answers as for a deleted
    checkpoint)."""
    return {
        s.checkpoint_id
        for h in latest_by_ns(steps).values()
        for s in chain_of(steps, h, keep_last)
    }


class Row(NamedTuple):
    """A checkpoint row as stored, listed or not."""

    ns: str
    parent: str | None
    seed_only: bool | None  # TRUE: kept only as a seed (prune, delete_for_runs); NULL: visible
    run_id: str | None


def stored_rows(dsn: str, thread: str) -> dict[str, Row]:
    """Every checkpoint row of ``thread`` by id, those no read path returns included."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {
            r[0]: Row(r[1], r[2], r[3], r[4])
            for r in conn.execute(
                "SELECT checkpoint_id, checkpoint_ns, parent_checkpoint_id, seed_only, "
                "metadata ->> 'run_id' FROM checkpoints WHERE thread_id = %s",
                (thread,),
            )
        }


def visible_after_prune(rows: Mapping[str, Row], keep_last: int) -> set[str]:
    """What prune(keep_last=...) leaves visible of a thread stored as ``rows`` (none of
    them seed_only yet): per namespace the keep_last latest of the parent chain of its
    head (its highest id)."""
    out: set[str] = set()
    for ns in {r.ns for r in rows.values()}:
        cur: str | None = max(i for i, r in rows.items() if r.ns == ns)
        for _ in range(keep_last):
            if cur is None or cur not in rows:
                break
            out.add(cur)
            cur = rows[cur].parent
    return out


@pytest.mark.parametrize("keep_last", [None, 3, 8])
async def test_aprune_keeps_what_prune_keeps(dsn: str, keep_last: int | None) -> None:
    """The async saver's prune passes keep_last on: exactly the keep_last latest of every
    namespace and their keep-set are left, as prune leaves them, and dry_run counted it;
    of those only the keep_last latest are visible, the rest of the keep-set is kept as
    seeds (seed_only, parents unchanged) and reads as deleted."""
    steps = with_counters(namespaces(random.Random("aprune"), 60))
    want = expected_keep(steps, keep_last or 1)
    visible = expected_visible(steps, keep_last or 1)
    assert visible < want  # some are kept only as seeds
    if keep_last is not None:  # keep_last decides what is left here
        assert want > expected_keep(steps, 1), keep_last
    by_id = {s.checkpoint_id: s for s in steps}
    with psycopg.connect(dsn, autocommit=True) as conn:
        ours = DeltaPostgresSaver(conn)
        for thread in ("A", "S"):
            write_thread(dsn, ours, thread, steps)
        synced = ours.prune(["S"], keep_last=keep_last)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        saver = AsyncDeltaPostgresSaver(aconn)
        dry = await saver.aprune(["A"], keep_last=keep_last, dry_run=True)
        assert {r.seed_only for r in stored_rows(dsn, "A").values()} == {None}
        done = await saver.aprune(["A"], keep_last=keep_last)
        assert done == dry == synced
        rows = stored_rows(dsn, "A")
        assert rows == {
            i: Row(by_id[i].ns, by_id[i].parent_id, None if i in visible else True, None)
            for i in want
        }
        assert stored_rows(dsn, "S") == rows
        every_ns: RunnableConfig = {"configurable": {"thread_id": "A"}}
        left = {t.config["configurable"]["checkpoint_id"] async for t in saver.alist(every_ns)}
        assert left == visible
        for i in want - visible:
            assert await saver.aget_tuple(cfg("A", by_id[i].ns, i)) is None, i
        assert done.checkpoints == len(steps) - len(want)
        assert done.hidden == len(want) - len(visible)
        again = await saver.aprune(["A"], keep_last=keep_last)
        assert (again.checkpoints, again.writes, again.blobs, again.hidden) == (0, 0, 0, 0)
        assert stored_rows(dsn, "A") == rows


def test_prune_before_and_argument_errors(dsn: str) -> None:
    steps = with_counters(linear(random.Random(4), 10))
    with psycopg.connect(dsn, autocommit=True) as conn:
        ours = DeltaPostgresSaver(conn)
        write_thread(dsn, ours, "T", steps)
        now = datetime.now(UTC)
        # the checkpoints' ts is "now": a thread is older than a future cut-off only
        assert ours.prune(["T"], before=now - timedelta(days=1)).threads == 0
        assert ours.prune(["T"], before=now - timedelta(days=1), strategy="delete").threads == 0
        assert len(list(ours.list(cfg("T")))) == 10
        assert ours.prune(["T", "nope"], before=now + timedelta(days=1), dry_run=True).threads == 1
        with pytest.raises(ValueError, match="timezone-aware"):
            ours.prune(["T"], before=datetime.now())  # noqa: DTZ005
        with pytest.raises(ValueError, match="keep_last"):
            ours.prune(["T"], keep_last=0)
        with pytest.raises(ValueError, match="keep_last"):
            ours.prune(["T"], keep_last=2, strategy="delete")
        with pytest.raises(ValueError, match="unknown prune strategy"):
            ours.prune(["T"], strategy="nope")
        with pytest.raises(TypeError):
            ours.prune("T")
        assert len(list(ours.list(cfg("T")))) == 10
        stats = ours.prune(["T"], strategy="delete_all", dry_run=True)
        assert (stats.threads, stats.checkpoints) == (1, 10) and stats.bytes > 0
        assert len(list(ours.list(cfg("T")))) == 10
        assert ours.prune(["T"], strategy="delete_all").checkpoints == 10
        assert list(ours.list(cfg("T"))) == []


def latest_ts(dsn: str, thread: str) -> datetime:
    """The ``ts`` of the thread's latest checkpoint, over its namespaces (each namespace's
    head: its highest id), as prune(before=...) reads it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        heads = conn.execute(
            "SELECT DISTINCT ON (checkpoint_ns) checkpoint ->> 'ts' FROM checkpoints "
            "WHERE thread_id = %s ORDER BY checkpoint_ns, checkpoint_id DESC",
            (thread,),
        ).fetchall()
    assert len(heads) > 1  # several namespaces: the newest head decides
    return max(datetime.fromisoformat(h[0]) for h in heads)


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("strategy", ["keep_latest", "delete"])
async def test_prune_before_spares_a_thread_whose_latest_is_exactly_before(
    dsn: str, mode: str, strategy: str
) -> None:
    """docs/retention.md: ``before`` prunes "only threads whose latest checkpoint (its ts)
    is older". At the boundary: a thread whose latest checkpoint's ts equals ``before`` is
    not older, so it is spared (not counted, nothing deleted, dry run too); one microsecond
    later it is older, and pruned."""
    steps = with_counters(namespaces(random.Random("before"), 20))
    with psycopg.connect(dsn, autocommit=True) as conn:
        write_thread(dsn, DeltaPostgresSaver(conn), "B", steps)
    cut = latest_ts(dsn, "B")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            sync_saver = DeltaPostgresSaver(conn)
            async_saver = AsyncDeltaPostgresSaver(aconn)

            async def prune(before: datetime, dry_run: bool = False) -> PruneStats:
                if mode == "sync":
                    return sync_saver.prune(["B"], strategy=strategy, before=before,
                                            dry_run=dry_run)
                return await async_saver.aprune(["B"], strategy=strategy, before=before,
                                                dry_run=dry_run)

            def rows() -> int:
                got = conn.execute(
                    "SELECT count(*) FROM checkpoints WHERE thread_id = 'B'"
                ).fetchone()
                assert got is not None
                return int(got[0])

            assert await prune(cut, dry_run=True) == PruneStats()
            assert await prune(cut) == PruneStats()
            assert rows() == len(steps)
            later = cut + timedelta(microseconds=1)
            dry = await prune(later, dry_run=True)
            assert dry.threads == 1 and dry.checkpoints > 0 and rows() == len(steps)
            assert await prune(later) == dry
            assert rows() == len(steps) - dry.checkpoints
            if strategy == "delete":
                assert rows() == 0


# ----------------------------------------------------------------------------- real graphs


def T(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


def observe(graph: Any, config: RunnableConfig) -> Any:
    return observe_snapshot(graph.get_state(config, subgraphs=True))


def check_pruned_thread(
    dsn: str,
    builder: StateGraph[Any],
    write: Callable[[Any, RunnableConfig], None],
    cont: Sequence[Any],
    *,
    writer: str = "ours",
    keep_last: int | None = None,
    compact: bool = False,
) -> None:
    """``write`` a thread A (with our saver or the official one); copy it to B; prune A
    with ours; exactly the keep_last latest of each namespace's chain are left visible,
    what else is kept stays as it was, marked seed_only, and loads as deleted; A's state
    reads the same as B's, through ours and the official saver; then A and B continue
    with the inputs ``cont`` and stay equal. ``compact``: prune with the graph, which
    leaves nothing but the visible ones (the official saver lists the same)."""
    with psycopg.connect(dsn, autocommit=True) as conn, official_saver(dsn) as off:
        ours = DeltaPostgresSaver(conn)
        g_ours = builder.compile(checkpointer=ours)
        g_off = builder.compile(checkpointer=off)
        write(g_ours if writer == "ours" else g_off, T("A"))
        ours.copy_thread("A", "B")
        before = observe(g_ours, T("B"))
        rows = stored_rows(dsn, "A")
        n = len(list(ours.list(T("A"))))
        assert n == len(rows) and {r.seed_only for r in rows.values()} == {None}
        visible = visible_after_prune(rows, keep_last or 1)
        stats = ours.prune(["A"], keep_last=keep_last, graph=g_ours if compact else None)
        kept = stored_rows(dsn, "A")
        left = {t.config["configurable"]["checkpoint_id"]: t for t in ours.list(T("A"))}
        assert set(left) == visible and len(left) < n, (n, len(left))
        if compact:
            assert set(kept) == visible and stats.hidden == 0
            theirs = [t.config["configurable"]["checkpoint_id"] for t in off.list(T("A"))]
            assert theirs == list(left)
        # the rest of the keep-set: rows as they were (parents too), marked seed_only
        assert visible <= set(kept) <= set(rows)
        assert kept == {i: rows[i]._replace(seed_only=None if i in visible else True)
                        for i in kept}
        assert 0 < stats.checkpoints == n - len(kept), (n, len(kept))
        assert stats.hidden == len(kept) - len(visible)
        for i in set(kept) - visible:
            assert ours.get_tuple(cfg("A", kept[i].ns, i)) is None, i
        for i, t in left.items():  # parent_config as before; a parent not visible is None
            parent = rows[i].parent
            if parent is None:
                assert t.parent_config is None, i
            else:
                assert t.parent_config is not None, i
                assert t.parent_config["configurable"]["checkpoint_id"] == parent, i
                if parent not in visible:
                    assert ours.get_tuple(t.parent_config) is None, i
        assert observe(g_ours, T("A")) == before
        assert observe(g_off, T("A")) == before
        for inp in cont:
            g_ours.invoke(inp, T("A"))
            g_ours.invoke(inp, T("B"))
            assert observe(g_ours, T("A")) == observe(g_ours, T("B"))
            assert observe(g_off, T("A")) == observe(g_ours, T("B"))


@pytest.mark.parametrize("compact", [False, True], ids=["keep-set", "compacted"])
@pytest.mark.parametrize("freq", [1, 3, 7, 100])
@pytest.mark.parametrize("writer", ["ours", "official"])
def test_prune_fanout_graph_with_a_fork(dsn: str, freq: int, writer: str, compact: bool) -> None:
    builder = fanout_builder(freq)

    def write(g: Any, t: RunnableConfig) -> None:
        for turn in range(6):
            g.invoke({"items": [f"user{turn}"]}, t)
        hist = list(g.get_state_history(t))
        # time travel: a fork from a mid-chain checkpoint becomes the latest
        g.invoke({"items": ["fork"]}, hist[len(hist) // 2].config)
        g.invoke({"items": ["after-fork"]}, t)

    check_pruned_thread(
        dsn, builder, write, [{"items": ["c1"]}, {"items": ["c2"]}], writer=writer,
        compact=compact,
    )


@pytest.mark.parametrize("compact", [False, True], ids=["keep-set", "compacted"])
@pytest.mark.parametrize("keep_last", [None, 4])
def test_prune_interrupted_subgraph_namespaces(
    dsn: str, keep_last: int | None, compact: bool
) -> None:
    """Pruned while a subgraph with its own DeltaChannel waits on an interrupt: the
    subgraph's namespace still loads, and the run resumes like the unpruned copy."""

    def write(g: Any, t: RunnableConfig) -> None:
        for turn in range(4):
            g.invoke({"items": [f"u{turn}"]}, t)
            g.invoke(Command(resume=f"r{turn}"), t)
        g.invoke({"items": ["waiting"]}, t)  # stops at the subgraph's interrupt

    check_pruned_thread(
        dsn,
        subgraph_builder(),
        write,
        [Command(resume="late"), {"items": ["next"]}, Command(resume="last")],
        keep_last=keep_last,
        compact=compact,
    )


@pytest.mark.parametrize("compact", [False, True], ids=["keep-set", "compacted"])
def test_prune_thread_migrated_from_add_messages(dsn: str, compact: bool) -> None:
    def msg(i: int) -> dict[str, Any]:
        return {"messages": [HumanMessage(content=f"h{i}", id=f"h{i}")], "log": []}

    with psycopg.connect(dsn, autocommit=True) as conn:
        g = chat_builder(delta=False).compile(checkpointer=DeltaPostgresSaver(conn))
        for i in range(4):
            g.invoke(msg(i), T("A"))

    def write(g: Any, t: RunnableConfig) -> None:
        for i in range(4, 6):  # two delta turns: the seed is still the add_messages value
            g.invoke(msg(i), t)

    # compacted: the add_messages value is the seed the graph's reducer folds on
    check_pruned_thread(
        dsn, chat_builder(delta=True), write, [msg(6), msg(7), msg(8)], compact=compact
    )


# ----------------------------------------------------------------------------- delete_for_runs


def RUN(thread: str, run_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}, "metadata": {"run_id": run_id}}


@pytest.mark.parametrize("writer", ["ours", "official"])
def test_delete_for_runs_keeps_what_later_runs_need(
    dsn: str, writer: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Runs r0..r3 on a DeltaChannel thread (snapshot_frequency=100: every state is
    rebuilt from r0 on). Deleting r1 keeps the checkpoints of r1 that r2 builds on
    (logged) only as seeds: their rows stay as they were, marked seed_only, and r1 reads
    as deleted; the thread reads and continues like an untouched copy; deleting the
    last run, which nothing builds on, removes all of it."""
    builder = fanout_builder(100)
    with psycopg.connect(dsn, autocommit=True) as conn, official_saver(dsn) as off:
        ours = DeltaPostgresSaver(conn)
        g_ours = builder.compile(checkpointer=ours)
        g_off = builder.compile(checkpointer=off)
        g_w = g_ours if writer == "ours" else g_off
        for i in range(4):
            g_w.invoke({"items": [f"u{i}"]}, RUN("A", f"r{i}"))
        ours.copy_thread("A", "B")

        def run_ids(thread: str) -> list[str]:
            return [t.metadata.get("run_id") for t in ours.list(T(thread))]  # type: ignore[misc]

        rows = stored_rows(dsn, "A")
        r1 = {i for i, r in rows.items() if r.run_id == "r1"}
        assert run_ids("A").count("r1") == len(r1) > 0
        assert {r.seed_only for r in rows.values()} == {None}
        with caplog.at_level("WARNING", logger="langgraph_delta_postgres"):
            ours.delete_for_runs(["r1"])
        assert "kept" in caplog.text and "r1" in caplog.text
        # what r2 needs of r1 is kept: all of it here (no snapshot in between), as it was
        # but seed_only; nothing else changes
        assert stored_rows(dsn, "A") == {
            i: r._replace(seed_only=True) if i in r1 else r for i, r in rows.items()
        }
        assert "r1" not in run_ids("A")
        for cid in r1:
            assert ours.get_tuple(cfg("A", rows[cid].ns, cid)) is None, cid
        assert observe(g_ours, T("A")) == observe(g_ours, T("B"))
        assert observe(g_off, T("A")) == observe(g_ours, T("B"))
        ours.delete_for_runs(["r3"])  # the last run: nothing builds on it
        assert "r3" not in run_ids("A")
        assert "r3" not in {r.run_id for r in stored_rows(dsn, "A").values()}
        ours.delete_for_runs(["r3"])  # and again: a no-op
        state_after = observe(g_ours, T("A"))
        g_ours.invoke({"items": ["next"]}, T("A"))
        assert observe(g_ours, T("A")) != state_after
        assert observe(g_off, T("A")) == observe(g_ours, T("A"))


def test_delete_for_runs_after_a_snapshot_deletes_the_run(dsn: str) -> None:
    """snapshot_frequency=1: every later checkpoint stores its own value, so an older
    run is needed by nothing and goes entirely, DeltaChannel or not."""
    builder = fanout_builder(1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        ours = DeltaPostgresSaver(conn)
        g = builder.compile(checkpointer=ours)
        for i in range(3):
            g.invoke({"items": [f"u{i}"]}, RUN("A", f"r{i}"))
        before = observe(g, T("A"))
        ours.delete_for_runs(["r0"])
        assert "r0" not in [t.metadata.get("run_id") for t in ours.list(T("A"))]
        assert observe(g, T("A")) == before


def test_prune_and_delete_for_runs_clear_this_savers_cache(dsn: str) -> None:
    builder = fanout_builder(100)
    with DeltaPostgresSaver.from_conn_string(dsn) as ours:
        cache = ours.history_cache
        assert cache is not None
        g = builder.compile(checkpointer=ours)
        for i in range(3):
            g.invoke({"items": [f"u{i}"]}, RUN("A", f"r{i}"))
            g.invoke({"items": [f"u{i}"]}, RUN("B", f"s{i}"))
        before = {t: observe(g, T(t)) for t in ("A", "B")}
        assert len(cache) == 2
        ours.prune(["A"], dry_run=True)
        assert len(cache) == 2  # a dry run changes nothing
        ours.prune(["A"])
        assert len(cache) == 1
        assert observe(g, T("A")) == before["A"]
        # forgotten, A is a thread the cache has not seen: get_tuple's first load of it
        # builds no bucket (_cache/policy.py, "A thread's first load"), its next call does
        assert len(cache) == 1
        assert observe(g, T("A")) == before["A"]
        assert len(cache) == 2
        ours.delete_for_runs(["s2"])  # B's last run: B is forgotten, A is not
        assert len(cache) == 1 and ("B", "") not in cache._buckets
        assert observe(g, T("A")) == before["A"]


def test_keepset_plan_cached_on_tiny_tables_stays_a_key_lookup(dsn: str) -> None:
    """The keep-set statement prepared (plan cached) while the thread holds 3 rows is
    still one primary-key lookup per step once it holds 300."""
    from langgraph.checkpoint.base import empty_checkpoint
    from psycopg import sql as psql

    with DeltaPostgresSaver.from_conn_string(dsn, prepare_threshold=0) as saver:
        assert isinstance(saver.conn, psycopg.Connection)
        c: Any = cfg("grow")
        for step in range(300):
            cp = empty_checkpoint()
            cp["channel_versions"] = {"ch": saver.get_next_version(None, None)}
            c = saver.put(c, cp, {"source": "loop", "step": step}, {})
            if step == 2:
                saver.get_delta_channel_keepset(config=c, channels=["ch"])
        assert len(saver.get_delta_channel_keepset(config=c, channels=["ch"])) == 300
        row = saver.conn.execute(
            "SELECT name FROM pg_prepared_statements "
            "WHERE statement LIKE 'WITH RECURSIVE%%' AND statement LIKE '%%met_twice%%'"
        ).fetchone()
        assert row is not None
        # parameters in order of first use: thread_id, checkpoint_ns, checkpoint_id,
        # channels, keep_last, settled_at, settled, max_depth
        plan = "\n".join(
            r[0]
            for r in saver.conn.execute(
                psql.SQL(
                    "EXPLAIN EXECUTE {}('grow', '', {}, ARRAY['ch'], 1, NULL, '{{}}', 1000000)"
                ).format(
                    psql.Identifier(row[0]), psql.Literal(c["configurable"]["checkpoint_id"])
                )
            )
        )
        assert "Seq Scan" not in plan and "checkpoints_pkey" in plan, plan


def test_delete_for_runs_logs_only_what_it_kept_of_the_runs_asked_for(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Runs r0..r5 on a DeltaChannel thread with no snapshot after the first: the
    checkpoint r3 starts from rebuilds its state through every earlier checkpoint, of r2
    and of r0, r1. Deleting r2 keeps what r3 needs of r2; the warning counts and lists
    those, not the checkpoints of r0 and r1 the keep-set also holds (issue 21: "kept 39
    checkpoint(s) of these runs" when the 39 belonged to 13 other runs). The kept ones of
    r2 are kept only as seeds (seed_only: not listed, not loadable); r0's and r1's stay
    visible."""
    builder = fanout_builder(100)
    with psycopg.connect(dsn, autocommit=True) as conn:
        ours = DeltaPostgresSaver(conn)
        g = builder.compile(checkpointer=ours)
        for i in range(6):
            g.invoke({"items": [f"u{i}"]}, RUN("A", f"r{i}"))

        def of_run(run_id: str) -> set[str]:
            """The run's checkpoints in the table, listed or not."""
            return {i for i, r in stored_rows(dsn, "A").items() if r.run_id == run_id}

        def listed() -> set[str]:
            return {t.config["configurable"]["checkpoint_id"] for t in ours.list(T("A"))}

        others = of_run("r0") | of_run("r1")
        assert others
        assert listed() == set(stored_rows(dsn, "A"))
        with caplog.at_level("WARNING", logger="langgraph_delta_postgres"):
            ours.delete_for_runs(["r2"])
        kept_r2 = of_run("r2")
        assert kept_r2  # r3 builds on it: kept, as a seed only
        rows = stored_rows(dsn, "A")
        assert {rows[i].seed_only for i in kept_r2} == {True}
        assert {rows[i].seed_only for i in others} == {None}
        assert listed() == {i for i, r in rows.items() if r.seed_only is None} >= others
        assert not listed() & kept_r2
        for cid in kept_r2:
            assert ours.get_tuple(cfg("A", rows[cid].ns, cid)) is None, cid
        (record,) = [r for r in caplog.records if "delete_for_runs" in r.getMessage()]
        msg = record.getMessage()
        m = re.search(r"kept (\d+) checkpoint\(s\) of these runs", msg)
        assert m is not None, msg
        assert int(m.group(1)) == len(kept_r2), msg
        named = set(re.findall(r"A/-/(\S+?)(?:,|$)", msg))
        assert named == kept_r2, msg
        assert not named & others
        # nothing builds on the last run: it goes and nothing is logged
        caplog.clear()
        with caplog.at_level("WARNING", logger="langgraph_delta_postgres"):
            ours.delete_for_runs(["r5"])
        assert not of_run("r5")
        assert "kept" not in caplog.text


# ------------------------------------------------- a run forking from what prune deletes
#
# The state tests/graph/test_maintenance_race.py's keep_latest races leave (a census of
# that race counted 11 in three 4 s runs): runner A forks from checkpoint P (an
# update_state on it, as a runner that loaded P before another runner moved the thread
# on does); its put probes P's snapshot blob of "log" and claims it, but commits after a
# prune that kept only the newer head and deleted P with that blob. A's checkpoint then
# names a DeltaChannel value that is gone, and its parent is gone. Read as "not stored"
# (as a delete of the whole thread racing a put is, test_integrity's issue repro), its
# state silently restarted from an empty "log" (8 entries at the fork, 0 after it, before
# PrunedValueError existed; the official saver reads it so too); a load of it now raises
# PrunedValueError naming the thread, namespace, checkpoint, channel and missing parent.


def _fork_point(g: Any, thread: str) -> tuple[dict[str, Any], str]:
    """Two turns, then a third from another runner: the config of the head the fork
    starts from (the second turn's last checkpoint, a snapshot of "log") and its id."""
    for i in range(2):
        g.invoke({"log": [f"u{i}"]}, T(thread))
    base = g.get_state(T(thread)).config
    g.invoke({"log": ["u2"]}, T(thread))  # the newer head prune keeps
    return base, base["configurable"]["checkpoint_id"]


def _gone_claims(dsn: str, thread: str) -> list[tuple[str, str]]:
    """(checkpoint, channel) of every claim of the thread whose value is gone."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [
            (r[0], r[1])
            for r in conn.execute(
                """SELECT c.checkpoint_id, ch
                   FROM checkpoints AS c, unnest(c.stored_channels) AS ch
                   WHERE c.thread_id = %s
                     AND jsonb_typeof(c.checkpoint -> 'channel_values' -> ch)
                         IS DISTINCT FROM 'string'
                     AND NOT EXISTS (
                         SELECT 1 FROM checkpoint_blobs AS b
                         WHERE b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
                           AND b.channel = ch
                           AND b.version = c.checkpoint -> 'channel_versions' ->> ch)""",
                (thread,),
            )
        ]


def test_a_run_forking_from_what_prune_deletes_gets_a_clear_error(dsn: str) -> None:
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        psycopg.connect(dsn) as run_conn,  # runner A: its put stays open over the prune
    ):
        ours = DeltaPostgresSaver(conn)
        g = _race_graph(ours)
        base, parent = _fork_point(g, "F")
        with run_conn.transaction():
            forked = _race_graph(DeltaPostgresSaver(run_conn)).update_state(
                base, {"note": "fork"}, as_node="c"
            )
            stats = ours.prune(["F"])  # does not see A's checkpoint, deletes its parent
        assert stats.checkpoints > 0 and stats.blobs > 0
        cid = forked["configurable"]["checkpoint_id"]
        assert _gone_claims(dsn, "F") == [(cid, "log")]
        for saver in (ours, DeltaPostgresSaver(conn, cache_bytes=0)):
            gr = _race_graph(saver)
            loads: list[Callable[[], Any]] = [
                functools.partial(gr.get_state, T("F")),
                functools.partial(gr.invoke, None, forked),
                functools.partial(gr.invoke, {"log": ["next"]}, T("F")),
            ]
            for load in loads:
                with pytest.raises(PrunedValueError) as err:
                    load()
                msg = str(err.value)
                for part in (repr("F"), "namespace ''", repr(cid), repr("log"), repr(parent),
                             "prune"):
                    assert part in msg, (part, msg)
            with pytest.raises(PrunedValueError):
                saver.get_delta_channel_history(config=forked, channels=["log"])
        # the checkpoint itself still reads (without the value it lost)
        tup = ours.get_tuple(forked)
        assert tup is not None and "log" not in tup.checkpoint["channel_values"]
        # runner A went on in memory: a child of its checkpoint (a step that wrote "log"
        # and stored no value) cannot be rebuilt either; the error names the ancestor
        child = tup.checkpoint.copy()
        child["id"] = str(uuid6(clock_seq=7))
        current = child["channel_versions"]["log"]
        assert isinstance(current, str)  # this saver's versions are strings
        version = ours.get_next_version(current, None)
        child["channel_versions"] = {**child["channel_versions"], "log": version}
        child["channel_values"] = {"note": "fork"}
        below = ours.put(forked, child, {"source": "loop", "step": 9, "parents": {},
                                         "counters_since_delta_snapshot": {"log": (1, 1)}},
                         {"log": version})
        with pytest.raises(PrunedValueError, match=f"checkpoint {cid!r} of its chain"):
            ours.get_delta_channel_history(config=below, channels=["log"])
        with pytest.raises(PrunedValueError, match=re.escape(repr(cid))):
            _race_graph(ours).get_state(T("F"))


async def test_a_run_forking_from_what_aprune_deletes_gets_a_clear_error(dsn: str) -> None:
    async with (
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn,
        await psycopg.AsyncConnection.connect(dsn) as run_conn,
    ):
        ours = AsyncDeltaPostgresSaver(conn)
        g = _race_graph(ours)
        for i in range(2):
            await g.ainvoke({"log": [f"u{i}"]}, T("F"))
        base = (await g.aget_state(T("F"))).config
        await g.ainvoke({"log": ["u2"]}, T("F"))
        async with run_conn.transaction():
            forked = await _race_graph(AsyncDeltaPostgresSaver(run_conn)).aupdate_state(
                base, {"note": "fork"}, as_node="c"
            )
            stats = await ours.aprune(["F"])
        assert stats.checkpoints > 0 and stats.blobs > 0
        cid = forked["configurable"]["checkpoint_id"]
        assert _gone_claims(dsn, "F") == [(cid, "log")]
        for saver in (ours, AsyncDeltaPostgresSaver(conn, cache_bytes=0)):
            gr = _race_graph(saver)
            with pytest.raises(PrunedValueError, match=re.escape(repr(cid))):
                await gr.aget_state(T("F"))
            with pytest.raises(PrunedValueError, match="'log'"):
                await gr.ainvoke({"log": ["next"]}, T("F"))
            with pytest.raises(PrunedValueError, match=re.escape(repr(base["configurable"]
                                                                       ["checkpoint_id"]))):
                await saver.aget_delta_channel_history(config=forked, channels=["log"])
