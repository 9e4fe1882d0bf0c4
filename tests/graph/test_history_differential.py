"""Differential tests of get_delta_channel_history on generated histories.

Every generated history is written three times: through our saver (thread ``T``), through
the official ``PostgresSaver.put`` (thread ``T-off``: rows without our ``stored_channels``
column, which exercise the SQL fallback path) and through ``InMemorySaver``. For every
checkpoint (and the latest of each namespace) our answer must equal the official saver's
on the same rows and the in-memory saver's, except the documented ``None`` divergence:
an inline ``None`` is a seed for InMemorySaver but not for the Postgres savers.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, ChannelVersions, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.types import Overwrite

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver
from tests.graph._util import (
    Step,
    ThreadGen,
    aapply_steps,
    apply_steps,
    canon_history,
    cfg,
    insert_empty_rows,
    official_saver,
    skewed_clock,
)
from tests.plugins.savers import SaverFactory

CHANNELS = ["msgs", "files", "count"]
QUERY_CHANNELS: list[list[str]] = [
    CHANNELS,
    ["msgs"],
    ["never_written", "count"],
    ["files", "msgs", "files"],  # duplicate names
]


# ----------------------------------------------------------------------------- shapes


def linear(rng: random.Random, n: int = 40, **kw: Any) -> list[Step]:
    g = ThreadGen(rng, CHANNELS, "t")
    last = None
    for _ in range(n):
        last = g.step(last, **kw)
    return g.steps


def forks(rng: random.Random, n: int = 45) -> list[Step]:
    g = ThreadGen(rng, CHANNELS, "t")
    last = g.step(None)
    for _ in range(n - 1):
        parent = rng.choice(g.steps) if rng.random() < 0.3 else last
        last = g.step(parent)
    return g.steps


def namespaces(rng: random.Random, n: int = 45) -> list[Step]:
    g = ThreadGen(rng, CHANNELS, "t")
    lasts: dict[str, Step | None] = {"": None, "sub:1": None, "sub:1|inner:2": None}
    for _ in range(n):
        ns = rng.choice(list(lasts))
        lasts[ns] = g.step(lasts[ns], ns)
    return g.steps


def skewed(rng: random.Random, n: int = 45) -> list[Step]:
    """A thread that moves between workers, some with a clock an hour behind, with
    forks: children whose ids sort below their parents' (langgraph#8550)."""
    g = ThreadGen(rng, CHANNELS, "t")
    last = g.step(None)
    for _ in range(n - 1):
        parent = rng.choice(g.steps) if rng.random() < 0.2 else last
        if rng.random() < 0.3:
            with skewed_clock(rng.choice([1.0, 2.0])):
                last = g.step(parent)
        else:
            last = g.step(parent)
    return g.steps


SHAPES: dict[str, Callable[[random.Random], list[Step]]] = {
    "linear": linear,
    "forks": forks,
    "namespaces": namespaces,
    "linear-seedless": lambda rng: linear(rng, 30, seed_p=0.0),
    "linear-seedy": lambda rng: linear(rng, 30, seed_p=0.6),
}


# ----------------------------------------------------------------------------- checks


def targets(steps: Sequence[Step], thread_id: str) -> list[RunnableConfig]:
    out = [cfg(thread_id, st.ns, st.checkpoint_id) for st in steps]
    out += [cfg(thread_id, ns) for ns in dict.fromkeys(st.ns for st in steps)]
    return out


def _with_thread(config: RunnableConfig, thread_id: str) -> RunnableConfig:
    conf = dict(config["configurable"])
    conf["thread_id"] = thread_id
    return {"configurable": conf}


def compare_one(
    ours: dict[str, Any],
    official: dict[str, Any],
    memory: dict[str, Any],
    channels: Sequence[str],
    where: str,
) -> None:
    assert list(ours) == list(dict.fromkeys(channels)), where
    assert ours == official, f"ours != official at {where}"
    for ch in ours:
        compare_channel(ours[ch], memory[ch], f"{ch!r} at {where}")


def compare_channel(ours: dict[str, Any], memory: dict[str, Any], where: str) -> None:
    """One channel of a canonical answer against InMemorySaver's. The documented
    divergence: InMemorySaver stops at an inline None, Postgres savers walk past it (our
    answer must then be the official one, checked by the callers). Only the seed is
    exempt: the writes InMemorySaver returns (those from the None checkpoint on) must be
    exactly the newest of ours, and ours must not stop at that None."""
    if memory.get("seed") != ("NoneType", None):
        assert ours == memory, f"ours != InMemorySaver for {where}"
        return
    assert ours.get("seed") != ("NoneType", None), where
    w_ours, w_mem = ours["writes"], memory["writes"]
    assert w_ours[len(w_ours) - len(w_mem) :] == w_mem, f"writes after a None seed, {where}"


