-- 0001_checkpoint_tables: the three checkpoint tables, in the storage format of
-- langgraph-checkpoint-postgres 3.2, so that a database that saver created is adopted in
-- place and rows either saver writes read identically through the other.
--
-- Every statement is idempotent (IF NOT EXISTS / DROP NOT NULL): on an adopted database
-- this migration only fills in whatever an older official schema lacked (task_path).
--
-- The official saver's own ledger, checkpoint_migrations, is created and marked
-- up to date (its versions 0-9 describe this schema plus three per-thread indexes, which
-- 0002 deliberately leaves out), so that running the official saver's setup() against
-- our database is a no-op.

CREATE TABLE IF NOT EXISTS {s}checkpoint_migrations (
    v INTEGER PRIMARY KEY
);

CREATE TABLE IF NOT EXISTS {s}checkpoints (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    parent_checkpoint_id TEXT,
    type TEXT,
    checkpoint JSONB NOT NULL,
    metadata JSONB NOT NULL DEFAULT '{{}}',
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
);

CREATE TABLE IF NOT EXISTS {s}checkpoint_blobs (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    channel TEXT NOT NULL,
    version TEXT NOT NULL,
    type TEXT NOT NULL,
    blob BYTEA,
    PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
);

CREATE TABLE IF NOT EXISTS {s}checkpoint_writes (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    channel TEXT NOT NULL,
    type TEXT,
    blob BYTEA NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
);

ALTER TABLE {s}checkpoint_blobs ALTER COLUMN blob DROP NOT NULL;

ALTER TABLE {s}checkpoint_writes ADD COLUMN IF NOT EXISTS task_path TEXT NOT NULL DEFAULT '';

INSERT INTO {s}checkpoint_migrations (v)
SELECT generate_series(0, 9)
ON CONFLICT (v) DO NOTHING;
