-- delta_history: get_delta_channel_history in one statement.
--
-- Purpose
--   For a target checkpoint (by id, or the thread's latest in the namespace when
--   checkpoint_id is NULL, resolved in this statement), walk the parent chain from the
--   target's PARENT, and per requested channel return
--     * its writes at every checkpoint from the nearest checkpoint that stores a value for
--       it (the seed checkpoint, inclusive) up to the target's parent, and
--     * that seed value: a blob (type, blob) or an inline primitive (jsonb).
--   Nothing else leaves the database: no checkpoint JSONB, no older snapshot blob.
--
-- Parameters
--   %(thread_id)s text, %(checkpoint_ns)s text, %(checkpoint_id)s text or NULL,
--   %(channels)s text[] (non-empty, distinct), %(max_depth)s int (depth guard).
--
-- Result columns (one row set, in this order; the driver reads them by position)
--   kind        's' seed | 'w' write | 'x' walk stopped on bad data (see below)
--   channel     the channel the row belongs to
--   task_id     the write's task ('w' only)
--   type, blob  serialized write or seed blob; NULL for an inline seed
--   inline      the inline primitive seed ('s' without a blob)
--   checkpoint_id               the checkpoint the row comes from
--   Rows come oldest first (by distance from the target, `depth`, 1 = its parent) and,
--   within one checkpoint, in Python's writes_sort_key order (task_path, task_id, idx)
--   compared with COLLATE "C", i.e. by code point, whatever the database's default
--   collation. depth, task_path and idx order the rows but are not sent: every column
--   costs the client a conversion per row.
--
-- The walk (recursive CTE, UNION ALL)
--   Row 0 is the target. Each row carries `active`, the channels still walking when it
--   is visited, and `seeded`, those of them this checkpoint stores a value for. The next
--   step follows parent_checkpoint_id with active := active - seeded.
--   "Stores a value" is read from the stored_channels column (written by put, backfilled
--   by migration 0004); a row where it is NULL (written by another saver) falls back to
--   the jsonb inline value and a primary-key probe of checkpoint_blobs.
--
-- Termination
--   The recursion ends when every channel is seeded (active becomes empty), when the root
--   is reached (parent_checkpoint_id NULL) or a parent row is missing (the join finds
--   nothing: the answer is the reachable chain's), or on bad data:
--     * checkpoint ids are time-ordered uuid6, so a parent always sorts below its child;
--       a parent that does not (a cycle, or a corrupt pointer) stops the walk at once and
--       yields a 'x' row, which the caller raises as an error;
--     * depth is capped at %(max_depth)s; hitting the cap with channels still active
--       yields a 'x' row too.
--   So a cycle costs at most one lap and never recurses forever.
--
-- Plan shape
--   Every correlated lookup is a LATERAL subquery with LIMIT 1 / OFFSET 0 (or a scalar
--   subquery), which the planner cannot flatten into a join. Measured: on a fresh,
--   never-analyzed table the flattened form was planned as "scan the whole thread per
--   step" (1.85 s for 2,000 ancestors); the fenced form is one primary-key lookup per
--   step whatever the statistics say (python scripts/explain_history.py --depth 2000).
--
-- EXPLAIN (ANALYZE, BUFFERS) on a 2,000-deep thread, with the command that produced it:
--   docs/history-query.md (python scripts/explain_history.py --depth 2000 --channels 2).
--
-- Indexes
--   target       checkpoints_pkey (thread_id, checkpoint_ns, checkpoint_id): equality,
--                or a backward range scan LIMIT 1 for the latest.
--   each step    checkpoints_pkey: one equality lookup per ancestor.
--   fallback     checkpoint_blobs_pkey (thread_id, checkpoint_ns, channel, version).
--   writes       checkpoint_writes_pkey prefix (thread_id, checkpoint_ns, checkpoint_id),
--                channel filtered on the few rows of one checkpoint.
--   seed blob    checkpoint_blobs_pkey, once per seeded channel.
--   Every table reference, the recursive term and each join included, filters on
--   thread_id and checkpoint_ns, so the statement is routable on partitioned or
--   distributed Postgres and touches only on-path ancestors.

WITH RECURSIVE
target AS (
    SELECT t.checkpoint_id, t.parent_checkpoint_id
    FROM {s}checkpoints AS t
    WHERE t.thread_id = %(thread_id)s
      AND t.checkpoint_ns = %(checkpoint_ns)s
      AND t.checkpoint_id = %(checkpoint_id)s::text
    UNION ALL
    (
        SELECT t.checkpoint_id, t.parent_checkpoint_id
        FROM {s}checkpoints AS t
        WHERE t.thread_id = %(thread_id)s
          AND t.checkpoint_ns = %(checkpoint_ns)s
          AND %(checkpoint_id)s::text IS NULL
        ORDER BY t.checkpoint_id DESC
        LIMIT 1
    )
),
walk AS (
    SELECT
        0 AS depth,
        t.checkpoint_id AS checkpoint_id,
        t.parent_checkpoint_id AS parent_checkpoint_id,
        %(channels)s::text[] AS active,
        '{{}}'::text[] AS seeded,
        TRUE AS ordered
    FROM target AS t
    UNION ALL
    SELECT
        w.depth + 1 AS depth,
        p.checkpoint_id AS checkpoint_id,
        p.parent_checkpoint_id AS parent_checkpoint_id,
        n.active AS active,
        CASE
            -- the common step: the row is ours and stores none of the active channels
            WHEN p.stored_channels IS NOT NULL AND NOT (p.stored_channels && n.active)
                THEN '{{}}'::text[]
            ELSE ARRAY(
                SELECT ch FROM unnest(n.active) AS ch
                WHERE CASE
                    WHEN p.stored_channels IS NOT NULL THEN ch = ANY (p.stored_channels)
                    ELSE jsonb_typeof(p.checkpoint -> 'channel_values' -> ch)
                             IN ('string', 'number', 'boolean')
                         OR (
                             SELECT TRUE FROM {s}checkpoint_blobs AS b
                             WHERE b.thread_id = %(thread_id)s
                               AND b.checkpoint_ns = %(checkpoint_ns)s
                               AND b.channel = ch
                               AND b.version = p.checkpoint -> 'channel_versions' ->> ch
                               AND b.type <> 'empty'
                             LIMIT 1
                         ) IS NOT NULL
                END
            )
        END AS seeded,
        p.checkpoint_id < w.checkpoint_id AS ordered
    FROM walk AS w
    CROSS JOIN LATERAL (
        SELECT CASE
            WHEN cardinality(w.seeded) = 0 THEN w.active
            ELSE ARRAY(SELECT ch FROM unnest(w.active) AS ch WHERE ch <> ALL (w.seeded))
        END AS active
    ) AS n
    CROSS JOIN LATERAL (
        SELECT p.checkpoint_id, p.parent_checkpoint_id, p.stored_channels, p.checkpoint
        FROM {s}checkpoints AS p
        WHERE p.thread_id = %(thread_id)s
          AND p.checkpoint_ns = %(checkpoint_ns)s
          AND p.checkpoint_id = w.parent_checkpoint_id
        LIMIT 1
    ) AS p
    WHERE w.ordered
      AND w.depth < %(max_depth)s
      AND cardinality(n.active) > 0
)
SELECT r.kind, r.channel, r.task_id, r.type, r.blob, r.inline, r.checkpoint_id
FROM (
    SELECT
        'w'::text AS kind,
        w.depth AS depth,
        cw.channel AS channel,
        cw.task_id AS task_id,
        cw.task_path AS task_path,
        cw.idx AS idx,
        cw.type AS type,
        cw.blob AS blob,
        NULL::jsonb AS inline,
        w.checkpoint_id AS checkpoint_id
    FROM walk AS w
    CROSS JOIN LATERAL (
        SELECT x.channel, x.task_id, x.task_path, x.idx, x.type, x.blob
        FROM {s}checkpoint_writes AS x
        WHERE x.thread_id = %(thread_id)s
          AND x.checkpoint_ns = %(checkpoint_ns)s
          AND x.checkpoint_id = w.checkpoint_id
          AND x.channel = ANY (w.active)
        OFFSET 0
    ) AS cw
    WHERE w.depth > 0 AND w.ordered
    UNION ALL
    SELECT
        's'::text AS kind,
        w.depth AS depth,
        s.ch AS channel,
        NULL::text AS task_id,
        NULL::text AS task_path,
        NULL::integer AS idx,
        b.type AS type,
        b.blob AS blob,
        CASE WHEN b.type IS NULL THEN p.inline END AS inline,
        w.checkpoint_id AS checkpoint_id
    FROM walk AS w
    CROSS JOIN LATERAL unnest(w.seeded) AS s(ch)
    CROSS JOIN LATERAL (
        SELECT x.checkpoint -> 'channel_versions' ->> s.ch AS version,
               x.checkpoint -> 'channel_values' -> s.ch AS inline
        FROM {s}checkpoints AS x
        WHERE x.thread_id = %(thread_id)s
          AND x.checkpoint_ns = %(checkpoint_ns)s
          AND x.checkpoint_id = w.checkpoint_id
        LIMIT 1
    ) AS p
    LEFT JOIN LATERAL (
        SELECT x.type, x.blob
        FROM {s}checkpoint_blobs AS x
        WHERE x.thread_id = %(thread_id)s
          AND x.checkpoint_ns = %(checkpoint_ns)s
          AND x.channel = s.ch
          AND x.version = p.version
          AND x.type <> 'empty'
        LIMIT 1
    ) AS b ON TRUE
    WHERE w.depth > 0 AND w.ordered AND cardinality(w.seeded) > 0
    UNION ALL
    SELECT
        'x'::text AS kind,
        w.depth AS depth,
        NULL::text AS channel,
        NULL::text AS task_id,
        NULL::text AS task_path,
        NULL::integer AS idx,
        NULL::text AS type,
        NULL::bytea AS blob,
        NULL::jsonb AS inline,
        w.checkpoint_id AS checkpoint_id
    FROM walk AS w
    WHERE NOT w.ordered
       OR (w.depth >= %(max_depth)s
           AND w.parent_checkpoint_id IS NOT NULL
           AND EXISTS (SELECT 1 FROM unnest(w.active) AS ch WHERE ch <> ALL (w.seeded)))
) AS r
ORDER BY r.kind, r.depth DESC, r.task_path COLLATE "C", r.task_id COLLATE "C", r.idx
