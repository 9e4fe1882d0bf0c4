"""Reading checkpoint tuples: get_tuple and list (``sql/checkpoints.sql``; get_tuple of
the latest checkpoint reads its history too, ``delta_history.tuple_history``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
)
from langgraph.checkpoint.serde.types import TASKS
from psycopg import sql
from psycopg.types.json import Jsonb

from .._cache import NO_PLAN, gc_paused
from .._checks import INT8_MAX, _kind, check_int, check_mapping
from ..errors import CorruptCheckpointError
from .base import _PREFETCH, Op, Row, Stmt, _configurable, _ns, _Prefetch, _thread_id
from .listed import _Listed
from .values import RowValues

if TYPE_CHECKING:
    from .context import SaverCore

#: Keys every stored checkpoint has (the official saver writes them all since format v1).
_CHECKPOINT_KEYS = frozenset(("v", "id", "channel_versions", "versions_seen"))

#: The columns of checkpoints.select_tuples, as delta_history.tuple_history sends them
#: after the history's 8 columns and hist_channels (rows by position).
_TUPLE_COLUMNS = (
    "thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "checkpoint",
    "metadata", "blob_channels", "blob_types", "blob_values", "write_task_ids",
    "write_channels", "write_types", "write_blobs", "send_types", "send_blobs",
    "blob_tokens",
)


def row_to_tuple(ctx: SaverCore, row: Row, decoder: RowValues) -> CheckpointTuple:
    """A row of ``checkpoints.select_tuples`` -> the CheckpointTuple (values decoded, the
    blobs through the call's ``decoder``: see _ops/values.py)."""
    loads = ctx.serde.loads_typed
    stored = row["checkpoint"]
    if (
        not isinstance(stored, dict)
        or not _CHECKPOINT_KEYS <= stored.keys()
        or stored["id"] != row["checkpoint_id"]
    ):
        raise CorruptCheckpointError(
            f"checkpoint {row['checkpoint_id']!r} of thread {row['thread_id']!r} "
            f"(namespace {row['checkpoint_ns']!r}) is corrupt: its stored JSON is not a "
            f"checkpoint with the keys {sorted(_CHECKPOINT_KEYS)} and this id: "
            f"{str(stored)[:200]}"
        )
    checkpoint: dict[str, Any] = dict(stored)
    values: dict[str, Any] = dict(checkpoint.get("channel_values") or {})
    if row["blob_channels"]:
        scope = f"{row['thread_id']}\x1f{row['checkpoint_ns']}"
        for ch, typ, blob, token in zip(
            row["blob_channels"], row["blob_types"], row["blob_values"], row["blob_tokens"],
            strict=True,
        ):
            values[ch] = decoder.value(scope, ch, token, typ, blob)
    if row["send_types"]:
        # Checkpoints older than format v4 kept pending sends as the parent's TASKS
        # writes; LangGraph now expects them as the TASKS channel's value.
        values[TASKS] = [
            loads((t, b)) for t, b in zip(row["send_types"], row["send_blobs"], strict=True)
        ]
        versions = dict(checkpoint.get("channel_versions") or {})
        versions[TASKS] = (
            max(versions.values()) if versions else ctx.get_next_version(None, None)
        )
        checkpoint["channel_versions"] = versions
    checkpoint["channel_values"] = values
    writes: list[PendingWrite] = []
    if row["write_task_ids"]:
        writes = [
            (tid, ch, loads((typ, blob)))
            for tid, ch, typ, blob in zip(
                row["write_task_ids"],
                row["write_channels"],
                row["write_types"],
                row["write_blobs"],
                strict=True,
            )
        ]
    thread_id, ns = row["thread_id"], row["checkpoint_ns"]
    parent = row["parent_checkpoint_id"]
    return CheckpointTuple(
        config={
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": row["checkpoint_id"],
            }
        },
        checkpoint=cast(Checkpoint, checkpoint),
        metadata=cast(CheckpointMetadata, row["metadata"]),
        parent_config=(
            {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": parent,
                }
            }
            if parent
            else None
        ),
        pending_writes=writes,
    )


