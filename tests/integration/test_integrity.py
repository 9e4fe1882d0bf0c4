"""Integrity defects of issue 13 (race, fault and bad-input probes), each on real Postgres:
schema names, dead pooled connections, connect timeout, corrupt rows, missing tables."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import operator
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import langgraph_delta_postgres._connect as core
from langgraph_delta_postgres import (
    AsyncDeltaPostgresSaver,
    CorruptCheckpointError,
    DeltaPostgresSaver,
    SetupRequiredError,
)
from langgraph_delta_postgres.migrate import amigrate, migrate, status
from tests.graph._util import canon, official_saver
from tests.integration._helpers import cfg, open_saver, put_chain
from tests.plugins.savers import SaverFactory

# ---------------------------------------------------------------- 3: schema names

LONG_A = "tenant_" + "x" * 56 + "_a"  # 65 bytes: Postgres would keep the first 63
LONG_B = "tenant_" + "x" * 56 + "_b"  # same first 63 bytes as LONG_A
MAX_OK = "t" * 61 + "\u00e9"  # exactly 63 bytes in UTF-8
QUOTED = 'ten"ant'


async def test_schema_longer_than_63_bytes_is_refused_everywhere(empty_dsn: str) -> None:
    assert LONG_A[:63] == LONG_B[:63]
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        for name in (LONG_A, LONG_B, "s" * 63 + "\u00e9"):
            with pytest.raises(ValueError, match="63 bytes"):
                DeltaPostgresSaver(conn, schema=name)
            with pytest.raises(ValueError, match="63 bytes"):
                migrate(conn, schema=name)
            with pytest.raises(ValueError, match="63 bytes"):
                status(conn, schema=name)
        with pytest.raises(ValueError, match="63 bytes"):
            DeltaPostgresSaver.from_conn_string(empty_dsn, schema=LONG_A).__enter__()
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'tenant%'"
                            ).fetchone() == (0,)
    async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as aconn:
        with pytest.raises(ValueError, match="63 bytes"):
            AsyncDeltaPostgresSaver(aconn, schema=LONG_A)
        with pytest.raises(ValueError, match="63 bytes"):
            await amigrate(aconn, schema=LONG_B)


@pytest.mark.parametrize("schema", [MAX_OK, QUOTED])
def test_schema_names_postgres_keeps_whole_work(empty_dsn: str, schema: str) -> None:
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        st = status(conn, schema=schema)
        assert st.schema_missing and len(st.pending) > 0
        saver = DeltaPostgresSaver(conn, schema=schema)
        saver.setup()
        st = status(conn, schema=schema)
        assert not st.pending and not st.drifted and not st.schema_missing
        (c,) = put_chain_sync(saver, "t", 1)
        tup = saver.get_tuple(c)
        assert tup is not None and tup.checkpoint["channel_values"]["num"] == 0
        names = {r[0] for r in conn.execute("SELECT nspname FROM pg_namespace").fetchall()}
        assert schema in names


def put_chain_sync(saver: DeltaPostgresSaver, thread_id: str, n: int) -> list[Any]:
    out = []
    parent = cfg(thread_id)
    for i in range(n):
        cp = empty_checkpoint()
        cp["channel_values"] = {"num": i}
        cp["channel_versions"] = {"num": saver.get_next_version(None, None)}
        parent = saver.put(parent, cp, {"source": "loop", "step": i}, cp["channel_versions"])
        out.append(parent)
    return out


# ---------------------------------------------------------------- 4: dead pooled connections


def _terminate_app(admin_dsn: str, app: str) -> set[int]:
    """Terminate every backend of ``app`` and wait (up to 10 s each) until it is gone:
    the pids terminated, each one confirmed (pg_terminate_backend returned true)."""
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid, pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
            "WHERE application_name = %s",
            (app,),
        ).fetchall()
    assert rows and all(ok for _, ok in rows), rows
    return {pid for pid, _ in rows}


def _app_pids(admin_dsn: str, app: str) -> set[int]:
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,)
        ).fetchall()
    return {r[0] for r in rows}


def _with_app(dsn: str, app: str) -> str:
    params = conninfo_to_dict(dsn)
    params["application_name"] = app
    return make_conninfo(**params)  # type: ignore[arg-type]


def test_pool_replaces_connections_the_server_closed(dsn: str, pg_server: Any) -> None:
    app = f"lgdp_pool_check_sync_{uuid.uuid4().hex[:8]}"
    with DeltaPostgresSaver.from_conn_string(_with_app(dsn, app), pool_size=3) as saver:
        (c,) = put_chain_sync(saver, "t", 1)
        for _ in range(3):
            assert saver.get_tuple(c) is not None
        for attempt in range(2):  # a server restart, or a network reset, twice
            killed = _terminate_app(pg_server.admin_dsn, app)
            assert not _app_pids(pg_server.admin_dsn, app) & killed  # really gone
            for _ in range(4):  # at once: the pool must notice, not wait it out
                assert saver.get_tuple(c) is not None, attempt
            # answered by new connections the pool opened, none of the killed ones
            now = _app_pids(pg_server.admin_dsn, app)
            assert now and not now & killed, (attempt, now, killed)
        # a write whose connection broke runs again too (writes are keyed: safe to repeat)
        _terminate_app(pg_server.admin_dsn, app)
        saver.put_writes(c, [("x", 1)], "after-kill")
        tup = saver.get_tuple(c)
        assert tup is not None and tup.pending_writes is not None
        assert [w[0] for w in tup.pending_writes] == ["after-kill"]


def _watch_pool(monkeypatch: Any, pool_class: Any) -> tuple[list[Any], list[Any]]:
    """The tasks ``pool_class`` gives its workers and the connections it checks, as they
    happen (the real methods still run)."""
    tasks: list[Any] = []
    checks: list[Any] = []
    real_task, real_check = pool_class.run_task, pool_class.check_connection

    def run_task(self: Any, task: Any) -> None:
        tasks.append(task)
        real_task(self, task)

    monkeypatch.setattr(pool_class, "run_task", run_task)
    if inspect.iscoroutinefunction(real_check):
        async def acheck(conn: Any) -> None:
            checks.append(conn)
            await real_check(conn)

        monkeypatch.setattr(pool_class, "check_connection", staticmethod(acheck))
    else:
        def check(conn: Any) -> None:
            checks.append(conn)
            real_check(conn)

        monkeypatch.setattr(pool_class, "check_connection", staticmethod(check))
    return tasks, checks


def test_pool_checks_no_healthy_connection(dsn: str, monkeypatch: Any) -> None:
    """A connection used within the last seconds is lent without a round trip of its
    own (issue 37: a warm get_state cost 1 statement and 2 checks)."""
    from psycopg_pool import ConnectionPool

    _, checks = _watch_pool(monkeypatch, ConnectionPool)
    with DeltaPostgresSaver.from_conn_string(dsn, pool_size=2) as saver:
        (c,) = put_chain_sync(saver, "t", 1)
        saver.get_tuple(c)
        checks.clear()
        for _ in range(20):
            assert saver.get_tuple(c) is not None
            saver.put_writes(c, [("x", 1)], "w")
        assert checks == []


def test_pool_returns_connections_without_a_worker_and_checks_idle_ones(
    dsn: str, monkeypatch: Any
) -> None:
    """A connection goes back to the pool in the call that used it: no task for the
    pool's worker threads (a reset callback costs one per return, each a wake-up and,
    with a busy main thread, a wait for the GIL before the connection is free again).
    The idle time it records still gets a connection idle longer than IDLE_CHECK_S
    checked before it is lent."""
    from psycopg_pool import ConnectionPool

    from langgraph_delta_postgres import _connect

    tasks, checks = _watch_pool(monkeypatch, ConnectionPool)
    with DeltaPostgresSaver.from_conn_string(dsn, pool_size=1) as saver:
        (c,) = put_chain_sync(saver, "t", 1)
        tasks.clear()
        for _ in range(10):
            assert saver.get_tuple(c) is not None
            saver.put_writes(c, [("x", 1)], "w")
        assert [type(t).__name__ for t in tasks] == []
        assert checks == []
        monkeypatch.setattr(_connect, "IDLE_CHECK_S", 0.05)
        time.sleep(0.2)
        assert saver.get_tuple(c) is not None
        assert len(checks) == 1  # idle a while: checked once, then used
        assert saver.get_tuple(c) is not None
        assert len(checks) == 1


async def test_async_pool_returns_connections_without_a_worker_and_checks_idle_ones(
    dsn: str, monkeypatch: Any
) -> None:
    """The async pool's twin of the test above (its worker is an asyncio task)."""
    from psycopg_pool import AsyncConnectionPool

    from langgraph_delta_postgres import _connect

    tasks, checks = _watch_pool(monkeypatch, AsyncConnectionPool)
    with psycopg.connect(dsn, autocommit=True) as conn:
        (c,) = put_chain_sync(DeltaPostgresSaver(conn), "t-async", 1)
    async with AsyncDeltaPostgresSaver.from_conn_string(dsn, pool_size=1) as saver:
        tasks.clear()
        for _ in range(10):
            assert await saver.aget_tuple(c) is not None
            await saver.aput_writes(c, [("x", 1)], "w")
        assert [type(t).__name__ for t in tasks] == []
        assert checks == []
        monkeypatch.setattr(_connect, "IDLE_CHECK_S", 0.05)
        await asyncio.sleep(0.2)
        assert await saver.aget_tuple(c) is not None
        assert len(checks) == 1
        assert await saver.aget_tuple(c) is not None
        assert len(checks) == 1


