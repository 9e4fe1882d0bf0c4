"""Value types the copy tests share (tests/unit/test_copies.py,
tests/integration/test_faithful_copies.py)."""

from __future__ import annotations

import threading
from typing import Any

from pydantic import BaseModel, PrivateAttr


class Locked(BaseModel):
    """Makes its lock in ``model_post_init``; its pickle state leaves the lock out."""

    name: str = "x"
    _lock: Any = PrivateAttr(default=None)

    def model_post_init(self, context: Any) -> None:
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[Any, Any]:
        state = super().__getstate__()
        state["__pydantic_private__"] = {**(state["__pydantic_private__"] or {}), "_lock": None}
        return state

    def use(self) -> str:
        """The name, read under the lock (TypeError when the lock is gone)."""
        with self._lock:
            return self.name
