-- 0004_backfill_delta_columns: fill the columns of 0003 for rows that existed before it
-- (an adopted langgraph-checkpoint-postgres database). Same definitions as put uses.
--
-- In bounded batches, each committed on its own: the runner repeats this statement, passing
-- the primary key of the last row the previous batch visited as %(after)s (NULL for the
-- first batch), until a batch finds no row. So no transaction holds more than
-- %(batch_rows)s rows (BATCH_ROWS in migrate.py) locked, the runner VACUUMs checkpoints
-- every few batches (so the space of the replaced row versions is reused by the next
-- batches instead of doubling the table), and an interrupted backfill resumes where it
-- stopped on the next setup() / migrate (rows already filled are skipped by
-- `stored_channels IS NULL`; the walk itself is a primary-key range scan). Savers keep
-- working meanwhile: a NULL stored_channels reads as "unknown" and readers probe the blobs.
-- Measured on 1,000,000 checkpoints: see docs/adoption.md.
--
-- Batches walk the primary key: `(thread_id, checkpoint_ns, checkpoint_id) > %(after)s`
-- is an index range scan of checkpoints_pkey; the blob probe is a checkpoint_blobs_pkey
-- lookup per channel. The result, `last`, is the cursor of the next batch.
--
-- The first version of this file backfilled every row in one UPDATE (one transaction, a
-- full-table rewrite and its WAL at once). Databases that applied it are complete, so its
-- checksum still counts as applied:
-- migrate: supersedes sha256:fe63c2a9131a1ee842048bc9ad3a2d4b40fd77932af75f5d448f80d702a74ecc
-- migrate: batched
-- migrate: vacuum checkpoints

WITH batch AS (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id
    FROM {s}checkpoints AS c
    WHERE %(after)s::text[] IS NULL
       OR (c.thread_id, c.checkpoint_ns, c.checkpoint_id)
          > ((%(after)s::text[])[1], (%(after)s::text[])[2], (%(after)s::text[])[3])
    ORDER BY c.thread_id, c.checkpoint_ns, c.checkpoint_id
    LIMIT %(batch_rows)s
), filled AS (
    UPDATE {s}checkpoints AS c
    SET stored_channels = ARRAY(
            SELECT v.key
            FROM jsonb_each(c.checkpoint -> 'channel_values') AS v
            WHERE jsonb_typeof(v.value) IN ('string', 'number', 'boolean')
            UNION
            SELECT cv.key
            FROM jsonb_each_text(c.checkpoint -> 'channel_versions') AS cv
            WHERE EXISTS (
                SELECT 1 FROM {s}checkpoint_blobs AS b
                WHERE b.thread_id = c.thread_id
                  AND b.checkpoint_ns = c.checkpoint_ns
                  AND b.channel = cv.key
                  AND b.version = cv.value
                  AND b.type <> 'empty'
            )
            ORDER BY 1
        ),
        delta_channels = (
            SELECT array_agg(k.key ORDER BY k.key)
            FROM jsonb_each(
                CASE WHEN jsonb_typeof(c.metadata -> 'counters_since_delta_snapshot') = 'object'
                     THEN c.metadata -> 'counters_since_delta_snapshot' END
            ) AS k
        ),
        delta_updates = (
            SELECT array_agg((k.value ->> 0)::int ORDER BY k.key)
            FROM jsonb_each(
                CASE WHEN jsonb_typeof(c.metadata -> 'counters_since_delta_snapshot') = 'object'
                     THEN c.metadata -> 'counters_since_delta_snapshot' END
            ) AS k
        ),
        delta_supersteps = (
            SELECT array_agg((k.value ->> 1)::int ORDER BY k.key)
            FROM jsonb_each(
                CASE WHEN jsonb_typeof(c.metadata -> 'counters_since_delta_snapshot') = 'object'
                     THEN c.metadata -> 'counters_since_delta_snapshot' END
            ) AS k
        )
    FROM batch AS b
    WHERE c.thread_id = b.thread_id
      AND c.checkpoint_ns = b.checkpoint_ns
      AND c.checkpoint_id = b.checkpoint_id
      AND c.stored_channels IS NULL
)
SELECT ARRAY[b.thread_id, b.checkpoint_ns, b.checkpoint_id] AS last
FROM batch AS b
ORDER BY b.thread_id DESC, b.checkpoint_ns DESC, b.checkpoint_id DESC
LIMIT 1;
