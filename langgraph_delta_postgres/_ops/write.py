"""Writing: put and put_writes (``sql/write.sql``), one statement each; the channel
version format (the order of a saver's own writes: :mod:`.._order`)."""

from __future__ import annotations

import json
import math
import random
import threading
from collections.abc import Mapping, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

import orjson
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from psycopg.errors import UndefinedColumn, UndefinedTable
from psycopg.types.json import Jsonb

from .._checks import check_mapping, check_str
from .._compat import _DeltaSnapshot
from ..errors import LostParentError
from .base import _PREFETCH, Op, Stmt, T, _configurable, _ns, _thread_id

if TYPE_CHECKING:
    from .context import SaverCore

def next_version(current: str | int | float | None) -> str:
    """Channel versions in the official saver's format: a zero-padded counter, then a
    random fraction, so versions from either saver compare correctly as strings."""
    if current is None:
        n = 0
    elif isinstance(current, str):
        n = int(current.split(".", 1)[0])
    else:
        n = int(current)
    return f"{n + 1:032}.{random.random():016}"


def packed_blobs(blobs: Sequence[bytes]) -> tuple[bytes, list[tuple[int, int]]]:
    """Blobs as the write statements take them: one ``bytea`` parameter holding them all,
    and each one's 1-based offset and length in it; the statement cuts them out with
    ``substring``. A ``bytea[]`` parameter instead costs the server two more copies of
    every blob (receiving an array copies each element, then the whole array): with a
    5 MB / 50 MB value, put took 1.5x / 1.4x the time (``%(x)b`` either way)."""
    spans: list[tuple[int, int]] = []
    at = 1
    for b in blobs:
        spans.append((at, len(b)))
        at += len(b)
    return b"".join(blobs), spans


def plan_param(plan: Any) -> Jsonb:
    """The small per-row lists of a write statement (channels, versions, types, offsets,
    counters) as one ``jsonb`` parameter the statement unpacks with
    ``jsonb_array_elements``, instead of parallel ``text[]`` / ``int[]`` parameters:
    psycopg dumps arrays element by element in Python, which was the largest part of
    put's and put_writes' client time (``scripts/profile_agent_turn.py``); one
    :func:`json_bytes` call does it in C, and the statement has fewer parameters to
    bind."""
    return Jsonb(plan, dumps=json_bytes)


#: orjson writes what ``json.dumps`` writes for dicts, lists, str, int, float, bool and
#: None; these options make it raise on the types it would write where ``json.dumps``
#: raises (a datetime, a dataclass) or writes them another way (a subclass of str, int,
#: dict or list): :func:`json_bytes` gives those to ``json.dumps``.
_ORJSON_PLAIN = (
    orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
)


def json_bytes(obj: Any) -> bytes:
    """``obj`` as JSON, for a ``jsonb`` parameter: the same document as ``json.dumps``
    (psycopg's default) makes, in a tenth of the time (orjson; a put's checkpoint and
    plan: 27 us of its 31 us of JSON). Whatever orjson does not take as plain values (a
    non-str key, an int beyond 64 bits, the types of ``_ORJSON_PLAIN``) goes through
    ``json.dumps``, as before. Only for values without NaN or infinities (orjson writes
    null, ``json.dumps`` NaN, which Postgres refuses): the package's own plans, and a
    stored checkpoint :func:`_plain_checkpoint` accepted (its inline values
    are finite: :func:`_inline`)."""
    try:
        return orjson.dumps(obj, option=_ORJSON_PLAIN)
    except TypeError:  # orjson.JSONEncodeError is one
        return json.dumps(obj).encode()


def _inline(v: Any) -> bool:
    """Whether a channel value is stored inline in the checkpoint's JSON (a primitive),
    not as a blob. NaN and the infinities are blobs: JSON has no spelling for them."""
    if isinstance(v, float):
        return math.isfinite(v)
    return v is None or isinstance(v, str | int | bool)


#: The keys of LangGraph's Checkpoint; ts is a str, v an int, updated_channels a list of
#: names (pending_sends: a format before v4's, a list of Send objects).
_CHECKPOINT_KEYS = frozenset(
    ("v", "id", "ts", "channel_values", "channel_versions", "versions_seen",
     "updated_channels", "pending_sends")
)


def _plain_checkpoint(checkpoint: Checkpoint) -> bool:
    """Whether the checkpoint has only LangGraph's keys and every version it names is a
    str or an int (what savers make): its JSON then holds no NaN (see
    :func:`json_bytes`; its inline values are finite, :func:`_inline`)."""
    if not checkpoint.keys() <= _CHECKPOINT_KEYS:
        return False
    plain = (str, int)
    if not all(type(v) in plain for v in checkpoint["channel_versions"].values()):
        return False
    return all(
        type(v) in plain
        for seen in checkpoint.get("versions_seen", {}).values()
        for v in (seen.values() if isinstance(seen, Mapping) else (None,))
    )


