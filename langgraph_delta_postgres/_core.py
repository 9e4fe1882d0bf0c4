"""The saver's logic, with no I/O.

Each operation is a generator that yields :class:`Stmt` objects and receives the rows
each statement returned; its return value is the operation's result. The sync saver
(:mod:`.saver`) and the async saver (:mod:`.aio`) only drive these generators over a
psycopg cursor, so both run the same statements and the same row -> result code.
"""

from __future__ import annotations

import logging
import os
import pickle
import random
import shlex
import time
from collections.abc import Generator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, TypeVar, cast

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.types import TASKS
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb

from ._cache import NO_PLAN, HistoryCache, Plan, gc_paused
from ._checks import (
    INT8_MAX,
    check_bool,
    check_id,
    check_ids,
    check_int,
    check_mapping,
    check_names,
    check_str,
)
from ._compat import _DeltaSnapshot
from ._sql import Queries
from ._stats import CacheStats, SaverStats, WalkCounters

logger = logging.getLogger("langgraph_delta_postgres")
T = TypeVar("T")
Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Stmt:
    """One statement for a driver to execute; ``fetch``: send its rows back, as dicts,
    or as tuples when ``by_position`` (the history statement: thousands of rows, where a
    dict per row is measurable); ``binary``: results in binary format (the statements
    that read blobs: a bytea column in text format is hex, twice its size on the wire
    and encoded by the server, decoded by the client; a scratch timing on a 1.9 MB seed
    plus 100 writes, not a benchmark figure: 16.1 ms in text, 8.5 ms in binary)."""

    query: sql.Composed
    params: Mapping[str, Any]
    fetch: bool = True
    by_position: bool = False
    binary: bool = False


Op = Generator[Stmt, list[Any], T]


def debug_statements() -> bool:
    """Whether the drivers log each statement (DEBUG on this package's logger). Asked
    once per operation: with DEBUG off, a statement costs no log work at all."""
    return logger.isEnabledFor(logging.DEBUG)


def log_statement(op: Op[Any], stmt: Stmt, started: float, rows: list[Any]) -> None:
    """One DEBUG line per statement: the operation that ran it (its generator's name,
    e.g. ``_op_delta_history``), whether rows were fetched, how many and how long it took
    (execute and fetch). No parameter values: they hold thread ids and user data."""
    logger.debug(
        "%s: %s in %.2f ms",
        getattr(op, "__name__", "operation"),
        f"{len(rows)} rows" if stmt.fetch else "no rows fetched",
        (time.perf_counter() - started) * 1000,
    )


@dataclass(frozen=True, slots=True)
class _Prefetch:
    """The history get_tuple read with its checkpoint (delta_history.tuple_history), for
    the get_delta_channel_history call LangGraph makes next on the same checkpoint."""

    saver: object
    key: tuple[str, str, str]
    channels: list[str]
    plan: Plan
    rows: list[tuple[Any, ...]]


