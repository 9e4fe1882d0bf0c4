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
wrapped saver. It patches by the adapter's shape, not by version: whatever the
``langgraph-api`` version, it patches only an adapter class that has everything the patch
relies on (see :func:`patch_agent_server_adapter`); on any other shape it warns once and
changes nothing, so the server still works, only slower on ``DeltaChannel`` loads.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import inspect
import logging
import os
import types
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

#: Deprecated: no longer consulted. It was the range of ``langgraph-api`` versions
#: (``low <= version < high``) the adapter patch applied to; the patch now goes by the
#: adapter's shape on any version (see :func:`patch_agent_server_adapter`), and CI runs
#: the Agent Server tests on the lowest version the ``server`` extra allows and on the
#: newest release and pre-release of the index. Kept so that imports of it still work.
TESTED_LANGGRAPH_API: tuple[tuple[int, ...], tuple[int, ...]] = ((0, 16, 7), (0, 17))

log = logging.getLogger("langgraph_delta_postgres")

_MARK = "_langgraph_delta_postgres_forwarding"
_HISTORY_METHODS = ("aget_delta_channel_history", "get_delta_channel_history")
#: The signature of the base-class methods the patch replaces, and of its replacements.
_HISTORY_PARAMETERS = (
    ("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
    ("config", inspect.Parameter.KEYWORD_ONLY),
    ("channels", inspect.Parameter.KEYWORD_ONLY),
)
#: The adapter's attribute that holds the saver it wraps.
_INNER = "_inner"
#: What a server without the patch pays, named in every warning.
_COST = (
    "Without forwarding, DeltaChannel loads in the server walk one aget_tuple per ancestor "
    "(BaseCheckpointSaver's generic history) instead of one history statement: the same "
    "results, more slowly (a get_state on a 30-turn thread: 121 statements instead of 1; "
    "docs/agent-server.md)"
)
_warned = False


def _warn_once(message: str) -> None:
    """A WARNING on the package logger and a RuntimeWarning, once per process."""
    global _warned
    if not _warned:
        _warned = True
        log.warning(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _owner(cls: type, name: str) -> type | None:
    """The class of ``cls``'s MRO whose own namespace defines ``name``."""
    return next((k for k in cls.__mro__ if name in vars(k)), None)


def _code_names(func: Any) -> frozenset[str] | None:
    """The attribute and global names a function's code uses (nested functions and
    comprehensions included), or ``None`` when it is not Python code."""
    try:
        func = inspect.unwrap(func)
    except ValueError:
        return None
    code = getattr(func, "__code__", None)
    if not isinstance(code, types.CodeType):
        return None
    names: set[str] = set()
    stack = [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return frozenset(names)


def _forwards(func: Any, name: str) -> bool:
    """Whether ``func`` (an adapter's own ``name``) calls ``self._inner.<name>``: its code
    names both the wrapped saver's attribute and the method (or it is this module's)."""
    if func in (_aget_delta_channel_history, _get_delta_channel_history):
        return True  # ours, inherited from a class this module patched
    names = _code_names(func)
    return names is not None and _INNER in names and name in names


def _parameters(func: Any) -> tuple[tuple[str, Any], ...] | None:
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return None
    return tuple((p.name, p.kind) for p in sig.parameters.values())


#: Verdicts of :func:`_adapter_shape`.
_PATCH, _FORWARDS, _UNKNOWN = "patch", "forwards", "unknown"


def _adapter_shape(cls: Any) -> tuple[str, str]:
    """What :func:`patch_agent_server_adapter` may do with the adapter class ``cls``:
    ``(_PATCH, "")``, ``(_FORWARDS, why)`` (it forwards the history calls itself: nothing
    to do) or ``(_UNKNOWN, why)`` (leave it alone and warn). See the function's docs."""
    if not isinstance(cls, type) or not issubclass(cls, BaseCheckpointSaver):
        return _UNKNOWN, "its _CustomCheckpointerAdapter is missing or not a BaseCheckpointSaver"
    own = [n for n in _HISTORY_METHODS if _owner(cls, n) is not BaseCheckpointSaver]
    if own:
        if len(own) == len(_HISTORY_METHODS) and all(
            _forwards(getattr(cls, n), n) for n in own
        ):
            return _FORWARDS, f"its adapter forwards {' and '.join(own)} to self.{_INNER} itself"
        return _UNKNOWN, (
            f"its adapter defines {' and '.join(own)} itself, not both as a call of "
            f"self.{_INNER}.<method> that this package recognises as forwarding"
        )
    for name in ("__init__", "aget_tuple"):
        names = _code_names(getattr(cls, name, None))
        if names is None or _INNER not in names:
            return _UNKNOWN, (
                f"its adapter's {name} does not use self.{_INNER} (the wrapped saver "
                "the patch forwards to)"
            )
    for name in _HISTORY_METHODS:
        params = _parameters(getattr(cls, name))
        if params != _HISTORY_PARAMETERS:
            return _UNKNOWN, (
                f"its adapter's inherited {name} does not have the signature "
                "(self, *, config, channels) the patch replaces it with"
            )
    return _PATCH, ""


def _inner_saver(adapter: Any, name: str) -> Any:
    """The wrapped saver when it overrides ``name``, else ``None`` (the base-class walk
    then runs on the adapter). Read without the adapter's ``__getattr__``, which
    delegates to ``self._inner`` and would recurse if it were missing."""
    try:
        inner = object.__getattribute__(adapter, _INNER)
    except AttributeError:
        return None
    if not isinstance(inner, BaseCheckpointSaver):
        return None
    if getattr(type(inner), name, None) is getattr(BaseCheckpointSaver, name):
        return None
    return inner


async def _aget_delta_channel_history(
    self: Any, *, config: RunnableConfig, channels: Sequence[str]
) -> Mapping[str, DeltaChannelHistory]:
    inner = _inner_saver(self, "aget_delta_channel_history")
    if inner is not None:
        return await inner.aget_delta_channel_history(  # type: ignore[no-any-return]
            config=config, channels=channels
        )
    return await BaseCheckpointSaver.aget_delta_channel_history(
        self, config=config, channels=channels
    )


def _get_delta_channel_history(
    self: Any, *, config: RunnableConfig, channels: Sequence[str]
) -> Mapping[str, DeltaChannelHistory]:
    inner = _inner_saver(self, "get_delta_channel_history")
    if inner is not None:
        return inner.get_delta_channel_history(  # type: ignore[no-any-return]
            config=config, channels=channels
        )
    return BaseCheckpointSaver.get_delta_channel_history(self, config=config, channels=channels)


def patch_agent_server_adapter() -> bool:
    """Make the Agent Server's checkpointer adapter forward ``aget_delta_channel_history``
    and ``get_delta_channel_history`` to the saver it wraps (when that saver overrides
    them). Idempotent. Returns whether the adapter forwards them now.

    It goes by the shape of ``langgraph_api._checkpointer._adapter._CustomCheckpointerAdapter``,
    on any ``langgraph-api`` version. It patches the class when everything the patch
    relies on holds:

    - the class exists and subclasses ``BaseCheckpointSaver``;
    - it defines neither history method itself (both are ``BaseCheckpointSaver``'s);
    - its ``__init__`` and its ``aget_tuple`` use ``self._inner`` (their code names it:
      the adapter keeps the wrapped saver there and forwards reads to it);
    - the inherited methods have the signature ``(self, *, config, channels)``.

    An adapter that defines both history methods itself, each calling
    ``self._inner.<the same method>`` (its code names ``_inner`` and the method), already
    forwards them: nothing is patched and the answer is ``True``, without a warning. Any
    other shape (one method defined, or defined without such a call; no ``_inner``;
    another signature; a class that is missing or cannot be imported) is left alone: a
    WARNING on the ``langgraph_delta_postgres`` logger and a ``RuntimeWarning``, once per
    process, name the cost (DeltaChannel loads walk one ``aget_tuple`` per ancestor
    instead of one statement), and the answer is ``False``. The server works either way.

    Without ``langgraph-api`` installed there is nothing to patch (``False``, silently).
    :data:`TESTED_LANGGRAPH_API` is no longer consulted.
    """
    try:
        version = importlib.metadata.version("langgraph-api")
    except importlib.metadata.PackageNotFoundError:
        return False
    try:
        from langgraph_api._checkpointer import _adapter
    except ImportError as e:
        _warn_once(
            f"langgraph-delta-postgres: cannot import langgraph-api {version}'s checkpointer "
            f"adapter ({e}); not patching it. {_COST}."
        )
        return False
    cls = getattr(_adapter, "_CustomCheckpointerAdapter", None)
    if isinstance(cls, type) and vars(cls).get(_MARK, False):
        return True
    verdict, why = _adapter_shape(cls)
    if verdict == _FORWARDS:
        log.info("langgraph-delta-postgres: langgraph-api %s: %s; not patching it", version, why)
        return True
    if verdict == _UNKNOWN:
        _warn_once(
            f"langgraph-delta-postgres: langgraph-api {version}'s checkpointer adapter is not "
            f"of the shape the patch relies on ({why}); not patching it. {_COST}."
        )
        return False
    assert cls is not None
    cls.aget_delta_channel_history = _aget_delta_channel_history
    cls.get_delta_channel_history = _get_delta_channel_history
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
