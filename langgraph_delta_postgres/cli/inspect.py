"""``langgraph-delta-pg inspect``: what an operator wants to know about one thread.

* checkpoints per namespace, and forks (checkpoints with more than one child);
* per DeltaChannel of the latest checkpoint: updates and supersteps since its last
  snapshot (the typed ``delta_*`` columns; the metadata's
  ``counters_since_delta_snapshot`` when those are NULL, as on rows another saver wrote),
  how many ancestors a load walks to reach its seed, and the writes it replays;
* the bytes the thread holds in checkpoints, blobs and writes;
* with ``--load``: what loading the latest checkpoint costs the saver, read from its
  counters (``saver.stats()``, docs/observability.md): LangGraph's two calls
  (``get_tuple``, then ``get_delta_channel_history`` of the DeltaChannels) made twice on
  one saver, cold, second, then warm: statements, rows, checkpoints walked, prefetch and cache
  hits, milliseconds, and what the cache holds after.

Every statement is a block of ``sql/inspect.sql``; the report as text is
:mod:`.inspect_text`. Failures are reported as one line that says what to do, never as a
traceback (see :mod:`._util`).

Note: this module shadows the standard library's ``inspect`` only as
``langgraph_delta_postgres.cli.inspect``; nothing in the package imports the stdlib one by a
bare relative name.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import psycopg
from psycopg.rows import dict_row

from langgraph_delta_postgres import migrate as _migrate
from langgraph_delta_postgres._sql import Queries
from langgraph_delta_postgres.cli._util import CliError, connect_to, db_error
from langgraph_delta_postgres.cli.inspect_text import render_text
from langgraph_delta_postgres.saver import DeltaPostgresSaver

#: Depth guard of the walk query (as the saver's ``max_history_depth``).
MAX_DEPTH = 1_000_000


def _qualified(schema: str | None, table: str) -> str:
    if schema is None:
        return table
    return '"' + schema.replace('"', '""') + '".' + table


def check_migrated(conn: psycopg.Connection[Any], schema: str | None) -> None:
    """Raise :class:`CliError` unless the schema has the tables at the current version."""
    where = f'schema "{schema}"' if schema else "this database (search_path)"
    q = Queries(schema)
    try:
        st = _migrate.status(conn, schema=schema)
        found = conn.execute(
            q["inspect.table_exists"], {"name": _qualified(schema, "checkpoints")}
        ).fetchone()
    except psycopg.Error as e:
        raise db_error(e) from None
    except _migrate.MigrationError as e:
        raise CliError(str(e)) from None
    schema_arg = f" --schema {schema}" if schema else ""
    if st.drifted:
        raise CliError(
            f"the migrations applied to {where} differ from this package's files "
            f"({'; '.join(_migrate.describe_drift(st).split(chr(10))).strip()}): "
            f"see `langgraph-delta-pg status{schema_arg}`"
        )
    if st.pending:
        names = ", ".join(m.name for m in st.pending)
        if not found or not found[0]:
            raise CliError(
                f"no checkpoint tables in {where}: run `langgraph-delta-pg migrate{schema_arg}` "
                "first (or pass the --schema that holds them)"
            )
        raise CliError(
            f"{where} is not migrated to this version ({len(st.pending)} pending: {names}): "
            f"run `langgraph-delta-pg migrate{schema_arg}`"
        )


# ---------------------------------------------------------------------- the report


def _delta_counters(latest: dict[str, Any]) -> dict[str, tuple[int, int, str]]:
    """{channel: (updates, supersteps, source)} of the latest checkpoint."""
    out: dict[str, tuple[int, int, str]] = {}
    if latest["delta_channels"] is not None:
        for ch, u, s in zip(
            latest["delta_channels"],
            latest["delta_updates"] or [],
            latest["delta_supersteps"] or [],
            strict=False,
        ):
            out[ch] = (int(u), int(s), "columns")
    elif isinstance(latest["counters"], dict):
        for ch, pair in latest["counters"].items():
            try:
                out[ch] = (int(pair[0]), int(pair[1]), "metadata")
            except (TypeError, ValueError, IndexError):
                continue
    # Right after a snapshot LangGraph drops the channel's counters: a channel snapshotted
    # at the latest checkpoint is a DeltaChannel with nothing since its snapshot.
    for ch in latest["snapshot_channels"] or []:
        out.setdefault(ch, (0, 0, "snapshot at latest"))
    return out


def walk_depths(
    conn: psycopg.Connection[Any],
    schema: str | None,
    thread_id: str,
    channels: list[str],
    checkpoint_ns: str = "",
    checkpoint_id: str | None = None,
) -> list[dict[str, Any]]:
    """Rows of ``inspect.walk_depth``: per channel, how far a load of the target walks."""
    if not channels:
        return []
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            Queries(schema)["inspect.walk_depth"],
            {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint_id,
                "channels": channels,
                "max_depth": MAX_DEPTH,
            },
        )
        return cur.fetchall()


def storage_rows(
    conn: psycopg.Connection[Any], schema: str | None, thread_id: str
) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(Queries(schema)["inspect.storage"], {"thread_id": thread_id})
        return cur.fetchall()


def thread_bytes(conn: psycopg.Connection[Any], schema: str | None, thread_id: str) -> int:
    """Stored bytes of a thread in the three tables (see ``inspect.storage``)."""
    return sum(int(r["bytes"]) for r in storage_rows(conn, schema, thread_id))


def _reached(row: dict[str, Any]) -> str:
    if row["stored_at_target"]:
        return "stored at the checkpoint"
    if row["seed_checkpoint_id"]:
        return "seed"
    if row["last_parent_id"] is None:
        return "root"
    return "broken chain"


def load_report(
    conn: psycopg.Connection[Any],
    schema: str | None,
    thread_id: str,
    checkpoint_ns: str,
    channels: list[str],
) -> dict[str, Any]:
    """``--load``: the latest checkpoint of the namespace loaded as LangGraph loads it
    (``get_tuple``, then ``get_delta_channel_history`` of ``channels``), three times on
    one saver with the default cache (cold: a thread's first load gets no cache bucket;
    second: it builds one; warm: it reuses it): per load, how the saver's counters moved (see
    :class:`.SaverStats`) and how long it took; then the counters after both. Reads the
    whole history once (the cold load): its blobs cross the network."""
    saver = DeltaPostgresSaver(conn, schema=schema)
    cfg: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}}
    loads = []
    for label in ("cold", "second", "warm"):
        before = saver.stats().as_dict()
        started = time.perf_counter()
        tup = saver.get_tuple(cfg)
        if tup is not None and channels:
            saver.get_delta_channel_history(config=tup.config, channels=channels)
        ms = (time.perf_counter() - started) * 1000
        after = saver.stats().as_dict()
        moved = {
            k: after[k] - before[k]
            for k in after
            if k not in ("cache_bytes", "cache_buckets", "cache_max_bytes")
        }
        loads.append({"load": label, "ms": round(ms, 2), **moved})
    return {"channels": channels, "loads": loads, "stats": saver.stats().as_dict()}


def thread_report(
    conn: psycopg.Connection[Any],
    schema: str | None,
    thread_id: str,
    checkpoint_ns: str = "",
    *,
    load: bool = False,
) -> dict[str, Any] | None:
    """The whole report as a JSON-ready dict; ``None`` for an unknown thread.

    Raises :class:`CliError` when the thread has no checkpoint in ``checkpoint_ns``.
    ``load``: add :func:`load_report` under ``"load"``.
    """
    q = Queries(schema)
    params = {"thread_id": thread_id}
    with conn.cursor(row_factory=dict_row) as cur:
        namespaces = cur.execute(q["inspect.namespaces"], params).fetchall()
        if not namespaces:
            return None
        forks = cur.execute(q["inspect.forks"], params).fetchall()
        latest = cur.execute(
            q["inspect.latest"], {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
        ).fetchone()
    if latest is None:
        known = ", ".join(repr(n["checkpoint_ns"]) for n in namespaces)
        raise CliError(
            f"thread {thread_id!r} has no checkpoint in namespace {checkpoint_ns!r} "
            f"(its namespaces: {known})"
        )
    storage = storage_rows(conn, schema, thread_id)
    counters = _delta_counters(latest)
    depth_rows = {
        r["channel"]: r
        for r in walk_depths(conn, schema, thread_id, sorted(counters), checkpoint_ns)
    }
    channels = []
    for ch in sorted(counters):
        updates, supersteps, source = counters[ch]
        d = depth_rows.get(ch)
        channels.append(
            {
                "channel": ch,
                "updates_since_snapshot": updates,
                "supersteps_since_snapshot": supersteps,
                "counters_from": source,
                "walk_depth": int(d["depth"]) if d else None,
                "walk_stops_at": _reached(d) if d else None,
                "seed_checkpoint_id": d["seed_checkpoint_id"] if d else None,
                "seed_kind": d["seed_kind"] if d else None,
                "replay_writes": int(d["replay_writes"]) if d else None,
                "replay_bytes": int(d["replay_bytes"]) if d else None,
            }
        )
    totals: dict[str, dict[str, int]] = {
        t: {"rows": 0, "bytes": 0} for t in ("checkpoints", "blobs", "writes")
    }
    for r in storage:
        totals[r["tbl"]]["rows"] += int(r["row_count"])
        totals[r["tbl"]]["bytes"] += int(r["bytes"])
    rep: dict[str, Any] = {
        "thread_id": thread_id,
        "schema": schema,
        "namespaces": [
            {
                "checkpoint_ns": n["checkpoint_ns"],
                "checkpoints": int(n["checkpoints"]),
                "roots": int(n["roots"]),
                "first_checkpoint_id": n["first_checkpoint_id"],
                "latest_checkpoint_id": n["latest_checkpoint_id"],
                "latest_step": n["latest_step"],
            }
            for n in namespaces
        ],
        "forks": [
            {
                "checkpoint_ns": f["checkpoint_ns"],
                "checkpoint_id": f["checkpoint_id"],
                "children": int(f["children"]),
                "child_ids": list(f["child_ids"]),
            }
            for f in forks
        ],
        "checkpoint_ns": checkpoint_ns,
        "latest": {
            "checkpoint_id": latest["checkpoint_id"],
            "step": latest["step"],
            "channels": list(latest["channels"] or []),
            "stored_channels": (
                None if latest["stored_channels"] is None else list(latest["stored_channels"])
            ),
        },
        "delta_channels": channels,
        "bytes": {t: v["bytes"] for t, v in totals.items()},
        "rows": {t: v["rows"] for t, v in totals.items()},
        "storage": [
            {
                "checkpoint_ns": r["checkpoint_ns"],
                "table": r["tbl"],
                "channel": r["channel"],
                "rows": int(r["row_count"]),
                "bytes": int(r["bytes"]),
            }
            for r in storage
        ],
    }
    if load:
        # as LangGraph asks: the DeltaChannels whose value is not stored at the checkpoint
        needs = [
            str(c["channel"]) for c in channels if c["walk_stops_at"] != "stored at the checkpoint"
        ]
        rep["load"] = load_report(conn, schema, thread_id, checkpoint_ns, needs)
    return rep


# ---------------------------------------------------------------------- command


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--thread", required=True, metavar="ID", help="the thread_id to inspect")
    p.add_argument(
        "--ns", default="", metavar="NS",
        help="checkpoint namespace for the delta-channel details (default: the root, '')",
    )
    p.add_argument("--dsn", help="Postgres connection string (default: $DATABASE_URL)")
    p.add_argument("--schema", default=None, help="Postgres schema (default: search_path)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument(
        "--load", action="store_true",
        help="also load the latest checkpoint as LangGraph does (cold, second, then warm) and show "
        "the saver's counters for those calls (reads the whole history once)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        with connect_to(args) as conn:
            check_migrated(conn, args.schema)
            try:
                rep = thread_report(conn, args.schema, args.thread, args.ns, load=args.load)
            except psycopg.Error as e:
                raise db_error(e) from None
    except CliError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code
    if rep is None:
        where = f' in schema "{args.schema}"' if args.schema else ""
        print(f"error: no thread {args.thread!r}{where}: it has no checkpoints", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(rep, indent=2, sort_keys=True))
    else:
        print(render_text(rep))
    return 0
