"""The Agent Server wiring, through langgraph-api's own loader and adapter on real Postgres.

``langgraph_api._checkpointer._adapter.collect_checkpointer_from_env`` loads
``langgraph_delta_postgres.agent_server.checkpointer`` the way ``langgraph.json``
``"checkpointer": {"path": ...}`` makes the server do, and ``get_checkpointer`` wraps the
saver in the server's ``_CustomCheckpointerAdapter``. A real DeltaChannel graph runs on
that adapter; statements are counted at the psycopg cursor of the pool's one connection
(``LANGGRAPH_DELTA_PG_POOL_SIZE=1``) and compared with the bare saver's on the same thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from psycopg_pool import AsyncConnectionPool

from langgraph_delta_postgres import AsyncDeltaPostgresSaver
from langgraph_delta_postgres import agent_server as ag
from langgraph_delta_postgres._local.workloads import build_graph, user_input
from tests.graph._util import canon, canon_history

PATH = "langgraph_delta_postgres.agent_server.checkpointer"
WORKLOAD = "coding_a"
TURNS = 30
SNAPSHOT_FREQUENCY = 50  # no snapshot yet at 30 turns: loads walk to the root
CHANNELS = ["files", "messages"]

# What `langgraph dev` puts in the environment before langgraph_api.config is imported
# (it reads them at import time); only set while importing, and only where unset.
_SERVER_ENV = {
    "DATABASE_URI": ":memory:",
    "REDIS_URI": "fake",
    "MIGRATIONS_PATH": "__inmem",
    "LANGGRAPH_RUNTIME_EDITION": "inmem",
}


def _server_modules() -> tuple[Any, Any]:
    added = [k for k in _SERVER_ENV if k not in os.environ]
    os.environ.update({k: _SERVER_ENV[k] for k in added})
    try:
        from langgraph_api import config as api_config
        from langgraph_api._checkpointer import _adapter
    finally:
        for k in added:
            del os.environ[k]
    return api_config, _adapter


class Counting(psycopg.AsyncCursor[Any]):
    """Counts the saver's statements; the pool's connection check (an empty query on
    checkout, ConnectionPool.check_connection) is a health probe, not counted."""

    executed: list[str] = []

    async def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
        if str(query).strip():
            Counting.executed.append(str(query))
        return await super().execute(query, params, **kw)

    async def executemany(self, query: Any, params_seq: Any, **kw: Any) -> Any:
        Counting.executed.append(str(query))
        return await super().executemany(query, params_seq, **kw)


@pytest.fixture
async def adapter(dsn: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    """The server's adapter around our saver, loaded by the server from ``PATH``."""
    api_config, _adapter = _server_modules()
    monkeypatch.setenv(ag.DSN_ENV, dsn)
    monkeypatch.setenv(ag.POOL_SIZE_ENV, "1")
    monkeypatch.setattr(api_config, "CHECKPOINTER_CONFIG", {"backend": "custom", "path": PATH})
    await _adapter.collect_checkpointer_from_env()
    try:
        wrapped = await _adapter.get_checkpointer()
        assert type(wrapped).__name__ == "_CustomCheckpointerAdapter"
        assert isinstance(wrapped._inner, AsyncDeltaPostgresSaver)
        assert isinstance(wrapped._inner.conn, AsyncConnectionPool)
        async with wrapped._inner.conn.connection() as conn:  # the pool's one connection
            conn.cursor_factory = Counting
        yield wrapped
    finally:
        await _adapter.exit_checkpointer()
        _adapter.CUSTOM_CHECKPOINTER = None
        _adapter._CHECKPOINTER_CAPABILITIES = None
        for name in ("inner", "stack"):
            if hasattr(_adapter.CHECKPOINTER_STACK, name):
                delattr(_adapter.CHECKPOINTER_STACK, name)


@pytest.fixture
async def bare(dsn: str) -> AsyncIterator[AsyncDeltaPostgresSaver]:
    async with AsyncDeltaPostgresSaver.from_conn_string(dsn) as saver:
        saver.conn.cursor_factory = Counting  # type: ignore[union-attr]
        yield saver


def _cfg(thread_id: str, **extra: Any) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, **extra}}


async def _run(graph: Any, thread_id: str, turns: int, start: int = 0, **extra: Any) -> None:
    for t in range(start, start + turns):
        await graph.ainvoke(user_input(WORKLOAD, t), _cfg(thread_id, **extra))


def _graph(saver: Any) -> Any:
    return build_graph(WORKLOAD, saver, delta=True, snapshot_frequency=SNAPSHOT_FREQUENCY)


async def _counted(coro: Any) -> tuple[Any, int]:
    Counting.executed.clear()
    result = await coro
    return result, len(Counting.executed)


