"""Maintenance: delete_thread and copy_thread (``sql/maintenance.sql``; its
``delete_runs`` is run by :mod:`.retention`'s delete_for_runs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._checks import check_id
from .base import Op, Stmt

if TYPE_CHECKING:
    from .context import SaverCore


def _op_delete_thread(ctx: SaverCore, thread_id: str) -> Op[None]:
    """delete_thread; ``thread_id`` is checked here, before the driver runs anything."""
    return _op_delete_threads(ctx, [check_id("thread_id", thread_id)])


def _op_delete_threads(ctx: SaverCore, thread_ids: Sequence[str]) -> Op[None]:
    """Every row of these threads (ids already checked)."""
    yield Stmt(
        ctx.queries["maintenance.delete_threads"],
        {"thread_ids": list(thread_ids)},
        fetch=False,
    )
    ctx._forget_threads(thread_ids)
    return None


def _op_copy_thread(ctx: SaverCore, source: str, target: str) -> Op[None]:
    """copy_thread; the ids are checked here, before the driver runs anything."""
    source = check_id("source_thread_id", source)
    target = check_id("target_thread_id", target)
    if source == target:
        raise ValueError("copy_thread: source and target thread ids are the same")
    return _copy_thread(ctx, source, target)


def _copy_thread(ctx: SaverCore, source: str, target: str) -> Op[None]:
    """Atomic: the driver runs it in one transaction."""
    rows = yield Stmt(ctx.queries["maintenance.thread_exists"], {"thread_id": target})
    if rows:
        raise ValueError(
            f"copy_thread: target thread {target!r} already has checkpoints; "
            "delete it first or choose another id"
        )
    yield Stmt(
        ctx.queries["maintenance.copy_thread"],
        {"source_thread_id": source, "target_thread_id": target},
        fetch=False,
    )
    yield Stmt(ctx.queries["maintenance.forget_recent"], {"thread_id": target}, fetch=False)
    ctx._forget_threads([target])
    return None