def _dedup(channels: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(channels))


def write_all(
    dsn: str, steps: Sequence[Step], ours: DeltaPostgresSaver, off_rows: bool = True
) -> InMemorySaver:
    apply_steps(ours, "T", steps)
    with official_saver(dsn) as off:
        apply_steps(off, "T-off", steps if off_rows else [])
    insert_empty_rows(dsn, "T", steps)
    insert_empty_rows(dsn, "T-off", steps)
    mem = InMemorySaver()
    apply_steps(mem, "T", steps)
    return mem


def check_all(
    dsn: str,
    steps: Sequence[Step],
    ours_get: Callable[[RunnableConfig, list[str]], dict[str, Any]],
    mem: InMemorySaver,
    query_channels: Sequence[Sequence[str]] = QUERY_CHANNELS,
    subset: Sequence[RunnableConfig] | None = None,
    off_rows: bool = True,
) -> int:
    n = 0
    with official_saver(dsn) as off:
        for config in subset if subset is not None else targets(steps, "T"):
            for chans in query_channels:
                chans = list(chans)
                where = f"{config['configurable']} channels={chans}"
                got = canon_history(ours_get(config, chans))
                if not off_rows:
                    official = canon_history(
                        off.get_delta_channel_history(config=config, channels=_dedup(chans))
                    )
                    memory = canon_history(
                        mem.get_delta_channel_history(config=config, channels=chans)
                    )
                    compare_one(got, official, memory, chans, where)
                    n += 1
                    continue
                got_off_rows = canon_history(ours_get(_with_thread(config, "T-off"), chans))
                # the official saver duplicates writes for duplicate names: ask it deduped
                official = canon_history(
                    off.get_delta_channel_history(config=config, channels=_dedup(chans))
                )
                official_off = canon_history(
                    off.get_delta_channel_history(
                        config=_with_thread(config, "T-off"), channels=_dedup(chans)
                    )
                )
                memory = canon_history(mem.get_delta_channel_history(config=config, channels=chans))
                compare_one(got, official, memory, chans, where)
                assert got_off_rows == official_off == official, (
                    f"rows written by the official saver: {where}"
                )
                n += 1
    return n


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("cache_bytes", [0, 1 << 20, 64 << 20])
@pytest.mark.parametrize("shape", ["skewed", "forks", "namespaces", "linear-seedy"])
def test_any_id_order_and_cache(dsn: str, shape: str, cache_bytes: int) -> None:
    """Parent pointers are the only order, with the cache off, small and large: every
    target asked in a random order (so cached chains are reused forwards, backwards and
    across forks) answers as InMemorySaver, which follows the parents."""
    rng = random.Random(f"order-{shape}-{cache_bytes}")
    steps = {**SHAPES, "skewed": skewed}[shape](rng)
    if shape == "skewed":
        assert any(st.parent_id is not None and st.checkpoint_id < st.parent_id for st in steps), (
            "the generator made no skewed child"
        )
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=cache_bytes) as ours:
        # the thread is written, read, then deleted and written again with another
        # history by a different saver (this one's cache is not told) and read again
        for rewrite in range(2):
            if rewrite:
                steps = {**SHAPES, "skewed": skewed}[shape](random.Random(f"again-{shape}"))
            mem = InMemorySaver()
            apply_steps(mem, "T", steps)
            with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as other:
                other.delete_thread("T")
                apply_steps(other, "T", steps)
            order = targets(steps, "T") * 2
            rng.shuffle(order)
            for config in order:
                for chans in QUERY_CHANNELS:
                    where = f"{config['configurable']} channels={chans} rewrite={rewrite}"
                    got = canon_history(
                        ours.get_delta_channel_history(config=config, channels=chans)
                    )
                    memory = canon_history(
                        mem.get_delta_channel_history(config=config, channels=chans)
                    )
                    assert list(got) == _dedup(chans), where
                    for ch in got:
                        compare_channel(got[ch], memory[ch], f"{ch!r} at {where}")
        if cache_bytes:
            assert ours.history_cache is not None
            assert ours.history_cache.nbytes <= cache_bytes
            assert ours.history_cache.chain_hits > 0