async def test_async_pool_replaces_connections_the_server_closed(
    dsn: str, pg_server: Any
) -> None:
    app = f"lgdp_pool_check_async_{uuid.uuid4().hex[:8]}"
    async with AsyncDeltaPostgresSaver.from_conn_string(
        _with_app(dsn, app), pool_size=3
    ) as saver:
        with psycopg.connect(dsn, autocommit=True) as conn:
            (c,) = put_chain_sync(DeltaPostgresSaver(conn), "t", 1)
        for _ in range(3):
            assert await saver.aget_tuple(c) is not None
        for attempt in range(2):
            killed = _terminate_app(pg_server.admin_dsn, app)
            assert not _app_pids(pg_server.admin_dsn, app) & killed
            for _ in range(4):
                assert await saver.aget_tuple(c) is not None, attempt
            now = _app_pids(pg_server.admin_dsn, app)
            assert now and not now & killed, (attempt, now, killed)


# ---------------------------------------------------------------- 5: connect timeout


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A loopback TCP port whose server completes the handshake and never answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)  # never accept(): the kernel completes the TCP handshake anyway
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def _bounded(fn: Callable[[], Any], limit: float) -> tuple[bool, BaseException | None, float]:
    """Run ``fn`` in a thread; (finished within ``limit`` s, its exception, seconds)."""
    box: list[BaseException | None] = [None]

    def target() -> None:
        try:
            fn()
        except BaseException as e:
            box[0] = e

    started = time.monotonic()
    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(limit)
    return not t.is_alive(), box[0], time.monotonic() - started