async def _page(graph: Any, thread_id: str) -> list[Any]:
    return [s async for s in graph.aget_state_history(_cfg(thread_id), limit=10)]


def _state_key(s: Any) -> Any:
    return (s.config["configurable"]["checkpoint_id"], canon(s.values), s.next)


async def test_get_state_and_history_page_through_the_server_adapter(
    adapter: Any, bare: AsyncDeltaPostgresSaver
) -> None:
    thread = f"srv-{uuid.uuid4().hex[:8]}"
    assert vars(type(adapter)).get(ag._MARK) is True, "the server adapter was not patched"
    await _run(_graph(adapter), thread, TURNS)

    # get_state: the same statements and values as the bare saver on the same thread.
    via_server, n_state = await _counted(_graph(adapter).aget_state(_cfg(thread)))
    via_bare, n_state_bare = await _counted(_graph(bare).aget_state(_cfg(thread)))
    assert _state_key(via_server) == _state_key(via_bare)
    assert n_state == n_state_bare <= 3, Counting.executed
    assert len(via_server.values["messages"]) == 3 * TURNS

    # A history page of 10: one list statement plus one history statement per state.
    page_server, n_page = await _counted(_page(_graph(adapter), thread))
    page_bare, n_page_bare = await _counted(_page(_graph(bare), thread))
    assert [_state_key(s) for s in page_server] == [_state_key(s) for s in page_bare]
    assert len(page_server) == 10
    assert n_page == n_page_bare <= 11, Counting.executed

    # The adapter as langgraph-api ships it: the base-class walk, a statement per ancestor,
    # with the same values.
    with pytest.MonkeyPatch.context() as mp:
        for name in ("aget_delta_channel_history", "get_delta_channel_history"):
            mp.delattr(type(adapter), name)
        unpatched, n_unpatched = await _counted(_graph(adapter).aget_state(_cfg(thread)))
        page_unpatched, n_page_unpatched = await _counted(_page(_graph(adapter), thread))
    assert _state_key(unpatched) == _state_key(via_bare)
    assert [_state_key(s) for s in page_unpatched] == [_state_key(s) for s in page_bare]
    print(
        f"statements: get_state {n_unpatched} unpatched, {n_state} patched; "
        f"history page of 10: {n_page_unpatched} unpatched, {n_page} patched"
    )
    assert n_unpatched > 10 * n_state
    assert n_page_unpatched > 10 * n_page


async def test_sync_history_twin_forwards(adapter: Any, bare: AsyncDeltaPostgresSaver) -> None:
    thread = f"srv-{uuid.uuid4().hex[:8]}"
    await _run(_graph(adapter), thread, 8)
    expected = await bare.aget_delta_channel_history(config=_cfg(thread), channels=CHANNELS)
    Counting.executed.clear()
    got = await asyncio.to_thread(
        adapter.get_delta_channel_history, config=_cfg(thread), channels=CHANNELS
    )
    assert len(Counting.executed) == 1, Counting.executed
    assert canon_history(got) == canon_history(expected)


async def _thread_values(graph: Any, thread_id: str) -> Any:
    return canon((await graph.aget_state(_cfg(thread_id))).values)


async def _checkpoints(saver: Any, thread_id: str) -> int:
    return len([t async for t in saver.alist(_cfg(thread_id))])


async def test_prune_copy_and_run_delete_through_the_server_adapter(adapter: Any) -> None:
    graph = _graph(adapter)
    src, dst = f"srv-{uuid.uuid4().hex[:8]}", f"srv-{uuid.uuid4().hex[:8]}"
    await _run(graph, src, 6)
    values = await _thread_values(graph, src)

    await adapter.acopy_thread(src, dst)
    assert await _thread_values(graph, dst) == values
    assert await _checkpoints(adapter, dst) == await _checkpoints(adapter, src)

    # keep_latest on a thread of full-snapshot fields (DeltaChannel threads: see the
    # retention docs); delete on the DeltaChannel thread.
    full = build_graph(WORKLOAD, adapter, delta=False)
    kept = f"srv-{uuid.uuid4().hex[:8]}"
    await _run(full, kept, 4)
    kept_values = await _thread_values(full, kept)
    before = await _checkpoints(adapter, kept)
    await adapter.aprune([kept], strategy="keep_latest")
    assert await _thread_values(full, kept) == kept_values
    assert await _checkpoints(adapter, kept) == 1 < before
    await adapter.aprune([src], strategy="delete")
    assert await _checkpoints(adapter, src) == 0
    assert await _thread_values(graph, dst) == values  # the copy is its own thread

    # A rolled-back run (multitask_strategy='rollback'): its checkpoints go, the thread is
    # back where the previous run left it. The adapter copies run_id into the metadata.
    runs = f"srv-{uuid.uuid4().hex[:8]}"
    await _run(graph, runs, 2, run_id="run-1")
    after_first = await _thread_values(graph, runs)
    await _run(graph, runs, 1, start=2, run_id="run-2")
    assert await _thread_values(graph, runs) != after_first
    await adapter.adelete_for_runs(["run-2"])
    assert await _thread_values(graph, runs) == after_first

    await adapter.adelete_thread(runs)
    assert await _checkpoints(adapter, runs) == 0


