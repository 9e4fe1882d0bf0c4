"""Every process answers the same (contract rule 15): a saver whose cache holds a chain
sees a write another process adds to one of its checkpoints after the checkpoint got a
child, in the same answer a saver without a cache gives.

The writer is another OS process (a second worker of a horizontally scaled deployment),
so nothing in this process's memory can learn of the write: only the statement can.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig

from langgraph_delta_postgres import AsyncDeltaPostgresSaver, DeltaPostgresSaver
from langgraph_delta_postgres.bench.rows import write_chain
from tests._config import cfg
from tests.graph._util import canon_history

CHANNELS = ["messages", "files"]


def _cfg(thread_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    return cfg(thread_id, checkpoint_id=checkpoint_id)


def put_writes_in_another_process(dsn: str, config: RunnableConfig, value: str) -> None:
    code = textwrap.dedent(
        """
        import sys, json
        from langgraph_delta_postgres import DeltaPostgresSaver
        dsn, config, value = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
        with DeltaPostgresSaver.from_conn_string(dsn) as s:
            s.put_writes(config, [("messages", [value])], task_id="late-" + value,
                         task_path="~z")
        """
    )
    import json

    subprocess.run(
        [sys.executable, "-c", code, dsn, json.dumps(config), value], check=True, timeout=120
    )


def _fresh(dsn: str, config: RunnableConfig) -> Any:
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as fresh:
        return canon_history(fresh.get_delta_channel_history(config=config, channels=CHANNELS))


def test_another_process_adds_a_write_to_a_cached_ancestor(dsn: str) -> None:
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        chain = write_chain(saver, "w2", 30, CHANNELS)
        head = _cfg("w2", chain.ids[-1])
        saver.get_delta_channel_history(config=head, channels=CHANNELS)
        saver.get_delta_channel_history(config=head, channels=CHANNELS)
        cache = saver.history_cache
        assert cache is not None and cache.chain_hits > 0, "the chain was never served cached"
        for i, at in enumerate((10, 28, 3)):  # deep, the target's parent, deeper again
            put_writes_in_another_process(dsn, _cfg("w2", chain.ids[at]), f"late{i}")
            got = canon_history(saver.get_delta_channel_history(config=head, channels=CHANNELS))
            assert got == _fresh(dsn, head)
            assert f"late{i}" in repr(got["messages"]), "the late write was not seen"
            hits = cache.chain_hits
            again = canon_history(saver.get_delta_channel_history(config=head, channels=CHANNELS))
            assert again == got
            assert cache.chain_hits > hits, "the cache did not serve the chain again"
        # and get_tuple's prefetch (the same walk) of the latest checkpoint
        put_writes_in_another_process(dsn, _cfg("w2", chain.ids[20]), "late-pre")
        assert saver.get_tuple(_cfg("w2")) is not None
        got = canon_history(saver.get_delta_channel_history(config=head, channels=CHANNELS))
        assert got == _fresh(dsn, head) and "late-pre" in repr(got["messages"])


async def test_another_process_adds_a_write_async(dsn: str) -> None:
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as writer:
        chain = write_chain(writer, "w2a", 20, CHANNELS)
    head = _cfg("w2a", chain.ids[-1])
    async with AsyncDeltaPostgresSaver.from_conn_string(dsn) as saver:
        await saver.aget_delta_channel_history(config=head, channels=CHANNELS)
        await saver.aget_delta_channel_history(config=head, channels=CHANNELS)
        put_writes_in_another_process(dsn, _cfg("w2a", chain.ids[5]), "late-a")
        got = canon_history(
            await saver.aget_delta_channel_history(config=head, channels=CHANNELS)
        )
    assert got == _fresh(dsn, head) and "late-a" in repr(got["messages"])


def _waiting_on_a_lock(dsn: str, pid: int) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
    return row is not None and row[0] == "Lock"


def _wait_for_lock(dsn: str, pid: int) -> None:
    deadline = time.monotonic() + 30
    while not _waiting_on_a_lock(dsn, pid):
        assert time.monotonic() < deadline, "the statement never waited on the lock"
        time.sleep(0.01)


def test_child_put_committed_first_then_write_to_its_parent(dsn: str) -> None:
    """The race of durability="async" on a pool: the child's put and the parent's
    put_writes run at once. The put commits while the write waits for the namespace's
    row; a reader caches the chain through the parent in between; the write then sees
    the child and marks the chain stale."""
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as s:
        chain = write_chain(s, "race", 12, CHANNELS)
    parent = chain.ids[-1]
    with psycopg.connect(dsn) as put_conn, psycopg.connect(dsn) as write_conn:
        putter = DeltaPostgresSaver(put_conn, cache_bytes=0)
        writer = DeltaPostgresSaver(write_conn, cache_bytes=0)
        put_conn.execute("SELECT 1")  # a transaction open: the saver's becomes a savepoint
        write_conn.execute("SELECT 1")
        child = write_chain(putter, "race", 1, CHANNELS, start=chain.branches[-1])
        done: list[Any] = []

        def write() -> None:
            writer.put_writes(_cfg("race", parent), [("messages", ["racing"])], "t-race")
            done.append(None)  # put_writes returned (its value: None)

        t = threading.Thread(target=write)
        t.start()
        _wait_for_lock(dsn, write_conn.info.backend_pid)
        put_conn.commit()  # the child's put lands; the write goes on
        t.join(timeout=30)
        assert not t.is_alive() and done == [None]
        # the write is not committed yet: a reader caches the chain through the parent
        head = _cfg("race", child.ids[-1])
        with DeltaPostgresSaver.from_conn_string(dsn) as reader:
            before = reader.get_delta_channel_history(config=head, channels=CHANNELS)
            reader.get_delta_channel_history(config=head, channels=CHANNELS)
            assert "racing" not in repr(before)
            write_conn.commit()
            got = canon_history(reader.get_delta_channel_history(config=head, channels=CHANNELS))
        assert got == _fresh(dsn, head) and "racing" in repr(got["messages"])


def test_write_to_the_last_put_holds_back_its_childs_put(dsn: str) -> None:
    """The other order: the write to the checkpoint just put locks the namespace's row,
    so the child's put waits for the write's commit and no reader sees the child
    without the write."""
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as s:
        chain = write_chain(s, "order", 12, CHANNELS)
    parent = chain.ids[-1]
    with psycopg.connect(dsn) as put_conn, psycopg.connect(dsn) as write_conn:
        writer = DeltaPostgresSaver(write_conn, cache_bytes=0)
        putter = DeltaPostgresSaver(put_conn, cache_bytes=0)
        put_conn.execute("SELECT 1")  # a transaction open: the saver's becomes a savepoint
        write_conn.execute("SELECT 1")
        writer.put_writes(_cfg("order", parent), [("messages", ["first"])], "t-first")
        got: list[Any] = []
        t = threading.Thread(
            target=lambda: got.append(
                write_chain(putter, "order", 1, CHANNELS, start=chain.branches[-1])
            )
        )
        t.start()
        _wait_for_lock(dsn, put_conn.info.backend_pid)
        write_conn.commit()
        t.join(timeout=30)
        assert not t.is_alive() and len(got) == 1
        put_conn.commit()
    head = _cfg("order", got[0].ids[-1])
    with DeltaPostgresSaver.from_conn_string(dsn) as reader:
        reader.get_delta_channel_history(config=head, channels=CHANNELS)
        answer = canon_history(reader.get_delta_channel_history(config=head, channels=CHANNELS))
    assert answer == _fresh(dsn, head) and "first" in repr(answer["messages"])


@pytest.mark.parametrize("late", [False, True])
def test_epoch_moves_only_for_late_writes(dsn: str, late: bool) -> None:
    """The common write (to the checkpoint just put) leaves the namespace's count alone,
    so caches keep their chains across a run's steps; a late one bumps it."""
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as s:
        chain = write_chain(s, "ep", 5, CHANNELS)
        target = chain.ids[1] if late else chain.ids[-1]
        with psycopg.connect(dsn) as conn:
            (before,) = conn.execute(
                "SELECT late_writes FROM checkpoint_epochs WHERE thread_id = 'ep'"
            ).fetchone() or (None,)
        s.put_writes(_cfg("ep", target), [("messages", ["x"])], "t-ep")
        with psycopg.connect(dsn) as conn:
            (after,) = conn.execute(
                "SELECT late_writes FROM checkpoint_epochs WHERE thread_id = 'ep'"
            ).fetchone() or (None,)
    assert before is not None
    assert after == (before + 1 if late else before)


