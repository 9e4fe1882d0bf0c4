"""Postgres checkpointer for LangGraph with SQL-side DeltaChannel history.

``DeltaPostgresSaver`` / ``AsyncDeltaPostgresSaver`` store checkpoints in the same tables
and format as ``langgraph-checkpoint-postgres`` 3.2 and answer
``get_delta_channel_history`` with one recursive SQL statement.
"""

from __future__ import annotations

from . import _compat  # noqa: F401  (first: a clear error on an unsupported langgraph-checkpoint)
from ._core import (
    CorruptCheckpointError,
    DeltaPruneError,
    HistoryError,
    PruneStats,
    SetupRequiredError,
)
from ._stats import CacheStats, SaverStats, WalkStats
from .aio import AsyncDeltaPostgresSaver
from .migrate import MigrationError
from .saver import DeltaPostgresSaver

__version__ = "0.1.0"

__all__ = [
    "AsyncDeltaPostgresSaver",
    "CacheStats",
    "CorruptCheckpointError",
    "DeltaPostgresSaver",
    "DeltaPruneError",
    "HistoryError",
    "MigrationError",
    "PruneStats",
    "SaverStats",
    "SetupRequiredError",
    "WalkStats",
    "__version__",
]
