"""What this package takes from langgraph-checkpoint beyond its stable API, in one place.

``_DeltaSnapshot`` (the full value a ``DeltaChannel`` stores every ``snapshot_frequency``
updates) is private to langgraph-checkpoint, and ``DeltaChannelHistory`` is new in 4.3 and
marked beta there. The dependency range in ``pyproject.toml`` is the one CI tests (its
lowest and its newest versions); a version without these names fails here, at import,
with an error that says which versions work instead of an ``ImportError`` deep inside.
"""

from __future__ import annotations

import importlib.metadata

#: The langgraph-checkpoint versions CI tests (pyproject's dependency range).
SUPPORTED_LANGGRAPH_CHECKPOINT = ">=4.3,<4.4"

try:
    from langgraph.checkpoint.base import DeltaChannelHistory
    from langgraph.checkpoint.serde.types import _DeltaSnapshot
except ImportError as e:  # pragma: no cover - exercised in a subprocess test
    try:
        installed = importlib.metadata.version("langgraph-checkpoint")
    except importlib.metadata.PackageNotFoundError:
        installed = "not installed"
    raise ImportError(
        f"langgraph-delta-postgres needs langgraph-checkpoint{SUPPORTED_LANGGRAPH_CHECKPOINT} "
        f"(installed: {installed}; {e}). It reads DeltaChannel snapshots "
        "through langgraph-checkpoint's private _DeltaSnapshot and the beta "
        "DeltaChannelHistory, which other versions may not have: "
        f"pip install 'langgraph-checkpoint{SUPPORTED_LANGGRAPH_CHECKPOINT}'"
    ) from e

__all__ = ["SUPPORTED_LANGGRAPH_CHECKPOINT", "DeltaChannelHistory", "_DeltaSnapshot"]