def _late_count(dsn: str, thread_id: str) -> int | None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT late_writes FROM checkpoint_epochs WHERE thread_id = %s", (thread_id,)
        ).fetchone()
    return None if row is None else int(row[0])


class _AtIds:
    """A saver whose puts take the given checkpoint ids, in order."""

    def __init__(self, saver: DeltaPostgresSaver, ids: list[str]) -> None:
        self.saver, self.ids = saver, list(ids)

    def put(self, config: Any, checkpoint: Any, metadata: Any, versions: Any) -> Any:
        checkpoint["id"] = self.ids.pop(0)
        return self.saver.put(config, checkpoint, metadata, versions)

    def put_writes(self, *a: Any, **k: Any) -> None:
        self.saver.put_writes(*a, **k)


def test_write_before_its_checkpoints_put_leaves_the_count_alone(dsn: str) -> None:
    """LangGraph's tasks write to their checkpoint while its put (durability="async") may
    still wait for the previous one: no walk can have passed through a checkpoint without
    a row, so such a write keeps the caches' chains; once the checkpoint and a child are
    put, a cached reader answers as a fresh one, the early write included."""
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as s:
        chain = write_chain(s, "early", 5, CHANNELS)
    with psycopg.connect(dsn) as put_conn:
        put_conn.execute("SELECT 1")  # a transaction open, rolled back: only the ids stay
        kids = write_chain(DeltaPostgresSaver(put_conn, cache_bytes=0), "early", 2, CHANNELS,
                           start=chain.branches[-1])
        put_conn.rollback()
    before = _late_count(dsn, "early")
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        head = _cfg("early", chain.ids[-1])
        saver.get_delta_channel_history(config=head, channels=CHANNELS)
        saver.get_delta_channel_history(config=head, channels=CHANNELS)
        saver.put_writes(_cfg("early", kids.ids[0]), [("messages", ["EARLY-WRITE"])], "t-e")
        assert _late_count(dsn, "early") == before
        with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as other:
            again = write_chain(_AtIds(other, kids.ids), "early", 2,  # type: ignore[arg-type]
                                CHANNELS, start=chain.branches[-1])
        assert again.ids == kids.ids
        assert _late_count(dsn, "early") == before
        tip = _cfg("early", kids.ids[-1])
        first = canon_history(saver.get_delta_channel_history(config=tip, channels=CHANNELS))
        got = canon_history(saver.get_delta_channel_history(config=tip, channels=CHANNELS))
        assert first == got == _fresh(dsn, tip) and "EARLY-WRITE" in repr(got["messages"])