class _Listed:
    """The rows of a ``list`` call of a thread, for the history calls LangGraph makes
    next, one per listed checkpoint (``get_state_history``: ``list``, then
    ``channels_from_checkpoint`` on every tuple). When a checkpoint's whole chain down to
    each channel's seed is in the listing, its history is read from these rows, in the
    snapshot the tuples came from, with no statement; otherwise the statement answers.

    It reads what the walk reads (delta_history.sql, "The walk"): from the target's
    parent down, per channel, each row's writes of the channel (writes_sort_key order,
    as checkpoints.tuples_of aggregates them) until a row that stores a value for it,
    inclusive. A row stores a value for ``ch`` when its claim allows it (its
    ``stored_channels``, sent by checkpoints.listed_claims, holds ``ch``, or is NULL: a
    row another saver wrote, probed for every channel) and either a non-"empty" blob is
    stored at the version the row names (the listing's blob columns are exactly those:
    the seed, as the walk's 's' row prefers a blob) or ``channel_values[ch]`` is a JSON
    string, number or boolean (not null, not an object or array). The answer is None
    (the statement answers, and raises where it raises) when a chain leaves the listing
    (a page, a filtered list, a pruned or missing parent), loops, or would reach
    ``max_history_depth``.

    Every value is decoded once (``serde.loads_typed``) and kept pickled; each answer
    unpickles its own copies, so no two answers, and no answer and a listed tuple, share
    a mutable object (the cache's isolation rule, _cache.py). Inline seeds are str, int,
    float or bool: immutable."""

    __slots__ = ("saver", "thread_id", "max_depth", "rows", "_writes", "_seeds", "broken")

    #: no seed at this row for this channel
    _NONE: tuple[str, Any] = ("", None)

    def __init__(self, saver: object, thread_id: str, rows: list[Row], max_depth: int) -> None:
        self.saver = saver
        self.thread_id = thread_id
        self.max_depth = max_depth
        #: (namespace, checkpoint id) -> its row (a list without checkpoint_ns spans all)
        self.rows = {(r["checkpoint_ns"], r["checkpoint_id"]): r for r in rows}
        #: (namespace, checkpoint id, channel) -> pickled list of its writes of that channel
        self._writes: dict[tuple[str, str, str], bytes | None] = {}
        #: (namespace, checkpoint id, channel) -> ("b", pickled value) | ("i", inline
        #: primitive) | _NONE
        self._seeds: dict[tuple[str, str, str], tuple[str, Any]] = {}
        #: a value that does not pickle: this listing answers nothing more
        self.broken = False

    def _seed_of(self, row: Row, ch: str, loads: Any) -> tuple[str, Any]:
        """The value ``row`` stores for ``ch`` by the walk's rule (class docstring), or
        :attr:`_NONE`."""
        key = (row["checkpoint_ns"], row["checkpoint_id"], ch)
        got = self._seeds.get(key)
        if got is not None:
            return got
        claims = row["stored_channels"]
        got = self._NONE
        if claims is None or ch in claims:
            blobs = row["blob_channels"]
            if blobs and ch in blobs:
                i = blobs.index(ch)
                got = ("b", pickle.dumps(
                    loads((row["blob_types"][i], row["blob_values"][i])), protocol=5))
            else:
                # jsonb_typeof(channel_values -> ch) IN ('string', 'number', 'boolean'):
                # what json gives for those (None is JSON null; a dict or list is not one)
                values = row["checkpoint"].get("channel_values")
                v = values.get(ch) if isinstance(values, dict) else None
                if v is not None and isinstance(v, str | int | float | bool):
                    got = ("i", v)
        self._seeds[key] = got
        return got

    def _writes_of(self, row: Row, ch: str, loads: Any) -> bytes | None:
        if not row["write_task_ids"] or ch not in row["write_channels"]:
            return None
        key = (row["checkpoint_ns"], row["checkpoint_id"], ch)
        if key in self._writes:
            return self._writes[key]
        ws = [
            (tid, c, loads((typ, blob)))
            for tid, c, typ, blob in zip(
                row["write_task_ids"], row["write_channels"], row["write_types"],
                row["write_blobs"], strict=True,
            )
            if c == ch
        ]
        got = self._writes[key] = pickle.dumps(ws, protocol=5)
        return got

    def answer(
        self, ns: str, checkpoint_id: str, channels: list[str], loads: Any
    ) -> dict[str, DeltaChannelHistory] | None:
        """The history of ``channels`` at ``checkpoint_id`` from the listed rows; None
        when the statement must answer (class docstring)."""
        target = self.rows.get((ns, checkpoint_id))
        if target is None or self.broken:
            return None
        limit = min(self.max_depth, len(self.rows))
        result: dict[str, DeltaChannelHistory] = {}
        try:
            for ch in channels:
                parts: list[bytes] = []
                seed = self._NONE
                cid = target["parent_checkpoint_id"]
                depth = 0
                while cid is not None:
                    if depth >= limit:
                        # the walk's depth guard would stop here with the channel still
                        # walking (it raises), or the listing holds a cycle (it raises)
                        return None
                    row = self.rows.get((ns, cid))
                    if row is None:
                        return None  # below the listing (or a missing parent)
                    depth += 1
                    w = self._writes_of(row, ch, loads)
                    if w is not None:
                        parts.append(w)
                    seed = self._seed_of(row, ch, loads)
                    if seed is not self._NONE:
                        break
                    cid = row["parent_checkpoint_id"]
                writes: list[PendingWrite] = []
                for data in reversed(parts):
                    writes.extend(pickle.loads(data))
                entry: DeltaChannelHistory = {"writes": writes}
                if seed[0] == "b":
                    entry["seed"] = pickle.loads(seed[1])
                elif seed[0] == "i":
                    entry["seed"] = seed[1]
                result[ch] = entry
        except (pickle.PicklingError, TypeError, AttributeError):
            self.broken = True
            return None
        return result

#: One slot per thread / asyncio task (a context): set by get_tuple (taken by the next
#: history call of the same saver if it asks for that checkpoint) or by list (serving
#: the history calls on its checkpoints until the next read or write), and cleared by
#: any write this context makes (so an answer never predates a write its caller made).
_PREFETCH: ContextVar[_Prefetch | _Listed | None] = ContextVar(
    "lgdp_history_prefetch", default=None
)

#: The columns of checkpoints.select_tuples, as delta_history.tuple_history sends them
#: after the history's 8 columns and hist_channels (rows by position).
_TUPLE_COLUMNS = (
    "thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "checkpoint",
    "metadata", "blob_channels", "blob_types", "blob_values", "write_task_ids",
    "write_channels", "write_types", "write_blobs", "send_types", "send_blobs",
)


class HistoryError(RuntimeError):
    """The parent chain of a checkpoint is corrupt (a checkpoint met twice: a cycle of
    parent pointers) or deeper than ``max_history_depth``."""


class DeltaPruneError(RuntimeError):
    """A maintenance call would leave a DeltaChannel thread unable to rebuild its state.

    No longer raised: ``prune`` and ``delete_for_runs`` keep what DeltaChannel state
    needs instead of refusing. Kept so that code catching it still imports."""


class CorruptCheckpointError(RuntimeError):
    """A stored checkpoint row is not a checkpoint (e.g. its JSON is ``{}``)."""


class SetupRequiredError(psycopg.errors.UndefinedTable):
    """The checkpoint tables (or columns) this package needs are missing: run ``setup()``.

    A subclass of the ``UndefinedTable`` error it replaces, so existing handlers still
    catch it; that error is its ``__cause__``.
    """


