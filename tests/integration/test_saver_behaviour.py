"""Behaviour of both savers over all six connection kinds (sync/async x conn/pool/pipeline).

Where possible the expected answer is computed, not hand-written: a Python model of the
stored data for ``list``, and the official ``PostgresSaver`` reading the same rows for
``get_tuple`` / ``put_writes``.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Any

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import WRITES_IDX_MAP, CheckpointTuple
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT, RESUME, SCHEDULED
from psycopg.rows import dict_row

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver
from langgraph_delta_postgres.migrate import discover, migrate
from tests.graph._util import official_saver
from tests.integration._helpers import (
    Uniform,
    cfg,
    make_checkpoint,
    open_saver,
    put_chain,
    strip_thread,
    table_counts,
    table_snapshot,
)
from tests.plugins.savers import SaverFactory

SPECIAL = [ERROR, INTERRUPT, RESUME, SCHEDULED]


def official(dsn: str) -> Any:
    conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row)
    return conn, PostgresSaver(conn)


def _contains(md: Any, f: Any) -> bool:
    """jsonb ``@>`` for objects and scalars (no arrays in these tests)."""
    if isinstance(f, dict):
        return isinstance(md, dict) and all(k in md and _contains(md[k], v) for k, v in f.items())
    return bool(md == f)


def orphan_blobs(dsn: str) -> list[tuple[Any, ...]]:
    """Blob rows no checkpoint of their thread/namespace names."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            """SELECT b.thread_id, b.checkpoint_ns, b.channel, b.version FROM checkpoint_blobs b
               WHERE NOT EXISTS (SELECT 1 FROM checkpoints c
                   WHERE c.thread_id = b.thread_id AND c.checkpoint_ns = b.checkpoint_ns
                     AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)"""
        ).fetchall()


def stored_checkpoints(dsn: str, thread_id: str) -> dict[str, tuple[str, str | None, Any]]:
    """Every checkpoint row of the thread, listed or not (prune and delete_for_runs keep
    some only as seeds: seed_only TRUE, and no read path returns them; NULL: visible):
    checkpoint id -> (namespace, parent_checkpoint_id, seed_only)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {
            r[0]: (r[1], r[2], r[3])
            for r in conn.execute(
                "SELECT checkpoint_id, checkpoint_ns, parent_checkpoint_id, seed_only "
                "FROM checkpoints WHERE thread_id = %s",
                (thread_id,),
            )
        }


# --------------------------------------------------------------------------- list