def test_write_waits_while_its_checkpoint_and_a_child_are_put(dsn: str) -> None:
    """The write's snapshot does not see its checkpoint, but the checkpoint and a child
    commit while it waits for the namespace's row: the snapshot cannot tell, so the write
    bumps the count, and a reader that cached the chain before the write committed
    re-reads it."""
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as s:
        chain = write_chain(s, "early2", 8, CHANNELS)
    with psycopg.connect(dsn) as put_conn, psycopg.connect(dsn) as write_conn:
        putter = DeltaPostgresSaver(put_conn, cache_bytes=0)
        writer = DeltaPostgresSaver(write_conn, cache_bytes=0)
        put_conn.execute("SELECT 1")
        write_conn.execute("SELECT 1")
        kids = write_chain(putter, "early2", 2, CHANNELS, start=chain.branches[-1])
        before = _late_count(dsn, "early2")
        done: list[Any] = []

        def write() -> None:
            writer.put_writes(_cfg("early2", kids.ids[0]), [("messages", ["waited"])],
                              "t-waited")
            done.append(None)  # put_writes returned (its value: None)

        t = threading.Thread(target=write)
        t.start()
        _wait_for_lock(dsn, write_conn.info.backend_pid)
        put_conn.commit()  # the checkpoint and its child land; the write goes on
        t.join(timeout=30)
        assert not t.is_alive() and done == [None]
        head = _cfg("early2", kids.ids[-1])
        with DeltaPostgresSaver.from_conn_string(dsn) as reader:
            reader.get_delta_channel_history(config=head, channels=CHANNELS)
            cached = reader.get_delta_channel_history(config=head, channels=CHANNELS)
            assert "waited" not in repr(cached)
            write_conn.commit()
            assert before is not None and _late_count(dsn, "early2") == before + 1
            got = canon_history(reader.get_delta_channel_history(config=head, channels=CHANNELS))
        assert got == _fresh(dsn, head) and "waited" in repr(got["messages"])


def _official_put_writes(dsn: str, config: RunnableConfig, value: str) -> None:
    """A write by the official saver (langgraph-checkpoint-postgres): it knows nothing of
    checkpoint_epochs; only the database can count it."""
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(dsn) as official:
        official.put_writes(config, [("messages", [value])], task_id="official-" + value,
                            task_path="~z")