#: Keys every stored checkpoint has (the official saver writes them all since format v1).
_CHECKPOINT_KEYS = frozenset(("v", "id", "channel_versions", "versions_seen"))

#: prune strategies; "delete_all" is Agent Server's name for "delete".
PRUNE_STRATEGIES = ("keep_latest", "delete", "delete_all")


@dataclass(frozen=True, slots=True)
class PruneStats:
    """What ``prune`` deleted (or, with ``dry_run=True``, would delete).

    ``threads``: threads pruned (those ``before=`` skipped are not counted);
    ``checkpoints`` / ``writes`` / ``blobs``: rows; ``bytes``: the stored size of their
    values (checkpoint and metadata JSONB, write and blob bytes, as Postgres stores
    them: compressed), i.e. about what the tables shrink by once vacuumed."""

    threads: int = 0
    checkpoints: int = 0
    writes: int = 0
    blobs: int = 0
    bytes: int = 0

    def __add__(self, other: PruneStats) -> PruneStats:
        return PruneStats(
            *(getattr(self, f.name) + getattr(other, f.name) for f in fields(self))
        )


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


#: Startup options of the connections ``from_conn_string`` opens. Every statement of this
#: package is primary-key lookups behind optimization fences, so one generic plan serves
#: all parameter values:
#: * plan_cache_mode=force_generic_plan: with the default, Postgres re-planned the history
#:   statement, put and get_tuple on every call for threads whose id is rare in the
#:   statistics (measured: 0 generic / 34 custom plans over 40 invokes; ~0.3-1 ms a call);
#: * enable_seqscan=off: a plan is cached when the connection first runs the statement,
#:   often while the tables are still tiny, where a sequential scan looks cheapest; cached,
#:   it would scan a whole table per step once the tables grow;
#: * jit=off: a generic plan of the recursive history statement is costed high enough to
#:   be JIT-compiled, which took 124 ms on a 3 ms statement (Postgres 15 with llvmjit).
GENERIC_PLANS = "-c plan_cache_mode=force_generic_plan -c enable_seqscan=off -c jit=off"
#: from_conn_string's default prepare_threshold (psycopg's own default).
DEFAULT_PREPARE_THRESHOLD = 5
#: Default budget of the decoded-value cache of get_delta_channel_history, per saver
#: object (see _cache.py and docs/cache.md for how it was chosen).
DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
#: How long a ``put_writes`` waits for this saver's ``put`` calls in flight on the same
#: thread and namespace before it runs anyway (see :func:`namespace_key`).
PUT_ORDER_WAIT_S = 10.0
#: from_conn_string's connect_timeout (seconds) when neither the DSN nor PGCONNECT_TIMEOUT
#: sets one: without it a server that accepts TCP and never answers hangs it forever.
DEFAULT_CONNECT_TIMEOUT = 10


def connect_kwargs(conn_string: str, prepare_threshold: int | None) -> dict[str, Any]:
    """psycopg connect() arguments of ``from_conn_string``: autocommit, the prepare
    threshold, a connect timeout unless the DSN or ``PGCONNECT_TIMEOUT`` has one, and, when
    statements are prepared, generic plans (added to any ``options`` of the DSN; left out
    without prepared statements, e.g. behind PgBouncer, which rejects an ``options``
    startup parameter by default)."""
    params = conninfo_to_dict(conn_string)
    kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": prepare_threshold}
    if "connect_timeout" not in params and not os.environ.get("PGCONNECT_TIMEOUT"):
        kwargs["connect_timeout"] = DEFAULT_CONNECT_TIMEOUT
    if prepare_threshold is not None:
        options = params.get("options")
        kwargs["options"] = f"{options} {GENERIC_PLANS}" if options else GENERIC_PLANS
    return kwargs


def packed_blobs(blobs: Sequence[bytes], prefix: str = "") -> dict[str, Any]:
    """Blobs as the write statements take them: one ``bytea`` parameter holding them all
    (``{prefix}data``), and each one's 1-based offset and length in it; the statement cuts
    them out with ``substring``. A ``bytea[]`` parameter instead costs the server two more
    copies of every blob (receiving an array copies each element, then the whole array):
    with a 5 MB / 50 MB value, put took 1.5x / 1.4x the time (``%(x)b`` either way)."""
    offsets: list[int] = []
    at = 1
    for b in blobs:
        offsets.append(at)
        at += len(b)
    return {
        f"{prefix}data": b"".join(blobs),
        f"{prefix}offsets": offsets,
        f"{prefix}lengths": [len(b) for b in blobs],
    }


def setup_required(
    error: psycopg.Error, schema: str | None, *, cli: bool = False
) -> SetupRequiredError:
    """The SetupRequiredError of ``error`` (an UndefinedTable/UndefinedColumn of a
    statement of this package): the tables are missing or not migrated. ``cli``: worded
    for the command line (run ``migrate``; Postgres's own first line only)."""
    where = f" in schema {schema!r}" if schema else ""
    migrate = f"langgraph-delta-pg migrate{f' --schema {shlex.quote(schema)}' if schema else ''}"
    if isinstance(error, SetupRequiredError) and isinstance(error.__cause__, psycopg.Error):
        error = error.__cause__  # the saver's own: word it again from Postgres's error
    if cli:
        said = error.diag.message_primary or str(error).split("\n", 1)[0]
        return SetupRequiredError(
            f"the checkpoint tables{where} are missing or not migrated: run `{migrate}` "
            f"first ({said})"
        )
    return SetupRequiredError(
        f"the checkpoint tables{where} are missing or not migrated: call the saver's "
        f"setup() once (or run `{migrate}`) before using it "
        f"({' '.join(str(error).split())})"
    )


