"""Postgres checkpointer for LangGraph with SQL-side DeltaChannel history.

``DeltaPostgresSaver`` / ``AsyncDeltaPostgresSaver`` store checkpoints in the same tables
and format as ``langgraph-checkpoint-postgres`` 3.2 and answer
``get_delta_channel_history`` with one recursive SQL statement.

This package is the library alone: the ``langgraph-delta-pg`` commands live in
:mod:`.cli` and the benchmark in :mod:`.bench`, imported only when they run.
"""

from __future__ import annotations

from typing import Any

from . import _compat  # noqa: F401  (first: a clear error on an unsupported langgraph-checkpoint)
from ._ops.retention import PruneStats
from ._stats import CacheStats, OrderStats, SaverStats, WalkStats
from .aio import AsyncDeltaPostgresSaver
from .errors import (
    CorruptCheckpointError,
    DeltaPostgresError,
    HistoryError,
    LostParentError,
    MigrationError,
    PrunedValueError,
    ReplicaMismatchError,
    SetupRequiredError,
    StaleServerError,
    _deprecated,
)
from .saver import DeltaPostgresSaver

__version__ = "0.1.0"

__all__ = [
    "AsyncDeltaPostgresSaver",
    "CacheStats",
    "CorruptCheckpointError",
    "DeltaPostgresError",
    "DeltaPostgresSaver",
    "HistoryError",
    "LostParentError",
    "MigrationError",
    "OrderStats",
    "PruneStats",
    "PrunedValueError",
    "ReplicaMismatchError",
    "SaverStats",
    "SetupRequiredError",
    "StaleServerError",
    "WalkStats",
    "__version__",
]


def __getattr__(name: str) -> Any:
    """``DeltaPruneError``: still importable, with a DeprecationWarning (see .errors)."""
    return _deprecated(__name__, name)
