-- 0002_thread_id_indexes: drop the per-thread indexes langgraph-checkpoint-postgres creates
-- (checkpoints_thread_id_idx, checkpoint_blobs_thread_id_idx,
-- checkpoint_writes_thread_id_idx), if an adopted database has them.
--
-- They are redundant: thread_id leads every primary key, which serves thread_id-only
-- lookups (delete_thread, copy_thread, prune) as well. And they are a plan trap: measured
-- on a fresh database, a prepared statement planned while the tables were small chose
-- checkpoints_thread_id_idx over the primary key for the history walk's per-step lookup
-- (Index Cond: thread_id; Filter: checkpoint_id), so every step scanned the whole thread:
-- 29 ms instead of 9.5 ms at 360 ancestors, growing with the square of the depth. Without
-- them every lookup has one index to use. Each insert also maintains one index less.
--
-- DROP INDEX CONCURRENTLY cannot run inside a transaction block, hence:
-- migrate: no-transaction

DROP INDEX CONCURRENTLY IF EXISTS {s}checkpoints_thread_id_idx;

DROP INDEX CONCURRENTLY IF EXISTS {s}checkpoint_blobs_thread_id_idx;

DROP INDEX CONCURRENTLY IF EXISTS {s}checkpoint_writes_thread_id_idx;
