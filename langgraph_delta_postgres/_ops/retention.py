"""Retention (``sql/retention.sql``): prune that keeps what each head's DeltaChannel
state needs, the keep-set itself, and delete_for_runs (whose delete is
``maintenance.delete_runs``). Every statement walks parents with the same ``walk``
block."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import get_checkpoint_id

from .._checks import check_bool, check_ids, check_int, check_str
from ..errors import HistoryError
from .base import Op, Stmt, _ns, _thread_id, logger
from .compaction import DeltaSpecs, check_graph, op_compact_ns
from .maintenance import _op_delete_threads

if TYPE_CHECKING:
    from .context import SaverCore

#: prune strategies; "delete_all" is Agent Server's name for "delete".
PRUNE_STRATEGIES = ("keep_latest", "delete", "delete_all")


@dataclass(frozen=True, slots=True)
class PruneStats:
    """What ``prune`` deleted (or, with ``dry_run=True``, would delete).

    ``threads``: threads pruned (those ``before=`` skipped are not counted);
    ``checkpoints`` / ``writes`` / ``blobs``: rows; ``bytes``: the stored size of their
    values (checkpoint and metadata JSONB, write and blob bytes, as Postgres stores
    them: compressed), i.e. about what the tables shrink by once vacuumed;
    ``hidden``: checkpoints kept only as seeds of the ones left visible, newly marked
    seed_only (no read path returns them again: docs/retention.md)."""

    threads: int = 0
    checkpoints: int = 0
    writes: int = 0
    blobs: int = 0
    bytes: int = 0
    hidden: int = 0

    def __add__(self, other: PruneStats) -> PruneStats:
        return PruneStats(
            *(getattr(self, f.name) + getattr(other, f.name) for f in fields(self))
        )



def bad_chain(ctx: SaverCore, cycle: bool | None) -> str:
    """Why a retention walk stopped on bad data (its 'x' row's ``cycle`` column): the
    two causes read apart, as history.raise_history_error tells them apart for history."""
    if cycle:
        return "a cycle of parent_checkpoint_id pointers"
    return f"deeper than max_history_depth={ctx.max_history_depth}"


def prune_ops(
    ctx: SaverCore,
    thread_ids: Sequence[str],
    strategy: str,
    keep_last: int | None,
    before: datetime | None,
    dry_run: bool,
    graph: Any = None,
) -> list[Op[PruneStats]]:
    """prune: the operations to run, each in its own transaction, whose results add
    up to the answer. ``keep_latest``: one per thread (a huge batch is never one
    long transaction); ``delete``: one for all the threads (atomic, as before).
    Every argument is checked here, before any operation is made: a wrong type
    raises TypeError, a bad value ValueError, and nothing runs."""
    ids = list(dict.fromkeys(check_ids("thread_ids", thread_ids, "thread id")))
    check_str("strategy", strategy)
    if strategy not in PRUNE_STRATEGIES:
        raise ValueError(
            f"unknown prune strategy {strategy!r}: use one of {', '.join(PRUNE_STRATEGIES)}"
        )
    check_int("keep_last", keep_last, low=1, none_ok=True)
    if keep_last is not None and strategy != "keep_latest":
        raise ValueError(f"keep_last applies to strategy='keep_latest', not {strategy!r}")
    if before is not None and not isinstance(before, datetime):
        raise TypeError(
            f"before must be a timezone-aware datetime or None, not {type(before).__name__}"
        )
    if before is not None and before.utcoffset() is None:
        raise ValueError(
            f"before must be a timezone-aware datetime (e.g. datetime.now(UTC) - "
            f"timedelta(days=30)), not {before!r}"
        )
    check_bool("dry_run", dry_run)
    check_graph(graph)
    if not ids:
        return []
    if strategy == "keep_latest":
        specs = DeltaSpecs(graph) if graph is not None else None
        return [
            _op_prune_thread(ctx, t, keep_last or 1, before, dry_run, specs) for t in ids
        ]
    return [_op_prune_delete(ctx, ids, before, dry_run)]


def _walk_params(
    ctx: SaverCore, thread_id: str, ns: str, checkpoint_id: str | None, keep_last: int,
    settled: tuple[str, list[str]] | None = None, **extra: Any,
) -> dict[str, Any]:
    """The parameters of a statement built on ``retention.walk`` (and its target and
    result blocks' own, ``extra``); ``settled``: see :func:`_op_prune_ns`."""
    return {
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        "checkpoint_id": checkpoint_id,
        "keep_last": keep_last,
        "max_depth": ctx.max_history_depth,
        "settled": settled[1] if settled else [],
        "settled_at": settled[0] if settled else None,
        **extra,
    }


def _prune_heads(ctx: SaverCore, thread_id: str, before: datetime | None) -> Op[list[str] | None]:
    """Lock the thread for maintenance; its namespaces, or None when it has no
    checkpoint or ``before`` spares it (its latest checkpoint is not older)."""
    yield Stmt(ctx.queries["retention.lock_thread"], {"thread_id": thread_id}, False)
    heads = yield Stmt(ctx.queries["retention.thread_heads"], {"thread_id": thread_id})
    if not heads:
        return None
    # a thread whose checkpoints are all seed-only reads as deleted: it is old
    visible = [h for h in heads if h["visible"]]
    if before is not None and visible:
        try:
            latest = max(datetime.fromisoformat(h["ts"]) for h in visible)
        except (TypeError, ValueError):
            return None  # a checkpoint without a readable "ts": not known to be old
        if latest.utcoffset() is None or latest >= before:
            return None
    return [h["checkpoint_ns"] for h in heads]


def _op_prune_ns(
    ctx: SaverCore, thread_id: str, ns: str, keep_last: int, dry_run: bool,
    settled: tuple[str, list[str]] | None = None,
) -> Op[PruneStats]:
    """Prune one namespace of a thread to what its latest checkpoint needs (see
    ``retention.prune_result``); ``keep_last=0`` counts everything. ``settled``: a
    checkpoint id and the channels compaction made need nothing older than it."""
    rows = yield Stmt(
        ctx.queries.join(
            "retention.prune_target", "retention.walk", "retention.prune_result"
        ),
        _walk_params(ctx, thread_id, ns, None, keep_last, settled, dry_run=dry_run),
    )
    r = rows[0]
    if r["bad"] is not None:
        raise HistoryError(
            f"prune of thread {thread_id!r} namespace {ns!r} refused, nothing of this "
            f"thread was deleted: its parent chain is corrupt at checkpoint {r['bad']!r} "
            f"({bad_chain(ctx, r['bad_cycle'])})"
        )
    return PruneStats(
        0, r["checkpoints"], r["writes"], r["blobs"], int(r["bytes"]), r["hidden"]
    )


def _op_prune_thread(
    ctx: SaverCore, thread_id: str, keep_last: int, before: datetime | None, dry_run: bool,
    graph: DeltaSpecs | None = None,
) -> Op[PruneStats]:
    """keep_latest of one thread, in one transaction: per namespace, its latest
    checkpoint (or the ``keep_last`` latest of its chain) and the keep-set of every
    DeltaChannel its state needs; everything else goes. With ``graph`` (the
    DeltaChannels of the graph passed to prune), the namespaces it wrote are compacted
    first (_ops/compaction.py)."""
    namespaces = yield from _prune_heads(ctx, thread_id, before)
    if namespaces is None:
        return PruneStats()
    total = PruneStats(threads=1)
    for ns in namespaces:
        settled: tuple[str, list[str]] | None = None
        specs = graph.of(ns) if graph is not None else None
        if specs:
            settled = yield from op_compact_ns(ctx, thread_id, ns, keep_last, specs, dry_run)
        total += yield from _op_prune_ns(ctx, thread_id, ns, keep_last, dry_run, settled)
    if not dry_run:
        ctx._forget_threads([thread_id])
    return total


def _op_prune_delete(
    ctx: SaverCore, thread_ids: list[str], before: datetime | None, dry_run: bool
) -> Op[PruneStats]:
    """strategy="delete": every row of the threads, in one transaction."""
    total = PruneStats()
    doomed: list[str] = []
    for thread_id in thread_ids:
        namespaces = yield from _prune_heads(ctx, thread_id, before)
        if namespaces is None:
            continue
        doomed.append(thread_id)
        total += PruneStats(threads=1)
        for ns in namespaces:
            total += yield from _op_prune_ns(ctx, thread_id, ns, 0, True)
    if doomed and not dry_run:
        yield from _op_delete_threads(ctx, doomed)  # forgets them
    return total


def _op_delta_keepset(ctx: SaverCore, config: RunnableConfig, channels: list[str]) -> Op[set[str]]:
    """get_delta_channel_keepset; ``channels``: distinct names (may be empty)."""
    rows = yield Stmt(
        ctx.queries.join(
            "retention.keepset_target", "retention.walk", "retention.keepset_result"
        ),
        _walk_params(
            ctx, _thread_id(config), _ns(config), get_checkpoint_id(config) or None, 1,
            channels=channels,
        ),
    )
    keep: set[str] = set()
    for r in rows:
        if r["kind"] == "x":
            raise HistoryError(
                f"parent chain of thread {_thread_id(config)!r} is corrupt at checkpoint "
                f"{r['checkpoint_id']!r}: {bad_chain(ctx, r['cycle'])}"
            )
        keep.add(r["checkpoint_id"])
    return keep


def _op_delete_for_runs(ctx: SaverCore, run_ids: Sequence[str]) -> Op[None]:
    """delete_for_runs; ``run_ids`` is checked here, before the driver runs anything."""
    return _delete_for_runs(ctx, check_ids("run_ids", run_ids, "run id"))


def _delete_for_runs(ctx: SaverCore, ids: list[str]) -> Op[None]:
    """Atomic: the driver runs it in one transaction. A checkpoint of the runs that
    a later checkpoint (of another run) needs to load its state is kept, with its
    writes and blobs, and logged; the rest of the runs goes."""
    if not ids:
        return None
    children = yield Stmt(ctx.queries["retention.run_children"], {"run_ids": ids})
    for thread_id in sorted({c["thread_id"] for c in children}):  # sorted: no deadlock
        yield Stmt(ctx.queries["retention.lock_thread"], {"thread_id": thread_id}, False)
    kept: set[tuple[str, str, str]] = set()
    for c in children:
        thread_id, ns = c["thread_id"], c["checkpoint_ns"]
        rows = yield Stmt(
            ctx.queries.join(
                "retention.prune_target", "retention.walk", "retention.keepset_result"
            ),
            _walk_params(ctx, thread_id, ns, c["checkpoint_id"], 1),
        )
        for r in rows:
            if r["kind"] == "x":
                raise HistoryError(
                    f"delete_for_runs refused, nothing was deleted: the parent chain of "
                    f"thread {thread_id!r} is corrupt at checkpoint {r['checkpoint_id']!r} "
                    f"({bad_chain(ctx, r['cycle'])})"
                )
            if r["checkpoint_id"] != c["checkpoint_id"]:
                kept.add((thread_id, ns, r["checkpoint_id"]))
    touched = yield Stmt(
        ctx.queries["maintenance.delete_runs"],
        {
            "run_ids": ids,
            "kept_threads": [k[0] for k in kept],
            "kept_ns": [k[1] for k in kept],
            "kept_ids": [k[2] for k in kept],
        },
    )
    # ``kept`` is every checkpoint of the keep-sets, some of other runs (never
    # deleted here anyway): the statement says which of the runs' own it kept.
    spared = sorted(
        (r["thread_id"], r["checkpoint_ns"], r["checkpoint_id"])
        for r in touched
        if r["kind"] == "k"
    )
    if spared:
        logger.warning(
            "delete_for_runs(%s): kept %d checkpoint(s) of these runs that later "
            "checkpoints rebuild their DeltaChannel state from (thread/namespace/"
            "checkpoint): %s",
            ", ".join(ids),
            len(spared),
            ", ".join(f"{t}/{n or '-'}/{i}" for t, n, i in spared),
        )
    # Memory only: a walk cannot reach a deleted row, and a kept one is unchanged.
    ctx._forget_threads([r["thread_id"] for r in touched if r["kind"] == "d"])
    return None
