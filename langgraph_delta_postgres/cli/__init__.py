"""The ``langgraph-delta-pg`` commands (also ``python -m langgraph_delta_postgres``).

:mod:`.main` is the parser and the database commands (``migrate``, ``status``,
``postgres``); :mod:`.demo`, :mod:`.inspect` and :mod:`.prune` are the other commands,
each loaded only when it runs (the benchmark is :mod:`langgraph_delta_postgres.bench`).
Not imported by the library.
"""

from __future__ import annotations

from .main import EXIT_PENDING, main

__all__ = ["EXIT_PENDING", "main"]