def _open_sync(dsn: str) -> None:
    with DeltaPostgresSaver.from_conn_string(dsn):
        pass


def _open_async(dsn: str) -> None:
    async def body() -> None:
        async with AsyncDeltaPostgresSaver.from_conn_string(dsn):
            pass

    asyncio.run(body())


def _open_silent(monkeypatch: pytest.MonkeyPatch, opener: Callable[[str], None],
                 dsn: str, default_timeout: int) -> tuple[bool, BaseException | None, float]:
    """``opener(dsn)`` against the silent server, with ``default_timeout`` as the
    package's connect timeout and no PGCONNECT_TIMEOUT: whether it returned within 20 s,
    what it raised, how long it took."""
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    monkeypatch.setattr(core, "DEFAULT_CONNECT_TIMEOUT", default_timeout)
    return _bounded(lambda: opener(dsn), 20)


@pytest.mark.parametrize("opener", [_open_sync, _open_async], ids=["sync", "async"])
def test_connect_times_out_on_a_server_that_never_answers(
    silent_server: int, monkeypatch: pytest.MonkeyPatch, opener: Callable[[str], None]
) -> None:
    dsn = f"postgresql://u@127.0.0.1:{silent_server}/db"
    done, err, took = _open_silent(monkeypatch, opener, dsn, 2)
    assert done, "from_conn_string hung on a server that never answers"
    assert isinstance(err, psycopg.OperationalError) and "timeout" in str(err).lower(), err
    assert took < 15