#: How long after a server change (a failover) a put checks that its parent exists
#: (one small statement; a run in flight across the failover meets it at its next put).
PARENT_CHECK_AFTER_FAILOVER_S = 3600.0


def _check_put_args(checkpoint: Any, metadata: Any, new_versions: Any) -> None:
    """put's checkpoint, metadata and new_versions, checked before anything runs: a
    clear TypeError/ValueError instead of an AttributeError or KeyError halfway."""
    check_mapping("checkpoint", checkpoint, none_ok=False)
    for key in ("id", "channel_values", "channel_versions"):
        if key not in checkpoint:
            raise ValueError(f"checkpoint has no {key!r}: not a LangGraph Checkpoint")
    check_mapping("checkpoint['channel_values']", checkpoint["channel_values"], none_ok=False)
    check_mapping("checkpoint['channel_versions']", checkpoint["channel_versions"],
                  none_ok=False)
    check_str("checkpoint['id']", checkpoint["id"])
    check_mapping("metadata", metadata, none_ok=False)
    check_mapping("new_versions", new_versions, none_ok=False)


def _op_put(
    ctx: SaverCore,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
) -> Op[RunnableConfig]:
    thread_id = _thread_id(config)
    ns = _ns(config)
    parent_id = get_checkpoint_id(config)
    _check_put_args(checkpoint, metadata, new_versions)
    stored = dict(checkpoint)
    inline: dict[str, Any] = {}
    blob_values: dict[str, Any] = {}
    for k, v in checkpoint["channel_values"].items():
        if isinstance(v, _DeltaSnapshot):
            blob_values[k] = v
            inline[k] = True  # the marker readers recognise a snapshot by
        elif _inline(v):
            inline[k] = v
        else:
            blob_values[k] = v
    stored["channel_values"] = inline
    versions = checkpoint["channel_versions"]
    dumps = ctx.serde.dumps_typed
    blob_rows = [
        (k, str(ver), *dumps(blob_values[k]))
        for k, ver in new_versions.items()
        if k in blob_values
    ]
    # Whether a blob is stored for the other versioned channels (a value carried over
    # from an earlier checkpoint, a snapshot older than this step), or already was for
    # the blobs written here (the same checkpoint put again: the inserts conflict and
    # return nothing), is the database's to say: the statement probes them by
    # primary key.
    inline_channels = [k for k, v in inline.items() if v is not None]
    known = set(inline_channels)
    probe = [[k, str(v)] for k, v in versions.items() if k not in known]
    md = get_serializable_checkpoint_metadata(config, metadata)
    counters = md.get("counters_since_delta_snapshot")
    delta = (
        [[n, int(counters[n][0]), int(counters[n][1])] for n in sorted(counters)]
        if isinstance(counters, Mapping) else []
    )
    data, spans = packed_blobs([b[3] for b in blob_rows])
    plan = {
        "blobs": [
            [channel, version, type_, off, length]
            for (channel, version, type_, _), (off, length) in zip(blob_rows, spans, strict=True)
        ],
        "inline": inline_channels,
        "probe": probe,
        "delta": delta,
    }
    if parent_id and ctx._server.changed_within(PARENT_CHECK_AFTER_FAILOVER_S):
        rows = yield Stmt(ctx.queries["write.parent_exists"], {
            "thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent_id})
        if not rows[0]["found"]:
            raise LostParentError(
                f"put of checkpoint {checkpoint['id']!r} of thread {thread_id!r} (namespace "
                f"{ns!r}): its parent {parent_id!r} is not on the server, which changed "
                "under this saver (a failover to a standby that lacked the last commits). "
                "The run was building on a state the server does not have; nothing was "
                "written. Load the thread's state again and run from there."
            )
    yield Stmt(
        ctx.queries["write.put_checkpoint"],
        {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint["id"],
            "parent_checkpoint_id": parent_id,
            "checkpoint": Jsonb(
                stored, dumps=json_bytes if _plain_checkpoint(checkpoint) else None),
            "metadata": Jsonb(md),
            "blob_data": data,
            "plan": plan_param(plan),
        },
        fetch=False,
    )
    # The history cache needs no word: a checkpoint put again has a new row (its token
    # changes), and a write added to one that may have a child moves its namespace's
    # late-write count (migrations/0007_epoch_triggers.sql), whoever writes.
    _PREFETCH.set(None)
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint["id"],
        }
    }


