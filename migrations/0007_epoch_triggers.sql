-- 0007_epoch_triggers: the database keeps checkpoint_epochs (0006) itself, whoever writes.
--
-- Until 0006, each release's put / put_writes statements kept last_put and late_writes.
-- A writer that does not (the official saver, a release before 0006), or does it
-- differently (a put of an existing checkpoint made it the namespace's last put, so a
-- write added to it later, after it had children, did not count as late), let another
-- process's warm history cache answer without a write (contract rule 15). Here three
-- triggers keep the row for every writer, with the same rules:
--
-- The order of a namespace's puts and writes is kept by its checkpoint_epochs row: a put
-- updates it (an exclusive row lock), a write takes it shared, each until its commit.
--
-- lgdp_epochs_put (checkpoints, AFTER INSERT, per row): last_put := the id of the
--   checkpoint just stored. It waits for every write that holds the row shared, so no
--   reader sees a child before such a write.
-- lgdp_epochs_reput (checkpoints, AFTER UPDATE OF checkpoint, metadata, per row): a
--   checkpoint put again (every saver's put sets both) is no longer trusted as the last
--   put (it may have children): last_put := NULL when it named it, so the next write to
--   it counts as late. Rare (a retried put). Updates of other columns (prune's parent
--   pointers, the 0004 backfill) do not fire it: they wait for no write.
-- lgdp_epochs_write (checkpoint_writes, AFTER INSERT OR UPDATE, per row of a regular
--   write: idx >= 0; the special channels of WRITES_IDX_MAP, negative, are never part of
--   a DeltaChannel history):
--   1. a write to the namespace's last put (the common write): the row locked shared,
--      only while last_put still names the checkpoint (re-checked on the row's latest
--      version when a put commits meanwhile). Parallel tasks' writes hold it together.
--   2. a write to another stored checkpoint: late_writes + 1 (the row locked
--      exclusively; once stored and not the last put, a checkpoint never is again).
--   3. a write to a checkpoint not stored (LangGraph's tasks write while their
--      checkpoint's put, durability="async", may still run): the row locked exclusively
--      (waiting for a put running there), then decided again: late only when the
--      checkpoint is now stored and not the last put. Otherwise no walk can have passed
--      through it: its put, and any child's, wait for this write's commit.
--   Each statement of a VOLATILE function takes a new snapshot under READ COMMITTED, so
--   "stored" is read after the lock was granted. Under another isolation level the
--   snapshot may predate it: every write counts as late (correct; caches read again).
-- No deadlock: a write takes the row once, shared or exclusive, never both (the rows of
-- one put_writes go to one checkpoint: the same decision each; a release with 0006
-- takes the row exclusively first: its own later locks are no conflict).
-- Per row, not per statement: a statement trigger's transition table cost more than the
-- row triggers' work (a put + put_writes step, triggers empty: +0.09 ms a step against
-- none; row triggers with this work: 0.78 ms, statement triggers 0.86, none 0.61, medians
-- of 10 interleaved blocks of 60 steps, one connection, Postgres 15, fsync off, load 1.1).
--
-- The functions pin the search_path of the migration (SET search_path FROM CURRENT), so
-- a session's own search_path cannot redirect them. The savers' statements no longer
-- touch checkpoint_epochs (sql/write.sql). Releases with 0006 still do as well: their
-- bumps add to these (a count only has to change) and their row locks only add waits.
-- Cost on the write path: `langgraph-delta-pg bench --only writes` (docs/upgrading.md).

CREATE OR REPLACE FUNCTION {s}lgdp_epochs_put() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO {s}checkpoint_epochs AS e (thread_id, checkpoint_ns, last_put)
    VALUES (NEW.thread_id, NEW.checkpoint_ns, NEW.checkpoint_id)
    ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE SET last_put = EXCLUDED.last_put;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION {s}lgdp_epochs_reput() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE {s}checkpoint_epochs AS e SET last_put = NULL
    WHERE e.thread_id = NEW.thread_id
      AND e.checkpoint_ns = NEW.checkpoint_ns
      AND e.last_put = NEW.checkpoint_id;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION {s}lgdp_epochs_write() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    head text;
BEGIN
    IF current_setting('transaction_isolation') = 'read committed' THEN
        -- 1. the last put: shared
        PERFORM FROM {s}checkpoint_epochs AS e
        WHERE e.thread_id = NEW.thread_id
          AND e.checkpoint_ns = NEW.checkpoint_ns
          AND e.last_put = NEW.checkpoint_id
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
            SELECT e.last_put INTO head FROM {s}checkpoint_epochs AS e
            WHERE e.thread_id = NEW.thread_id AND e.checkpoint_ns = NEW.checkpoint_ns
            FOR UPDATE;
            IF head IS NOT DISTINCT FROM NEW.checkpoint_id OR NOT EXISTS (
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

DROP TRIGGER IF EXISTS lgdp_epochs_reput ON {s}checkpoints;
CREATE TRIGGER lgdp_epochs_reput
    AFTER UPDATE OF checkpoint, metadata ON {s}checkpoints
    FOR EACH ROW EXECUTE FUNCTION {s}lgdp_epochs_reput();

DROP TRIGGER IF EXISTS lgdp_epochs_write ON {s}checkpoint_writes;
CREATE TRIGGER lgdp_epochs_write
    AFTER INSERT OR UPDATE ON {s}checkpoint_writes
    FOR EACH ROW WHEN (NEW.idx >= 0) EXECUTE FUNCTION {s}lgdp_epochs_write();
