-- 0007_epoch_triggers: the database keeps checkpoint_epochs (0006) itself, whoever writes.
--
-- Until 0006, each release's put / put_writes statements kept last_put and late_writes.
-- A writer that does not (the official saver, a release before 0006), or does it
-- differently (a put of an existing checkpoint made it the namespace's last put, so a
-- write added to it later, after it had children, did not count as late), let another
-- process's warm history cache answer without a write (contract rule 15). Here three
-- triggers keep the row for every writer, with the same rules:
--
-- lgdp_epochs_put (checkpoints, AFTER INSERT, per statement): last_put := the id of the
--   checkpoint just stored (per namespace, the greatest id when one statement stores
--   several, as copy_thread does). An exclusive row lock until the commit: it waits for
--   every write that holds the row shared (below), so no reader sees the child before
--   such a write.
-- lgdp_epochs_reput (checkpoints, AFTER UPDATE, per row): a checkpoint put again is no
--   longer trusted as the last put (it may have children): last_put := NULL when it named
--   it, so the next write to it counts as late. Rare (a retried put, a backfill).
-- lgdp_epochs_write (checkpoint_writes, AFTER INSERT and AFTER UPDATE, per statement):
--   for each checkpoint the statement added regular writes to (idx >= 0: the special
--   channels of WRITES_IDX_MAP, negative, are never part of a DeltaChannel history),
--   1. the common write, to the namespace's last put: a SHARE lock on the row, taken only
--      while last_put still names this checkpoint (re-checked on the latest version when
--      a put is committing). Writes of parallel tasks hold it together; the next put
--      waits for them. No row version is made.
--   2. a write to a stored checkpoint that is not the last put: late_writes + 1.
--   3. a write to a checkpoint not stored yet (LangGraph's tasks write while their
--      checkpoint's put, durability="async", may still run): SHARE lock on the row (so
--      the put, and any child's, commits after this write), then decided again: late only
--      when the checkpoint is now stored and not the last put.
--   Each statement of a VOLATILE function takes a new snapshot under READ COMMITTED, so
--   "stored" is read after the lock was granted: a put committed meanwhile is seen (the
--   statements of 0006 had to count such a write as late).
-- Deadlocks: a session takes one row per namespace, shared or exclusive, except in case
-- 3 when a put and its child's put both commit between the two reads (the write then
-- upgrades its SHARE lock); two such writes at once deadlock, and Postgres cancels one
-- after deadlock_timeout (the savers of this package retry a put_writes once).
--
-- The functions pin the search_path of the migration (SET search_path FROM CURRENT), so
-- a session's own search_path cannot redirect them. The savers' statements no longer
-- touch checkpoint_epochs (sql/write.sql). Releases with 0006 still do as well: their
-- bumps add to these (a count only has to change).

CREATE OR REPLACE FUNCTION {s}lgdp_epochs_put() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO {s}checkpoint_epochs AS e (thread_id, checkpoint_ns, last_put)
    SELECT n.thread_id, n.checkpoint_ns, max(n.checkpoint_id)
    FROM new_rows AS n
    GROUP BY n.thread_id, n.checkpoint_ns
    ORDER BY n.thread_id, n.checkpoint_ns
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
    r record;
    head text;
BEGIN
    FOR r IN
        SELECT DISTINCT n.thread_id, n.checkpoint_ns, n.checkpoint_id
        FROM new_rows AS n
        WHERE n.idx >= 0
        ORDER BY 1, 2, 3
    LOOP
        -- 1. the namespace's last put
        PERFORM FROM {s}checkpoint_epochs AS e
        WHERE e.thread_id = r.thread_id
          AND e.checkpoint_ns = r.checkpoint_ns
          AND e.last_put = r.checkpoint_id
        FOR SHARE;
        CONTINUE WHEN FOUND;
        -- 2. stored, not the last put
        IF EXISTS (
            SELECT FROM {s}checkpoints AS c
            WHERE c.thread_id = r.thread_id
              AND c.checkpoint_ns = r.checkpoint_ns
              AND c.checkpoint_id = r.checkpoint_id
        ) THEN
            INSERT INTO {s}checkpoint_epochs AS e (thread_id, checkpoint_ns, late_writes)
            VALUES (r.thread_id, r.checkpoint_ns, 1)
            ON CONFLICT (thread_id, checkpoint_ns)
            DO UPDATE SET late_writes = e.late_writes + 1;
            CONTINUE;
        END IF;
        -- 3. not stored yet: wait for a put running there, then decide again
        INSERT INTO {s}checkpoint_epochs (thread_id, checkpoint_ns)
        VALUES (r.thread_id, r.checkpoint_ns)
        ON CONFLICT (thread_id, checkpoint_ns) DO NOTHING;
        SELECT e.last_put INTO head FROM {s}checkpoint_epochs AS e
        WHERE e.thread_id = r.thread_id
          AND e.checkpoint_ns = r.checkpoint_ns
        FOR SHARE;
        IF head IS DISTINCT FROM r.checkpoint_id AND EXISTS (
            SELECT FROM {s}checkpoints AS c
            WHERE c.thread_id = r.thread_id
              AND c.checkpoint_ns = r.checkpoint_ns
              AND c.checkpoint_id = r.checkpoint_id
        ) THEN
            UPDATE {s}checkpoint_epochs AS e SET late_writes = e.late_writes + 1
            WHERE e.thread_id = r.thread_id
              AND e.checkpoint_ns = r.checkpoint_ns;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS lgdp_epochs_put ON {s}checkpoints;
CREATE TRIGGER lgdp_epochs_put
    AFTER INSERT ON {s}checkpoints
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}lgdp_epochs_put();

DROP TRIGGER IF EXISTS lgdp_epochs_reput ON {s}checkpoints;
CREATE TRIGGER lgdp_epochs_reput
    AFTER UPDATE ON {s}checkpoints
    FOR EACH ROW EXECUTE FUNCTION {s}lgdp_epochs_reput();

DROP TRIGGER IF EXISTS lgdp_epochs_write ON {s}checkpoint_writes;
CREATE TRIGGER lgdp_epochs_write
    AFTER INSERT ON {s}checkpoint_writes
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}lgdp_epochs_write();

DROP TRIGGER IF EXISTS lgdp_epochs_rewrite ON {s}checkpoint_writes;
CREATE TRIGGER lgdp_epochs_rewrite
    AFTER UPDATE ON {s}checkpoint_writes
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}lgdp_epochs_write();
