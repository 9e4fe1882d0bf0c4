"""Versioned SQL migrations: discovery, status and a concurrency-safe runner.

* Files ``migrations/NNNN_name.sql`` (the number is the version), applied in order.
* The ledger table ``langgraph_delta_migrations`` holds one row per applied file:
  version, file name, sha256 checksum of its text, when and how long.
* Each file runs in its own transaction together with its ledger row, unless its header
  has the line ``-- migrate: no-transaction`` (for ``CREATE INDEX CONCURRENTLY``); such a
  file runs statement by statement and is written so that re-running it is harmless.
* One session-level advisory lock is held around the whole run, so any number of
  processes may call ``setup()`` at once: the first applies, the others wait (polling
  ``pg_try_advisory_lock``, see LOCK_POLL_SECONDS) and find nothing left to do.
* An applied file whose text changed, or that disappeared, is drift: the runner refuses
  to continue (nothing is applied) and ``status`` reports it. A file may name earlier
  texts of itself that still count as applied, one header line each,
  ``-- migrate: supersedes sha256:<hex>``: only when applying the new text to a database
  that has the old one applied changes nothing that matters (0004, made batched).
* A file whose header has ``-- migrate: batched`` is one statement the runner repeats,
  each run committing on its own, for a backfill that must not lock or rewrite a large
  table in one transaction. It takes ``%(after)s`` (NULL first, then the ``last`` value of
  the previous run) and ``%(batch_rows)s`` (:data:`BATCH_ROWS`), and returns one row with
  a column ``last``, the cursor of the next run, or no row when it is done. An interrupted
  run leaves the ledger row out, so the next run starts over and skips the filled rows.
  With a header line ``-- migrate: vacuum TABLE``, the runner also runs ``VACUUM TABLE``
  every :data:`VACUUM_EVERY_BATCHES` runs and at the end, so that the space of the row
  versions the batches replaced is reused by the next batches instead of growing the
  table (an UPDATE of every row otherwise doubles it until a VACUUM FULL).
* Behind a connection pooler (PgBouncer and the like) the runner takes no lock: when
  every file is applied it returns at once, as on a direct connection; when some are
  pending it refuses before changing anything, saying to run migrations on a direct
  connection (see :data:`POOLED`).

The runner is a generator of statements (``_plan``, yielding :class:`._ops.base.Stmt`)
that :func:`migrate` and :func:`amigrate` run with the savers' driver.
"""

from __future__ import annotations

import hashlib
import re
import time
import zlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection, Connection, sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from ._ops.base import Op, Stmt
from ._sql import Queries, data_dir, render
from .errors import MigrationError as MigrationError  # its documented home: migrate

FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
NO_TRANSACTION = re.compile(r"^--\s*migrate:\s*no-transaction\s*$", re.MULTILINE)
BATCHED = re.compile(r"^--\s*migrate:\s*batched\s*$", re.MULTILINE)
SUPERSEDES = re.compile(
    r"^--\s*migrate:\s*supersedes\s+sha256:([0-9a-f]{64})\s*$", re.MULTILINE
)
VACUUM = re.compile(r"^--\s*migrate:\s*vacuum\s+([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
#: Rows per run of a batched migration, and runs between two VACUUMs of its table
#: (measured on 1,000,000 checkpoints, docs/adoption.md: 2,000-row batches held their
#: row locks 0.36 s (median), 2.25 s at most; 5,000 rows: 0.93 s, 5.56 s).
BATCH_ROWS = 2000
VACUUM_EVERY_BATCHES = 10
LEDGER = "langgraph_delta_migrations"
# Waiting inside pg_advisory_lock() would keep a statement (and its snapshot) open, which
# CREATE INDEX CONCURRENTLY in another session waits for: a deadlock. So waiters poll.
LOCK_POLL_SECONDS = 0.05
# Migrations run with the server's planner defaults, whatever the connection's startup
# options say (see _connect.GENERIC_PLANS); the session's own values are restored after.
PLANNER_DEFAULTS = {"enable_seqscan": "on", "plan_cache_mode": "auto"}

#: Why migrations refuse to run through a pooler. In PgBouncer's transaction mode (and
#: statement mode) each statement of an autocommit connection may run on another server
#: connection: the session-level advisory lock would be taken on one backend and
#: "released" on another (pg_advisory_unlock returns false there), staying held on the
#: first for as long as PgBouncer keeps it, and the session-level planner settings would
#: leak into other clients' transactions. Detection: a pooler answers the client's startup
#: itself, with a cancel key of its own, so the backend pid the connection was given
#: (``conn.info.backend_pid``) is not the ``pg_backend_pid()`` of the server process that
#: runs its statements; on a direct connection the two are always equal. (Comparing
#: pg_backend_pid() between statements is no test: an idle PgBouncer hands one client the
#: same server connection again and again.) A session-mode pooler looks the same from the
#: client and is refused too: the client cannot tell the modes apart.
POOLED = (
    "{n} migration(s) pending, and this connection goes through a connection pooler "
    "(PgBouncer or similar: the server process {actual} is not the backend {reported} "
    "the connection was given): migrations hold a session-level advisory lock across "
    "many statements, which a pooler in transaction mode does not keep. Run them on a "
    "direct connection to Postgres: `langgraph-delta-pg migrate --dsn <direct DSN>`, or "
    "setup() on a saver of a direct connection; then setup() through the pooler finds "
    "nothing to do and returns (see docs/poolers.md)"
)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    text: str
    checksum: str
    transactional: bool
    batched: bool = False
    #: the table a batched migration vacuums as it goes (``-- migrate: vacuum TABLE``)
    vacuum: str | None = None
    #: checksums of earlier texts of this file that still count as applied
    superseded: frozenset[str] = frozenset()

    def statements(self) -> list[str]:
        """The file's statements, for a file that runs outside a transaction."""
        body = "\n".join(
            ln for ln in self.text.splitlines() if not ln.lstrip().startswith("--")
        )
        return [s.strip() for s in re.split(r";\s*(?:\n|$)", body) if s.strip()]


@dataclass(frozen=True)
class Applied:
    version: int
    name: str
    checksum: str
    applied_at: datetime | None
    duration_ms: int


@dataclass
class Status:
    applied: list[Applied] = field(default_factory=list)
    pending: list[Migration] = field(default_factory=list)
    drifted: list[tuple[Applied, Migration | None]] = field(default_factory=list)
    #: status() of a ``schema`` that does not exist (``migrate`` would create it).
    schema_missing: bool = False

    @property
    def ok(self) -> bool:
        return not self.drifted


def discover() -> list[Migration]:
    """Every migration file, in version order; malformed names are an error."""
    found: list[Migration] = []
    for entry in data_dir("migrations").iterdir():
        if not entry.name.endswith(".sql"):
            continue
        m = FILE_NAME.match(entry.name)
        if not m:
            raise MigrationError(
                f"migration file {entry.name!r} must be named NNNN_lowercase_name.sql"
            )
        text = entry.read_text(encoding="utf-8").replace("\r\n", "\n")
        found.append(
            Migration(
                version=int(m.group(1)),
                name=entry.name,
                text=text,
                checksum=hashlib.sha256(text.encode()).hexdigest(),
                transactional=not (NO_TRANSACTION.search(text) or BATCHED.search(text)),
                batched=bool(BATCHED.search(text)),
                vacuum=(v.group(1) if (v := VACUUM.search(text)) else None),
                superseded=frozenset(SUPERSEDES.findall(text)),
            )
        )
        if found[-1].batched and len(found[-1].statements()) != 1:
            raise MigrationError(f"batched migration {entry.name!r} must hold one statement")
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"two migration files share a version: {versions}")
    return found


def lock_key(schema: str | None) -> int:
    """The advisory lock of one schema's migrations (a signed 64-bit key)."""
    return zlib.crc32(f"langgraph_delta_postgres:{schema or ''}".encode()) + (0x4C47 << 32)


def _compare(migrations: list[Migration], ledger: list[dict[str, Any]]) -> Status:
    by_version = {m.version: m for m in migrations}
    status = Status()
    seen = set()
    for row in ledger:
        a = Applied(
            row["version"], row["name"], row["checksum"], row["applied_at"], row["duration_ms"]
        )
        status.applied.append(a)
        seen.add(a.version)
        m = by_version.get(a.version)
        if m is None or (m.checksum != a.checksum and a.checksum not in m.superseded):
            status.drifted.append((a, m))
    status.pending = [m for m in migrations if m.version not in seen]
    return status


def describe_drift(status: Status) -> str:
    lines = []
    for a, m in status.drifted:
        if m is None:
            lines.append(f"  {a.name}: applied (version {a.version}) but the file is gone")
        else:
            lines.append(
                f"  {a.name}: edited after it was applied "
                f"(ledger sha256 {a.checksum[:12]}, file {m.checksum[:12]})"
            )
    return "\n".join(lines)


_Plan = Op[list[Migration]]


def _step(query: sql.Composed | sql.SQL, params: dict[str, Any] | None = None,
          fetch: bool = False) -> Stmt:
    """A statement of the plan, run with autocommit on and never prepared; params None
    sends it with the simple query protocol, which takes several statements at once."""
    return Stmt(query, params, fetch=fetch, prepare=False)


