"""get_delta_channel_history at the driver: one statement per call, collation-proof
ordering, and bad data that fails fast instead of hanging."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint, writes_sort_key
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from psycopg import pq

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver, HistoryError
from langgraph_delta_postgres.migrate import migrate
from tests.graph._util import canon_history, cfg, official_saver
from tests.plugins.postgres import PgServer

CHANNELS4 = ["a", "b", "c", "d"]


def build_chain(
    saver: Any, thread: str, depth: int, channels: list[str], *, descending: bool = False
) -> list[str]:
    """A chain of ``depth + 1`` checkpoints, a write per channel at each, no seeds: every
    history call on the head walks to the root. ``descending``: every child's id sorts
    below its parent's (each step written by a worker whose clock is further behind)."""
    ids: list[str] = []
    parent: str | None = None
    versions: dict[str, str] = {}
    made = sorted((str(uuid6()) for _ in range(depth + 1)), reverse=descending)
    for i in range(depth + 1):
        cp = empty_checkpoint()
        cp["id"] = made[i]
        new = {ch: f"{i + 1:032}.0" for ch in channels}
        versions.update(new)
        cp["channel_versions"] = dict(versions)
        saved = saver.put(cfg(thread, "", parent), cp, {"source": "loop", "step": i}, new)
        saver.put_writes(saved, [(ch, i) for ch in channels], f"task{i}", "")
        parent = cp["id"]
        ids.append(parent)
    return ids


# ------------------------------------------------------------------ (a) statement count


class CountingCursor(psycopg.Cursor[Any]):
    executed: list[str] = []

    def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
        CountingCursor.executed.append(str(query))
        return super().execute(query, params, **kw)

    def executemany(self, query: Any, params_seq: Any, **kw: Any) -> Any:
        CountingCursor.executed.append(str(query))
        return super().executemany(query, params_seq, **kw)