async def test_list_matches_model(dsn: str, saver_factory: SaverFactory) -> None:
    rng = random.Random(7)
    stored: list[tuple[str, str, str, dict[str, Any]]] = []  # thread, ns, id, metadata
    async with open_saver(saver_factory, dsn) as u:
        for t in ("t-a", "t-b", "t-c"):
            for ns in ("", "child:1"):
                mds = [
                    {
                        "source": rng.choice(["loop", "input"]),
                        "step": i,
                        "run_id": rng.choice(["r1", "r2", "r3"]),
                        "user": {"id": rng.choice([1, 2]), "name": "x"},
                    }
                    for i in range(rng.randint(2, 5))
                ]
                configs = await put_chain(u, t, len(mds), ns=ns, metadata=lambda i, m=mds: m[i])
                for c, md in zip(configs, mds, strict=True):
                    stored.append((t, ns, c["configurable"]["checkpoint_id"], md))
        ids = sorted(s[2] for s in stored)
        mid = cfg("t-b", "", ids[len(ids) // 2])
        config_opts: list[Any] = [
            None,
            {"configurable": {"thread_id": "t-a"}},
            cfg("t-b", ""),
            cfg("t-c", "child:1"),
            cfg("t-a", "", stored[1][2]),
            {"configurable": {"thread_id": "nope"}},
        ]
        filters: list[Any] = [
            None,
            {"source": "loop"},
            {"run_id": "r2"},
            {"run_id": "r1", "source": "input"},
            {"user": {"id": 1}},
            {"missing": 1},
        ]
        n_checked = 0
        for config in config_opts:
            for flt in filters:
                for before in (None, mid):
                    for limit in (None, 1, 3):
                        got = await u.list(config, filter=flt, before=before, limit=limit)
                        conf = (config or {}).get("configurable", {})
                        exp = [
                            s
                            for s in stored
                            if (not conf or s[0] == conf["thread_id"])
                            and ("checkpoint_ns" not in conf or s[1] == conf["checkpoint_ns"])
                            and ("checkpoint_id" not in conf or s[2] == conf["checkpoint_id"])
                            and (flt is None or _contains(s[3], flt))
                            and (before is None or s[2] < before["configurable"]["checkpoint_id"])
                        ]
                        exp.sort(key=lambda s: s[2], reverse=True)
                        if limit is not None:
                            exp = exp[:limit]
                        key = (config, flt, before, limit)
                        assert [
                            (
                                g.config["configurable"]["thread_id"],
                                g.config["configurable"]["checkpoint_ns"],
                                g.config["configurable"]["checkpoint_id"],
                                g.metadata,
                            )
                            for g in got
                        ] == exp, key
                        n_checked += 1
        assert n_checked == 216


# --------------------------------------------------------------------------- get_tuple


async def test_get_tuple_latest_by_id_and_namespaces(
    dsn: str, saver_factory: SaverFactory
) -> None:
    async with open_saver(saver_factory, dsn) as u:
        root = await put_chain(u, "t", 4)
        child = await put_chain(u, "t", 3, ns="sub:1", values=lambda i: {"c": f"child{i}"})
        other = await put_chain(u, "t2", 2)
        conn, off = official(dsn)
        with conn:
            for chain in (root, child, other):
                for i, c in enumerate(chain):
                    t = await u.get_tuple(c)
                    assert t is not None
                    assert t.config == c
                    assert t == off.get_tuple(c)
                    assert t.parent_config == (chain[i - 1] if i else None)
                # latest in the namespace, without a checkpoint id
                conf = chain[-1]["configurable"]
                latest = await u.get_tuple(cfg(conf["thread_id"], conf["checkpoint_ns"]))
                assert latest is not None and latest.config == chain[-1]
                assert latest == off.get_tuple(cfg(conf["thread_id"], conf["checkpoint_ns"]))
        t = await u.get_tuple(root[1])
        assert t is not None
        assert t.checkpoint["channel_values"] == {"num": 1, "obj": {"i": 1, "xs": [0]}}
        t = await u.get_tuple(child[2])
        assert t is not None and t.checkpoint["channel_values"] == {"c": "child2"}
        # a namespace is not a thread: the root latest is not the child's
        latest_root = await u.get_tuple(cfg("t"))
        assert latest_root is not None and latest_root.config == root[-1]
        assert await u.get_tuple(cfg("t", "", str(uuid.uuid4()))) is None
        assert await u.get_tuple(cfg("nope")) is None
        assert await u.get_tuple(cfg("t", "sub:2")) is None


# --------------------------------------------------------------------------- put_writes


async def test_put_writes_first_wins_special_last_wins(
    dsn: str, saver_factory: SaverFactory
) -> None:
    async with open_saver(saver_factory, dsn) as u:
        (c,) = await put_chain(u, "t", 1)
        await u.put_writes(c, [("a", 1), ("b", {"v": 2})], "task1", "~p")
        await u.put_writes(c, [("a", 10), ("b", {"v": 20}), ("c", 30)], "task1", "~p")
        await u.put_writes(c, [(ERROR, "e1")], "task2")
        await u.put_writes(c, [(ERROR, "e2")], "task2")
        await u.put_writes(c, [(INTERRUPT, ["i1"])], "task3")
        await u.put_writes(c, [(INTERRUPT, ["i2"])], "task3")
        t = await u.get_tuple(c)
        assert t is not None
        assert sorted(t.pending_writes or [], key=repr) == sorted(
            [
                ("task1", "a", 1),
                ("task1", "b", {"v": 2}),
                ("task1", "c", 30),  # idx 2 was new
                ("task2", ERROR, "e2"),
                ("task3", INTERRUPT, ["i2"]),
            ],
            key=repr,
        )


async def test_put_writes_generated_same_as_official(
    dsn: str, saver_factory: SaverFactory
) -> None:
    """Random put_writes sequences: what we store reads back exactly like the official
    saver's rows for the same calls (read through both savers)."""
    rng = random.Random(11)
    channels = ["a", "b", *SPECIAL]
    conn, off = official(dsn)
    with conn:
        async with open_saver(saver_factory, dsn) as u:
            for rnd in range(4):
                ours = await put_chain(u, f"ours{rnd}", 1)
                theirs_cp = make_checkpoint({"num": 1})
                theirs = off.put(cfg(f"theirs{rnd}"), theirs_cp, {"step": 0}, {"num": 1})
                for _ in range(12):
                    if rng.random() < 0.4:
                        writes = [(rng.choice(SPECIAL), rng.randint(0, 99))]
                    else:
                        writes = [
                            (rng.choice(channels), rng.randint(0, 99))
                            for _ in range(rng.randint(1, 4))
                        ]
                    task = rng.choice(["t1", "t2", "t3"])
                    path = {"t1": "~a", "t2": "~b", "t3": ""}[task]
                    await u.put_writes(ours[0], writes, task, path)
                    off.put_writes(theirs, writes, task, path)
                mine = await u.get_tuple(ours[0])
                ref = off.get_tuple(theirs)
                assert mine is not None and ref is not None
                assert mine.pending_writes == ref.pending_writes
                assert off.get_tuple(ours[0]).pending_writes == ref.pending_writes
                assert (await u.get_tuple(theirs)).pending_writes == ref.pending_writes  # type: ignore[union-attr]
                assert any(w[1] in WRITES_IDX_MAP for w in ref.pending_writes or [])


async def test_pending_writes_and_history_in_task_path_order(
    dsn: str, saver_factory: SaverFactory
) -> None:
    """writes_sort_key order = (task_path, task_id, idx) by code point, for pending writes
    and for the delta history, whatever the database collation would say."""
    rng = random.Random(3)
    paths = ["", "~__pregel_pull, a", "~__pregel_pull, B", "a", "B", "é", "e", "Z", "10", "9",
             "~", "a b", "ab", "A"]
    ids = ["T", "t", "ß", "é", "1", "_"]
    conn, off = official(dsn)
    with conn:
        async with open_saver(saver_factory, dsn) as u:
            for rnd in range(3):
                tid = f"order{rnd}"
                (c,) = await put_chain(u, tid, 1)
                expected = []
                used = set()
                for _ in range(25):
                    task_id = rng.choice(ids) + str(rng.randint(0, 3))
                    if task_id in used:
                        continue
                    used.add(task_id)
                    path = rng.choice(paths)
                    writes = [(rng.choice(["x", "y"]), f"{task_id}/{i}")
                              for i in range(rng.randint(1, 3))]
                    await u.put_writes(c, writes, task_id, path)
                    expected += [(path, task_id, i, ch, v) for i, (ch, v) in enumerate(writes)]
                expected.sort(key=lambda w: (w[0], w[1], w[2]))
                t = await u.get_tuple(c)
                assert t is not None
                assert t.pending_writes == [(w[1], w[3], w[4]) for w in expected]
                assert off.get_tuple(c).pending_writes == t.pending_writes
                # the writes become history once a child checkpoint exists
                child = await u.put(c, make_checkpoint({"num": 2}), {"step": 1}, {})
                hist = await u.history(child, ["x", "y"])
                ref = off.get_delta_channel_history(config=child, channels=["x", "y"])
                for ch in ("x", "y"):
                    assert hist[ch] == {
                        "writes": [(w[1], w[3], w[4]) for w in expected if w[3] == ch]
                    }
                    assert hist[ch] == ref[ch]


# --------------------------------------------------------------------------- delete


async def test_delete_thread(dsn: str, saver_factory: SaverFactory) -> None:
    async with open_saver(saver_factory, dsn) as u:
        for t in ("gone", "kept"):
            for ns in ("", "sub:1"):
                chain = await put_chain(u, t, 3, ns=ns)
                await u.put_writes(chain[-1], [("obj", {"w": 1}), ("num", 5)], "task", "~p")
        before = table_counts(dsn, "kept")
        assert all(before.values())
        await u.delete_thread("gone")
        assert table_counts(dsn, "gone") == dict.fromkeys(before, 0)
        assert table_counts(dsn, "kept") == before
        assert await u.get_tuple(cfg("gone")) is None
        assert await u.list(cfg("gone")) == []
        assert len(await u.list({"configurable": {"thread_id": "kept"}})) == 6
        await u.delete_thread("never-existed")  # no error
        assert table_counts(dsn, "kept") == before


async def _runs_fixture(u: Uniform, *, delta_thread: bool) -> dict[str, list[RunnableConfig]]:
    """Thread A: run r1 (3 checkpoints) then r2 (2). Thread B: r1 only. Thread D
    (optional): r1 then r2, with DeltaChannel counters in the metadata."""

    def md(runs: list[str], delta: bool) -> Any:
        def f(i: int) -> dict[str, Any]:
            m: dict[str, Any] = {"source": "loop", "step": i, "run_id": runs[i]}
            if delta:
                m["counters_since_delta_snapshot"] = {"msgs": [i + 1, i + 1]}
            return m

        return f

    out = {
        "A": await put_chain(u, "A", 5, metadata=md(["r1"] * 3 + ["r2"] * 2, False)),
        "B": await put_chain(u, "B", 2, metadata=md(["r1"] * 2, False)),
    }
    for chain in out.values():
        for c in chain:
            await u.put_writes(c, [("obj", {"c": c["configurable"]["checkpoint_id"]})], "t", "")
    if delta_thread:
        out["D"] = await put_chain(u, "D", 4, metadata=md(["r1"] * 2 + ["r2"] * 2, True))
    return out


async def test_delete_for_runs(dsn: str, saver_factory: SaverFactory) -> None:
    async with open_saver(saver_factory, dsn) as u:
        chains = await _runs_fixture(u, delta_thread=False)
        survivors = {c["configurable"]["checkpoint_id"]: await u.get_tuple(c)
                     for c in chains["A"][3:]}
        await u.delete_for_runs(["r1"])
        left = await u.list(None)
        assert {t.config["configurable"]["checkpoint_id"] for t in left} == set(survivors)
        for t in left:
            assert t.metadata["run_id"] == "r2"
            again = await u.get_tuple(t.config)
            before = survivors[t.config["configurable"]["checkpoint_id"]]
            assert again is not None and before is not None
            assert again.checkpoint == before.checkpoint
            assert again.pending_writes == before.pending_writes
        assert table_counts(dsn, "B") == {
            "checkpoints": 0, "checkpoint_blobs": 0, "checkpoint_writes": 0
        }
        assert table_counts(dsn, "A")["checkpoint_writes"] == 2
        assert orphan_blobs(dsn) == []
        await u.delete_for_runs([])  # no-op
        await u.delete_for_runs(["no-such-run"])
        assert len(await u.list(None)) == 2


async def test_delete_for_runs_of_a_delta_thread_deletes_what_nothing_needs(
    dsn: str, saver_factory: SaverFactory
) -> None:
    """Thread D: run r1 (2 checkpoints) then r2 (2) with DeltaChannel counters for "obj",
    stored only at D's first checkpoint. Deleting r1 keeps r1's checkpoints (r2 rebuilds
    "obj" from them) instead of refusing, but only as seeds: their rows stay, marked
    seed_only, and every read path answers as for deleted checkpoints; deleting r2, which
    nothing builds on, removes it entirely."""
    async with open_saver(saver_factory, dsn) as u:
        runs = ["r1", "r1", "r2", "r2"]
        chain = await put_chain(
            u, "D", 4,
            metadata=lambda i: {
                "step": i, "run_id": runs[i], "counters_since_delta_snapshot": {"obj": [i, i]}
            },
            values=lambda i: {"obj": {"seed": 1} if i == 0 else None},
        )
        for c in chain:
            await u.put_writes(c, [("obj", c["configurable"]["checkpoint_id"])], "t", "")
        ids = [c["configurable"]["checkpoint_id"] for c in chain]
        parents = [None, *ids[:-1]]
        latest = chain[-1]
        before = await u.history(latest, ["obj"])
        r2_before = [await u.get_tuple(c) for c in chain[2:]]
        await u.delete_for_runs(["r1"])
        # every row stays as it was (parents too); r1's are marked seed_only
        assert stored_checkpoints(dsn, "D") == {
            i: ("", p, True if n < 2 else None)
            for n, (i, p) in enumerate(zip(ids, parents, strict=True))
        }
        left = await u.list(cfg("D"))
        assert [t.config["configurable"]["checkpoint_id"] for t in left] == [ids[3], ids[2]]
        assert [t.metadata["run_id"] for t in left] == ["r2", "r2"]
        # r2's checkpoints read as before: r2's first still names its parent, of r1
        assert [await u.get_tuple(c) for c in chain[2:]] == r2_before
        assert left[-1].parent_config == cfg("D", "", ids[1])
        for c in chain[:2]:  # r1 reads as deleted
            assert await u.get_tuple(c) is None
            assert await u.history(c, ["obj"]) == {"obj": {"writes": []}}
            assert await u.keepset(c, ["obj"]) == set()
        assert await u.history(latest, ["obj"]) == before
        assert await u.keepset(latest, ["obj"]) == set(ids)  # through r1's seed-only rows
        await u.delete_for_runs(["r2"])
        # r2 is gone entirely; r1's seed-only rows stay behind, and D reads as empty
        assert stored_checkpoints(dsn, "D") == {
            ids[0]: ("", None, True), ids[1]: ("", ids[0], True)
        }
        assert await u.list(cfg("D")) == []
        assert await u.get_tuple(cfg("D")) is None
        assert table_counts(dsn, "D")["checkpoint_writes"] == 2
        assert orphan_blobs(dsn) == []


# --------------------------------------------------------------------------- copy


async def test_copy_thread(dsn: str, saver_factory: SaverFactory) -> None:
    async with open_saver(saver_factory, dsn) as u:
        for ns in ("", "sub:1", "sub:2|inner:3"):
            chain = await put_chain(u, "src", 3, ns=ns)
            await u.put_writes(chain[-1], [("obj", {"p": ns}), (ERROR, "boom")], "t", "~x")
            await u.put_writes(chain[0], [("obj", {"old": 1})], "t0", "")
        await put_chain(u, "other", 2)
        src = table_counts(dsn, "src")
        await u.copy_thread("src", "dst")
        assert table_counts(dsn, "dst") == src
        a = await u.list({"configurable": {"thread_id": "src"}})
        b = await u.list({"configurable": {"thread_id": "dst"}})
        assert len(a) == 9
        assert [strip_thread(t) for t in a] == [strip_thread(t) for t in b]
        for t in b:
            assert t.config["configurable"]["thread_id"] == "dst"
            got = await u.get_tuple(t.config)
            assert got is not None and strip_thread(got) == strip_thread(t)
            h_src = await u.history(
                {"configurable": {**t.config["configurable"], "thread_id": "src"}},
                ["obj", "num"],
            )
            assert await u.history(t.config, ["obj", "num"]) == h_src
        # an existing target is refused and left alone
        snap = table_snapshot(dsn)
        with pytest.raises(ValueError, match="already"):
            await u.copy_thread("other", "dst")
        with pytest.raises(ValueError):
            await u.copy_thread("src", "src")
        assert table_snapshot(dsn) == snap
        # the source is untouched by deleting the copy
        await u.delete_thread("dst")
        assert table_counts(dsn, "src") == src


# --------------------------------------------------------------------------- prune


async def test_prune_keep_latest_and_delete(dsn: str, saver_factory: SaverFactory) -> None:
    async with open_saver(saver_factory, dsn) as u:
        latest: dict[tuple[str, str], CheckpointTuple | None] = {}
        for tid in ("A", "B"):
            for ns in ("", "sub:1"):
                chain = await put_chain(u, tid, 4, ns=ns)
                await u.put_writes(chain[-1], [("obj", {"pending": tid + ns})], "task", "~p")
                await u.put_writes(chain[-2], [("obj", {"old": 1})], "task", "~p")
                latest[(tid, ns)] = await u.get_tuple(chain[-1])
        b_before = table_counts(dsn, "B")
        stats = await u.prune(["A"], strategy="keep_latest")
        # no DeltaChannel: nothing is kept as a seed
        assert (stats.threads, stats.checkpoints, stats.hidden) == (1, 6, 0)
        a_left = await u.list({"configurable": {"thread_id": "A"}})
        assert len(a_left) == 2
        for t in a_left:
            ref = latest[("A", t.config["configurable"]["checkpoint_ns"])]
            assert ref is not None
            assert t.config == ref.config
            assert t.checkpoint == ref.checkpoint
            assert t.metadata == ref.metadata
            assert t.pending_writes == ref.pending_writes
            # its parent pointer is left as it was: the parent reads as deleted
            assert ref.parent_config is not None
            assert t.parent_config == ref.parent_config
            assert await u.get_tuple(t.parent_config) is None
        assert stored_checkpoints(dsn, "A") == {
            ref.config["configurable"]["checkpoint_id"]: (
                ns, ref.parent_config["configurable"]["checkpoint_id"], None
            )
            for (t, ns), ref in latest.items()
            if t == "A" and ref is not None and ref.parent_config is not None
        }
        assert table_counts(dsn, "A") == {
            "checkpoints": 2, "checkpoint_blobs": 2, "checkpoint_writes": 2
        }
        assert orphan_blobs(dsn) == []
        assert table_counts(dsn, "B") == b_before
        await u.prune(["B", "nope"], strategy="delete")
        assert table_counts(dsn, "B") == {
            "checkpoints": 0, "checkpoint_blobs": 0, "checkpoint_writes": 0
        }
        assert len(await u.list(None)) == 2
        await u.prune([], strategy="keep_latest")
        await u.prune([], strategy="delete")
        await u.prune(["A"])  # default keep_latest; idempotent
        assert len(await u.list(None)) == 2


async def test_prune_keep_latest_keeps_what_delta_threads_need(
    dsn: str, saver_factory: SaverFactory
) -> None:
    """keep_latest used to refuse DeltaChannel threads (DeltaPruneError); it now keeps
    the checkpoints back to the nearest stored value of each DeltaChannel: the latest
    visible, the older ones only as seeds (seed_only: they read as deleted)."""
    async with open_saver(saver_factory, dsn) as u:
        await put_chain(u, "plain", 3)
        # "m" is stored at checkpoint 1 only, later checkpoints bump its version with
        # no stored value (a DeltaChannel between snapshots)
        chain = await put_chain(
            u, "delta", 5,
            metadata=lambda i: {"step": i, "counters_since_delta_snapshot": {"m": [i, i]}},
            values=lambda i: {"m": [i] if i == 1 else None, "num": i},
        )
        for c in chain:
            await u.put_writes(c, [("m", c["configurable"]["checkpoint_id"])], "task", "~p")
        latest = chain[-1]
        before = await u.history(latest, ["m"])
        needed = {c["configurable"]["checkpoint_id"] for c in chain[1:]}
        assert await u.keepset(latest, ["m"]) == needed
        assert await u.keepset(cfg("delta"), ["m", "m"]) == needed  # the latest, by default
        assert await u.keepset(latest, []) == {latest["configurable"]["checkpoint_id"]}
        assert await u.keepset(cfg("delta", "", "nope"), ["m"]) == set()
        latest_before = await u.get_tuple(latest)
        stats = await u.prune(["delta", "plain"], strategy="keep_latest")
        assert stats.threads == 2 and stats.checkpoints == 1 + 2
        assert stats.hidden == 3  # the 3 seeds of "delta"'s latest; none of "plain"
        ids = [c["configurable"]["checkpoint_id"] for c in chain]
        # the keep-set stays in the table, parents as they were (the oldest kept still
        # names the deleted root); all but the latest are marked seed_only
        assert stored_checkpoints(dsn, "delta") == {
            ids[i]: ("", ids[i - 1], None if i == 4 else True) for i in range(1, 5)
        }
        listed = await u.list(cfg("delta"))
        assert [t.config["configurable"]["checkpoint_id"] for t in listed] == [ids[4]]
        assert await u.get_tuple(latest) == latest_before  # parent_config as before
        for c in chain[:4]:  # the seeds and the deleted root read as deleted
            assert await u.get_tuple(c) is None
            assert await u.history(c, ["m"]) == {"m": {"writes": []}}
            assert await u.keepset(c, ["m"]) == set()
        assert await u.history(latest, ["m"]) == before
        assert await u.keepset(latest, ["m"]) == needed
        assert table_counts(dsn, "plain")["checkpoints"] == 1
        again = await u.prune(["delta"], strategy="keep_latest")  # idempotent
        assert (again.checkpoints, again.hidden) == (0, 0)
        assert await u.history(latest, ["m"]) == before
        assert (await u.prune(["delta"], strategy="delete_all")).checkpoints == 4
        assert table_counts(dsn, "delta")["checkpoints"] == 0


# --------------------------------------------------------------------------- serde


async def test_encrypted_serializer_round_trip(dsn: str, saver_factory: SaverFactory) -> None:
    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef")
    async with open_saver(saver_factory, dsn, serde=serde) as u:
        chain = await put_chain(
            u, "enc", 3,
            values=lambda i: {"secret": {"text": f"plaintext-marker-{i}"}, "n": i},
        )
        await u.put_writes(chain[-1], [("secret", {"text": "write-marker"})], "t", "~p")
        for i, c in enumerate(chain):
            t = await u.get_tuple(c)
            assert t is not None
            assert t.checkpoint["channel_values"] == {
                "secret": {"text": f"plaintext-marker-{i}"}, "n": i
            }
        t = await u.get_tuple(chain[-1])
        assert t is not None and t.pending_writes == [("t", "secret", {"text": "write-marker"})]
        child = await u.put(chain[-1], make_checkpoint({"n": 9}), {"step": 9}, {})
        h = await u.history(child, ["secret"])
        assert h["secret"] == {
            "seed": {"text": "plaintext-marker-2"},
            "writes": [("t", "secret", {"text": "write-marker"})],
        }
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT type, blob FROM checkpoint_blobs UNION ALL "
            "SELECT type, blob FROM checkpoint_writes"
        ).fetchall()
    assert len(rows) == 4
    for typ, blob in rows:
        assert "aes" in typ, typ
        assert b"marker" not in bytes(blob)


# --------------------------------------------------------------------------- schema


SCHEMA = "Delta Schema"


async def test_schema_keeps_everything_out_of_public(
    empty_dsn: str, saver_factory: SaverFactory
) -> None:
    if saver_factory.conn_kind == "pipeline":
        # setup() itself on a pipeline saver is covered by test_setup_on_every_kind
        with psycopg.connect(empty_dsn, autocommit=True) as conn:
            migrate(conn, schema=SCHEMA)
    async with open_saver(saver_factory, empty_dsn, schema=SCHEMA) as u:
        if saver_factory.conn_kind != "pipeline":
            await u.setup()
            await u.setup()  # second run: no-op
        chain = await put_chain(u, "t", 3)
        await u.put_writes(chain[-1], [("obj", {"k": 1})], "task", "~p")
        t = await u.get_tuple(cfg("t"))
        assert t is not None and t.config == chain[-1]
        assert t.pending_writes == [("task", "obj", {"k": 1})]
        assert len(await u.list(cfg("t"))) == 3
        h = await u.history(t.config, ["obj"])
        assert h["obj"]["seed"] == {"i": 1, "xs": [0]}
        await u.copy_thread("t", "t2")
        await u.delete_for_runs(["none"])
        await u.prune(["t2"], strategy="keep_latest")
        assert len(await u.list(cfg("t2"))) == 1
        await u.delete_thread("t2")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        tables = {r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (SCHEMA,)
        )}
        assert tables == {"checkpoints", "checkpoint_blobs", "checkpoint_writes",
                          "checkpoint_migrations", "langgraph_delta_migrations",
                          "checkpoint_epochs"}
        public = conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public'"
        ).fetchall()
        assert public == []
        idx = {r[0] for r in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s", (SCHEMA,)
        )}
        assert {"checkpoints_pkey", "checkpoint_blobs_pkey", "checkpoint_writes_pkey"} <= idx
        assert table_counts(empty_dsn, schema=SCHEMA)["checkpoints"] == 3