@pytest.mark.parametrize("opener", [_open_sync, _open_async], ids=["sync", "async"])
def test_the_dsn_connect_timeout_wins(
    silent_server: int, monkeypatch: pytest.MonkeyPatch, opener: Callable[[str], None]
) -> None:
    dsn = f"postgresql://u@127.0.0.1:{silent_server}/db?connect_timeout=2"
    done, err, took = _open_silent(monkeypatch, opener, dsn, 3600)
    assert done and isinstance(err, psycopg.OperationalError), err
    assert took < 15
    assert core.connect_kwargs(dsn, None).get("connect_timeout") is None
    assert core.connect_kwargs("postgresql://u@h/db", None)["connect_timeout"] == 3600
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "7")
    assert core.connect_kwargs("postgresql://u@h/db", None).get("connect_timeout") is None


# ---------------------------------------------------------------- 6: corrupt rows


@pytest.mark.parametrize("corrupt", ["{}", '"x"', "[]", '{"v": 4}'])
async def test_corrupt_checkpoint_json_is_a_clear_error(
    saver_factory: SaverFactory, dsn: str, corrupt: str
) -> None:
    async with open_saver(saver_factory, dsn) as u:
        configs = await put_chain(u, "thread-c", 3)
        bad = configs[1]["configurable"]["checkpoint_id"]
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE checkpoints SET checkpoint = %s::jsonb WHERE checkpoint_id = %s",
                (corrupt, bad),
            )
        with pytest.raises(CorruptCheckpointError) as e:
            await u.get_tuple(configs[1])
        assert "thread-c" in str(e.value) and bad in str(e.value)
        with pytest.raises(CorruptCheckpointError, match=bad):
            await u.list(cfg("thread-c"))
        assert (await u.get_tuple(configs[2])) is not None  # the others still read


# ---------------------------------------------------------------- 7: before setup()


async def test_a_saver_before_setup_says_to_run_setup(
    saver_factory: SaverFactory, empty_dsn: str
) -> None:
    for schema in (None, "not_set_up"):
        async with open_saver(saver_factory, empty_dsn, schema=schema) as u:
            for call in (
                lambda: u.get_tuple(cfg("t")),
                lambda: u.list(cfg("t")),
                lambda: put_chain(u, "t", 1),
                lambda: u.put_writes(cfg("t", checkpoint_id="x"), [("a", 1)], "task"),
                lambda: u.history(cfg("t"), ["a"]),
                lambda: u.delete_thread("t"),
            ):
                with pytest.raises(SetupRequiredError) as e:
                    await call()
                msg = str(e.value)
                assert "setup()" in msg and "langgraph-delta-pg migrate" in msg
                assert isinstance(e.value, psycopg.errors.UndefinedTable)
                assert isinstance(e.value.__cause__, psycopg.errors.UndefinedTable)
                if schema:
                    assert "--schema not_set_up" in msg
            await u.setup()  # the same saver works once set up
            assert await u.get_tuple(cfg("t")) is None


# ---------------------------------------------------------------- 2: runs of copied threads


def _run_md(thread_id: str, runs: list[str]) -> Callable[[int], dict[str, Any]]:
    """Metadata as Agent Server writes it: each checkpoint names its run and thread."""
    return lambda i: {"source": "loop", "step": i, "run_id": runs[i], "thread_id": thread_id}


def _rows(dsn: str, thread_id: str) -> dict[str, list[tuple[Any, ...]]]:
    out = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for t in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
            rows = conn.execute(f"SELECT * FROM {t} WHERE thread_id = %s", (thread_id,))
            out[t] = sorted(rows.fetchall(), key=repr)
    return out