def _op_put_writes(
    ctx: SaverCore,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> Op[None]:
    """put_writes; the arguments are checked here, before the driver runs anything."""
    check_str("task_id", task_id)
    check_str("task_path", task_path, none_ok=True)  # None: "" as before
    if isinstance(writes, str | bytes | Mapping):
        raise TypeError(
            f"writes must be a sequence of (channel, value) pairs, not {type(writes).__name__}"
        )
    return _put_writes(ctx, config, writes, task_id, task_path)


def _put_writes(
    ctx: SaverCore, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
    task_path: str,
) -> Op[None]:
    """put_writes, its arguments checked (by :func:`_op_put_writes`)."""
    if not writes:
        return None
    conf = _configurable(config)
    checkpoint_id = conf.get("checkpoint_id")
    if not checkpoint_id:
        raise ValueError("put_writes needs config['configurable']['checkpoint_id']")
    special = all(ch in WRITES_IDX_MAP for ch, _ in writes)
    by_idx: dict[int, tuple[str, str, bytes]] = {}
    for i, (ch, value) in enumerate(writes):
        idx = WRITES_IDX_MAP.get(ch, i)
        if special or idx not in by_idx:  # upsert: the last wins; insert: the first
            by_idx[idx] = (ch, *ctx.serde.dumps_typed(value))
    data, spans = packed_blobs([w[2] for w in by_idx.values()])
    yield Stmt(
        ctx.queries["write.upsert_writes" if special else "write.insert_writes"],
        {
            "thread_id": _thread_id(config),
            "checkpoint_ns": _ns(config),
            "checkpoint_id": checkpoint_id,
            "task_id": task_id,
            "task_path": task_path or "",
            "data": data,
            "writes": plan_param([
                [idx, ch, type_, off, length]
                for (idx, (ch, type_, _)), (off, length) in zip(by_idx.items(), spans, strict=True)
            ]),
        },
        fetch=False,
    )
    _PREFETCH.set(None)
    return None


def resume(first: Stmt, op: Op[T]) -> Op[T]:
    """``op``, whose first statement was already taken from it (``first``)."""
    rows = yield first
    while True:
        try:
            stmt = op.send(rows)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        rows = yield stmt


class _Queued:
    """One put_writes waiting in a :class:`WriteBatch`: its statement, and once run,
    its outcome (``error`` None: written)."""

    __slots__ = ("stmt", "error")

    def __init__(self, stmt: Stmt) -> None:
        self.stmt = stmt
        self.error: BaseException | None = None


class WriteBatch:
    """put_writes calls queued for a saver's single connection, run as one statement.

    A saver on one connection runs one statement at a time; the writes of LangGraph's
    parallel tasks arrive together (a 16-task ``Send`` fan-out: 16 put_writes at once)
    and queued for the connection one round trip each. Here each call queues its
    ``insert_writes`` statement, then takes the connection; whoever holds it runs every
    statement queued by then as one ``insert_writes_batch`` (sorted by thread and
    namespace), so a call finds its writes already written, or writes the queue's. A
    batch that fails is run again call by call, so each call gets its own outcome. No
    I/O here: the drivers hold the connection and execute (saver.py, aio.py). Measured
    with ``langgraph-delta-pg bench --only writes`` (docs/design/writes.md, "Measured")."""

    def __init__(self, queries: Any) -> None:
        self._queries = queries
        self._lock = threading.Lock()
        self._queue: list[_Queued] = []

    def batchable(self, stmt: Stmt) -> bool:
        return stmt.query is self._queries["write.insert_writes"]

    def add(self, stmt: Stmt) -> _Queued:
        entry = _Queued(stmt)
        with self._lock:
            self._queue.append(entry)
        return entry

    def take(self) -> list[_Queued]:
        """Every call queued and not run yet (the caller holds the connection; a call
        that queued before taking it is then either in the list or already done)."""
        with self._lock:
            out, self._queue = self._queue, []
        return out

    @staticmethod
    def finish(entry: _Queued, op: Op[None], setup_required: Any) -> None:
        """After the connection was released: the call's own outcome (its error, a
        missing table as ``setup_required`` says), then the rest of its operation."""
        if entry.error is not None:
            if isinstance(entry.error, UndefinedTable | UndefinedColumn):
                raise setup_required(entry.error) from entry.error
            raise entry.error
        with suppress(StopIteration):
            op.send([])

    @staticmethod
    def failed(entries: Sequence[_Queued], error: BaseException) -> list[_Queued]:
        """The batch statement failed: one call's error is its own; several calls are
        run again one by one (the list returned), each for its own outcome."""
        if len(entries) == 1:
            entries[0].error = error
            return []
        return list(entries)

    def statement(self, entries: Sequence[_Queued]) -> Stmt:
        """One statement for these calls (one call: its own)."""
        if len(entries) == 1:
            return entries[0].stmt
        rows: list[list[Any]] = []
        blobs: list[bytes] = []
        at = 0
        for p in sorted((_params(e) for e in entries),
                        key=lambda p: (p["thread_id"], p["checkpoint_ns"])):
            key = [p["thread_id"], p["checkpoint_ns"], p["checkpoint_id"], p["task_id"],
                   p["task_path"]]
            for idx, ch, type_, off, length in p["writes"].obj:
                rows.append([*key, idx, ch, type_, off + at, length])
            blobs.append(p["data"])
            at += len(p["data"])
        return Stmt(
            self._queries["write.insert_writes_batch"],
            {"data": b"".join(blobs), "writes": plan_param(rows)},
            fetch=False,
        )


def _params(entry: _Queued) -> Mapping[str, Any]:
    """The parameters of a queued put_writes statement (it always has some)."""
    assert entry.stmt.params is not None
    return entry.stmt.params
