-- 0004_backfill_delta_columns: fill the columns of 0003 for rows that existed before it
-- (an adopted langgraph-checkpoint-postgres database). Same definitions as put uses.
-- Rows that already have stored_channels are left alone, so re-running is harmless.

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
    delta_channels = counters.channels,
    delta_updates = counters.updates,
    delta_supersteps = counters.supersteps
FROM (
    SELECT c2.thread_id, c2.checkpoint_ns, c2.checkpoint_id,
           array_agg(k.key ORDER BY k.key) FILTER (WHERE k.key IS NOT NULL) AS channels,
           array_agg((k.value ->> 0)::int ORDER BY k.key)
               FILTER (WHERE k.key IS NOT NULL) AS updates,
           array_agg((k.value ->> 1)::int ORDER BY k.key)
               FILTER (WHERE k.key IS NOT NULL) AS supersteps
    FROM {s}checkpoints AS c2
    LEFT JOIN LATERAL jsonb_each(
        CASE WHEN jsonb_typeof(c2.metadata -> 'counters_since_delta_snapshot') = 'object'
             THEN c2.metadata -> 'counters_since_delta_snapshot' END
    ) AS k ON TRUE
    WHERE c2.stored_channels IS NULL
    GROUP BY c2.thread_id, c2.checkpoint_ns, c2.checkpoint_id
) AS counters
WHERE c.stored_channels IS NULL
  AND c.thread_id = counters.thread_id
  AND c.checkpoint_ns = counters.checkpoint_ns
  AND c.checkpoint_id = counters.checkpoint_id;