def _op_get_tuple(ctx: SaverCore, config: RunnableConfig) -> Op[CheckpointTuple | None]:
    """get_tuple. For the latest checkpoint (no checkpoint_id), with the delta
    history LangGraph asks for next read in the same statement (see
    delta_history.tuple_history and :class:`.base._Prefetch`)."""
    thread_id, ns = _thread_id(config), _ns(config)
    checkpoint_id = get_checkpoint_id(config) or None
    cache = ctx.history_cache
    if checkpoint_id is not None:
        # A checkpoint by id: the tuple alone. Callers also read ancestors one by one
        # by id (BaseCheckpointSaver's generic history walk, as langgraph-api's
        # adapter runs it unpatched), where a walk per call would cost the square of
        # the depth; and the checkpoint a run or get_state loads, the one a
        # concurrent prune may supersede and delete, is the latest.
        _PREFETCH.set(None)
        held, _ = cache.values_of(thread_id, ns) if cache is not None else ({}, {})
        rows = yield Stmt(
            ctx.tuple_by_id_query(),
            {"tasks": TASKS, "thread_id": thread_id, "checkpoint_ns": ns,
             "checkpoint_id": checkpoint_id, "held_values": list(held)},
            binary=True,
        )
        if not rows:
            return None
        with gc_paused():  # see _cache/store.py, gc_paused
            return row_to_tuple(ctx, rows[0], RowValues(ctx.serde.loads_typed, held))
    plan = (
        cache.plan(thread_id, ns, None, None, admit_unseen=False)
        if cache is not None else NO_PLAN
    )
    rows = yield Stmt(
        ctx.tuple_history_query(),
        {"tasks": TASKS, **ctx._history_params(thread_id, ns, None, None, plan)},
        by_position=True,
        binary=True,
    )
    # the first row is the 'a' row: the channels walked and the tuple (NULL: none)
    if not rows or rows[0][0] != "a" or rows[0][11] is None:
        _PREFETCH.set(None)
        return None
    first = rows[0]
    row = dict(zip(_TUPLE_COLUMNS, first[9:], strict=True))
    channels = first[8]
    if channels:
        key = (thread_id, ns, row["checkpoint_id"])
        hist = [r[:8] for r in rows[1:]]
        ctx._walk.ran(hist)
        _PREFETCH.set(_Prefetch(ctx, key, channels, plan, hist))
    else:
        _PREFETCH.set(None)
    decoder = RowValues(ctx.serde.loads_typed, plan.held_values, plan.seen_values)
    with gc_paused():  # see _cache/store.py, gc_paused
        got = row_to_tuple(ctx, row, decoder)
    if cache is not None:
        cache.keep_values(plan, decoder.sent, decoder.keep, decoder.sent_bytes)
    return got


def _op_list(
    ctx: SaverCore,
    config: RunnableConfig | None,
    filter: dict[str, Any] | None,
    before: RunnableConfig | None,
    limit: int | None,
) -> Op[list[CheckpointTuple]]:
    """list; the arguments are checked here, before the driver runs anything."""
    check_mapping("config", config)
    if config is not None:
        _thread_id(config)  # a config must name its thread
    check_mapping("filter", filter)
    check_mapping("before", before)
    if before is not None and not isinstance(before.get("configurable"), Mapping):
        raise ValueError(
            "before must be a checkpoint's config, with a 'configurable' mapping holding "
            f"its 'checkpoint_id'; its 'configurable' is {_kind(before.get('configurable'))}"
        )
    # a limit beyond int8 is "no limit" (SQL's LIMIT is a bigint)
    check_int("limit", limit, low=None, high=None, none_ok=True)
    if limit is not None:
        limit = min(limit, INT8_MAX)
    return _list(ctx, config, filter, before, limit)


def _list(
    ctx: SaverCore, config: RunnableConfig | None, filter: dict[str, Any] | None,
    before: RunnableConfig | None, limit: int | None,
) -> Op[list[CheckpointTuple]]:
    """list, its arguments checked (by :func:`_op_list`)."""
    _PREFETCH.set(None)  # the prefetch serves only the call right after get_tuple
    q = ctx.queries
    params: dict[str, Any] = {"tasks": TASKS}
    preds: list[str] = ["checkpoints.where_visible"]  # never a seed-only checkpoint
    held: dict[str, bytes] = {}
    if config is not None:
        params["thread_id"] = _thread_id(config)
        preds.append("checkpoints.where_thread")
        ns = _configurable(config).get("checkpoint_ns")
        if ns is not None:
            params["checkpoint_ns"] = ns
            preds.append("checkpoints.where_ns")
            if ctx.history_cache is not None:  # tokens are unique within one namespace
                held, _ = ctx.history_cache.values_of(params["thread_id"], ns)
        if checkpoint_id := get_checkpoint_id(config):
            params["checkpoint_id"] = checkpoint_id
            preds.append("checkpoints.where_id")
    params["held_values"] = list(held)
    if filter:
        params["filter"] = Jsonb(filter)
        preds.append("checkpoints.where_filter")
    if before is not None and (before_id := get_checkpoint_id(before)):
        params["before"] = before_id
        preds.append("checkpoints.where_before")
    if limit is not None and int(limit) <= 0:
        return []
    gate = ctx._list_gate(params, filter, limit)  # a replica's page gate (.replicas)
    # without a thread, only the keys go through the sort (see checkpoints.keys_newest)
    by_key = config is None and limit is not None
    parts: list[sql.Composable] = [q["checkpoints.select_tuples"]]
    if config is not None:  # the claims _Listed reads (see checkpoints.listed_claims)
        parts.append(q["checkpoints.listed_claims"])
    parts.append(q["checkpoints.from_checkpoints"])
    if by_key:
        parts.append(q["checkpoints.keys_newest"])
    parts += [sql.SQL("WHERE"), q.join(*preds, sep=" AND ")]
    if gate is not None:
        parts += [sql.SQL("AND"), gate]
    if limit is not None:
        params["limit"] = int(limit)
        parts.append(q["checkpoints.order_newest_limit"])
    else:
        parts.append(q["checkpoints.order_newest"])
    if by_key:
        parts.append(q["checkpoints.keys_end"])
    parts.append(q["checkpoints.tuples_of"])
    rows = yield Stmt(sql.SQL(" ").join(parts), params, binary=True)
    with gc_paused():  # see _cache/store.py, gc_paused
        decoder = RowValues(ctx.serde.loads_typed, held)
        tuples = [row_to_tuple(ctx, r, decoder) for r in rows]
    decoder.done()
    if rows and config is not None:
        _PREFETCH.set(
            _Listed(ctx, params["thread_id"], rows, ctx.max_history_depth, decoder)
        )
    return tuples
