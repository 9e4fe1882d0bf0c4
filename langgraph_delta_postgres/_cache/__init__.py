"""The saver's decoded-value cache for ``get_delta_channel_history``.

A checkpoint's rows never change once written, so what one history call fetched and
decoded can answer the next call on the same chain. The cache is three modules:

* :mod:`.store`: what a bucket (one thread and namespace) holds, how the statement is
  told what is held, and how an answer gets its own copies (staleness, isolation);
* :mod:`.policy`: the memory budget, outsized threads, admission and ageing, and a
  thread's first load (which threads get a bucket, and which buckets go);
* :mod:`.cache`: :class:`HistoryCache`, one call's plan and answer, which uses both.

Every name other modules import is re-exported here.
"""

from __future__ import annotations

from .cache import HistoryCache
from .policy import AGE_EVERY, AGE_MIN, MAX_KNOWN, MAX_SHARE, estimate
from .store import (
    BUCKET_OVERHEAD,
    ENTRY_OVERHEAD,
    MAX_TOPS,
    NO_PLAN,
    NODE_OVERHEAD,
    SEP,
    Plan,
    Row,
    gc_paused,
)

__all__ = [
    "AGE_EVERY",
    "AGE_MIN",
    "BUCKET_OVERHEAD",
    "ENTRY_OVERHEAD",
    "MAX_KNOWN",
    "MAX_SHARE",
    "MAX_TOPS",
    "NODE_OVERHEAD",
    "NO_PLAN",
    "SEP",
    "HistoryCache",
    "Plan",
    "Row",
    "estimate",
    "gc_paused",
]
