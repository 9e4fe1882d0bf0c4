-- maintenance: delete_thread, delete_for_runs, copy_thread, prune.
-- Each block is one statement; the multi-table deletes use data-modifying CTEs so a
-- thread is removed atomically even on an autocommit connection.

-- name: delete_threads
-- delete_thread and prune(strategy="delete"). Parameter: thread_ids text[].
-- Indexes: the primary keys, whose leading column is thread_id.
WITH w AS (
    DELETE FROM {s}checkpoint_writes WHERE thread_id = ANY (%(thread_ids)s::text[])
), e AS (
    DELETE FROM {s}checkpoint_epochs WHERE thread_id = ANY (%(thread_ids)s::text[])
), b AS (
    DELETE FROM {s}checkpoint_blobs WHERE thread_id = ANY (%(thread_ids)s::text[])
)
DELETE FROM {s}checkpoints WHERE thread_id = ANY (%(thread_ids)s::text[])

-- name: delete_runs
-- delete_for_runs: the runs' checkpoints except the kept ones, their writes, and the
-- blobs no surviving checkpoint of the same thread and namespace references.
-- Parameters: run_ids text[]; kept_threads, kept_ns, kept_ids text[]: checkpoints of the
-- runs that later checkpoints still need (retention.run_children), kept with their
-- writes and blobs, and marked seed_only (no read path returns them: the runs read as
-- deleted) (the keep-sets of retention.run_children's checkpoints: they may
-- also hold checkpoints of other runs, which this statement never deletes anyway).
-- Result columns: kind, thread_id, checkpoint_ns, checkpoint_id. Kind 'd': once per
-- thread a checkpoint was deleted from (the saver's cache forgets those; ns and id
-- NULL); kind 'k': a kept checkpoint that is one of the runs' own (what the saver logs
-- as kept: not the other runs' checkpoints of the keep-sets). A run's checkpoints are
-- those of the thread it ran on: a row whose metadata names another thread_id is a copy
-- (copy_thread of an older version, or of another saver) and is kept. Index:
-- checkpoints_run_id_idx (metadata ->> 'run_id', migration 0005); a kept one by
-- checkpoints_pkey.
WITH kept AS (
    SELECT k.thread_id, k.checkpoint_ns, k.checkpoint_id
    FROM unnest(%(kept_threads)s::text[], %(kept_ns)s::text[], %(kept_ids)s::text[])
        AS k(thread_id, checkpoint_ns, checkpoint_id)
), dead AS (
    DELETE FROM {s}checkpoints AS c
    WHERE c.metadata ->> 'run_id' = ANY (%(run_ids)s::text[])
      AND coalesce(c.metadata ->> 'thread_id', c.thread_id) = c.thread_id
      AND NOT EXISTS (
          SELECT 1 FROM kept AS k
          WHERE k.thread_id = c.thread_id
            AND k.checkpoint_ns = c.checkpoint_ns
            AND k.checkpoint_id = c.checkpoint_id
      )
    RETURNING c.thread_id, c.checkpoint_ns, c.checkpoint_id,
              c.checkpoint -> 'channel_versions' AS versions
), del_writes AS (
    DELETE FROM {s}checkpoint_writes AS w
    USING dead AS d
    WHERE w.thread_id = d.thread_id
      AND w.checkpoint_ns = d.checkpoint_ns
      AND w.checkpoint_id = d.checkpoint_id
), freed AS (
    SELECT DISTINCT d.thread_id, d.checkpoint_ns, v.key AS channel, v.value AS version
    FROM dead AS d
    CROSS JOIN LATERAL jsonb_each_text(d.versions) AS v
), del_blobs AS (
DELETE FROM {s}checkpoint_blobs AS b
USING freed AS f
WHERE b.thread_id = f.thread_id
  AND b.checkpoint_ns = f.checkpoint_ns
  AND b.channel = f.channel
  AND b.version = f.version
  AND NOT EXISTS (
      SELECT 1 FROM {s}checkpoints AS c
      WHERE c.thread_id = f.thread_id
        AND c.checkpoint_ns = f.checkpoint_ns
        AND c.checkpoint -> 'channel_versions' ->> f.channel = f.version
        AND (coalesce(c.metadata ->> 'run_id', '') <> ALL (%(run_ids)s::text[])
             OR coalesce(c.metadata ->> 'thread_id', c.thread_id) <> c.thread_id
             OR EXISTS (
                 SELECT 1 FROM kept AS k
                 WHERE k.thread_id = c.thread_id
                   AND k.checkpoint_ns = c.checkpoint_ns
                   AND k.checkpoint_id = c.checkpoint_id
             ))
  )
), hide AS (
    -- the runs' own checkpoints kept only as seeds are deleted for every read path
    -- (seed_only, migration 0008): the runs read as deleted
    UPDATE {s}checkpoints AS c
    SET seed_only = TRUE
    FROM kept AS k
    WHERE c.thread_id = k.thread_id
      AND c.checkpoint_ns = k.checkpoint_ns
      AND c.checkpoint_id = k.checkpoint_id
      AND c.metadata ->> 'run_id' = ANY (%(run_ids)s::text[])
      AND coalesce(c.metadata ->> 'thread_id', c.thread_id) = c.thread_id
      AND c.seed_only IS NOT TRUE
)
SELECT DISTINCT 'd'::text AS kind, d.thread_id AS thread_id,
       NULL::text AS checkpoint_ns, NULL::text AS checkpoint_id
