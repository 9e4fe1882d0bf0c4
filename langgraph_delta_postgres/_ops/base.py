"""What every operation module shares: the statement type, the config helpers, the
DEBUG log of statements, and the get_tuple -> history prefetch slot."""

from __future__ import annotations

import logging
import time
from collections.abc import Generator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from psycopg import sql

from .._cache import Plan
from .._checks import _kind
from .listed import _Listed as _Listed  # the slot holds one (and tests reach it here)

logger = logging.getLogger("langgraph_delta_postgres")
T = TypeVar("T")
Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Stmt:
    """One statement for a driver to execute (``adrive`` / ``drive``, _driver_async.py): the
    statements of the savers' operations, of the migration plan (``migrate._plan``) and
    of the routing savers' ``Query`` steps (``replicas/_ops.py``). ``params``: None sends
    it with the simple query protocol, which takes several statements at once (a
    migration file); ``fetch``: send its rows back, as dicts, or as tuples when
    ``by_position`` (the history statement: thousands of rows, where a dict per row is
    measurable); ``binary``: results in binary format (the statements that read blobs: a
    bytea column in text format is hex, twice its size on the wire and encoded by the
    server, decoded by the client; a scratch timing on a 1.9 MB seed plus 100 writes,
    not a benchmark figure: 16.1 ms in text, 8.5 ms in binary); ``prepare``: psycopg's
    ``execute(prepare=...)`` (None: the connection's prepare_threshold; migrations never
    prepare)."""

    query: sql.Composed | sql.SQL
    params: Mapping[str, Any] | None
    fetch: bool = True
    by_position: bool = False
    binary: bool = False
    prepare: bool | None = None


Op = Generator[Stmt, list[Any], T]


def debug_statements() -> bool:
    """Whether the drivers log each statement (DEBUG on this package's logger). Asked
    once per operation: with DEBUG off, a statement costs no log work at all."""
    return logger.isEnabledFor(logging.DEBUG)


def log_statement(op: Op[Any], stmt: Stmt, started: float, rows: list[Any]) -> None:
    """One DEBUG line per statement: the operation that ran it (its generator's name,
    e.g. ``_op_delta_history``), whether rows were fetched, how many and how long it took
    (execute and fetch). No parameter values: they hold thread ids and user data."""
    logger.debug(
        "%s: %s in %.2f ms",
        getattr(op, "__name__", "operation"),
        f"{len(rows)} rows" if stmt.fetch else "no rows fetched",
        (time.perf_counter() - started) * 1000,
    )


@dataclass(frozen=True, slots=True)
class _Prefetch:
    """The history get_tuple read with its checkpoint (delta_history.tuple_history), for
    the get_delta_channel_history call LangGraph makes next on the same checkpoint."""

    saver: object
    key: tuple[str, str, str]
    channels: list[str]
    plan: Plan
    rows: list[tuple[Any, ...]]


#: One slot per thread / asyncio task (a context): set by get_tuple (taken by the next
#: history call of the same saver if it asks for that checkpoint) or by list (serving
#: the history calls on its checkpoints until the next read or write), and cleared by
#: any write this context makes (so an answer never predates a write its caller made).
_PREFETCH: ContextVar[_Prefetch | _Listed | None] = ContextVar(
    "lgdp_history_prefetch", default=None
)


def _configurable(config: RunnableConfig) -> dict[str, Any]:
    """``config["configurable"]``, or ValueError naming what is missing (a config that is
    None or not a dict, or whose ``configurable`` is not a dict: an AttributeError on
    ``.get`` before, issue 38)."""
    if not isinstance(config, Mapping):
        raise ValueError(
            "config must be a dict with a 'configurable' mapping holding a 'thread_id', "
            f"not {_kind(config)}"
        )
    conf = config.get("configurable")
    if not isinstance(conf, Mapping):
        raise ValueError(
            "config must have a 'configurable' mapping with a 'thread_id'"
            + ("" if conf is None and "configurable" not in config
               else f"; its 'configurable' is {_kind(conf)}")
        )
    return conf


def _thread_id(config: RunnableConfig) -> str:
    conf = _configurable(config)
    if conf.get("thread_id") is None:
        raise ValueError("config['configurable'] needs a 'thread_id'")
    return str(conf["thread_id"])


def _ns(config: RunnableConfig) -> str:
    return cast(str, _configurable(config).get("checkpoint_ns") or "")