# --------------------------------------------------------------------------- bad input


async def test_bad_input_gives_clear_errors(dsn: str, saver_factory: SaverFactory) -> None:
    async with open_saver(saver_factory, dsn) as u:
        (c,) = await put_chain(u, "t", 1)
        with pytest.raises(ValueError, match="thread_id"):
            await u.get_tuple({"configurable": {}})
        with pytest.raises(ValueError, match="thread_id"):
            await u.get_tuple({})
        with pytest.raises(ValueError, match="thread_id"):
            await u.put({"configurable": {"checkpoint_ns": ""}}, make_checkpoint({"a": 1}),
                        {}, {})
        with pytest.raises(ValueError, match="thread_id"):
            await u.list({"configurable": {"checkpoint_ns": ""}})
        with pytest.raises(ValueError, match="checkpoint_id"):
            await u.put_writes(cfg("t"), [("a", 1)], "task")
        with pytest.raises(TypeError, match="str"):
            await u.prune("t")
        with pytest.raises(ValueError, match="bogus"):
            await u.prune(["t"], strategy="bogus")
        with pytest.raises(TypeError, match="str"):
            await u.delete_for_runs("run")
        with pytest.raises(TypeError, match="str"):
            await u.history(c, "abc")
        assert await u.history(c, []) == {}
        # the saver still works after every refusal, and nothing was touched
        t = await u.get_tuple(c)
        assert t is not None and t.config == c
    with pytest.raises(TypeError, match="Connection"):
        DeltaPostgresSaver("postgresql://nowhere")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Connection"):
        AsyncDeltaPostgresSaver("postgresql://nowhere")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="schema"):
        with psycopg.connect(dsn) as conn:
            DeltaPostgresSaver(conn, schema="")


