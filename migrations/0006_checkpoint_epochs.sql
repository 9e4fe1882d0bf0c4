-- 0006_checkpoint_epochs: one row per thread and namespace that lets every process's
-- history cache see writes added to a checkpoint that already has a child (contract
-- rule 15).
--
-- last_put     the id of the checkpoint most recently put in this namespace (in commit
--              order, not id order: a child written by a worker whose clock is behind
--              may sort below its parent). Set by every put (write.put_checkpoint).
-- late_writes  bumped by put_writes (write.insert_writes) when its checkpoint is not
--              last_put: a write to a checkpoint that may have a child, which a cached
--              chain may hold without it. The common write, to the checkpoint just put,
--              leaves it alone.
-- The history statement reads late_writes in its snapshot and makes it part of every
-- token of a visited checkpoint (delta_history.walk), so a cache that read a chain
-- before a late write holds tokens that no longer match, and re-reads the chain.
-- put_writes decides with the row locked (INSERT ... ON CONFLICT DO UPDATE locks the
-- row and reads its latest committed version): a put of the child that committed
-- first is seen; one that did not waits for the write's commit, so no reader sees the
-- child without the write. No row (a thread written before this migration, or by
-- another saver): tokens carry 0, and the first write through this package creates
-- the row with late_writes 1, which invalidates whatever was cached under 0.

CREATE TABLE IF NOT EXISTS {s}checkpoint_epochs (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    last_put TEXT,
    late_writes BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (thread_id, checkpoint_ns)
);