@pytest.mark.parametrize(
    ("seed", "cache_bytes"), [(1, 64 << 20), (2, 64 << 20), (3, 64 << 20), (1, 0)]
)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_generated_histories_sync(dsn: str, shape: str, seed: int, cache_bytes: int) -> None:
    rng = random.Random(f"{shape}-{seed}")
    steps = SHAPES[shape](rng)
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=cache_bytes) as ours:
        mem = write_all(dsn, steps, ours)

        def get(config: RunnableConfig, chans: list[str]) -> dict[str, Any]:
            return dict(ours.get_delta_channel_history(config=config, channels=chans))

        assert check_all(dsn, steps, get, mem) > 0


@pytest.mark.parametrize("shape", ["forks", "namespaces"])
async def test_generated_histories_every_kind(
    dsn: str, saver_factory: SaverFactory, shape: str
) -> None:
    rng = random.Random(f"kind-{shape}")
    steps = SHAPES[shape](rng)
    mem = InMemorySaver()
    apply_steps(mem, "T", steps)
    results: dict[str, Any] = {}
    chans = CHANNELS + ["never_written"]
    if saver_factory.is_async:
        async with saver_factory.aio(dsn) as ours:
            await aapply_steps(ours, "T", steps)
            for config in targets(steps, "T"):
                key = repr(config)
                results[key] = await ours.aget_delta_channel_history(config=config, channels=chans)
    else:
        with saver_factory.sync(dsn) as sours:
            apply_steps(sours, "T", steps)
            for config in targets(steps, "T"):
                key = repr(config)
                results[key] = sours.get_delta_channel_history(config=config, channels=chans)
    with official_saver(dsn) as off:
        apply_steps(off, "T-off", steps)
        for config in targets(steps, "T"):
            where = repr(config)
            got = canon_history(results[where])
            official = canon_history(off.get_delta_channel_history(config=config, channels=chans))
            official_off = canon_history(
                off.get_delta_channel_history(config=_with_thread(config, "T-off"), channels=chans)
            )
            memory = canon_history(mem.get_delta_channel_history(config=config, channels=chans))
            compare_one(got, official, memory, chans, where)
            assert official_off == official


async def test_generated_histories_async_conn(dsn: str) -> None:
    rng = random.Random("async")
    steps = forks(rng, 40)
    with DeltaPostgresSaver.from_conn_string(dsn) as sync_ours:
        mem = write_all(dsn, steps, sync_ours)
    answers: dict[str, Any] = {}
    async with AsyncDeltaPostgresSaver.from_conn_string(dsn) as ours:
        for config in targets(steps, "T") + targets(steps, "T-off"):
            for chans in QUERY_CHANNELS:
                answers[repr((config, chans))] = await ours.aget_delta_channel_history(
                    config=config, channels=list(chans)
                )

    def get(config: RunnableConfig, chans: list[str]) -> dict[str, Any]:
        return dict(answers[repr((config, chans))])

    assert check_all(dsn, steps, get, mem) > 0


def test_thousands_of_ancestors(dsn: str) -> None:
    """3000 checkpoints, seeds only near the root: no truncation at any depth."""
    rng = random.Random("deep")
    g = ThreadGen(rng, CHANNELS, "t")
    last = None
    for i in range(3000):
        last = g.step(last, seed_p=0.5 if i < 3 else 0.0, write_p=0.9)
    steps = g.steps
    with DeltaPostgresSaver.from_conn_string(dsn) as ours:
        mem = write_all(dsn, steps, ours, off_rows=False)

        def get(config: RunnableConfig, chans: list[str]) -> dict[str, Any]:
            return dict(ours.get_delta_channel_history(config=config, channels=chans))

        picks = [steps[i] for i in (1, 3, 1025, 2999)]
        subset = [cfg("T", st.ns, st.checkpoint_id) for st in picks] + [cfg("T")]
        assert check_all(dsn, steps, get, mem, [CHANNELS], subset, off_rows=False) == 5
        full = ours.get_delta_channel_history(config=cfg("T"), channels=["msgs"])
        expected = [
            (tid, ch, v)
            for st in steps[:-1]
            for tid, path, ws in sorted(st.writes, key=lambda w: (w[1], w[0]))
            for ch, v in ws
            if ch == "msgs"
        ]
        seed_at = max((i for i, st in enumerate(steps[:-1]) if _stores(st, "msgs")), default=None)
        if seed_at is not None:
            cut = sum(
                1
                for st in steps[:seed_at]
                for _, _, ws in st.writes
                for ch, _ in ws
                if ch == "msgs"
            )
            expected = expected[cut:]
        assert len(full["msgs"]["writes"]) == len(expected) > 2000
        assert canon_history({"m": {"writes": full["msgs"]["writes"]}}) == canon_history(
            {"m": {"writes": expected}}
        )


