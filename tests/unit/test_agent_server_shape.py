"""The Agent Server adapter patch goes by the adapter's shape, not by langgraph-api's version.

Fake adapter classes, one per test (the patch changes the class), stand in for
``langgraph_api._checkpointer._adapter._CustomCheckpointerAdapter``: the shape of
langgraph-api 0.16.7 to 0.18.0.dev12 is patched on any version number; every variant the
patch cannot rely on is left alone, with a WARNING on the package logger and a
RuntimeWarning that name the cost. No langgraph-api is needed: the public function is run
on fake ``langgraph_api`` modules.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import sys
import types
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver

from langgraph_delta_postgres import agent_server as ag

CFG: RunnableConfig = {"configurable": {"thread_id": "t"}}


class Saver(BaseCheckpointSaver[str]):
    """The wrapped saver: answers the history calls itself."""

    async def aget_delta_channel_history(
        self, *, config: Any, channels: Sequence[str]
    ) -> Mapping[str, Any]:
        return {"from": "inner async", "channels": list(channels)}

    def get_delta_channel_history(
        self, *, config: Any, channels: Sequence[str]
    ) -> Mapping[str, Any]:
        return {"from": "inner sync", "channels": list(channels)}

    async def aget_tuple(self, config: Any) -> Any:
        return None


class PlainSaver(BaseCheckpointSaver[str]):
    """A wrapped saver without history methods of its own: the base-class walk runs."""

    async def aget_tuple(self, config: Any) -> Any:
        return None

    def get_tuple(self, config: Any) -> Any:
        return None


def shipped() -> type[BaseCheckpointSaver[Any]]:
    """A fresh class of the shape langgraph-api's adapter has (0.16.7 to 0.18.0.dev12)."""

    class Adapter(BaseCheckpointSaver[Any]):
        def __init__(self, inner: BaseCheckpointSaver[Any]) -> None:
            self._inner = inner
            super().__init__(serde=getattr(inner, "serde", None))

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

        async def aget_tuple(self, config: Any) -> Any:
            return await self._inner.aget_tuple(config)

    return Adapter


def wraps_as_saver() -> type[BaseCheckpointSaver[Any]]:
    """Keeps the wrapped saver under another name than ``_inner``."""

    class Adapter(BaseCheckpointSaver[Any]):
        def __init__(self, inner: BaseCheckpointSaver[Any]) -> None:
            self._saver = inner
            super().__init__()

        async def aget_tuple(self, config: Any) -> Any:
            return await self._saver.aget_tuple(config)

    return Adapter


def reads_without_inner() -> type[BaseCheckpointSaver[Any]]:
    """Assigns ``_inner`` but does not read through it (aget_tuple is its own)."""

    class Adapter(shipped()):  # type: ignore[misc]
        async def aget_tuple(self, config: Any) -> Any:
            return None

    return Adapter


def defines_history_itself() -> type[BaseCheckpointSaver[Any]]:
    """Has history methods of its own that do not call the wrapped saver's."""

    class Adapter(shipped()):  # type: ignore[misc]
        async def aget_delta_channel_history(
            self, *, config: Any, channels: Sequence[str]
        ) -> Mapping[str, Any]:
            return {}

        def get_delta_channel_history(
            self, *, config: Any, channels: Sequence[str]
        ) -> Mapping[str, Any]:
            return {}

    return Adapter


def forwards_async_only() -> type[BaseCheckpointSaver[Any]]:
    """Forwards the async history call itself, not the sync one."""

    class Adapter(shipped()):  # type: ignore[misc]
        async def aget_delta_channel_history(
            self, *, config: Any, channels: Sequence[str]
        ) -> Mapping[str, Any]:
            return await self._inner.aget_delta_channel_history(  # type: ignore[no-any-return]
                config=config, channels=channels
            )

    return Adapter


def forwards_natively() -> type[BaseCheckpointSaver[Any]]:
    """A future adapter that forwards both history calls itself."""

    class Adapter(forwards_async_only()):  # type: ignore[misc]
        def get_delta_channel_history(
            self, *, config: Any, channels: Sequence[str]
        ) -> Mapping[str, Any]:
            return self._inner.get_delta_channel_history(  # type: ignore[no-any-return]
                config=config, channels=channels
            )

    return Adapter


def forwards_async_only_of_two() -> type[BaseCheckpointSaver[Any]]:
    """Defines both history methods; only the async one calls the wrapped saver's."""

    class Adapter(forwards_async_only()):  # type: ignore[misc]
        def get_delta_channel_history(
            self, *, config: Any, channels: Sequence[str]
        ) -> Mapping[str, Any]:
            return {}

    return Adapter


