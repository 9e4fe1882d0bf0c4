"""get_delta_channel_history (``sql/delta_history.sql``): one walk statement, through the
decoded-value cache when there is one, or the rows get_tuple prefetched."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import DeltaChannelHistory, get_checkpoint_id

from .._cache import NO_PLAN, Plan, gc_paused
from .._checks import check_names
from ..errors import HistoryError, PrunedValueError
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
            got = history_answer(
                ctx, pre.plan, pre.channels, pre.rows, pre.key, prefetched=True
            )
            return {ch: got[ch] for ch in wanted}
    plan = cache.plan(thread_id, ns, checkpoint_id, wanted) if cache is not None else NO_PLAN
    rows = yield Stmt(
        ctx.history_query(),
        ctx._history_params(thread_id, ns, checkpoint_id, wanted, plan),
        by_position=True,
        binary=True,
    )
    ctx._walk.ran(rows)
    return history_answer(ctx, plan, wanted, rows, (thread_id, ns, checkpoint_id))


#: (thread, namespace, checkpoint id or None for the latest) a history answer is of
Target = tuple[str, str, str | None]


def history_answer(
    ctx: SaverCore, plan: Plan, channels: list[str], rows: list[tuple[Any, ...]],
    target: Target, *, prefetched: bool = False,
) -> dict[str, DeltaChannelHistory]:
    """The answer built from the history statement's rows: through the cache (which
    keeps what they hold) when there is one and the thread fits it (a plan without a
    bucket asked the statement what a saver without a cache asks). ``target``: what the
    answer is of, for the errors' messages."""
    cache = ctx.history_cache
    if cache is not None and plan.bucket is not None:
        got = cache.answer(
            plan, channels, rows, ctx.serde.loads_typed,
            lambda row: raise_history_error(ctx, row, target),
        )
        ctx._walk.answered(prefetched=prefetched, uncached=False)
        return got
    result = rows_to_history(ctx, channels, rows, target)
    if cache is not None:
        cache.answered_without(plan, rows)
    ctx._walk.answered(prefetched=prefetched, uncached=cache is not None)
    return result


def raise_history_error(ctx: SaverCore, row: tuple[Any, ...], target: Target) -> None:
    """Raise the HistoryError of the walk's 'x' row (a cycle, too deep, or a value
    gone: PrunedValueError)."""
    kind, checkpoint_id, why = row[0], row[6], row[7]
    if kind == "x" and why == "gone":
        raise_value_gone(target, row[1], checkpoint_id, row[2])
    if kind == "x" and why == "cycle":
        raise HistoryError(
            f"parent chain is corrupt: checkpoint {checkpoint_id!r} is its own ancestor "
            "(a cycle of parent_checkpoint_id pointers)"
        )
    raise HistoryError(
        f"parent chain of checkpoint {checkpoint_id!r} is deeper than "
        f"max_history_depth={ctx.max_history_depth} (corrupt, or raise the limit)"
    )


def raise_value_gone(target: Target, channel: str, at: str, parent: str) -> NoReturn:
    """Raise the PrunedValueError of the walk's 'x' row of a value gone
    (sql/delta_history.sql, "Values gone"): checkpoint ``at`` (the target, or an
    ancestor on its chain) claims a value of ``channel`` that is gone, and its
    ``parent`` is gone too."""
    thread_id, ns, checkpoint_id = target
    which = f"checkpoint {checkpoint_id!r}" if checkpoint_id else "the latest checkpoint"
    who = "it" if at == checkpoint_id else f"checkpoint {at!r} of its chain"
    raise PrunedValueError(
        f"cannot rebuild channel {channel!r} of {which} of thread {thread_id!r} "
        f"(namespace {ns!r}): {who} claims a stored value of {channel!r} that is gone, and "
        f"its parent {parent!r} is gone too, while older checkpoints of the namespace "
        "remain. Retention (prune, delete_for_runs; or delete_thread while several runs "
        "wrote to the thread) deleted them while a run was writing this checkpoint on top "
        "of them (a run forking from a checkpoint prune was deleting); read on, the state "
        "would silently restart from an empty value. "
        "Continue the thread from an older checkpoint (get_state_history lists them) or "
        "delete the thread, and run prune while no run forks from what it deletes (see "
        "docs/retention.md)."
    )


def rows_to_history(
    ctx: SaverCore, channels: list[str], rows: list[tuple[Any, ...]], target: Target
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
                raise_history_error(ctx, row, target)
    return result