@contextlib.contextmanager
def traced(conn: psycopg.Connection[Any]) -> Iterator[list[str]]:
    """libpq protocol trace of ``conn``; yields the list of frontend messages (filled on
    exit): one ``Query`` per simple statement, one ``Execute`` per extended one."""
    msgs: list[str] = []
    with tempfile.TemporaryFile("w+") as f:
        conn.pgconn.trace(f.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield msgs
        finally:
            conn.pgconn.untrace()
        f.seek(0)
        for line in f:
            parts = line.split("\t")
            if len(parts) >= 3 and parts[0] == "F":
                msgs.append(parts[2].split(" ")[0])


@pytest.mark.parametrize("prepare_threshold", [None, 0])
def test_one_statement_per_history_call(dsn: str, prepare_threshold: int | None) -> None:
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=prepare_threshold) as conn:
        saver = DeltaPostgresSaver(conn)
        shallow = build_chain(saver, "shallow", 1, CHANNELS4)
        deep = build_chain(saver, "deep", 2000, CHANNELS4)
        conn.cursor_factory = CountingCursor
        cases = []
        for thread, ids in (("shallow", shallow), ("deep", deep)):
            for chans in (["a"], CHANNELS4):
                cases.append((cfg(thread, "", ids[-1]), chans, len(ids) - 1))
                cases.append((cfg(thread), chans, len(ids) - 1))
                cases.append((cfg(thread, "", ids[len(ids) // 2]), chans, len(ids) // 2))
        for config, chans, n_writes in cases:
            for _ in range(2):  # the second call may run a prepared statement
                CountingCursor.executed.clear()
                with traced(conn) as msgs:
                    got = saver.get_delta_channel_history(config=config, channels=chans)
                assert len(CountingCursor.executed) == 1, (config, chans)
                statements = [m for m in msgs if m in ("Query", "Execute")]
                assert statements in (["Execute"], ["Query"]), (config, chans, msgs)
                assert msgs.count("Parse") <= 1, msgs
                assert sorted(got) == sorted(chans)
                for ch in chans:
                    assert [w[2] for w in got[ch]["writes"]] == list(range(n_writes))
                    assert "seed" not in got[ch]


async def test_one_statement_per_async_history_call(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = build_chain(DeltaPostgresSaver(conn), "deep", 300, CHANNELS4)

    class ACounting(psycopg.AsyncCursor[Any]):
        executed: list[str] = []

        async def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
            ACounting.executed.append(str(query))
            return await super().execute(query, params, **kw)

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        aconn.cursor_factory = ACounting
        saver = AsyncDeltaPostgresSaver(aconn)
        for config in (cfg("deep"), cfg("deep", "", ids[-1]), cfg("deep", "", ids[1])):
            for chans in (["a"], CHANNELS4):
                ACounting.executed.clear()
                got = await saver.aget_delta_channel_history(config=config, channels=chans)
                assert len(ACounting.executed) == 1
                assert all(len(got[ch]["writes"]) >= 1 for ch in chans)


# ------------------------------------------------------------------ (b) collation

PATHS = ["a", "B", "b", "ä", "~", "", "A", "Z", "é", "aa", "a b", "日本", "_x", "-y"]


def _non_c_database(pg_server: PgServer) -> str:
    """A database whose default collation orders text unlike code points."""
    attempts: list[dict[str, str]] = [
        {"LC_COLLATE": "'en_US.UTF-8'", "LC_CTYPE": "'en_US.UTF-8'"},
        {"LC_COLLATE": "'en_US.utf8'", "LC_CTYPE": "'en_US.utf8'"},
        {"LOCALE_PROVIDER": "icu", "ICU_LOCALE": "'en-US'", "LOCALE": "'C.UTF-8'"},
    ]
    try:
        out = subprocess.run(["locale", "-a"], capture_output=True, text=True, timeout=5).stdout
    except OSError:
        out = ""
    for loc in out.split():
        if loc.lower().endswith(("utf8", "utf-8")) and not loc.startswith(("C", "POSIX")):
            attempts.append({"LC_COLLATE": f"'{loc}'", "LC_CTYPE": f"'{loc}'"})
    errors = []
    for opts in attempts:
        try:
            return pg_server.create_db(template="template0", ENCODING="'UTF8'", **opts)
        except psycopg.Error as e:
            errors.append(f"{opts}: {e}")
    why = (
        "this Postgres server has no non-C collation to test with (no ICU, no en_US "
        "locale); generate one, e.g. `localedef -i en_US -f UTF-8 en_US.UTF-8` (.ci/run "
        "does), and restart the server.\n" + "\n".join(errors)
    )
    if os.environ.get("CI"):
        pytest.fail(why)  # CI provisions the locale: never skipped there
    pytest.skip(why)


@pytest.fixture
def non_c_dsn(pg_server: PgServer) -> Iterator[str]:
    name = _non_c_database(pg_server)
    try:
        d = pg_server.dsn_for(name)
        with psycopg.connect(d, autocommit=True) as conn:
            migrate(conn)
        yield d
    finally:
        pg_server.drop_db(name)


def test_non_c_collation_keeps_writes_sort_key_order(non_c_dsn: str) -> None:
    with psycopg.connect(non_c_dsn, autocommit=True) as conn:
        # the database really sorts these unlike Python, or the test proves nothing
        db_order = conn.execute(
            "SELECT array_agg(p ORDER BY p) FROM unnest(%s::text[]) AS p", (PATHS,)
        ).fetchone()[0]  # type: ignore[index]
        assert db_order != sorted(PATHS), db_order
        saver = DeltaPostgresSaver(conn)
        mem = InMemorySaver()
        results = []
        for s in (saver, mem):
            cp = empty_checkpoint()
            cp["id"] = str(uuid6())
            cp["channel_versions"] = {"c": "1"}
            parent = s.put(cfg("coll"), cp, {"source": "loop", "step": 0}, {"c": "1"})
            # call order deliberately unrelated to the expected order; task ids that
            # disagree with the path order; same path twice (tie broken by task_id)
            for i, path in enumerate(reversed(PATHS)):
                s.put_writes(parent, [("c", f"{path}|0"), ("c", f"{path}|1")], f"T{i:02}", path)
            s.put_writes(parent, [("c", "a|dup")], "T00-dup", "a")
            s.put_writes(parent, [("c", "a|Dup")], "t00", "a")
            cp2 = empty_checkpoint()
            cp2["id"] = str(uuid6())
            cp2["channel_versions"] = {"c": "2"}
            child = s.put(parent, cp2, {"source": "loop", "step": 1}, {"c": "2"})
            hist = s.get_delta_channel_history(config=child, channels=["c"])
            tup = s.get_tuple(parent)
            assert tup is not None
            results.append((hist, tup.pending_writes))
        (hist, pending), (mem_hist, mem_pending) = results
        rows = conn.execute(
            "SELECT task_id, task_path, idx FROM checkpoint_writes WHERE thread_id = 'coll'"
        ).fetchall()
        expected_keys = sorted(rows, key=lambda r: writes_sort_key(r[1], r[0], r[2]))
        assert [w[0] for w in hist["c"]["writes"]] == [r[0] for r in expected_keys]
        assert hist == mem_hist
        assert pending == mem_pending == hist["c"]["writes"]
        with official_saver(non_c_dsn) as off:
            assert canon_history(
                off.get_delta_channel_history(config=cfg("coll"), channels=["c"])
            ) == canon_history(hist)


# ------------------------------------------------------------------ (c) bad data


def test_cycle_in_parent_pointers_raises_fast(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        saver = DeltaPostgresSaver(conn)
        ids = build_chain(saver, "cyc", 6, ["a"])
        conn.execute("SET statement_timeout = '20s'")
        # root -> head: a cycle through every checkpoint
        conn.execute(
            "UPDATE checkpoints SET parent_checkpoint_id = %s WHERE thread_id = 'cyc' "
            "AND checkpoint_id = %s",
            (ids[-1], ids[0]),
        )
        for config in (cfg("cyc"), cfg("cyc", "", ids[3])):
            # the cycle check, not the depth guard (max_history_depth=1e6): by message
            with pytest.raises(HistoryError, match="its own ancestor"):
                saver.get_delta_channel_history(config=config, channels=["a", "zz"])
        # a self-loop
        build_chain(saver, "self", 2, ["a"])
        conn.execute(
            "UPDATE checkpoints SET parent_checkpoint_id = checkpoint_id WHERE thread_id = "
            "'self' AND parent_checkpoint_id IS NULL"
        )
        with pytest.raises(HistoryError, match="its own ancestor"):
            saver.get_delta_channel_history(config=cfg("self"), channels=["a"])
        # a seed before the cycle closes stops the walk: no error needed
        conn.execute(
            "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, '{channel_values,a}', "
            "'5') WHERE thread_id = 'cyc' AND checkpoint_id = %s",
            (ids[4],),
        )
        conn.execute("UPDATE checkpoints SET stored_channels = NULL WHERE thread_id = 'cyc'")
        got = saver.get_delta_channel_history(config=cfg("cyc"), channels=["a"])
        assert got == {"a": {"writes": [("task4", "a", 4), ("task5", "a", 5)], "seed": 5}}


@pytest.mark.parametrize("cache_bytes", [0, 1 << 20])
def test_descending_ids_are_followed_and_short_cycles_fail_fast(dsn: str, cache_bytes: int) -> None:
    """Parent pointers are the only order (langgraph#8550): a chain whose every child
    sorts below its parent (the worst case for the cycle check: every step is an "up"
    step) answers as InMemorySaver does; a cycle of three is reported in milliseconds."""
    from langgraph.checkpoint.memory import InMemorySaver

    mem = InMemorySaver()
    mem_ids = build_chain(mem, "desc", 400, ["a", "b"], descending=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        saver = DeltaPostgresSaver(conn, cache_bytes=cache_bytes)
        ids = build_chain(saver, "desc", 400, ["a", "b"], descending=True)
        assert ids == sorted(ids, reverse=True)
        for k in (400, 250, 3, 0):
            got = saver.get_delta_channel_history(
                config=cfg("desc", "", ids[k]), channels=["a", "b"]
            )
            want = mem.get_delta_channel_history(
                config=cfg("desc", "", mem_ids[k]), channels=["a", "b"]
            )
            assert got == want
            assert len(got["a"]["writes"]) == k
        # latest is still the highest id in the namespace: here the root
        assert saver.get_delta_channel_history(config=cfg("desc"), channels=["a"]) == {
            "a": {"writes": []}
        }
        conn.execute(
            "UPDATE checkpoints SET parent_checkpoint_id = %s WHERE thread_id = 'desc' "
            "AND checkpoint_id = %s",
            (ids[300], ids[298]),
        )
        saver = DeltaPostgresSaver(conn, cache_bytes=cache_bytes)
        with pytest.raises(HistoryError, match="its own ancestor"):
            saver.get_delta_channel_history(config=cfg("desc", "", ids[301]), channels=["a"])
        # a target below the cycle does not meet it
        got = saver.get_delta_channel_history(config=cfg("desc", "", ids[297]), channels=["a"])
        assert len(got["a"]["writes"]) == 297


async def test_cycle_async_raises(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = build_chain(DeltaPostgresSaver(conn), "cyc", 4, ["a"])
        conn.execute(
            "UPDATE checkpoints SET parent_checkpoint_id = %s WHERE checkpoint_id = %s",
            (ids[-1], ids[0]),
        )
    async with AsyncDeltaPostgresSaver.from_conn_string(dsn) as saver:
        with pytest.raises(HistoryError, match="its own ancestor"):
            await saver.aget_delta_channel_history(config=cfg("cyc"), channels=["a"])


def test_missing_parent_row_answers_for_reachable_chain(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        saver = DeltaPostgresSaver(conn)
        ids = build_chain(saver, "gap", 8, ["a", "b"])
        conn.execute(
            "DELETE FROM checkpoints WHERE thread_id = 'gap' AND checkpoint_id = %s", (ids[3],)
        )
        got = saver.get_delta_channel_history(config=cfg("gap"), channels=["a", "b"])
        assert got["a"] == {"writes": [(f"task{i}", "a", i) for i in range(4, 8)]}
        assert got["b"] == {"writes": [(f"task{i}", "b", i) for i in range(4, 8)]}
        with official_saver(dsn) as off:
            for target in (cfg("gap"), cfg("gap", "", ids[5]), cfg("gap", "", ids[2])):
                assert saver.get_delta_channel_history(
                    config=target, channels=["a", "b"]
                ) == off.get_delta_channel_history(config=target, channels=["a", "b"])
        # the missing row as a target: nothing, no error
        assert saver.get_delta_channel_history(config=cfg("gap", "", ids[3]), channels=["a"]) == {
            "a": {"writes": []}
        }


def test_depth_guard(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        saver = DeltaPostgresSaver(conn)
        ids = build_chain(saver, "deep", 120, ["a"])
        full = saver.get_delta_channel_history(config=cfg("deep"), channels=["a"])
        assert len(full["a"]["writes"]) == 120
        # the guard bounds the database walk: a saver whose cache already holds the
        # chain does not walk it again, so take a fresh one
        saver = DeltaPostgresSaver(conn)
        saver.max_history_depth = 50
        with pytest.raises(HistoryError, match="deeper than max_history_depth=50"):
            saver.get_delta_channel_history(config=cfg("deep"), channels=["a"])
        # within the guard: fine
        got = saver.get_delta_channel_history(config=cfg("deep", "", ids[50]), channels=["a"])
        assert len(got["a"]["writes"]) == 50
        # a seed within the guard stops the walk before it: fine too
        conn.execute(
            "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, '{channel_values,a}', "
            "'\"s\"'), stored_channels = NULL WHERE thread_id = 'deep' AND checkpoint_id = %s",
            (ids[100],),
        )
        got = saver.get_delta_channel_history(config=cfg("deep"), channels=["a"])
        assert got == {
            "a": {"writes": [(f"task{i}", "a", i) for i in range(100, 120)], "seed": "s"}
        }