async def test_deleting_a_run_leaves_copies_of_its_thread_alone(
    saver_factory: SaverFactory, dsn: str
) -> None:
    async with open_saver(saver_factory, dsn) as u:
        chain = await put_chain(u, "M", 4, metadata=_run_md("M", ["r1", "r1", "r2", "r2"]))
        await u.put_writes(chain[-1], [("obj", {"w": 1})], "task")
        await u.copy_thread("M", "C")
        copied = await u.list(cfg("C"))
        assert [t.metadata.get("thread_id") for t in copied] == ["C"] * 4
        assert all("run_id" not in t.metadata for t in copied)
        before = _rows(dsn, "C")
        await u.delete_for_runs(["r2"])  # M's latest run
        assert _rows(dsn, "C") == before, "deleting a run of M changed its copy C"
        left = await u.list(cfg("M"))
        assert [t.metadata["run_id"] for t in left] == ["r1", "r1"]
        # rows copied by an older copy_thread (or another saver) kept the source's run_id
        # and thread_id in their metadata: they are not the run's and stay too
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                """INSERT INTO checkpoints SELECT 'OLD', checkpoint_ns, checkpoint_id,
                          parent_checkpoint_id, type, checkpoint, metadata, stored_channels,
                          delta_channels, delta_updates, delta_supersteps
                   FROM checkpoints WHERE thread_id = 'M'"""
            )
            conn.execute(
                """INSERT INTO checkpoint_blobs SELECT 'OLD', checkpoint_ns, channel, version,
                          type, blob FROM checkpoint_blobs WHERE thread_id = 'M'"""
            )
        old = _rows(dsn, "OLD")
        await u.delete_for_runs(["r1"])
        assert _rows(dsn, "OLD") == old and _rows(dsn, "C") == before
        assert await u.list(cfg("M")) == []


def test_delete_for_runs_uses_the_run_id_index(dsn: str) -> None:
    from psycopg import sql

    from langgraph_delta_postgres._sql import Queries

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            """INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, checkpoint,
                                        metadata)
               SELECT 't' || (g % 500), '', lpad(g::text, 12, '0'), '{}'::jsonb,
                      jsonb_build_object('run_id', 'run-' || g, 'step', g)
               FROM generate_series(1, 20000) AS g"""
        )
        conn.execute("ANALYZE checkpoints")
        q = Queries(None)
        params = {
            "run_ids": ["run-7", "run-9"], "kept_threads": [], "kept_ns": [], "kept_ids": []
        }
        for name in ("maintenance.delete_runs", "retention.run_children"):
            plan = conn.execute(sql.SQL("EXPLAIN ") + q[name], params).fetchall()
            text = "\n".join(r[0] for r in plan)
            assert "checkpoints_run_id_idx" in text, (name, text)


# ---------------------------------------------------------------- 1: claims without a blob


def _stored(dsn: str, thread_id: str) -> dict[str, list[str] | None]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT checkpoint_id, stored_channels FROM checkpoints WHERE thread_id = %s",
            (thread_id,),
        ).fetchall()
    return {r[0]: r[1] for r in rows}


async def test_copy_thread_does_not_copy_a_claim_without_its_blob(
    saver_factory: SaverFactory, dsn: str
) -> None:
    async with open_saver(saver_factory, dsn) as u:
        chain = await put_chain(u, "S", 3)
        last = chain[-1]["configurable"]["checkpoint_id"]
        assert _stored(dsn, "S")[last] == ["num", "obj"]
        # what a delete racing a put leaves: the claim of "obj" stays, its blob is gone
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                """DELETE FROM checkpoint_blobs b USING checkpoints c
                   WHERE c.thread_id = 'S' AND c.checkpoint_id = %s
                     AND b.thread_id = 'S' AND b.channel = 'obj'
                     AND b.version = c.checkpoint -> 'channel_versions' ->> 'obj'""",
                (last,),
            )
        source = await u.get_tuple(chain[-1])
        assert source is not None and "obj" not in source.checkpoint["channel_values"]
        await u.copy_thread("S", "T")
        claims = _stored(dsn, "T")
        assert claims[last] == ["num"], "the copy claims a value it has no blob for"
        assert {k: v for k, v in claims.items() if k != last} == {
            k: v for k, v in _stored(dsn, "S").items() if k != last
        }
        copy = await u.get_tuple(cfg("T", checkpoint_id=last))
        assert copy is not None
        assert copy.checkpoint["channel_values"] == source.checkpoint["channel_values"]


# ------------------------------------------- 1: a delete racing a put (the issue's repro)
#
# After the race, a checkpoint's stored_channels claims a value whose blob the delete
# removed. get_tuple, copy_thread and the history walk (sql/delta_history.sql) read such a
# claim as "not stored"; before, the walk seeded from it (seed None: TypeError on every
# later invoke).


class _State(TypedDict):
    items: Annotated[list[str], operator.add]
    note: str


def _extend(state: list[str], writes: list[list[str]]) -> list[str]:
    return state + [x for w in writes for x in w]


class _DeltaState(TypedDict):
    items: Annotated[list[str], DeltaChannel(_extend, snapshot_frequency=2)]
    note: str


