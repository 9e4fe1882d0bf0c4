"""LangGraph Agent Server (``langgraph-api``) wiring: the checkpointer ``langgraph.json`` loads.

.. code-block:: json

    {"checkpointer": {"path": "langgraph_delta_postgres.agent_server.checkpointer"}}

:func:`checkpointer` is an async context manager that opens an
:class:`.AsyncDeltaPostgresSaver` on a connection pool, runs ``setup()`` and yields it.
It is configured by environment variables:

========================================  ==================================================
``LANGGRAPH_DELTA_PG_DSN``                Postgres connection string (required)
``LANGGRAPH_DELTA_PG_POOL_SIZE``          connections in the pool (default 10)
``LANGGRAPH_DELTA_PG_SCHEMA``             Postgres schema of the tables (default: search_path)
``LANGGRAPH_DELTA_PG_PREPARE_THRESHOLD``  ``none`` behind PgBouncer in transaction mode
========================================  ==================================================

The server wraps a custom checkpointer in its own adapter class, which forwards the
calls it knows (``aget_tuple``, ``aput``, ``aprune``, ``acopy_thread``, ...) but not
``aget_delta_channel_history``: without help, every ``DeltaChannel`` load falls back to
``BaseCheckpointSaver``'s walk, one ``aget_tuple`` per ancestor instead of one statement.
:func:`patch_agent_server_adapter` (called by :func:`checkpointer`; call it yourself in a
``checkpointer.py`` of your own) makes that adapter forward the history calls to the
wrapped saver. It patches only the ``langgraph-api`` versions it was tested with
(:data:`TESTED_LANGGRAPH_API`); on any other version it warns once and changes nothing,
so the server still works, only slower on ``DeltaChannel`` loads.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import re
import warnings
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, DeltaChannelHistory

from .aio import AsyncDeltaPostgresSaver

__all__ = [
    "DSN_ENV",
    "POOL_SIZE_ENV",
    "PREPARE_THRESHOLD_ENV",
    "SCHEMA_ENV",
    "TESTED_LANGGRAPH_API",
    "checkpointer",
    "patch_agent_server_adapter",
]

DSN_ENV = "LANGGRAPH_DELTA_PG_DSN"
POOL_SIZE_ENV = "LANGGRAPH_DELTA_PG_POOL_SIZE"
SCHEMA_ENV = "LANGGRAPH_DELTA_PG_SCHEMA"
PREPARE_THRESHOLD_ENV = "LANGGRAPH_DELTA_PG_PREPARE_THRESHOLD"
DEFAULT_POOL_SIZE = 10
DEFAULT_PREPARE_THRESHOLD = 5

#: ``langgraph-api`` versions whose ``_CustomCheckpointerAdapter`` the patch was tested
#: on: ``low <= version < high``.
TESTED_LANGGRAPH_API: tuple[tuple[int, ...], tuple[int, ...]] = ((0, 16, 7), (0, 17))

_MARK = "_langgraph_delta_postgres_forwarding"
_warned = False


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        m = re.match(r"\d+", piece)
        if m is None:
            break
        parts.append(int(m.group()))
        if m.end() < len(piece):  # 0.17.0rc1: stop at the pre-release tag
            break
    return tuple(parts)


def _warn_once(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _overrides(inner: Any, name: str) -> bool:
    return getattr(type(inner), name, None) is not getattr(BaseCheckpointSaver, name)


async def _aget_delta_channel_history(
    self: Any, *, config: RunnableConfig, channels: Sequence[str]
) -> Mapping[str, DeltaChannelHistory]:
    inner = self._inner
    if _overrides(inner, "aget_delta_channel_history"):
        return await inner.aget_delta_channel_history(  # type: ignore[no-any-return]
            config=config, channels=channels
        )
    return await BaseCheckpointSaver.aget_delta_channel_history(
        self, config=config, channels=channels
    )


def _get_delta_channel_history(
    self: Any, *, config: RunnableConfig, channels: Sequence[str]
) -> Mapping[str, DeltaChannelHistory]:
    inner = self._inner
    if _overrides(inner, "get_delta_channel_history"):
        return inner.get_delta_channel_history(  # type: ignore[no-any-return]
            config=config, channels=channels
        )
    return BaseCheckpointSaver.get_delta_channel_history(self, config=config, channels=channels)


def patch_agent_server_adapter() -> bool:
    """Make the Agent Server's checkpointer adapter forward ``aget_delta_channel_history``
    and ``get_delta_channel_history`` to the saver it wraps (when that saver overrides
    them). Idempotent. Returns whether the adapter forwards them now.

    Without ``langgraph-api`` installed there is nothing to patch (``False``, silently).
    On a version outside :data:`TESTED_LANGGRAPH_API`, or one whose adapter does not have
    the expected shape, it warns once (``RuntimeWarning``) and changes nothing.
    """
    try:
        version = importlib.metadata.version("langgraph-api")
    except importlib.metadata.PackageNotFoundError:
        return False
    low, high = TESTED_LANGGRAPH_API
    lo_s, hi_s = ".".join(map(str, low)), ".".join(map(str, high))
    if not (low <= _version_tuple(version) < high):
        _warn_once(
            f"langgraph-delta-postgres: langgraph-api {version} is outside the versions the "
            f"checkpointer adapter patch was tested with (>={lo_s},<{hi_s}); not patching it. "
            "DeltaChannel loads in the server then walk one aget_tuple per ancestor "
            "instead of one history statement; the results are the same."
        )
        return False
    try:
        from langgraph_api._checkpointer import _adapter
    except ImportError as e:
        _warn_once(
            f"langgraph-delta-postgres: cannot import langgraph-api's checkpointer adapter "
            f"({e}); not patching it (DeltaChannel loads in the server stay slower)"
        )
        return False
    cls = getattr(_adapter, "_CustomCheckpointerAdapter", None)
    if not isinstance(cls, type) or not issubclass(cls, BaseCheckpointSaver):
        _warn_once(
            f"langgraph-delta-postgres: langgraph-api {version} has no "
            "_CustomCheckpointerAdapter; not patching it"
        )
        return False
    if not getattr(cls, _MARK, False):
        cls.aget_delta_channel_history = _aget_delta_channel_history  # type: ignore[method-assign]
        cls.get_delta_channel_history = _get_delta_channel_history  # type: ignore[method-assign]
        setattr(cls, _MARK, True)
    return True


def _env_int(name: str, default: int | None, *, allow_none: bool = False) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if allow_none and raw.lower() == "none":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < (0 if allow_none else 1):
        raise ValueError(
            f"{name}={raw!r}: expected a whole number of at least {0 if allow_none else 1}"
            + (" or 'none'" if allow_none else "")
        )
    return value


@contextlib.asynccontextmanager
async def checkpointer() -> AsyncIterator[AsyncDeltaPostgresSaver]:
    """An :class:`.AsyncDeltaPostgresSaver` on a pool, migrated, for the Agent Server.

    Reads :data:`DSN_ENV` (required), :data:`POOL_SIZE_ENV`, :data:`SCHEMA_ENV` and
    :data:`PREPARE_THRESHOLD_ENV`; patches the server's adapter (see
    :func:`patch_agent_server_adapter`); closes the pool on exit.
    """
    dsn = os.environ.get(DSN_ENV, "").strip()
    if not dsn:
        raise ValueError(
            f"{DSN_ENV} is not set: set it to the Postgres connection string of the "
            "checkpointer, e.g. postgresql://user:password@host:5432/dbname "
            "(for a local one: langgraph-delta-pg postgres)"
        )
    pool_size = _env_int(POOL_SIZE_ENV, DEFAULT_POOL_SIZE)
    prepare = _env_int(PREPARE_THRESHOLD_ENV, DEFAULT_PREPARE_THRESHOLD, allow_none=True)
    schema = os.environ.get(SCHEMA_ENV, "").strip() or None
    patch_agent_server_adapter()
    async with AsyncDeltaPostgresSaver.from_conn_string(
        dsn, pool_size=pool_size, schema=schema, prepare_threshold=prepare
    ) as saver:
        await saver.setup()
        yield saver
