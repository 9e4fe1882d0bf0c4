-- migrate: the migration runner's own statements (see langgraph_delta_postgres/migrate.py).

-- name: try_lock
-- Session-level advisory lock around a whole run: concurrent setup() calls poll it (a
-- waiter blocked in pg_advisory_lock would hold a snapshot that CREATE INDEX CONCURRENTLY
-- waits for), and the later ones find every migration applied. Parameter: key bigint.
-- Result column: locked (bool).
SELECT pg_try_advisory_lock(%(key)s) AS locked

-- name: backend_pid
-- The server process of this statement. A direct connection learns the same number at
-- startup (BackendKeyData, psycopg's conn.info.backend_pid); a pooler such as PgBouncer
-- answers startup itself with a made-up key, so the two differ behind one (see
-- migrate.py, POOLED). Result column: pid (int).
SELECT pg_backend_pid() AS pid

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

-- name: schema_exists
-- Parameter: schema (the schema's name, as stored). Result column: found (bool).
SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = %(schema)s) AS found

-- name: select_ledger
SELECT version, name, checksum, applied_at, duration_ms
FROM {s}langgraph_delta_migrations
ORDER BY version

-- name: insert_ledger
INSERT INTO {s}langgraph_delta_migrations (version, name, checksum, duration_ms)
VALUES (%(version)s, %(name)s, %(checksum)s, %(duration_ms)s)

-- name: planner_settings
-- The session's planner settings the runner overrides (a saver connection from
-- from_conn_string plans generically with seq scans disabled; migrations such as a
-- backfill want the server's defaults). Result columns: enable_seqscan, plan_cache_mode.
SELECT current_setting('enable_seqscan') AS enable_seqscan,
       current_setting('plan_cache_mode') AS plan_cache_mode

-- name: set_planner_settings
-- Parameters: enable_seqscan, plan_cache_mode (text). Session level, restored afterwards.
SELECT set_config('enable_seqscan', %(enable_seqscan)s, false) AS enable_seqscan,
       set_config('plan_cache_mode', %(plan_cache_mode)s, false) AS plan_cache_mode