# --------------------------------------------------------------------------- from_conn_string


OPTIONS: dict[str, dict[str, Any]] = {
    "default": {},
    "pool": {"pool_size": 3},
    "pipeline": {"pipeline": True},
    "no-prepare": {"prepare_threshold": None},
    "pool-no-prepare": {"pool_size": 2, "prepare_threshold": None},
}


async def _exercise(u: Uniform, tid: str) -> None:
    # more than prepare_threshold (5) runs of each statement
    chain = await put_chain(u, tid, 8)
    for i, c in enumerate(chain):
        await u.put_writes(c, [("obj", {"w": i})], "task", "~p")
        t = await u.get_tuple(c)
        assert t is not None and t.pending_writes == [("task", "obj", {"w": i})]
        assert t.checkpoint["channel_values"]["num"] == i
        h = await u.history(c, ["obj"])
        if i:
            assert h["obj"] == {"seed": {"i": i - 1, "xs": list(range(i - 1))},
                                "writes": [("task", "obj", {"w": i - 1})]}
    assert len(await u.list(cfg(tid))) == 8


@pytest.mark.parametrize("opts", list(OPTIONS), ids=list(OPTIONS))
@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_from_conn_string(dsn: str, flavour: str, opts: str) -> None:
    kw = OPTIONS[opts]
    if flavour == "sync":
        with DeltaPostgresSaver.from_conn_string(dsn, **kw) as s:
            await _exercise(Uniform(s), "t")
    else:
        async with AsyncDeltaPostgresSaver.from_conn_string(dsn, **kw) as a:
            await _exercise(Uniform(a), "t")


