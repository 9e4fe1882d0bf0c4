"""The one ``cfg()`` of the test suite: a checkpoint config, typed as what the savers take.

``tests/integration/_helpers.py`` and ``tests/graph/_util.py`` re-export it, so the tests
import it from either, as before.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig


def cfg(thread_id: str, ns: str = "", checkpoint_id: str | None = None) -> RunnableConfig:
    """``{"configurable": {"thread_id", "checkpoint_ns"[, "checkpoint_id"]}}``."""
    c: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        c["checkpoint_id"] = checkpoint_id
    return {"configurable": c}
