-- 0002_thread_id_indexes: the per-thread indexes the official saver builds (same names,
-- so an adopted database keeps the ones it has). They serve delete_thread, copy_thread
-- and prune, which select by thread_id alone.
--
-- CREATE INDEX CONCURRENTLY cannot run inside a transaction block, hence:
-- migrate: no-transaction

CREATE INDEX CONCURRENTLY IF NOT EXISTS checkpoints_thread_id_idx ON {s}checkpoints(thread_id);

CREATE INDEX CONCURRENTLY IF NOT EXISTS checkpoint_blobs_thread_id_idx ON {s}checkpoint_blobs(thread_id);

CREATE INDEX CONCURRENTLY IF NOT EXISTS checkpoint_writes_thread_id_idx ON {s}checkpoint_writes(thread_id);