async def test_setup_on_every_kind(empty_dsn: str, saver_factory: SaverFactory) -> None:
    """setup() migrates an empty database through any saver kind, and again is a no-op."""
    async with open_saver(saver_factory, empty_dsn) as u:
        await u.setup()
        await u.setup()
        await _exercise(u, "t")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        ledger = conn.execute("SELECT name FROM langgraph_delta_migrations ORDER BY version")
        assert [r[0] for r in ledger] == [m.name for m in discover()]


async def test_from_conn_string_rejects_pipeline_with_pool(dsn: str) -> None:
    with pytest.raises(ValueError, match="pipeline"):
        with DeltaPostgresSaver.from_conn_string(dsn, pipeline=True, pool_size=2):
            pass
    with pytest.raises(ValueError, match="pipeline"):
        async with AsyncDeltaPostgresSaver.from_conn_string(dsn, pipeline=True, pool_size=2):
            pass


# --------------------------------------------------------------------------- concurrency


async def test_async_concurrent_calls(dsn: str, async_factory: SaverFactory) -> None:
    """Many concurrent aput / aput_writes / aget_tuple / history calls on one saver."""
    async with async_factory.aio(dsn) as s:
        u = Uniform(s)

        async def thread(n: int) -> list[RunnableConfig]:
            chain = await put_chain(u, f"c{n}", 3)
            await u.put_writes(chain[-1], [("obj", n)], f"task{n}", "~p")
            return chain

        chains = await asyncio.gather(*(thread(n) for n in range(20)))
        configs = [c for chain in chains for c in chain]
        tuples = await asyncio.gather(*(s.aget_tuple(c) for c in configs))
        hists = await asyncio.gather(
            *(s.aget_delta_channel_history(config=c, channels=["obj", "num"]) for c in configs)
        )
        latest = await asyncio.gather(*(s.aget_tuple(cfg(f"c{n}")) for n in range(20)))
        # each concurrent answer, seeds included, is the answer of the same call made
        # alone (one at a time, on a saver of its own: no cache shared with the gather)
        async with async_factory.aio(dsn) as alone_saver:
            alone = [
                await alone_saver.aget_delta_channel_history(config=c, channels=["obj", "num"])
                for c in configs
            ]
    assert hists == alone
    with official_saver(dsn) as off:
        assert hists == [
            off.get_delta_channel_history(config=c, channels=["obj", "num"]) for c in configs
        ]
    # every checkpoint stores both channels: the seed is the parent's value (none at
    # the root), the parent's own writes none
    for n in range(20):
        assert hists[3 * n] == {"obj": {"writes": []}, "num": {"writes": []}}
        for i in (1, 2):
            parent = tuples[3 * n + i - 1]
            assert parent is not None
            want = {
                ch: {"writes": [], "seed": parent.checkpoint["channel_values"][ch]}
                for ch in ("obj", "num")
            }
            assert hists[3 * n + i] == want, (n, i)
    for c, t in zip(configs, tuples, strict=True):
        assert t is not None and t.config == c
    for n, t in enumerate(latest):
        assert t is not None and t.pending_writes == [(f"task{n}", "obj", n)]
        assert t.config == chains[n][-1]
    assert table_counts(dsn)["checkpoints"] == 60