def _plan(schema: str | None, migrations: list[Migration]) -> _Plan:
    """The migration run, as statements (:class:`._ops.base.Stmt`) that the savers'
    driver runs (``adrive`` / ``drive``, in ``_migrate_async.py``)."""
    q = Queries(schema)
    if schema is not None:
        yield _step(q["migrate.create_schema"])
    yield _step(q["migrate.create_ledger"])
    ledger = yield _step(q["migrate.select_ledger"], fetch=True)
    status = _compare(migrations, ledger)
    if status.drifted:
        raise MigrationError(
            "migrations drifted from the ledger; nothing was applied:\n" + describe_drift(status)
        )
    applied: list[Migration] = []
    for m in status.pending:
        started = time.monotonic()
        if m.transactional:
            yield _step(sql.SQL("BEGIN"))
            yield _step(render(m.text, schema))
        elif m.batched:
            batch = render(m.statements()[0], schema)
            vacuum = render(f"VACUUM {{s}}{m.vacuum}", schema) if m.vacuum else None
            after = None
            runs = 0
            while True:
                rows = yield _step(batch, {"after": after, "batch_rows": BATCH_ROWS}, True)
                runs += 1
                done = not rows or rows[0]["last"] is None
                if vacuum is not None and (done or runs % VACUUM_EVERY_BATCHES == 0):
                    yield _step(vacuum)
                if done:
                    break
                after = rows[0]["last"]
        else:
            for statement in m.statements():
                yield _step(render(statement, schema))
        ms = int((time.monotonic() - started) * 1000)
        yield _step(
            q["migrate.insert_ledger"],
            {"version": m.version, "name": m.name, "checksum": m.checksum, "duration_ms": ms},
        )
        if m.transactional:
            yield _step(sql.SQL("COMMIT"))
        applied.append(m)
    return applied


def _locked(row: dict[str, Any] | None) -> bool:
    return bool(row and row["locked"])


def _pooled(conn: Connection[Any] | AsyncConnection[Any], row: dict[str, Any] | None) -> bool:
    """Whether ``conn`` reaches Postgres through a pooler (``row``: migrate.backend_pid)."""
    return row is not None and int(row["pid"]) != conn.info.backend_pid


def _pooled_verdict(
    conn: Connection[Any] | AsyncConnection[Any],
    row: dict[str, Any],
    migrations: list[Migration],
    ledger: list[dict[str, Any]],
) -> list[Migration]:
    """Through a pooler: nothing to apply (``[]``), or a MigrationError (drift, pending)."""
    st = _compare(migrations, ledger)
    if st.drifted:
        raise MigrationError(
            "migrations drifted from the ledger; nothing was applied:\n" + describe_drift(st)
        )
    if st.pending:
        raise MigrationError(
            POOLED.format(n=len(st.pending), actual=row["pid"], reported=conn.info.backend_pid)
        )
    return []


def _ledger_name(schema: str | None) -> sql.Identifier:
    # to_regclass() parses a qualified name: quote the schema as an identifier.
    return sql.Identifier(schema, LEDGER) if schema else sql.Identifier(LEDGER)


def _check_idle(conn: Connection[Any] | AsyncConnection[Any]) -> None:
    if conn.info.transaction_status != 0:  # pq.TransactionStatus.IDLE
        raise MigrationError(
            "setup()/migrate need a connection that is not inside a transaction; "
            "commit or roll back first"
        )


def conninfo_of(conn: Connection[Any] | AsyncConnection[Any]) -> str:
    """The connection string of ``conn``, password included, to open a second connection
    (migrations can't run on a connection in pipeline mode: several statements per
    file, and CREATE INDEX CONCURRENTLY outside any transaction)."""
    return make_conninfo(conn.info.dsn, password=conn.info.password or None)


def status(conn: Connection[Any], *, schema: str | None = None) -> Status:
    """Applied, pending and drifted migrations, without changing anything."""
    migrations = discover()
    q = Queries(schema)
    ledger = _ledger_name(schema)
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(q["migrate.ledger_exists"], {"ledger": ledger.as_string(conn)})
        row = cur.fetchone()
        rows = []
        if row and row["found"]:
            cur.execute(q["migrate.select_ledger"])
            rows = cur.fetchall()
        schema_missing = False
        if schema is not None and not rows:
            cur.execute(q["migrate.schema_exists"], {"schema": schema})
            found = cur.fetchone()
            schema_missing = not (found and found["found"])
    if not conn.autocommit:
        conn.rollback()
    st = _compare(migrations, rows)
    st.schema_missing = schema_missing
    return st


# The runners, after the names they read here at each call (tests replace _plan): amigrate
# is written in _migrate_async.py, migrate generated from it (scripts/async_to_sync.py).
from ._migrate_async import amigrate as amigrate  # noqa: E402
from ._migrate_sync import migrate as migrate  # noqa: E402
