-- migrate: the migration runner's own statements (see langgraph_delta_postgres/migrate.py).

-- name: try_lock
-- Session-level advisory lock around a whole run: concurrent setup() calls poll it (a
-- waiter blocked in pg_advisory_lock would hold a snapshot that CREATE INDEX CONCURRENTLY
-- waits for), and the later ones find every migration applied. Parameter: key bigint.
-- Result column: locked (bool).
SELECT pg_try_advisory_lock(%(key)s) AS locked

-- name: unlock
SELECT pg_advisory_unlock(%(key)s)

-- name: create_schema
CREATE SCHEMA IF NOT EXISTS {schema}

-- name: create_ledger
-- One row per applied migration file: its number, file name, sha256 of its text, when it
-- was applied and how long it took.
CREATE TABLE IF NOT EXISTS {s}langgraph_delta_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    checksum TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    duration_ms INTEGER NOT NULL DEFAULT 0
)

-- name: ledger_exists
-- Parameter: ledger (the ledger table's qualified name). Result column: found (bool).
SELECT to_regclass(%(ledger)s) IS NOT NULL AS found

-- name: select_ledger
SELECT version, name, checksum, applied_at, duration_ms
FROM {s}langgraph_delta_migrations
ORDER BY version

-- name: insert_ledger
INSERT INTO {s}langgraph_delta_migrations (version, name, checksum, duration_ms)
VALUES (%(version)s, %(name)s, %(checksum)s, %(duration_ms)s)