def _graph(state: Any, checkpointer: Any) -> Any:
    b = StateGraph(state)
    b.add_node("agent", lambda s: {"items": ["x"]})
    b.add_edge(START, "agent")
    b.add_edge("agent", END)
    return b.compile(checkpointer=checkpointer)


def _repro(dsn: str, saver: Any, state: Any, thread: str) -> dict[str, Any]:
    """The issue's steps: invoke; an open transaction deletes the thread's rows from the
    three tables; update_state (it does not wait for that transaction); commit;
    update_state again; invoke twice. Returns the final state's values."""
    g = _graph(state, saver)
    cfg_ = {"configurable": {"thread_id": thread}}
    g.invoke({"items": ["a"]}, cfg_)
    with psycopg.connect(dsn) as other:  # not autocommit: one open transaction
        for table in ("checkpoint_writes", "checkpoint_blobs", "checkpoints"):
            other.execute(f"DELETE FROM {table} WHERE thread_id = %s", (thread,))
        done, err, _ = _bounded(lambda: g.update_state(cfg_, {"note": "u1"}), 30)
        assert done and err is None, err
        other.commit()
    g.update_state(cfg_, {"note": "u2"})
    g.invoke({"items": ["b"]}, cfg_)
    g.invoke({"items": ["c"]}, cfg_)
    return dict(g.get_state(cfg_).values)


@pytest.mark.parametrize("state", [_State, _DeltaState], ids=["operator.add", "DeltaChannel"])
def test_the_issue_repro_keeps_the_thread_working(dsn: str, state: Any) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        # langgraph's stub wants a dict-row connection; its cursors set dict_row themselves
        official = _repro(dsn, PostgresSaver(conn), state, "official")  # type: ignore[arg-type]
        ours = _repro(dsn, DeltaPostgresSaver(conn), state, "ours")
    assert official == {"items": ["b", "x", "c", "x"], "note": "u2"}
    assert ours == official


# The race loops. Each writer owns one thread (a second writer on it would make the
# interleaving, and so any reference, arbitrary); the deleters pick among those threads
# only. Two groups:
#   fenced   a delete takes the thread's lock, so it lands between two whole operations;
#            the operations and deletes are fed in lock order to an InMemorySaver: the
#            state after every operation, and the final state and history, must equal
#            that reference (a write lost, replayed or left behind by a delete fails).
#   racing   deletes race the operations (a delete lands in the middle of an invoke, as
#            in the issue's repro): what the thread holds then is a legitimate partial
#            state no replay reproduces, so the reference is the official saver reading
#            the same rows (state and history), and one more invoke must append exactly
#            its own items to the state ours read before it.
# Each group must have done MIN_OPS operations and MIN_DELETES deletes of its threads:
# a race runs at least RACE_SECONDS and on until it has (counted, not timed: a loaded
# machine does fewer a second); one that has not by RACE_DEADLINE fails, saying so.

RACE_SECONDS = 4.0
RACE_DEADLINE = 300.0
WRITERS = 6  # writers 0-2 fenced, 3-5 racing
MIN_OPS = 15
MIN_DELETES = 10


def _race_graphs(saver: Any) -> list[Any]:
    return [_graph(_State, saver), _graph(_DeltaState, saver)]


def _race_thread(prefix: str, k: int) -> str:
    return f"{prefix}-{k}-{k % 2}"


def _fenced(k: int) -> bool:
    return k < WRITERS // 2