def _stores(st: Step, ch: str) -> bool:
    v = st.channel_values.get(ch, None)
    return ch in st.channel_values and v is not None


# ----------------------------------------------------------------------------- edges


def _put(
    saver: BaseCheckpointSaver[Any],
    thread: str,
    parent: str | None,
    values: dict[str, Any],
    versions: ChannelVersions,
    new: ChannelVersions,
    ns: str = "",
) -> RunnableConfig:
    cp = empty_checkpoint()
    cp["id"] = str(uuid6())
    cp["channel_values"] = values
    cp["channel_versions"] = versions
    return saver.put(cfg(thread, ns, parent), cp, {"source": "loop", "step": 0}, new)


def test_edge_cases(dsn: str) -> None:
    with DeltaPostgresSaver.from_conn_string(dsn) as ours, official_saver(dsn) as off:
        c1 = _put(ours, "e", None, {"a": [1]}, {"a": "1"}, {"a": "1"})
        ours.put_writes(c1, [("a", 2)], "task", "p")
        c2 = _put(ours, "e", c1["configurable"]["checkpoint_id"], {}, {"a": "2"}, {"a": "2"})
        for s in (ours, off):
            # channels=[] -> {} even for a missing target
            assert s.get_delta_channel_history(config=cfg("nope", "", "x"), channels=[]) == {}
            assert s.get_delta_channel_history(config=c2, channels=[]) == {}
            # unknown thread, missing target id, unknown namespace
            for config in (
                cfg("nope"),
                cfg("e", "", str(uuid6())),
                cfg("e", "ns-x"),
                cfg("nope", "", c2["configurable"]["checkpoint_id"]),
            ):
                got = s.get_delta_channel_history(config=config, channels=["a", "zz"])
                assert got == {"a": {"writes": []}, "zz": {"writes": []}}, (s, config)
            # channel never written: no seed key at all
            got = s.get_delta_channel_history(config=c2, channels=["zz"])
            assert got == {"zz": {"writes": []}}
            assert "seed" not in got["zz"]
            got = s.get_delta_channel_history(config=c2, channels=["a"])
            assert got == {"a": {"writes": [("task", "a", 2)], "seed": [1]}}
            # the target's own writes and value are never part of the answer
            assert s.get_delta_channel_history(config=c1, channels=["a"]) == {"a": {"writes": []}}
        # duplicate names: one entry, no duplicated writes
        got = ours.get_delta_channel_history(config=c2, channels=["a", "a", "zz", "a"])
        assert got == {"a": {"writes": [("task", "a", 2)], "seed": [1]}, "zz": {"writes": []}}
        assert list(got) == ["a", "zz"]
        mem = InMemorySaver()
        m1 = _put(mem, "e", None, {"a": [1]}, {"a": "1"}, {"a": "1"})
        mem.put_writes(m1, [("a", 2)], "task", "p")
        m2 = _put(mem, "e", m1["configurable"]["checkpoint_id"], {}, {"a": "2"}, {"a": "2"})
        assert mem.get_delta_channel_history(config=m2, channels=["a", "a", "zz", "a"]) == got
        with pytest.raises(TypeError):
            ours.get_delta_channel_history(config=c2, channels="a")  # a str: a Sequence to mypy


def test_inline_primitive_seeds_and_none(dsn: str) -> None:
    """0, "", False, True, 1.5, "s" are seeds; an inline None is not (official Postgres
    behaviour), while InMemorySaver stops at it."""
    for seed in (0, "", False, True, 1.5, "s", None):
        thread = f"p-{seed!r}"
        mem = InMemorySaver()
        answers = []
        with DeltaPostgresSaver.from_conn_string(dsn) as ours, official_saver(dsn) as off:
            for s in (ours, mem):
                r = _put(s, thread, None, {"c": [9]}, {"c": "1"}, {"c": "1"})
                s.put_writes(r, [("c", "w0")], "t0", "")
                r = _put(
                    s,
                    thread,
                    r["configurable"]["checkpoint_id"],
                    {"c": seed},
                    {"c": "2"},
                    {"c": "2"},
                )
                s.put_writes(r, [("c", "w1")], "t1", "x")
                r = _put(s, thread, r["configurable"]["checkpoint_id"], {}, {"c": "3"}, {"c": "3"})
                answers.append(s.get_delta_channel_history(config=r, channels=["c"]))
            official = off.get_delta_channel_history(config=cfg(thread), channels=["c"])
        got, memory = answers
        assert canon_history(got) == canon_history(official)
        if seed is None:
            assert got == {"c": {"writes": [("t0", "c", "w0"), ("t1", "c", "w1")], "seed": [9]}}
            assert memory == {"c": {"writes": [("t1", "c", "w1")], "seed": None}}
        else:
            assert canon_history(got) == canon_history(
                {"c": {"writes": [("t1", "c", "w1")], "seed": seed}}
            )
            assert canon_history(got) == canon_history(memory)


