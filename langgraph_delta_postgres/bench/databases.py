"""The benchmark's databases: scratch databases (or schemas) made for a run and dropped
after it, the setting of a ``bench --only SECTION`` run, and the sizes of the three tables."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from psycopg import sql

from .savers import connect_official, connect_ours

TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")



# ---------------------------------------------------------------- sizes


def storage_bytes(conn: psycopg.Connection[Any]) -> int:
    """Bytes on disk of the three tables, TOAST and indexes included."""
    q = sql.SQL(" + ").join(
        sql.SQL("pg_total_relation_size({})").format(sql.Literal(t)) for t in TABLES
    )
    row = conn.execute(sql.SQL("SELECT ") + q).fetchone()
    return int(_first(row))


def thread_payload_bytes(conn: psycopg.Connection[Any], thread_id: str) -> int:
    """Sum of ``pg_column_size`` of the thread's rows in the three tables (TOASTed
    values at their stored, compressed size; no page or index overhead)."""
    parts = [
        sql.SQL(
            "(SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM {} AS t WHERE t.thread_id = %(t)s)"
        ).format(sql.Identifier(t))
        for t in TABLES
    ]
    row = conn.execute(sql.SQL("SELECT ") + sql.SQL(" + ").join(parts), {"t": thread_id}).fetchone()
    return int(_first(row))


def _first(row: Any) -> Any:
    if row is None:
        return 0
    if isinstance(row, dict):
        return next(iter(row.values()))
    return row[0]


def freeze_autovacuum(conn: psycopg.Connection[Any]) -> None:
    """No autovacuum on the bench tables: its FSM/VM forks would show up in the size deltas."""
    for t in TABLES:
        conn.execute(
            sql.SQL(
                "ALTER TABLE {} SET (autovacuum_enabled = false, toast.autovacuum_enabled = false)"
            ).format(sql.Identifier(t))
        )


# ---------------------------------------------------------------- databases


def _dsn_with(dsn: str, **kw: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params: dict[str, Any] = dict(conninfo_to_dict(dsn))
    params.update(kw)
    return make_conninfo(**params)


@contextlib.contextmanager
def scratch_database(admin_dsn: str, tag: str) -> Iterator[tuple[str, str]]:
    """A fresh database for the run (dropped afterwards); ``(dsn, description)``.

    Without CREATEDB, a fresh schema in the DSN's database instead (every connection
    gets it as ``search_path``), dropped afterwards."""
    name = f"lgdp_bench_{tag}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        try:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except psycopg.errors.InsufficientPrivilege:
            admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
            try:
                yield _dsn_with(admin_dsn, options=f"-c search_path={name}"), f"schema {name}"
            finally:
                admin.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
                )
            return
    try:
        yield _dsn_with(admin_dsn, dbname=name), f"database {name}"
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextlib.contextmanager
def scratch_pair(
    dsn: str | None, tag: str
) -> Iterator[tuple[psycopg.Connection[Any], psycopg.Connection[Any]]]:
    """Ours' and the official saver's connections (as their ``from_conn_string`` open
    them) on a migrated scratch database of the server at ``dsn`` (the embedded Postgres
    when None); closed, and the database dropped, afterwards. For the scripts that put
    the two savers side by side outside the bench."""
    from langgraph_delta_postgres.migrate import migrate

    from .._local.embedded import embedded_postgres

    with contextlib.ExitStack() as stack:
        server = dsn or stack.enter_context(embedded_postgres())
        scratch, _ = stack.enter_context(scratch_database(server, tag))
        with psycopg.connect(scratch, autocommit=True) as conn:
            migrate(conn)
        ours = stack.enter_context(connect_ours(scratch))
        official = stack.enter_context(connect_official(scratch))
        yield ours, official


@contextlib.contextmanager
def section_database(
    args: Any, scale: str, server: Callable[[str | None], Any], command: str, *,
    migrated: bool = True, frozen: bool = False,
) -> Iterator[tuple[dict[str, Any], str, str]]:
    """The setting of a ``bench --only SECTION`` run: the server the full run uses, a
    scratch database on it (``migrated``: with our tables; ``frozen``: autovacuum off on
    them), and the result dict with the command, the scale, the database and the machine;
    ``(result, dsn, server_dsn)``."""
    import uuid

    from langgraph_delta_postgres.migrate import migrate

    from .machine import machine_facts

    res: dict[str, Any] = {"command": command, "scale": scale}
    with server(args.dsn) as (server_dsn, source), scratch_database(
        server_dsn, uuid.uuid4().hex[:10]
    ) as (dsn, where):
        res["database"] = {"source": source, "scratch": where}
        with psycopg.connect(dsn, autocommit=True) as meter:
            if migrated:
                migrate(meter)
            if frozen:
                freeze_autovacuum(meter)
            res["machine"] = machine_facts(meter)
        yield res, dsn, server_dsn