class _RaceLog:
    """Counts per group, and per fenced thread the reference: an InMemorySaver fed, in
    lock order, each acknowledged operation (invoke + update_state(note)) and delete.
    After every fenced operation ours must read the reference's state: a write lost or
    replayed fails at once, not only if it survives to the end."""

    def __init__(self, names: list[str]) -> None:
        self.ops = {"fenced": 0, "racing": 0}
        self.deletes = {"fenced": 0, "racing": 0}
        self.checked = 0
        self.count = threading.Lock()
        self.mem = {t: InMemorySaver() for t in names}
        self.mem_graphs = {t: _race_graphs(self.mem[t])[k % 2] for k, t in enumerate(names)}

    def racing(self, t0: float) -> bool:
        """Whether the race that started at ``t0`` goes on: for RACE_SECONDS, then until
        every count is reached; never past RACE_DEADLINE."""
        elapsed = time.monotonic() - t0
        if elapsed >= RACE_DEADLINE:
            return False
        with self.count:
            short = self.checked < MIN_OPS or any(
                self.ops[g] < MIN_OPS or self.deletes[g] < MIN_DELETES
                for g in ("fenced", "racing")
            )
        return elapsed < RACE_SECONDS or short

    def done(self, kind: str, fenced: bool) -> None:
        with self.count:
            getattr(self, kind)["fenced" if fenced else "racing"] += 1

    def op(self, thread: str, note: str, ours: Any) -> None:
        """Under the thread's lock, after ours acknowledged the operation."""
        g, c = self.mem_graphs[thread], {"configurable": {"thread_id": thread}}
        g.invoke({"items": ["a"]}, c)
        g.update_state(c, {"note": note}, as_node="agent")
        want = canon(g.get_state(c).values)
        assert canon(ours) == want, f"{thread}: {ours!r} != InMemorySaver {want!r}"
        with self.count:
            self.checked += 1

    def delete(self, thread: str) -> None:
        self.mem[thread].delete_thread(thread)

    def reference(self, thread: str) -> tuple[Any, Any]:
        g, c = self.mem_graphs[thread], {"configurable": {"thread_id": thread}}
        return canon(g.get_state(c).values), _snapshot(g.get_state_history(c))

    def check_counts(self) -> str:
        report = (
            f"operations {self.ops}, deletes {self.deletes}, "
            f"states checked against InMemorySaver {self.checked}"
        )
        for group in ("fenced", "racing"):
            few = f"too few to prove anything in {RACE_DEADLINE:.0f} s: {report}"
            assert self.ops[group] >= MIN_OPS, few
            assert self.deletes[group] >= MIN_DELETES, few
        assert self.checked >= MIN_OPS, report
        return report


def _snapshot(states: Any) -> list[Any]:
    """A history as comparable across savers: values, next, step, source (ids differ)."""
    return [
        (canon(s.values), s.next, s.metadata.get("step"), s.metadata.get("source"))
        for s in states
    ]


def _official(dsn: str, graph_idx: int, thread: str) -> tuple[Any, Any]:
    with official_saver(dsn) as off:
        g = _race_graphs(off)[graph_idx]
        c = {"configurable": {"thread_id": thread}}
        return canon(g.get_state(c).values), _snapshot(g.get_state_history(c))


def _check_final(
    dsn: str, k: int, thread: str, ours: tuple[Any, Any], log: _RaceLog
) -> None:
    official = _official(dsn, k % 2, thread)
    assert ours == official, f"{thread}: ours and the official saver read the rows apart"
    if _fenced(k):
        want = log.reference(thread)
        assert ours[0] == want[0], f"{thread}: state differs from InMemorySaver"
        assert ours[1] == want[1], f"{thread}: history differs from InMemorySaver"


def _appended(before: Any, after: Any) -> None:
    """One more invoke of ["z"] appended exactly ["z", "x"] to the state read before."""
    items_before = list(before.get("items", []))
    assert list(after["items"]) == items_before + ["z", "x"], (items_before, after)