def forwards_elsewhere() -> type[BaseCheckpointSaver[Any]]:
    """Defines both history methods, calling them on something else than ``_inner``."""

    class Adapter(shipped()):  # type: ignore[misc]
        async def aget_delta_channel_history(
            self, *, config: Any, channels: Sequence[str]
        ) -> Mapping[str, Any]:
            return await self._grpc.aget_delta_channel_history(  # type: ignore[no-any-return]
                config=config, channels=channels
            )

        def get_delta_channel_history(
            self, *, config: Any, channels: Sequence[str]
        ) -> Mapping[str, Any]:
            return self._grpc.get_delta_channel_history(  # type: ignore[no-any-return]
                config=config, channels=channels
            )

    return Adapter


def walks_through_inner() -> type[BaseCheckpointSaver[Any]]:
    """Defines both history methods as a walk of its own over ``self._inner.aget_tuple``."""

    class Adapter(shipped()):  # type: ignore[misc]
        async def aget_delta_channel_history(
            self, *, config: Any, channels: Sequence[str]
        ) -> Mapping[str, Any]:
            await self._inner.aget_tuple(config)
            return {}

        def get_delta_channel_history(
            self, *, config: Any, channels: Sequence[str]
        ) -> Mapping[str, Any]:
            self._inner.get_tuple(config)
            return {}

    return Adapter


def not_a_saver() -> type:
    class Adapter:
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        async def aget_tuple(self, config: Any) -> Any:
            return await self._inner.aget_tuple(config)

    return Adapter


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Callable[[Any], None]:
    """Installs fake ``langgraph_api`` modules whose adapter module holds the given class,
    as a langgraph-api of version 99.0 (no version cap applies)."""
    real = importlib.metadata.version

    def version(name: str) -> str:
        return "99.0" if name == "langgraph-api" else real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.setattr(ag, "_warned", False)
    pkg = types.ModuleType("langgraph_api")
    sub = types.ModuleType("langgraph_api._checkpointer")
    adapter = types.ModuleType("langgraph_api._checkpointer._adapter")
    pkg._checkpointer = sub  # type: ignore[attr-defined]
    sub._adapter = adapter  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "langgraph_api", pkg)
    monkeypatch.setitem(sys.modules, "langgraph_api._checkpointer", sub)
    monkeypatch.setitem(sys.modules, "langgraph_api._checkpointer._adapter", adapter)

    def install(cls: Any) -> None:
        if cls is None:
            if hasattr(adapter, "_CustomCheckpointerAdapter"):
                delattr(adapter, "_CustomCheckpointerAdapter")
        else:
            adapter._CustomCheckpointerAdapter = cls  # type: ignore[attr-defined]

    return install


@pytest.fixture
def caught(caplog: pytest.LogCaptureFixture) -> Iterator[list[warnings.WarningMessage]]:
    caplog.set_level(logging.INFO, logger="langgraph_delta_postgres")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        yield record


def _warnings_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "langgraph_delta_postgres" and r.levelno == logging.WARNING
    ]