def test_snapshot_marker_and_true_inline(dsn: str) -> None:
    """A _DeltaSnapshot comes back as the object; an inline True is the value True."""
    with DeltaPostgresSaver.from_conn_string(dsn) as ours, official_saver(dsn) as off:
        r = _put(
            ours,
            "m",
            None,
            {"s": _DeltaSnapshot(["x"]), "b": True},
            {"s": "1", "b": "1"},
            {"s": "1", "b": "1"},
        )
        ours.put_writes(r, [("s", "y"), ("b", False)], "t", "")
        r = _put(
            ours,
            "m",
            r["configurable"]["checkpoint_id"],
            {},
            {"s": "2", "b": "2"},
            {"s": "2", "b": "2"},
        )
        got = ours.get_delta_channel_history(config=r, channels=["s", "b"])
        assert isinstance(got["s"]["seed"], _DeltaSnapshot)
        assert canon_history(got) == canon_history(
            {
                "s": {"writes": [("t", "s", "y")], "seed": _DeltaSnapshot(["x"])},
                "b": {"writes": [("t", "b", False)], "seed": True},
            }
        )
        assert canon_history(got) == canon_history(
            off.get_delta_channel_history(config=r, channels=["s", "b"])
        )


def test_overwrite_values_returned_as_stored(dsn: str) -> None:
    with DeltaPostgresSaver.from_conn_string(dsn) as ours, official_saver(dsn) as off:
        r = _put(ours, "o", None, {}, {"c": "1"}, {"c": "1"})
        ours.put_writes(r, [("c", [1])], "a", "a")
        ours.put_writes(r, [("c", Overwrite([5]))], "b", "b")
        r = _put(ours, "o", r["configurable"]["checkpoint_id"], {}, {"c": "2"}, {"c": "2"})
        ours.put_writes(r, [("c", [6]), ("c", Overwrite(None))], "c", "")
        r = _put(ours, "o", r["configurable"]["checkpoint_id"], {}, {"c": "3"}, {"c": "3"})
        got = ours.get_delta_channel_history(config=r, channels=["c"])
        assert canon_history(got) == canon_history(
            {
                "c": {
                    "writes": [
                        ("a", "c", [1]),
                        ("b", "c", Overwrite([5])),
                        ("c", "c", [6]),
                        ("c", "c", Overwrite(None)),
                    ]
                }
            }
        )
        assert canon_history(got) == canon_history(
            off.get_delta_channel_history(config=r, channels=["c"])
        )


def test_snapshot_behind_unchanged_version(dsn: str) -> None:
    """A checkpoint that omits a channel from channel_values but names a version whose
    blob is a snapshot stores a value for it (contract point 7): the walk stops there."""
    with DeltaPostgresSaver.from_conn_string(dsn) as ours, official_saver(dsn) as off:
        mem = InMemorySaver()
        answers = []
        for s in (ours, mem):
            r0 = _put(s, "u", None, {}, {"c": "1"}, {"c": "1"})
            s.put_writes(r0, [("c", "before")], "t0", "")
            r1 = _put(
                s,
                "u",
                r0["configurable"]["checkpoint_id"],
                {"c": _DeltaSnapshot(["S"])},
                {"c": "2"},
                {"c": "2"},
            )
            # a write at r1 that (unusually) does not bump the version of the child
            s.put_writes(r1, [("c", "at-snapshot")], "t1", "")
            r2 = _put(s, "u", r1["configurable"]["checkpoint_id"], {}, {"c": "2"}, {})
            s.put_writes(r2, [("c", "after")], "t2", "")
            r3 = _put(s, "u", r2["configurable"]["checkpoint_id"], {}, {"c": "3"}, {"c": "3"})
            answers.append(canon_history(s.get_delta_channel_history(config=r3, channels=["c"])))
        official = canon_history(off.get_delta_channel_history(config=cfg("u"), channels=["c"]))
        assert official == answers[1]
        assert answers[0] == official
