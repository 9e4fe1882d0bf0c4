"""The server side of the load section: its facts and meters (``pg_stat_statements``,
backend CPU from ``/proc``, wait events sampled from ``pg_stat_activity``) and copies of
template threads made in SQL."""

from __future__ import annotations

import contextlib
import os
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row


@dataclass
class Server:
    """Facts of the server and the meter connection (on the admin database)."""

    admin_dsn: str
    meter: psycopg.Connection[Any]
    pgss: bool
    max_connections: int
    proc: bool

    @classmethod
    def open(cls, admin_dsn: str) -> Server:
        meter = psycopg.connect(admin_dsn, autocommit=True)
        pgss = False
        with contextlib.suppress(psycopg.Error):
            pre = str(_one(meter, "SHOW shared_preload_libraries"))
            if "pg_stat_statements" in pre:
                meter.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                meter.execute("SELECT count(*) FROM pg_stat_statements")
                pgss = True
        maxc = int(_one(meter, "SHOW max_connections"))
        pid = int(_one(meter, "SELECT pg_backend_pid()"))
        proc = _cpu_ticks([pid]) is not None
        return cls(admin_dsn, meter, pgss, maxc, proc)

    def close(self) -> None:
        self.meter.close()

    def dbid(self, dsn: str) -> int:
        with psycopg.connect(dsn, autocommit=True) as c:
            return int(_one(c, "SELECT oid FROM pg_database WHERE datname = current_database()"))

    def reset(self, dbid: int) -> None:
        if self.pgss:
            self.meter.execute("SELECT pg_stat_statements_reset(0, %s, 0)", (dbid,))

    def statements(self, dbid: int) -> dict[str, Any] | None:
        if not self.pgss:
            return None
        rows = self.meter.cursor(row_factory=dict_row).execute(
            "SELECT queryid, left(regexp_replace(query, '\\s+', ' ', 'g'), 160) AS query, "
            "calls, total_exec_time, rows, shared_blks_hit + shared_blks_read AS blks, "
            "shared_blks_dirtied + shared_blks_written AS blks_dirtied_written "
            "FROM pg_stat_statements WHERE dbid = %s AND query NOT LIKE '%%pg_stat%%' "
            "ORDER BY total_exec_time DESC",
            (dbid,),
        ).fetchall()
        return {
            "exec_ms": sum(r["total_exec_time"] for r in rows),
            "calls": sum(r["calls"] for r in rows),
            "shared_blks": sum(r["blks"] for r in rows),
            "blks_dirtied_written": sum(r["blks_dirtied_written"] for r in rows),
            "top": [
                {"query": r["query"], "calls": r["calls"], "exec_ms": r["total_exec_time"],
                 "rows": r["rows"], "shared_blks": r["blks"]}
                for r in rows[:8]
            ],
        }


def _one(conn: psycopg.Connection[Any], q: str) -> Any:
    row = conn.execute(q).fetchone()
    assert row is not None
    return row[0]


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_ticks(pids: list[int]) -> int | None:
    """utime + stime of ``pids`` (None: not readable, e.g. the server is elsewhere)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        total += int(fields[11]) + int(fields[12])  # fields 14, 15 of proc(5)
    return total


class WaitSampler:
    """Samples what the given backends are doing every ``every`` seconds."""

    def __init__(self, dsn: str, pids: list[int], every: float = 0.05) -> None:
        self.pids = pids
        self.every = every
        self.samples: Counter[str] = Counter()
        self.n = 0
        self._stop = threading.Event()
        self._conn = psycopg.connect(dsn, autocommit=True)
        self._t = threading.Thread(target=self._run, daemon=True, name="lgdp-load-waits")

    def _run(self) -> None:
        q = (
            "SELECT state, wait_event_type, wait_event FROM pg_stat_activity "
            "WHERE pid = ANY(%s)"
        )
        while not self._stop.is_set():
            for state, wtype, wevent in self._conn.execute(q, (self.pids,)).fetchall():
                if state == "active":
                    self.samples[f"{wtype}:{wevent}" if wtype else "CPU"] += 1
                elif state == "idle in transaction":
                    self.samples["idle in transaction"] += 1
            self.n += 1
            self._stop.wait(self.every)

    def __enter__(self) -> WaitSampler:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(timeout=5)
        self._conn.close()

    def summary(self) -> dict[str, Any]:
        n = max(self.n, 1)
        return {
            "samples": self.n,
            # mean number of the pool's backends in each state per sample
            "per_sample": {k: v / n for k, v in self.samples.most_common()},
        }


#: the tables a copy of a thread is made of (checkpoint_epochs: kept by the tables' triggers,
#: migrations/0007)
_THREAD_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


def clone_threads(conn: psycopg.Connection[Any], template: str, ids: list[str]) -> None:
    """Copies of ``template``'s rows (any saver's tables) under the thread ids ``ids``."""
    for table in _THREAD_TABLES:
        cols = [
            r[0] for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                "AND table_schema = ANY(current_schemas(false)) AND column_name <> 'thread_id' "
                "ORDER BY ordinal_position",
                (table,),
            ).fetchall()
        ]
        if not cols:
            continue
        c = sql.SQL(", ").join(map(sql.Identifier, cols))
        conn.execute(
            sql.SQL(
                "INSERT INTO {t} (thread_id, {c}) SELECT n, {c} FROM {t} "
                "CROSS JOIN unnest(%(ids)s::text[]) AS n WHERE thread_id = %(src)s"
            ).format(t=sql.Identifier(table), c=c),
            {"ids": ids, "src": template},
        )
    # inserted in no causal order: every write to a copy counts as late until new puts
    # (sql/maintenance.sql, forget_recent); the official saver's database has no such table
    if _one(conn, "SELECT to_regclass('checkpoint_epochs') IS NOT NULL"):
        conn.execute("UPDATE checkpoint_epochs SET recent = NULL, parents = NULL "
                     "WHERE thread_id = ANY(%s)", (ids,))
    conn.execute("ANALYZE")