def test_official_saver_adds_a_write_to_a_cached_ancestor(dsn: str) -> None:
    """Contract rule 15 whoever writes: the official saver as the other writer needs no
    ``cache_bytes=0``."""
    with DeltaPostgresSaver.from_conn_string(dsn) as saver:
        chain = write_chain(saver, "off", 20, CHANNELS)
        head = _cfg("off", chain.ids[-1])
        saver.get_delta_channel_history(config=head, channels=CHANNELS)
        saver.get_delta_channel_history(config=head, channels=CHANNELS)
        for i, at in enumerate((7, 18)):
            _official_put_writes(dsn, _cfg("off", chain.ids[at]), f"off{i}")
            got = canon_history(saver.get_delta_channel_history(config=head, channels=CHANNELS))
            assert got == _fresh(dsn, head) and f"off{i}" in repr(got["messages"])


@pytest.mark.parametrize("reputter", ["ours", "official"])
def test_reput_then_late_write_is_seen(dsn: str, reputter: str) -> None:
    """Another process puts an existing checkpoint again after it has children; a caching
    reader walks through it; a write is then added to it: the reader sees the write (a
    re-put does not make a checkpoint the namespace's last put)."""
    from langgraph.checkpoint.postgres import PostgresSaver

    thread = f"reput-{reputter}"
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as s:
        chain = write_chain(s, thread, 12, CHANNELS)
        again = s.get_tuple(_cfg(thread, chain.ids[5]))
    assert again is not None
    ctx = (PostgresSaver.from_conn_string(dsn) if reputter == "official"
           else DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0))
    with ctx as other, DeltaPostgresSaver.from_conn_string(dsn) as reader:
        parent_cfg = _cfg(thread, again.parent_config["configurable"]["checkpoint_id"])  # type: ignore[index]
        other.put(parent_cfg, again.checkpoint, again.metadata, {})
        head = _cfg(thread, chain.ids[-1])
        reader.get_delta_channel_history(config=head, channels=CHANNELS)
        reader.get_delta_channel_history(config=head, channels=CHANNELS)
        other.put_writes(_cfg(thread, chain.ids[5]), [("messages", ["after-reput"])],
                         task_id="t-reput", task_path="~z")
        got = canon_history(reader.get_delta_channel_history(config=head, channels=CHANNELS))
    assert got == _fresh(dsn, head) and "after-reput" in repr(got["messages"])


def test_writes_to_the_heads_of_two_branches_are_not_late(dsn: str) -> None:
    """Concurrent runs of one thread (or forks) put children of one parent: a write to
    either head (a recent checkpoint without a child) is not late, though the other was
    put last; a write to the parent (it has children) is (migrations/0007: recent and
    parents). Before, every such write counted as late."""
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as s:
        chain = write_chain(s, "br", 4, CHANNELS)
        one = write_chain(s, "br", 1, CHANNELS, start=chain.branches[-1])
        two = write_chain(s, "br", 1, CHANNELS, start=chain.branches[-1])
        assert one.ids[-1] != two.ids[-1]
        before = _late_count(dsn, "br")
        assert before is not None
        s.put_writes(_cfg("br", one.ids[-1]), [("messages", ["to one"])], "t-one")
        s.put_writes(_cfg("br", two.ids[-1]), [("messages", ["to two"])], "t-two")
        assert _late_count(dsn, "br") == before
        s.put_writes(_cfg("br", chain.ids[-1]), [("messages", ["to the parent"])], "t-p")
        assert _late_count(dsn, "br") == before + 1


def test_a_copy_forgets_its_recent_puts(dsn: str) -> None:
    """copy_thread inserts its checkpoints in one statement, in no causal order: the
    target's row forgets its recent puts, so a write to any copied checkpoint counts as
    late (a cache may hold a chain through it) until new puts fill the window."""
    with DeltaPostgresSaver.from_conn_string(dsn, cache_bytes=0) as s:
        chain = write_chain(s, "src", 5, CHANNELS)
        s.copy_thread("src", "dst")
        before = _late_count(dsn, "dst")
        s.put_writes(_cfg("dst", chain.ids[-1]), [("messages", ["to the copy"])], "t-c")
        assert _late_count(dsn, "dst") == (before or 0) + 1
        # a new put refills the window: its own writes are not late
        more = write_chain(s, "dst", 1, CHANNELS, start=chain.branches[-1])
        after = _late_count(dsn, "dst")
        s.put_writes(_cfg("dst", more.ids[-1]), [("messages", ["new head"])], "t-n")
        assert _late_count(dsn, "dst") == after
