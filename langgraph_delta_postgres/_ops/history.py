"""get_delta_channel_history (``sql/delta_history.sql``): one walk statement, through the
decoded-value cache when there is one, or the rows get_tuple prefetched."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import DeltaChannelHistory, get_checkpoint_id

from .._cache import NO_PLAN, Plan, gc_paused
from .._checks import check_names
from ..errors import HistoryError
from .base import _PREFETCH, Op, Stmt, _ns, _thread_id
from .listed import _Listed

if TYPE_CHECKING:
    from .context import SaverCore


def wanted_channels(channels: Sequence[str]) -> list[str]:
    """The distinct requested channels, in order (empty: the answer is ``{}``, no query)."""
    return list(dict.fromkeys(check_names("channels", channels, "channel name")))


def _op_delta_history(
    ctx: SaverCore, config: RunnableConfig, wanted: list[str]
) -> Op[dict[str, DeltaChannelHistory]]:
    """``wanted``: distinct channel names, as :func:`wanted_channels` gives them."""
    thread_id, ns = _thread_id(config), _ns(config)
    checkpoint_id = get_checkpoint_id(config) or None
    cache = ctx.history_cache
    pre = _PREFETCH.get()
    if isinstance(pre, _Listed):
        if pre.saver is ctx and pre.thread_id == thread_id and checkpoint_id:
            with gc_paused():  # see _cache/store.py, gc_paused
                got_listed = pre.answer(ns, checkpoint_id, wanted, ctx.serde.loads_typed)
            if got_listed is not None:
                ctx._walk.answered(prefetched=True, uncached=False)
                return got_listed
    elif pre is not None:
        _PREFETCH.set(None)  # taken once
        if (
            pre.saver is ctx
            and pre.key == (thread_id, ns, checkpoint_id)
            and set(wanted) <= set(pre.channels)
        ):
            got = history_answer(ctx, pre.plan, pre.channels, pre.rows, prefetched=True)
            return {ch: got[ch] for ch in wanted}
    plan = cache.plan(thread_id, ns, checkpoint_id, wanted) if cache is not None else NO_PLAN
    rows = yield Stmt(
        ctx.history_query(),
        ctx._history_params(thread_id, ns, checkpoint_id, wanted, plan),
        by_position=True,
        binary=True,
    )
    ctx._walk.ran(rows)
    return history_answer(ctx, plan, wanted, rows)


def history_answer(
    ctx: SaverCore, plan: Plan, channels: list[str], rows: list[tuple[Any, ...]], *,
    prefetched: bool = False,
) -> dict[str, DeltaChannelHistory]:
    """The answer built from the history statement's rows: through the cache (which
    keeps what they hold) when there is one and the thread fits it (a plan without a
    bucket asked the statement what a saver without a cache asks)."""
    cache = ctx.history_cache
    if cache is not None and plan.bucket is not None:
        got = cache.answer(
            plan, channels, rows, ctx.serde.loads_typed,
            lambda row: raise_history_error(ctx, row),
        )
        ctx._walk.answered(prefetched=prefetched, uncached=False)
        return got
    result = rows_to_history(ctx, channels, rows)
    if cache is not None:
        cache.answered_without(plan, rows)
    ctx._walk.answered(prefetched=prefetched, uncached=cache is not None)
    return result


def raise_history_error(ctx: SaverCore, row: tuple[Any, ...]) -> None:
    """Raise the HistoryError of the walk's 'x' row (a cycle, or too deep)."""
    kind, checkpoint_id, why = row[0], row[6], row[7]
    if kind == "x" and why == "cycle":
        raise HistoryError(
            f"parent chain is corrupt: checkpoint {checkpoint_id!r} is its own ancestor "
            "(a cycle of parent_checkpoint_id pointers)"
        )
    raise HistoryError(
        f"parent chain of checkpoint {checkpoint_id!r} is deeper than "
        f"max_history_depth={ctx.max_history_depth} (corrupt, or raise the limit)"
    )


def rows_to_history(
    ctx: SaverCore, channels: list[str], rows: list[tuple[Any, ...]]
) -> dict[str, DeltaChannelHistory]:
    """Rows of ``delta_history.sql`` without the cache (so no 'c' / 'h' rows and
    every seed blob sent; oldest first, writes in ``writes_sort_key`` order) -> the
    contract's per-channel entries."""
    loads = ctx.serde.loads_typed
    result: dict[str, DeltaChannelHistory] = {ch: {"writes": []} for ch in channels}
    appenders = {ch: entry["writes"].append for ch, entry in result.items()}
    with gc_paused():  # see _cache/store.py, gc_paused
        for row in rows:
            kind, channel, task_id, type_, blob, inline = row[:6]
            if kind == "w":
                appenders[channel]((task_id, channel, loads((type_, blob))))
            elif kind == "s":
                result[channel]["seed"] = loads((type_, blob)) if type_ else inline
            else:
                raise_history_error(ctx, row)
    return result