def test_the_shipped_shape_is_patched_on_any_version(
    server: Callable[[Any], None],
    caught: list[warnings.WarningMessage],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cls = shipped()
    server(cls)
    # The old version cap is not consulted: 99.0 is far outside it.
    monkeypatch.setattr(ag, "TESTED_LANGGRAPH_API", ((0, 1), (0, 2)))
    assert ag._adapter_shape(cls) == (ag._PATCH, "")
    assert ag.patch_agent_server_adapter() is True
    first = vars(cls)["aget_delta_channel_history"]
    assert vars(cls)["get_delta_channel_history"] is ag._get_delta_channel_history
    assert vars(cls)[ag._MARK] is True
    assert ag.patch_agent_server_adapter() is True  # idempotent
    assert vars(cls)["aget_delta_channel_history"] is first
    assert caught == [] and _warnings_logged(caplog) == []

    # The patched adapter forwards to the saver it wraps, async and sync.
    adapter = cls(Saver())  # type: ignore[call-arg, arg-type]  # shipped(): takes a saver
    got: object = asyncio.run(adapter.aget_delta_channel_history(config=CFG, channels=["m"]))
    assert got == {"from": "inner async", "channels": ["m"]}
    got_sync: object = adapter.get_delta_channel_history(config=CFG, channels=["m"])
    assert got_sync == {"from": "inner sync", "channels": ["m"]}
    # A wrapped saver without its own: BaseCheckpointSaver's walk, on the adapter (async:
    # the server's adapter has no sync get_tuple for the sync walk, patched or not).
    plain = cls(PlainSaver())  # type: ignore[call-arg, arg-type]  # shipped(): takes a saver
    assert ag._inner_saver(plain, "aget_delta_channel_history") is None
    walked = asyncio.run(PlainSaver().aget_delta_channel_history(config=CFG, channels=["m"]))
    assert asyncio.run(plain.aget_delta_channel_history(config=CFG, channels=["m"])) == walked


def test_the_replacements_have_the_signature_they_replace() -> None:
    for fn in (ag._aget_delta_channel_history, ag._get_delta_channel_history):
        assert ag._parameters(fn) == ag._HISTORY_PARAMETERS
    for name in ag._HISTORY_METHODS:
        assert ag._parameters(getattr(BaseCheckpointSaver, name)) == ag._HISTORY_PARAMETERS


def test_an_adapter_without_inner_at_run_time_walks_instead_of_recursing() -> None:
    # __getattr__ delegates to self._inner: a missing _inner must not recurse.
    cls = shipped()
    cls.aget_delta_channel_history = ag._aget_delta_channel_history  # type: ignore[method-assign]
    adapter = cls.__new__(cls)
    assert ag._inner_saver(adapter, "aget_delta_channel_history") is None


UNKNOWN_SHAPES = {
    "no _inner": (wraps_as_saver, "__init__ does not use self._inner"),
    "aget_tuple not through _inner": (reads_without_inner, "aget_tuple does not use self._inner"),
    "own history methods": (defines_history_itself, "defines aget_delta_channel_history and"),
    "forwards async only": (forwards_async_only, "defines aget_delta_channel_history itself"),
    "forwards one of two": (forwards_async_only_of_two, "not both as a call of self._inner"),
    "calls another attribute": (forwards_elsewhere, "not both as a call of self._inner"),
    "walks through _inner": (walks_through_inner, "not both as a call of self._inner"),
    "not a saver": (not_a_saver, "not a BaseCheckpointSaver"),
    "no class": (lambda: None, "missing or not a BaseCheckpointSaver"),
}


@pytest.mark.parametrize("variant", list(UNKNOWN_SHAPES))
def test_an_unknown_shape_is_left_alone_with_one_warning(
    variant: str,
    server: Callable[[Any], None],
    caught: list[warnings.WarningMessage],
    caplog: pytest.LogCaptureFixture,
) -> None:
    make, reason = UNKNOWN_SHAPES[variant]
    cls = make()
    server(cls)
    before = dict(vars(cls)) if cls is not None else None
    assert ag._adapter_shape(cls)[0] == ag._UNKNOWN
    assert ag.patch_agent_server_adapter() is False
    assert ag.patch_agent_server_adapter() is False
    if cls is not None:
        assert dict(vars(cls)) == before  # nothing patched
    assert len(caught) == 1 and caught[0].category is RuntimeWarning
    message = str(caught[0].message)
    assert caught[0].filename == __file__  # attributed to the caller
    assert reason in message, message
    assert "langgraph-api 99.0" in message
    assert "not patching it" in message
    assert "one aget_tuple per ancestor" in message and "one history statement" in message
    assert "121 statements instead of 1" in message
    assert _warnings_logged(caplog) == [message]  # the same text, once, on the logger


def test_a_different_base_signature_is_left_alone(
    server: Callable[[Any], None],
    caught: list[warnings.WarningMessage],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A future langgraph-checkpoint whose base method takes config positionally.
    async def positional(self: Any, config: Any, channels: Sequence[str]) -> Any:
        return {}

    monkeypatch.setattr(BaseCheckpointSaver, "aget_delta_channel_history", positional)
    cls = shipped()
    server(cls)
    assert ag.patch_agent_server_adapter() is False
    assert "aget_delta_channel_history" not in vars(cls)
    assert len(caught) == 1
    assert "(self, *, config, channels)" in str(caught[0].message)
    assert len(_warnings_logged(caplog)) == 1


def test_an_adapter_that_forwards_itself_is_fine_and_not_patched(
    server: Callable[[Any], None],
    caught: list[warnings.WarningMessage],
    caplog: pytest.LogCaptureFixture,
) -> None:
    cls = forwards_natively()
    server(cls)
    own = vars(cls)["get_delta_channel_history"]
    assert ag._adapter_shape(cls)[0] == ag._FORWARDS
    assert ag.patch_agent_server_adapter() is True
    assert vars(cls)["get_delta_channel_history"] is own and ag._MARK not in vars(cls)
    assert caught == [] and _warnings_logged(caplog) == []
    assert any("forwards" in r.getMessage() for r in caplog.records)
    # A subclass of a patched class inherits forwarders that call self._inner: fine too.
    parent = shipped()
    server(parent)
    assert ag.patch_agent_server_adapter() is True

    class Child(parent):  # type: ignore[valid-type,misc]
        pass

    assert ag._adapter_shape(Child)[0] == ag._FORWARDS


def test_an_adapter_module_that_does_not_import_warns(
    server: Callable[[Any], None],
    caught: list[warnings.WarningMessage],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "langgraph_api._checkpointer", None)
    assert ag.patch_agent_server_adapter() is False
    assert len(caught) == 1
    assert "cannot import langgraph-api 99.0's checkpointer adapter" in str(caught[0].message)
    assert "one aget_tuple per ancestor" in str(caught[0].message)
    assert len(_warnings_logged(caplog)) == 1

