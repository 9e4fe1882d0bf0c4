"""The suite's DeltaChannel reducer, in a module that imports nothing: the deployment
worker (_deploy_worker.py) runs it next to the previous release's package too, where
tests/graph/_graphs.py (which imports this release's test plugins) may not be imported."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def append_reducer(state: Sequence[Any], writes: Sequence[Any]) -> list[Any]:
    """Order-sensitive, batching-invariant DeltaChannel reducer."""
    out = list(state)
    for w in writes:
        out.extend(w if isinstance(w, list) else [w])
    return out