@pytest.fixture
def unpatched(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The server's adapter class as langgraph-api ships it; afterwards exactly as it was
    before the test, whatever the test patched. It removes only this package's own
    attributes (a server's method is never deleted: ``delattr`` of an inherited method
    fails), so its tests pass alone, in any order, patched class or not."""
    _, _adapter = _server_modules()
    cls = _adapter._CustomCheckpointerAdapter
    ours = {ag._MARK, ag._HISTORY_METHODS[0], ag._HISTORY_METHODS[1]}
    ours_values = (ag._aget_delta_channel_history, ag._get_delta_channel_history, True)

    def own_patches() -> dict[str, Any]:
        return {n: v for n, v in vars(cls).items() if n in ours and v in ours_values}

    before = own_patches()
    for name in before:
        delattr(cls, name)
    monkeypatch.setattr(ag, "_warned", False)
    try:
        yield cls
    finally:
        for name in own_patches():
            delattr(cls, name)
        for name, value in before.items():
            setattr(cls, name, value)


def test_the_installed_adapter_has_the_shape_the_patch_relies_on(unpatched: Any) -> None:
    assert ag._adapter_shape(unpatched) == (ag._PATCH, "")


def test_any_version_of_that_shape_is_patched(
    unpatched: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Neither the version number nor the former cap gates the patch (issue 37).
    import importlib.metadata

    real = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata, "version",
        lambda name: "99.0.dev1" if name == "langgraph-api" else real(name),
    )
    monkeypatch.setattr(ag, "TESTED_LANGGRAPH_API", ((0, 1), (0, 2)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ag.patch_agent_server_adapter() is True
    assert unpatched.__dict__["aget_delta_channel_history"] is ag._aget_delta_channel_history


def test_without_langgraph_api_there_is_nothing_to_patch(
    unpatched: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import importlib.metadata

    real = importlib.metadata.version

    def version(name: str) -> str:
        if name == "langgraph-api":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ag.patch_agent_server_adapter() is False
    assert "aget_delta_channel_history" not in unpatched.__dict__
    assert not [r for r in caplog.records  # silently: no warning logged either
                if r.name == "langgraph_delta_postgres" and r.levelno >= logging.WARNING]


def test_the_installed_version_patches_once(unpatched: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ag.patch_agent_server_adapter() is True
        first = unpatched.__dict__["aget_delta_channel_history"]
        assert ag.patch_agent_server_adapter() is True
    assert unpatched.__dict__["aget_delta_channel_history"] is first


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "LANGGRAPH_DELTA_PG_DSN is not set"),
        ({ag.POOL_SIZE_ENV: "0"}, "LANGGRAPH_DELTA_PG_POOL_SIZE='0'"),
        ({ag.POOL_SIZE_ENV: "ten"}, "expected a whole number"),
        ({ag.PREPARE_THRESHOLD_ENV: "-1"}, "or 'none'"),
    ],
)
async def test_bad_environment_is_a_clear_error(
    dsn: str, env: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (ag.DSN_ENV, ag.POOL_SIZE_ENV, ag.PREPARE_THRESHOLD_ENV, ag.SCHEMA_ENV):
        monkeypatch.delenv(name, raising=False)
    if env:
        monkeypatch.setenv(ag.DSN_ENV, dsn)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match=message):
        async with ag.checkpointer():
            pass


async def test_schema_and_prepare_threshold_from_the_environment(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _server_modules()  # langgraph-api's config, imported with the settings it requires
    monkeypatch.setenv(ag.DSN_ENV, dsn)
    monkeypatch.setenv(ag.SCHEMA_ENV, "agents")
    monkeypatch.setenv(ag.PREPARE_THRESHOLD_ENV, "none")
    monkeypatch.setenv(ag.POOL_SIZE_ENV, "2")
    async with ag.checkpointer() as saver:
        await _run(_graph(saver), "in-schema", 2)
        assert isinstance(saver.conn, AsyncConnectionPool)
        assert saver.conn.max_size == 2
        async with saver.conn.connection() as conn:
            assert conn.prepare_threshold is None
    with psycopg.connect(dsn) as conn:
        n = conn.execute(
            "SELECT count(*) FROM agents.checkpoints WHERE thread_id = 'in-schema'"
        ).fetchone()
    assert n is not None and n[0] > 0