FROM dead AS d
UNION ALL
SELECT 'k'::text, c.thread_id, c.checkpoint_ns, c.checkpoint_id
FROM kept AS k
JOIN {s}checkpoints AS c
  ON c.thread_id = k.thread_id
 AND c.checkpoint_ns = k.checkpoint_ns
 AND c.checkpoint_id = k.checkpoint_id
WHERE c.metadata ->> 'run_id' = ANY (%(run_ids)s::text[])
  AND coalesce(c.metadata ->> 'thread_id', c.thread_id) = c.thread_id

-- name: thread_exists
-- Parameter: thread_id. Result column: found (a row when the thread has a checkpoint).
SELECT 1 AS found FROM {s}checkpoints WHERE thread_id = %(thread_id)s LIMIT 1

-- name: forget_recent
-- After copy_thread, in its transaction: the target's checkpoint_epochs rows forget their
-- recent puts (migrations/0007). The copy inserted its checkpoints in one statement, in
-- no causal order (a child may come before its parent), so "a recent checkpoint's
-- children are recent too" does not hold for them; every write to a copied checkpoint
-- then counts as late until new puts fill the window. Parameter: thread_id.
-- Index: checkpoint_epochs_pkey (thread_id leads it).
UPDATE {s}checkpoint_epochs SET recent = NULL, parents = NULL
WHERE thread_id = %(thread_id)s

-- name: copy_thread
-- copy_thread: every checkpoint, blob and write of source_thread_id, all namespaces, to
-- target_thread_id, with the same checkpoint ids and parent pointers, so the copy can
-- rebuild any DeltaChannel state the source can. Parameters: source_thread_id,
-- target_thread_id. Rows the target already has are kept (ON CONFLICT DO NOTHING).
-- The copy is a thread of its own, as in Agent Server: its metadata names the target
-- thread_id (where the source's did name one) and no run_id (the source's runs did not
-- run on it, so delete_for_runs of them leaves the copy alone).
-- stored_channels is not copied blindly: a claim is kept only when it is backed, by a
-- blob at the version the checkpoint names or by an inline primitive (a delete that
-- raced a put can leave a claim whose blob is gone; it reads as "not stored"): the seed
-- rule of rules.stores_value, written here with EXISTS and the source row's thread.
-- A seed-only checkpoint stays seed-only in the copy (the copy's visible checkpoints
-- rebuild their state from it, as the source's do).
-- Writes are copied only with their checkpoint: orphans (writes whose checkpoint was
-- never saved, or was deleted) stay behind (contract rule 13).
-- Indexes: the primary keys (thread_id leads them).
WITH cp AS (
    INSERT INTO {s}checkpoints (
        thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,
        metadata, stored_channels, delta_channels, delta_updates, delta_supersteps,
        seed_only
    )
    SELECT %(target_thread_id)s, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
           c.type, c.checkpoint,
           CASE WHEN c.metadata ? 'thread_id'
                THEN jsonb_set(c.metadata, '{{thread_id}}', to_jsonb(%(target_thread_id)s::text))
                ELSE c.metadata
           END - 'run_id',
           CASE WHEN c.stored_channels IS NOT NULL THEN ARRAY(
               SELECT ch
               FROM unnest(c.stored_channels) AS ch
               WHERE jsonb_typeof(c.checkpoint -> 'channel_values' -> ch) IN
                         ('string', 'number', 'boolean')
                  OR EXISTS (
                      SELECT 1 FROM {s}checkpoint_blobs AS b
                      WHERE b.thread_id = c.thread_id
                        AND b.checkpoint_ns = c.checkpoint_ns
                        AND b.channel = ch
                        AND b.version = c.checkpoint -> 'channel_versions' ->> ch
                        AND b.type <> 'empty'
                  )
               ORDER BY 1
           ) END,
           c.delta_channels, c.delta_updates, c.delta_supersteps, c.seed_only
    FROM {s}checkpoints AS c
    WHERE c.thread_id = %(source_thread_id)s
    ON CONFLICT DO NOTHING
), bl AS (
    INSERT INTO {s}checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
    SELECT %(target_thread_id)s, checkpoint_ns, channel, version, type, blob
    FROM {s}checkpoint_blobs
    WHERE thread_id = %(source_thread_id)s
    ON CONFLICT DO NOTHING
)
INSERT INTO {s}checkpoint_writes (
    thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob
)
SELECT %(target_thread_id)s, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.task_path, w.idx,
       w.channel, w.type, w.blob
FROM {s}checkpoint_writes AS w
WHERE w.thread_id = %(source_thread_id)s
  AND EXISTS (
      SELECT 1 FROM {s}checkpoints AS c
      WHERE c.thread_id = %(source_thread_id)s
        AND c.checkpoint_ns = w.checkpoint_ns
        AND c.checkpoint_id = w.checkpoint_id
  )
ON CONFLICT DO NOTHING
