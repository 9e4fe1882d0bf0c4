-- 0007_epoch_triggers: the database keeps checkpoint_epochs (0006) itself, whoever writes.
--
-- Until 0006, each release's put / put_writes statements kept last_put and late_writes.
-- A writer that does not (the official saver, a release before 0006), or does it
-- differently (a put of an existing checkpoint made it the namespace's last put, so a
-- write added to it later, after it had children, did not count as late), let another
-- process's warm history cache answer without a write (contract rule 15). Here triggers
-- keep the row for every writer.
--
-- What counts as late: a write to a checkpoint that has a child (a cached chain may pass
-- through it). The row keeps the last RECENT_PUTS (32) checkpoints put in the namespace
-- (recent) and their parents (parents), newest first: for a checkpoint among them, every
-- child it has is among them too (a child is put after its parent), so "has a child" is
-- exact; for any other stored checkpoint it is assumed (late). This holds because puts
-- come in causal order (a child after its parent, as every saver's put does); a bulk
-- insert in another order must make the row forget them (copy_thread does:
-- sql/maintenance.sql, forget_recent). (array_position, not
-- = ANY: the first checkpoint's parent is NULL, and = ANY of an array holding a NULL is
-- NULL, never false.) Before, "not the
-- namespace's last put" counted every write of concurrent runs of one thread as late
-- (8,300 of 12,600 writes of a run of `langgraph-delta-pg bench --only writes`'
-- concurrent part, counted in the database after it, each a bump that sent every cache
-- of the thread back to the database).
--
-- The order of a namespace's puts and writes is kept by the same row: a put updates it
-- (an exclusive row lock), a write that is not late holds it shared, each until its
-- commit.
--
-- lgdp_epochs_put (checkpoints, AFTER INSERT, per row): the checkpoint and its parent
--   go first in recent / parents (and last_put := its id, which releases with 0006
--   read). It waits for every write that holds the row shared, so no reader sees a
--   child before such a write.
-- lgdp_epochs_write (checkpoint_writes, AFTER INSERT OR UPDATE, per row of a regular
--   write: idx >= 0; the special channels of WRITES_IDX_MAP, negative, are never part of
--   a DeltaChannel history):
--   1. a write to a recent checkpoint without a child (the common write): the row locked
--      shared, only while that still holds (re-checked on the row's latest version when
--      a put commits meanwhile). Parallel tasks' writes, and concurrent runs', hold it
--      together.
--   2. a write to another stored checkpoint: late_writes + 1 (the row locked
--      exclusively; a checkpoint with a child, or no longer recent, never goes back).
--   3. a write to a checkpoint not stored (LangGraph's tasks write while their
--      checkpoint's put, durability="async", may still run): the row locked exclusively
--      (waiting for a put running there), then decided again: late only when the
--      checkpoint is now stored and has a child (or is not recent). Otherwise no walk can
--      have passed through it: its put, and any child's, wait for this write's commit.
--   Each statement of a VOLATILE function takes a new snapshot under READ COMMITTED, so
--   "stored" is read after the lock was granted. Under another isolation level the
--   snapshot may predate it: every write counts as late (correct; caches read again).
-- A checkpoint put again (an update) changes nothing here: its children, if any, were
-- put after it (recent and parents tell), and its row's xmin changes its cache tokens.
-- No deadlock: a write takes the row once, shared or exclusive, never both (the rows of
-- one put_writes go to one checkpoint: the same decision each; a release with 0006
-- takes the row exclusively first: its own later locks are no conflict).
-- Per row, not per statement: a statement trigger's transition table cost more than the
-- row triggers' work (a scratch timing, not a benchmark figure: a put + put_writes step,
-- triggers empty: +0.09 ms a step against none; row triggers with this work: 0.78 ms,
-- statement triggers 0.86, none 0.61; medians of 10 interleaved blocks of 60 steps, one
-- connection, Postgres 15, fsync off, load 1.1).
--
-- The functions pin the search_path of the migration (SET search_path FROM CURRENT), so
-- a session's own search_path cannot redirect them. The savers' statements no longer
-- touch checkpoint_epochs (sql/write.sql). Releases with 0006 still do as well: their
-- bumps add to these (a count only has to change) and their row locks only add waits.
-- Cost on the write path: `langgraph-delta-pg bench --only writes` (docs/writes.md).

ALTER TABLE {s}checkpoint_epochs ADD COLUMN IF NOT EXISTS recent TEXT[];
ALTER TABLE {s}checkpoint_epochs ADD COLUMN IF NOT EXISTS parents TEXT[];

CREATE OR REPLACE FUNCTION {s}lgdp_epochs_put() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO {s}checkpoint_epochs AS e (thread_id, checkpoint_ns, last_put, recent, parents)
    VALUES (NEW.thread_id, NEW.checkpoint_ns, NEW.checkpoint_id,
            ARRAY[NEW.checkpoint_id], ARRAY[NEW.parent_checkpoint_id])
    ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE SET
        last_put = EXCLUDED.last_put,
        recent = (EXCLUDED.recent || e.recent)[1:32],
        parents = (EXCLUDED.parents || e.parents)[1:32];
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION {s}lgdp_epochs_write() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    fresh boolean;
BEGIN
    IF current_setting('transaction_isolation') = 'read committed' THEN
        -- 1. a recent checkpoint without a child: shared
        PERFORM FROM {s}checkpoint_epochs AS e
        WHERE e.thread_id = NEW.thread_id
          AND e.checkpoint_ns = NEW.checkpoint_ns
          AND array_position(e.recent, NEW.checkpoint_id) IS NOT NULL
          AND array_position(e.parents, NEW.checkpoint_id) IS NULL
        FOR SHARE;
        IF FOUND THEN
            RETURN NULL;
        END IF;
        IF NOT EXISTS (
            SELECT FROM {s}checkpoints AS c
            WHERE c.thread_id = NEW.thread_id
              AND c.checkpoint_ns = NEW.checkpoint_ns
              AND c.checkpoint_id = NEW.checkpoint_id
        ) THEN
            -- 3. not stored: wait for a put running there, then decide again
            INSERT INTO {s}checkpoint_epochs (thread_id, checkpoint_ns)
            VALUES (NEW.thread_id, NEW.checkpoint_ns)
            ON CONFLICT (thread_id, checkpoint_ns) DO NOTHING;
            SELECT array_position(e.recent, NEW.checkpoint_id) IS NOT NULL
                   AND array_position(e.parents, NEW.checkpoint_id) IS NULL
            INTO fresh
            FROM {s}checkpoint_epochs AS e
            WHERE e.thread_id = NEW.thread_id AND e.checkpoint_ns = NEW.checkpoint_ns
            FOR UPDATE;
            IF fresh OR NOT EXISTS (
                SELECT FROM {s}checkpoints AS c
                WHERE c.thread_id = NEW.thread_id
                  AND c.checkpoint_ns = NEW.checkpoint_ns
                  AND c.checkpoint_id = NEW.checkpoint_id
            ) THEN
                RETURN NULL;
            END IF;
        END IF;
    END IF;
    -- 2. late
    INSERT INTO {s}checkpoint_epochs AS e (thread_id, checkpoint_ns, late_writes)
    VALUES (NEW.thread_id, NEW.checkpoint_ns, 1)
    ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE SET late_writes = e.late_writes + 1;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS lgdp_epochs_put ON {s}checkpoints;
CREATE TRIGGER lgdp_epochs_put
    AFTER INSERT ON {s}checkpoints
    FOR EACH ROW EXECUTE FUNCTION {s}lgdp_epochs_put();

DROP TRIGGER IF EXISTS lgdp_epochs_write ON {s}checkpoint_writes;
CREATE TRIGGER lgdp_epochs_write
    AFTER INSERT OR UPDATE ON {s}checkpoint_writes
    FOR EACH ROW WHEN (NEW.idx >= 0) EXECUTE FUNCTION {s}lgdp_epochs_write();