def test_delete_put_race_loop_sync(dsn: str) -> None:
    """Writers invoke / update_state / read while deleters delete the same threads
    (delete_thread and prune(strategy="delete")), for a few seconds and at least the
    counts of _RaceLog.racing: 0 errors, and
    every thread's state and history equal to the reference of its group."""
    errors: list[BaseException] = []
    names = [_race_thread("race", k) for k in range(WRITERS)]
    log = _RaceLog(names)
    locks = {t: threading.Lock() for t in names}
    with DeltaPostgresSaver.from_conn_string(dsn, pool_size=8) as saver:
        graphs = _race_graphs(saver)
        t0 = time.monotonic()

        def writer(k: int) -> None:
            rnd = random.Random(k)
            t, g = names[k], graphs[k % 2]
            c = {"configurable": {"thread_id": t}}
            while log.racing(t0):
                note = str(rnd.random())
                try:
                    with locks[t] if _fenced(k) else contextlib.nullcontext():
                        g.invoke({"items": ["a"]}, c)
                        g.update_state(c, {"note": note}, as_node="agent")
                        state = g.get_state(c).values
                        if _fenced(k):
                            log.op(t, note, state)
                    log.done("ops", _fenced(k))
                except BaseException as e:  # noqa: BLE001 - every error counts
                    errors.append(e)

        def deleter(d: int) -> None:
            rnd = random.Random(100 + d)
            while log.racing(t0):
                k = rnd.randrange(WRITERS)
                t = names[k]
                try:
                    with locks[t] if _fenced(k) else contextlib.nullcontext():
                        if d % 2:
                            saver.delete_thread(t)
                        else:
                            saver.prune([t], strategy="delete")
                        if _fenced(k):
                            log.delete(t)
                    log.done("deletes", _fenced(k))
                except BaseException as e:  # noqa: BLE001
                    errors.append(e)
                time.sleep(rnd.random() * 0.002)

        workers = [threading.Thread(target=writer, args=(k,), daemon=True) for k in range(WRITERS)]
        workers += [threading.Thread(target=deleter, args=(d,), daemon=True) for d in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(RACE_DEADLINE + 60)
        assert not any(w.is_alive() for w in workers), "a worker hung"
        assert errors == [], f"{len(errors)} errors: {errors[:3]!r}"
        report = log.check_counts()
        for k, t in enumerate(names):
            g, c = graphs[k % 2], {"configurable": {"thread_id": t}}
            ours = (canon(g.get_state(c).values), _snapshot(g.get_state_history(c)))
            _check_final(dsn, k, t, ours, log)
            before = g.get_state(c).values
            g.invoke({"items": ["z"]}, c)  # every thread still works
            _appended(before, g.get_state(c).values)
            assert canon(g.get_state(c).values) == _official(dsn, k % 2, t)[0]
    print(report)


async def test_delete_put_race_loop_async(dsn: str) -> None:
    errors: list[BaseException] = []
    names = [_race_thread("arace", k) for k in range(WRITERS)]
    log = _RaceLog(names)
    locks = {t: asyncio.Lock() for t in names}
    async with AsyncDeltaPostgresSaver.from_conn_string(dsn, pool_size=8) as saver:
        graphs = _race_graphs(saver)
        t0 = time.monotonic()

        async def writer(k: int) -> None:
            rnd = random.Random(k)
            t, g = names[k], graphs[k % 2]
            c = {"configurable": {"thread_id": t}}
            while log.racing(t0):
                note = str(rnd.random())
                try:
                    async with locks[t] if _fenced(k) else contextlib.nullcontext():
                        await g.ainvoke({"items": ["a"]}, c)
                        await g.aupdate_state(c, {"note": note}, as_node="agent")
                        state = (await g.aget_state(c)).values
                        if _fenced(k):
                            log.op(t, note, state)
                    log.done("ops", _fenced(k))
                except Exception as e:  # noqa: BLE001
                    errors.append(e)

        async def deleter(d: int) -> None:
            rnd = random.Random(100 + d)
            while log.racing(t0):
                k = rnd.randrange(WRITERS)
                t = names[k]
                try:
                    async with locks[t] if _fenced(k) else contextlib.nullcontext():
                        if d % 2:
                            await saver.adelete_thread(t)
                        else:
                            await saver.aprune([t], strategy="delete")
                        if _fenced(k):
                            log.delete(t)
                    log.done("deletes", _fenced(k))
                except Exception as e:  # noqa: BLE001
                    errors.append(e)
                await asyncio.sleep(rnd.random() * 0.002)

        await asyncio.wait_for(
            asyncio.gather(*[writer(k) for k in range(WRITERS)], *[deleter(d) for d in range(2)]),
            RACE_DEADLINE + 60,
        )
        assert errors == [], f"{len(errors)} errors: {errors[:3]!r}"
        report = log.check_counts()
        for k, t in enumerate(names):
            g, c = graphs[k % 2], {"configurable": {"thread_id": t}}
            hist = [s async for s in g.aget_state_history(c)]
            ours = (canon((await g.aget_state(c)).values), _snapshot(hist))
            _check_final(dsn, k, t, ours, log)
            before = (await g.aget_state(c)).values
            await g.ainvoke({"items": ["z"]}, c)
            _appended(before, (await g.aget_state(c)).values)
            assert canon((await g.aget_state(c)).values) == _official(dsn, k % 2, t)[0]
    print(report)