def _configurable(config: RunnableConfig) -> dict[str, Any]:
    try:
        return config["configurable"]
    except (KeyError, TypeError):
        raise ValueError("config must have a 'configurable' mapping with a 'thread_id'") from None


def _thread_id(config: RunnableConfig) -> str:
    conf = _configurable(config)
    if conf.get("thread_id") is None:
        raise ValueError("config['configurable'] needs a 'thread_id'")
    return str(conf["thread_id"])


def _ns(config: RunnableConfig) -> str:
    return cast(str, _configurable(config).get("checkpoint_ns") or "")


class SaverCore(BaseCheckpointSaver[str]):
    """State and operations shared by the sync and async savers."""

    queries: Queries
    #: Depth guard of the history walk: more ancestors than this is treated as corrupt.
    max_history_depth: int = 1_000_000

    def _init_core(self, schema: str | None, cache_bytes: int) -> None:
        self.queries = Queries(schema)  # checks the name (see _sql.check_schema)
        #: statements composed of several blocks, built on first use (history_query, ...)
        self._composed: dict[str, sql.Composed] = {}
        self.schema = schema
        check_int("cache_bytes", cache_bytes, low=0, high=INT8_MAX)
        cache = HistoryCache(cache_bytes)
        #: The decoded-value cache of get_delta_channel_history (None: cache_bytes=0).
        self.history_cache: HistoryCache | None = cache if cache_bytes else None
        self._walk = WalkCounters()

    def stats(self) -> SaverStats:
        """A snapshot of this saver's counters: its history walks and its cache (None
        when ``cache_bytes=0``). No statement runs; see docs/observability.md."""
        cache = self.history_cache
        return SaverStats(
            self._walk.snapshot(), CacheStats(**cache.counters()) if cache is not None else None
        )

    def _query(self, name: str, *parts: str | sql.SQL) -> sql.Composed:
        """The statement made of these blocks of sql/ (a name) and literal fragments,
        joined with spaces; composed on the first call, kept under ``name`` after."""
        got = self._composed.get(name)
        if got is None:
            got = self._composed[name] = sql.SQL(" ").join(
                [self.queries[p] if isinstance(p, str) else p for p in parts]
            )
        return got

    def history_query(self) -> sql.Composed:
        """The get_delta_channel_history statement (sql/delta_history.sql)."""
        return self._query(
            "history", "delta_history.walk", "delta_history.select_rows",
            "delta_history.rows", "delta_history.order_rows",
        )

    def tuple_history_query(self) -> sql.Composed:
        """get_tuple of the latest checkpoint with the history LangGraph asks for next,
        in one statement."""
        return self._query(
            "tuple_history", "delta_history.walk", "delta_history.tuple_history",
            "delta_history.rows", "delta_history.tuple_rows", "checkpoints.select_tuples",
            "checkpoints.from_checkpoints", sql.SQL("WHERE"), "checkpoints.where_target",
            "checkpoints.tuples_of", "delta_history.tuple_end",
        )

    def tuple_by_id_query(self) -> sql.Composed:
        """get_tuple of a checkpoint by id: the tuple alone."""
        return self._query(
            "tuple_by_id", "checkpoints.select_tuples", "checkpoints.from_checkpoints",
            sql.SQL("WHERE"),
            "checkpoints.where_thread", sql.SQL("AND"), "checkpoints.where_ns",
            sql.SQL("AND"), "checkpoints.where_id", "checkpoints.tuples_of",
        )

    def _history_params(
        self, thread_id: str, ns: str, checkpoint_id: str | None, channels: list[str] | None,
        plan: Plan,
    ) -> dict[str, Any]:
        """The parameters of the history walk (both statements that start with it)."""
        return {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
            "channels": channels,
            "max_depth": self.max_history_depth,
            **plan.params(),
        }

    def _forget_threads(self, thread_ids: Sequence[str]) -> None:
        """Drop what the cache holds of these threads (after this saver changed them)."""
        _PREFETCH.set(None)
        if self.history_cache is not None:
            self.history_cache.forget(thread_ids)

    def get_next_version(self, current: str | None, channel: None) -> str:
        return next_version(current)

    # ------------------------------------------------------------------ reading

    def setup_required(self, error: psycopg.Error) -> SetupRequiredError:
        """What a driver raises instead of a statement's UndefinedTable/UndefinedColumn:
        the tables are missing, or older than this package (found without a statement of
        its own on the hot path: the driver translates the error when it happens)."""
        return setup_required(error, self.schema)

    def _row_to_tuple(self, row: Row) -> CheckpointTuple:
        loads = self.serde.loads_typed
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
            for ch, typ, blob in zip(
                row["blob_channels"], row["blob_types"], row["blob_values"], strict=True
            ):
                values[ch] = loads((typ, blob))
        if row["send_types"]:
            # Checkpoints older than format v4 kept pending sends as the parent's TASKS
            # writes; LangGraph now expects them as the TASKS channel's value.
            values[TASKS] = [
                loads((t, b)) for t, b in zip(row["send_types"], row["send_blobs"], strict=True)
            ]
            versions = dict(checkpoint.get("channel_versions") or {})
            versions[TASKS] = (
                max(versions.values()) if versions else self.get_next_version(None, None)
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

    def _op_get_tuple(self, config: RunnableConfig) -> Op[CheckpointTuple | None]:
        """get_tuple. For the latest checkpoint (no checkpoint_id), with the delta
        history LangGraph asks for next read in the same statement (see
        delta_history.tuple_history and :class:`_Prefetch`)."""
        thread_id, ns = _thread_id(config), _ns(config)
        checkpoint_id = get_checkpoint_id(config) or None
        if checkpoint_id is not None:
            # A checkpoint by id: the tuple alone. Callers also read ancestors one by one
            # by id (BaseCheckpointSaver's generic history walk, as langgraph-api's
            # adapter runs it unpatched), where a walk per call would cost the square of
            # the depth; and the checkpoint a run or get_state loads, the one a
            # concurrent prune may supersede and delete, is the latest.
            _PREFETCH.set(None)
            rows = yield Stmt(
                self.tuple_by_id_query(),
                {"tasks": TASKS, "thread_id": thread_id, "checkpoint_ns": ns,
                 "checkpoint_id": checkpoint_id},
                binary=True,
            )
            if not rows:
                return None
            with gc_paused():  # see _cache.gc_paused
                return self._row_to_tuple(rows[0])
        cache = self.history_cache
        plan = (
            cache.plan(thread_id, ns, None, None, admit_unseen=False)
            if cache is not None else NO_PLAN
        )
        rows = yield Stmt(
            self.tuple_history_query(),
            {"tasks": TASKS, **self._history_params(thread_id, ns, None, None, plan)},
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
            self._walk.ran(hist)
            _PREFETCH.set(_Prefetch(self, key, channels, plan, hist))
        else:
            _PREFETCH.set(None)
        with gc_paused():  # see _cache.gc_paused
            return self._row_to_tuple(row)

    def _op_list(
        self,
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
        # a limit beyond int8 is "no limit" (SQL's LIMIT is a bigint)
        check_int("limit", limit, low=None, high=None, none_ok=True)
        if limit is not None:
            limit = min(limit, INT8_MAX)
        return self._list(config, filter, before, limit)

    def _list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Op[list[CheckpointTuple]]:
        _PREFETCH.set(None)  # the prefetch serves only the call right after get_tuple
        q = self.queries
        params: dict[str, Any] = {"tasks": TASKS}
        preds: list[str] = []
        if config is not None:
            params["thread_id"] = _thread_id(config)
            preds.append("checkpoints.where_thread")
            ns = _configurable(config).get("checkpoint_ns")
            if ns is not None:
                params["checkpoint_ns"] = ns
                preds.append("checkpoints.where_ns")
            if checkpoint_id := get_checkpoint_id(config):
                params["checkpoint_id"] = checkpoint_id
                preds.append("checkpoints.where_id")
        if filter:
            params["filter"] = Jsonb(filter)
            preds.append("checkpoints.where_filter")
        if before is not None and (before_id := get_checkpoint_id(before)):
            params["before"] = before_id
            preds.append("checkpoints.where_before")
        if limit is not None and int(limit) <= 0:
            return []
        # without a thread, only the keys go through the sort (see checkpoints.keys_newest)
        by_key = config is None and limit is not None
        parts: list[sql.Composable] = [q["checkpoints.select_tuples"]]
        if config is not None:  # the claims _Listed reads (see checkpoints.listed_claims)
            parts.append(q["checkpoints.listed_claims"])
        parts.append(q["checkpoints.from_checkpoints"])
        if by_key:
            parts.append(q["checkpoints.keys_newest"])
        if preds:
            parts += [sql.SQL("WHERE"), q.join(*preds, sep=" AND ")]
        if limit is not None:
            params["limit"] = int(limit)
            parts.append(q["checkpoints.order_newest_limit"])
        else:
            parts.append(q["checkpoints.order_newest"])
        if by_key:
            parts.append(q["checkpoints.keys_end"])
        parts.append(q["checkpoints.tuples_of"])
        rows = yield Stmt(sql.SQL(" ").join(parts), params, binary=True)
        with gc_paused():  # see _cache.gc_paused
            tuples = [self._row_to_tuple(r) for r in rows]
        if rows and config is not None:
            _PREFETCH.set(_Listed(self, params["thread_id"], rows, self.max_history_depth))
        return tuples

    # ------------------------------------------------------------------ history

    def _op_delta_history(
        self, config: RunnableConfig, wanted: list[str]
    ) -> Op[dict[str, DeltaChannelHistory]]:
        """``wanted``: distinct channel names, as :func:`wanted_channels` gives them."""
        thread_id, ns = _thread_id(config), _ns(config)
        checkpoint_id = get_checkpoint_id(config) or None
        cache = self.history_cache
        pre = _PREFETCH.get()
        if isinstance(pre, _Listed):
            if pre.saver is self and pre.thread_id == thread_id and checkpoint_id:
                with gc_paused():  # see _cache.gc_paused
                    got_listed = pre.answer(ns, checkpoint_id, wanted, self.serde.loads_typed)
                if got_listed is not None:
                    self._walk.answered(prefetched=True, uncached=False)
                    return got_listed
        elif pre is not None:
            _PREFETCH.set(None)  # taken once
            if (
                pre.saver is self
                and pre.key == (thread_id, ns, checkpoint_id)
                and set(wanted) <= set(pre.channels)
            ):
                got = self._history_answer(pre.plan, pre.channels, pre.rows, prefetched=True)
                return {ch: got[ch] for ch in wanted}
        plan = cache.plan(thread_id, ns, checkpoint_id, wanted) if cache is not None else NO_PLAN
        rows = yield Stmt(
            self.history_query(),
            self._history_params(thread_id, ns, checkpoint_id, wanted, plan),
            by_position=True,
            binary=True,
        )
        self._walk.ran(rows)
        return self._history_answer(plan, wanted, rows)

    def _history_answer(
        self, plan: Plan, channels: list[str], rows: list[tuple[Any, ...]], *,
        prefetched: bool = False,
    ) -> dict[str, DeltaChannelHistory]:
        """The answer built from the history statement's rows: through the cache (which
        keeps what they hold) when there is one and the thread fits it (a plan without a
        bucket asked the statement what a saver without a cache asks)."""
        cache = self.history_cache
        if cache is not None and plan.bucket is not None:
            got = cache.answer(
                plan, channels, rows, self.serde.loads_typed, self._raise_history_error
            )
            self._walk.answered(prefetched=prefetched, uncached=False)
            return got
        result = self._rows_to_history(channels, rows)
        if cache is not None:
            cache.answered_without(plan, rows)
        self._walk.answered(prefetched=prefetched, uncached=cache is not None)
        return result

    def _raise_history_error(self, row: tuple[Any, ...]) -> None:
        kind, checkpoint_id, why = row[0], row[6], row[7]
        if kind == "x" and why == "cycle":
            raise HistoryError(
                f"parent chain is corrupt: checkpoint {checkpoint_id!r} is its own ancestor "
                "(a cycle of parent_checkpoint_id pointers)"
            )
        raise HistoryError(
            f"parent chain of checkpoint {checkpoint_id!r} is deeper than "
            f"max_history_depth={self.max_history_depth} (corrupt, or raise the limit)"
        )

    def _bad_chain(self, cycle: bool | None) -> str:
        """Why a retention walk stopped on bad data (its 'x' row's ``cycle`` column): the
        two causes read apart, as _raise_history_error tells them apart for history."""
        if cycle:
            return "a cycle of parent_checkpoint_id pointers"
        return f"deeper than max_history_depth={self.max_history_depth}"

    def _rows_to_history(
        self, channels: list[str], rows: list[tuple[Any, ...]]
    ) -> dict[str, DeltaChannelHistory]:
        """Rows of ``delta_history.sql`` without the cache (so no 'c' / 'h' rows and
        every seed blob sent; oldest first, writes in ``writes_sort_key`` order) -> the
        contract's per-channel entries."""
        loads = self.serde.loads_typed
        result: dict[str, DeltaChannelHistory] = {ch: {"writes": []} for ch in channels}
        appenders = {ch: entry["writes"].append for ch, entry in result.items()}
        with gc_paused():  # see _cache.gc_paused
            for row in rows:
                kind, channel, task_id, type_, blob, inline = row[:6]
                if kind == "w":
                    appenders[channel]((task_id, channel, loads((type_, blob))))
                elif kind == "s":
                    result[channel]["seed"] = loads((type_, blob)) if type_ else inline
                else:
                    self._raise_history_error(row)
        return result

    # ------------------------------------------------------------------ writing

    def _op_put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Op[RunnableConfig]:
        thread_id = _thread_id(config)
        ns = _ns(config)
        parent_id = get_checkpoint_id(config)
        stored = dict(checkpoint)
        inline: dict[str, Any] = {}
        blob_values: dict[str, Any] = {}
        for k, v in checkpoint["channel_values"].items():
            if isinstance(v, _DeltaSnapshot):
                blob_values[k] = v
                inline[k] = True  # the marker readers recognise a snapshot by
            elif v is None or isinstance(v, str | int | float | bool):
                inline[k] = v
            else:
                blob_values[k] = v
        stored["channel_values"] = inline
        versions = checkpoint["channel_versions"]
        dumps = self.serde.dumps_typed
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
        known = {k for k, v in inline.items() if v is not None}
        probe = [(k, str(v)) for k, v in versions.items() if k not in known]
        md = get_serializable_checkpoint_metadata(config, metadata)
        counters = md.get("counters_since_delta_snapshot")
        delta: tuple[list[str] | None, list[int] | None, list[int] | None] = (None, None, None)
        if isinstance(counters, Mapping) and counters:
            names = sorted(counters)
            delta = (
                names,
                [int(counters[n][0]) for n in names],
                [int(counters[n][1]) for n in names],
            )
        yield Stmt(
            self.queries["write.put_checkpoint"],
            {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
                "parent_checkpoint_id": parent_id,
                "checkpoint": Jsonb(stored),
                "metadata": Jsonb(md),
                "blob_channels": [b[0] for b in blob_rows],
                "blob_versions": [b[1] for b in blob_rows],
                "blob_types": [b[2] for b in blob_rows],
                **packed_blobs([b[3] for b in blob_rows], "blob_"),
                "inline_channels": [k for k, v in inline.items() if v is not None],
                "probe_channels": [p[0] for p in probe],
                "probe_versions": [p[1] for p in probe],
                "delta_channels": delta[0],
                "delta_updates": delta[1],
                "delta_supersteps": delta[2],
            },
            fetch=False,
        )
        _PREFETCH.set(None)
        if self.history_cache is not None:  # the same checkpoint put again
            self.history_cache.touched(thread_id, ns, checkpoint["id"])
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _op_put_writes(
        self,
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
        return self._put_writes(config, writes, task_id, task_path)

    def _put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Op[None]:
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
                by_idx[idx] = (ch, *self.serde.dumps_typed(value))
        yield Stmt(
            self.queries["write.upsert_writes" if special else "write.insert_writes"],
            {
                "thread_id": _thread_id(config),
                "checkpoint_ns": _ns(config),
                "checkpoint_id": checkpoint_id,
                "task_id": task_id,
                "task_path": task_path or "",
                "idxs": list(by_idx),
                "channels": [w[0] for w in by_idx.values()],
                "types": [w[1] for w in by_idx.values()],
                **packed_blobs([w[2] for w in by_idx.values()]),
            },
            fetch=False,
        )
        _PREFETCH.set(None)
        if self.history_cache is not None:
            self.history_cache.touched(_thread_id(config), _ns(config), str(checkpoint_id))
        return None

    # ------------------------------------------------------------------ maintenance

    def _op_delete_thread(self, thread_id: str) -> Op[None]:
        """delete_thread; ``thread_id`` is checked here, before the driver runs anything."""
        return self._op_delete_threads([check_id("thread_id", thread_id)])

    def _op_delete_threads(self, thread_ids: Sequence[str]) -> Op[None]:
        """Every row of these threads (ids already checked)."""
        yield Stmt(
            self.queries["maintenance.delete_threads"],
            {"thread_ids": list(thread_ids)},
            fetch=False,
        )
        self._forget_threads(thread_ids)
        return None

    def _prune_ops(
        self,
        thread_ids: Sequence[str],
        strategy: str,
        keep_last: int | None,
        before: datetime | None,
        dry_run: bool,
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
        if not ids:
            return []
        if strategy == "keep_latest":
            return [self._op_prune_thread(t, keep_last or 1, before, dry_run) for t in ids]
        return [self._op_prune_delete(ids, before, dry_run)]

    def _prune_heads(self, thread_id: str, before: datetime | None) -> Op[list[str] | None]:
        """Lock the thread for maintenance; its namespaces, or None when it has no
        checkpoint or ``before`` spares it (its latest checkpoint is not older)."""
        yield Stmt(self.queries["retention.lock_thread"], {"thread_id": thread_id}, False)
        heads = yield Stmt(self.queries["retention.thread_heads"], {"thread_id": thread_id})
        if not heads:
            return None
        if before is not None:
            try:
                latest = max(datetime.fromisoformat(h["ts"]) for h in heads)
            except (TypeError, ValueError):
                return None  # a checkpoint without a readable "ts": not known to be old
            if latest.utcoffset() is None or latest >= before:
                return None
        return [h["checkpoint_ns"] for h in heads]

    def _op_prune_ns(
        self, thread_id: str, ns: str, keep_last: int, dry_run: bool
    ) -> Op[PruneStats]:
        """Prune one namespace of a thread to what its latest checkpoint needs (see
        ``retention.prune_result``); ``keep_last=0`` counts everything."""
        rows = yield Stmt(
            self.queries.join(
                "retention.prune_target", "retention.walk", "retention.prune_result"
            ),
            {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": None,
                "keep_last": keep_last,
                "max_depth": self.max_history_depth,
                "dry_run": dry_run,
            },
        )
        r = rows[0]
        if r["bad"] is not None:
            raise HistoryError(
                f"prune of thread {thread_id!r} namespace {ns!r} refused, nothing of this "
                f"thread was deleted: its parent chain is corrupt at checkpoint {r['bad']!r} "
                f"({self._bad_chain(r['bad_cycle'])})"
            )
        return PruneStats(0, r["checkpoints"], r["writes"], r["blobs"], int(r["bytes"]))

    def _op_prune_thread(
        self, thread_id: str, keep_last: int, before: datetime | None, dry_run: bool
    ) -> Op[PruneStats]:
        """keep_latest of one thread, in one transaction: per namespace, its latest
        checkpoint (or the ``keep_last`` latest of its chain) and the keep-set of every
        DeltaChannel its state needs; everything else goes."""
        namespaces = yield from self._prune_heads(thread_id, before)
        if namespaces is None:
            return PruneStats()
        total = PruneStats(threads=1)
        for ns in namespaces:
            total += yield from self._op_prune_ns(thread_id, ns, keep_last, dry_run)
        if not dry_run:
            self._forget_threads([thread_id])
        return total

    def _op_prune_delete(
        self, thread_ids: list[str], before: datetime | None, dry_run: bool
    ) -> Op[PruneStats]:
        """strategy="delete": every row of the threads, in one transaction."""
        total = PruneStats()
        doomed: list[str] = []
        for thread_id in thread_ids:
            namespaces = yield from self._prune_heads(thread_id, before)
            if namespaces is None:
                continue
            doomed.append(thread_id)
            total += PruneStats(threads=1)
            for ns in namespaces:
                total += yield from self._op_prune_ns(thread_id, ns, 0, True)
        if doomed and not dry_run:
            yield from self._op_delete_threads(doomed)  # forgets them
        return total

    def _op_delta_keepset(self, config: RunnableConfig, channels: list[str]) -> Op[set[str]]:
        """get_delta_channel_keepset; ``channels``: distinct names (may be empty)."""
        rows = yield Stmt(
            self.queries.join(
                "retention.keepset_target", "retention.walk", "retention.keepset_result"
            ),
            {
                "thread_id": _thread_id(config),
                "checkpoint_ns": _ns(config),
                "checkpoint_id": get_checkpoint_id(config) or None,
                "channels": channels,
                "keep_last": 1,
                "max_depth": self.max_history_depth,
            },
        )
        keep: set[str] = set()
        for r in rows:
            if r["kind"] == "x":
                raise HistoryError(
                    f"parent chain of thread {_thread_id(config)!r} is corrupt at checkpoint "
                    f"{r['checkpoint_id']!r}: {self._bad_chain(r['cycle'])}"
                )
            keep.add(r["checkpoint_id"])
        return keep

    def _op_delete_for_runs(self, run_ids: Sequence[str]) -> Op[None]:
        """delete_for_runs; ``run_ids`` is checked here, before the driver runs anything."""
        return self._delete_for_runs(check_ids("run_ids", run_ids, "run id"))

    def _delete_for_runs(self, ids: list[str]) -> Op[None]:
        """Atomic: the driver runs it in one transaction. A checkpoint of the runs that
        a later checkpoint (of another run) needs to load its state is kept, with its
        writes and blobs, and logged; the rest of the runs goes."""
        if not ids:
            return None
        children = yield Stmt(self.queries["retention.run_children"], {"run_ids": ids})
        for thread_id in sorted({c["thread_id"] for c in children}):  # sorted: no deadlock
            yield Stmt(self.queries["retention.lock_thread"], {"thread_id": thread_id}, False)
        kept: set[tuple[str, str, str]] = set()
        for c in children:
            thread_id, ns = c["thread_id"], c["checkpoint_ns"]
            rows = yield Stmt(
                self.queries.join(
                    "retention.prune_target", "retention.walk", "retention.keepset_result"
                ),
                {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": c["checkpoint_id"],
                    "keep_last": 1,
                    "max_depth": self.max_history_depth,
                },
            )
            for r in rows:
                if r["kind"] == "x":
                    raise HistoryError(
                        f"delete_for_runs refused, nothing was deleted: the parent chain of "
                        f"thread {thread_id!r} is corrupt at checkpoint {r['checkpoint_id']!r} "
                        f"({self._bad_chain(r['cycle'])})"
                    )
                if r["checkpoint_id"] != c["checkpoint_id"]:
                    kept.add((thread_id, ns, r["checkpoint_id"]))
        touched = yield Stmt(
            self.queries["maintenance.delete_runs"],
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
        self._forget_threads([r["thread_id"] for r in touched if r["kind"] == "d"])
        return None

    def _op_copy_thread(self, source: str, target: str) -> Op[None]:
        """copy_thread; the ids are checked here, before the driver runs anything."""
        source = check_id("source_thread_id", source)
        target = check_id("target_thread_id", target)
        if source == target:
            raise ValueError("copy_thread: source and target thread ids are the same")
        return self._copy_thread(source, target)

    def _copy_thread(self, source: str, target: str) -> Op[None]:
        """Atomic: the driver runs it in one transaction."""
        rows = yield Stmt(self.queries["maintenance.thread_exists"], {"thread_id": target})
        if rows:
            raise ValueError(
                f"copy_thread: target thread {target!r} already has checkpoints; "
                "delete it first or choose another id"
            )
        yield Stmt(
            self.queries["maintenance.copy_thread"],
            {"source_thread_id": source, "target_thread_id": target},
            fetch=False,
        )
        self._forget_threads([target])
        return None


def wanted_channels(channels: Sequence[str]) -> list[str]:
    """The distinct requested channels, in order (empty: the answer is ``{}``, no query)."""
    return list(dict.fromkeys(check_names("channels", channels, "channel name")))


def namespace_key(config: RunnableConfig) -> tuple[str, str]:
    """The (thread, namespace) a put / put_writes goes to, for the savers' ordering of
    writes after the puts they have in flight there.

    Under ``durability="async"`` LangGraph's tasks write to their checkpoint while the
    checkpoint's put, or its parent's, is still running on another thread or task. Run
    at once, such a write waits in the database for the namespace's row
    (``checkpoint_epochs``) that the put holds until its commit, and having taken its
    snapshot before that commit it cannot tell whether its checkpoint was stored
    meanwhile, so it counts as a late write and every cache of the thread reads the
    whole chain again (``write.insert_writes``). Waiting here instead, until the puts
    this saver has in flight there have returned, the write starts after their commit:
    it sees what they stored, holds no connection while it waits, and is late only when
    it really is. The database decides as before whatever the order; this only spares
    the needless bumps (see the ``load`` section of ``langgraph-delta-pg bench``)."""
    conf = config.get("configurable") or {}
    return (str(conf.get("thread_id")), str(conf.get("checkpoint_ns") or ""))
