-- inspect: read-only questions about one thread, for `langgraph-delta-pg inspect` and the
-- summary table of `langgraph-delta-pg demo`. Nothing here is on the saver's hot path.
--
-- Every block filters on thread_id first, so each one uses checkpoints_pkey /
-- checkpoint_blobs_pkey / checkpoint_writes_pkey prefixes and touches only the rows of
-- one thread.
--
-- Byte counts are pg_column_size of the payload columns: the bytes as stored, after
-- TOAST compression (for an out-of-line value, the compressed size of the value, not the
-- 18-byte pointer). Key columns, tuple headers, page slack and indexes are not counted,
-- so two threads that share the tables can be compared row by row.

-- name: namespaces
-- Checkpoints per namespace of a thread.
-- Parameters: thread_id text.
-- Result columns: checkpoint_ns text, checkpoints bigint, roots bigint (checkpoints
--   without a parent), first_checkpoint_id, latest_checkpoint_id text,
--   latest_step bigint (metadata step of the latest checkpoint).
-- Index: checkpoints_pkey prefix (thread_id).
SELECT
    c.checkpoint_ns AS checkpoint_ns,
    count(*) AS checkpoints,
    count(*) FILTER (WHERE c.parent_checkpoint_id IS NULL) AS roots,
    min(c.checkpoint_id) AS first_checkpoint_id,
    max(c.checkpoint_id) AS latest_checkpoint_id,
    (array_agg((c.metadata ->> 'step')::bigint ORDER BY c.checkpoint_id DESC))[1]
        AS latest_step
FROM {s}checkpoints AS c
WHERE c.thread_id = %(thread_id)s
GROUP BY c.checkpoint_ns
ORDER BY c.checkpoint_ns COLLATE "C"

-- name: forks
-- Checkpoints with more than one child (a fork: update_state or a replay from an older
-- checkpoint started a second branch there).
-- Parameters: thread_id text.
-- Result columns: checkpoint_ns, checkpoint_id text, children bigint,
--   child_ids text[] (oldest first).
-- Index: checkpoints_pkey prefix (thread_id).
SELECT
    c.checkpoint_ns AS checkpoint_ns,
    c.parent_checkpoint_id AS checkpoint_id,
    count(*) AS children,
    array_agg(c.checkpoint_id ORDER BY c.checkpoint_id) AS child_ids
FROM {s}checkpoints AS c
WHERE c.thread_id = %(thread_id)s
  AND c.parent_checkpoint_id IS NOT NULL
GROUP BY c.checkpoint_ns, c.parent_checkpoint_id
HAVING count(*) > 1
ORDER BY c.checkpoint_ns COLLATE "C", c.parent_checkpoint_id

-- name: storage
-- Rows and stored bytes of a thread, per namespace, table and channel.
-- Parameters: thread_id text.
-- Result columns: checkpoint_ns text, tbl text ('checkpoints' | 'blobs' | 'writes'),
--   channel text (NULL for 'checkpoints'), row_count bigint, bytes bigint.
--   checkpoints: checkpoint + metadata jsonb and the four typed delta columns;
--   blobs / writes: the serialized value (blob).
-- Indexes: the three *_pkey prefixes (thread_id).
SELECT r.*
FROM (
    SELECT
        c.checkpoint_ns AS checkpoint_ns,
        'checkpoints'::text AS tbl,
        NULL::text AS channel,
        count(*) AS row_count,
        coalesce(sum(
            pg_column_size(c.checkpoint) + pg_column_size(c.metadata)
            + coalesce(pg_column_size(c.stored_channels), 0)
            + coalesce(pg_column_size(c.delta_channels), 0)
            + coalesce(pg_column_size(c.delta_updates), 0)
            + coalesce(pg_column_size(c.delta_supersteps), 0)
        ), 0)::bigint AS bytes
    FROM {s}checkpoints AS c
    WHERE c.thread_id = %(thread_id)s
    GROUP BY c.checkpoint_ns
    UNION ALL
    SELECT
        b.checkpoint_ns AS checkpoint_ns,
        'blobs'::text AS tbl,
        b.channel AS channel,
        count(*) AS row_count,
        coalesce(sum(coalesce(pg_column_size(b.blob), 0)), 0)::bigint AS bytes
    FROM {s}checkpoint_blobs AS b
    WHERE b.thread_id = %(thread_id)s
    GROUP BY b.checkpoint_ns, b.channel
    UNION ALL
    SELECT
        w.checkpoint_ns AS checkpoint_ns,
        'writes'::text AS tbl,
        w.channel AS channel,
        count(*) AS row_count,
        coalesce(sum(pg_column_size(w.blob)), 0)::bigint AS bytes
    FROM {s}checkpoint_writes AS w
    WHERE w.thread_id = %(thread_id)s
    GROUP BY w.checkpoint_ns, w.channel
) AS r
ORDER BY r.checkpoint_ns COLLATE "C", r.tbl, r.channel COLLATE "C"

-- name: latest
-- The latest checkpoint of one namespace (as get_tuple loads it: never a seed-only one,
-- migration 0008) and its delta counters.
-- Parameters: thread_id, checkpoint_ns text.
-- Result columns: checkpoint_id text, step bigint, stored_channels text[],
--   delta_channels text[], delta_updates int[], delta_supersteps int[] (the typed columns,
--   NULL when the row was written by another saver or has no DeltaChannel),
--   counters jsonb (metadata counters_since_delta_snapshot: {channel: [updates,
--   supersteps]}), channels text[] (the keys of channel_versions),
--   snapshot_channels text[] (channels this checkpoint holds a _DeltaSnapshot for: the
--   inline `true` marker with a non-"empty" blob at its version; right after a snapshot
--   LangGraph drops the channel's counters, so this is how such a channel is still known
--   to be a DeltaChannel).
-- Indexes: checkpoints_pkey, backward range scan LIMIT 1; checkpoint_blobs_pkey probes.
SELECT
    c.checkpoint_id AS checkpoint_id,
    (c.metadata ->> 'step')::bigint AS step,
    c.stored_channels AS stored_channels,
    c.delta_channels AS delta_channels,
    c.delta_updates AS delta_updates,
    c.delta_supersteps AS delta_supersteps,
    c.metadata -> 'counters_since_delta_snapshot' AS counters,
    ARRAY(
        SELECT k FROM jsonb_object_keys(c.checkpoint -> 'channel_versions') AS k
        ORDER BY k COLLATE "C"
    ) AS channels,
    ARRAY(
        SELECT v.key
        FROM jsonb_each(c.checkpoint -> 'channel_values') AS v
        JOIN {s}checkpoint_blobs AS b
          ON b.thread_id = c.thread_id
         AND b.checkpoint_ns = c.checkpoint_ns
         AND b.channel = v.key
         AND b.version = c.checkpoint -> 'channel_versions' ->> v.key
        WHERE v.value = 'true'::jsonb AND b.type <> 'empty'
        ORDER BY v.key COLLATE "C"
    ) AS snapshot_channels
FROM {s}checkpoints AS c
WHERE c.thread_id = %(thread_id)s
  AND c.checkpoint_ns = %(checkpoint_ns)s
  AND c.seed_only IS NOT TRUE
ORDER BY c.checkpoint_id DESC
LIMIT 1

-- name: walk_depth
-- How far a load of the target walks, per channel: the ancestors that
-- get_delta_channel_history visits from the target's parent up to the nearest checkpoint
-- that stores a value for the channel (the seed, inclusive), or up to the root, and the
-- writes it would replay. A channel the target itself stores needs no walk (LangGraph
-- only asks for history of channels missing from the checkpoint): depth 0.
-- "Stores a value" is read exactly as delta_history.sql reads it: a channel the row's
-- stored_channels claims (every channel when that column is NULL) backed by an inline
-- primitive or a non-"empty" blob at the version (a claim whose blob is gone: not stored):
-- the same fragment, rules.stores_value (sql/rules.sql).
-- The walk follows parent pointers for any order of the ids, as delta_history.sql does.
-- Parameters: thread_id, checkpoint_ns text, checkpoint_id text or NULL (NULL: the
--   latest in the namespace), channels text[], max_depth int.
-- Result columns (one row per requested channel, in the order given; no rows when the
--   target does not exist):
--   channel text; depth int (ancestors visited; 0: stored at the target);
--   stored_at_target bool; seed_checkpoint_id text (NULL: no seed on the path);
--   seed_kind text ('snapshot': a _DeltaSnapshot blob behind the inline `true` marker,
--     'blob': a plain value blob, 'inline': an inline primitive, NULL: no seed);
--   last_parent_id text (the parent pointer of the deepest checkpoint visited: NULL when
--     the walk reached the root, else the chain is broken or the depth cap was hit);
--   replay_writes bigint, replay_bytes bigint (writes of the channel from the seed
--     inclusive to the target's parent: what DeltaChannel.replay_writes gets).
-- Termination: as delta_history.sql: every channel seeded, the root, a missing parent,
--   a checkpoint met twice (a cycle, found within one extra lap through `ups`), or
--   depth max_depth.
-- Indexes: checkpoints_pkey per step, checkpoint_blobs_pkey for probes,
--   checkpoint_writes_pkey prefix per visited checkpoint.
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
    -- Row -1 stands before the target and points at it, so the recursive term's "stores
    -- a value" test also reads the target itself (depth 0: the channels it stores need
    -- no walk) and that test is written once.
    SELECT
        -1 AS depth,
        NULL::text AS checkpoint_id,
        t.checkpoint_id AS parent_checkpoint_id,
        %(channels)s::text[] AS active,
        '{{}}'::text[] AS seeded,
        '{{}}'::text[] AS ups,
        FALSE AS looped
    FROM target AS t
    UNION ALL
    SELECT
        w.depth + 1 AS depth,
        p.checkpoint_id AS checkpoint_id,
        p.parent_checkpoint_id AS parent_checkpoint_id,
        n.active AS active,
        ARRAY(
            SELECT ch FROM unnest(n.active) AS ch
            WHERE (p.stored_channels IS NULL OR ch = ANY (p.stored_channels))
              AND (
                  @rules.stores_value(p, ch)
              )
        ) AS seeded,
        CASE WHEN w.checkpoint_id IS NULL OR p.checkpoint_id < w.checkpoint_id THEN w.ups
             ELSE w.ups || p.checkpoint_id
        END AS ups,
        w.checkpoint_id IS NOT NULL AND NOT (p.checkpoint_id < w.checkpoint_id)
            AND p.checkpoint_id = ANY (w.ups) AS looped
    FROM walk AS w
    CROSS JOIN LATERAL (
        SELECT ARRAY(SELECT ch FROM unnest(w.active) AS ch WHERE ch <> ALL (w.seeded)) AS active
    ) AS n
    CROSS JOIN LATERAL (
        -- LIMIT 1: a primary-key lookup per step whatever the statistics (as in
        -- delta_history.sql)
        SELECT p.checkpoint_id, p.parent_checkpoint_id, p.stored_channels, p.checkpoint
        FROM {s}checkpoints AS p
        WHERE p.thread_id = %(thread_id)s
          AND p.checkpoint_ns = %(checkpoint_ns)s
          AND p.checkpoint_id = w.parent_checkpoint_id
        LIMIT 1
    ) AS p
    WHERE w.depth < %(max_depth)s
      AND NOT w.looped
      AND cardinality(n.active) > 0
),
visited AS (
    -- a checkpoint met twice (a cycle) is not visited again
    SELECT * FROM walk WHERE NOT looped
),
per_channel AS (
    SELECT
        ch.channel AS channel,
        ch.ord AS ord,
        coalesce(max(w.depth) FILTER (WHERE w.depth >= 1 AND ch.channel = ANY (w.active)), 0)
            AS depth,
        coalesce(bool_or(w.depth = 0 AND ch.channel = ANY (w.seeded)), FALSE)
            AS stored_at_target,
        (array_agg(w.checkpoint_id) FILTER (WHERE w.depth >= 1 AND ch.channel = ANY (w.seeded)))[1]
            AS seed_checkpoint_id,
        (array_agg(w.parent_checkpoint_id ORDER BY w.depth DESC)
            FILTER (WHERE w.depth >= 0 AND ch.channel = ANY (w.active)))[1] AS last_parent_id,
        coalesce(sum(wr.n), 0)::bigint AS replay_writes,
        coalesce(sum(wr.bytes), 0)::bigint AS replay_bytes
    FROM unnest(%(channels)s::text[]) WITH ORDINALITY AS ch(channel, ord)
    JOIN visited AS w ON TRUE
    LEFT JOIN LATERAL (
        SELECT count(*) AS n, sum(pg_column_size(cw.blob)) AS bytes
        FROM {s}checkpoint_writes AS cw
        WHERE cw.thread_id = %(thread_id)s
          AND cw.checkpoint_ns = %(checkpoint_ns)s
          AND cw.checkpoint_id = w.checkpoint_id
          AND cw.channel = ch.channel
          AND w.depth >= 1
          AND ch.channel = ANY (w.active)
    ) AS wr ON TRUE
    GROUP BY ch.channel, ch.ord
)
SELECT
    pc.channel AS channel,
    pc.depth AS depth,
    pc.stored_at_target AS stored_at_target,
    pc.seed_checkpoint_id AS seed_checkpoint_id,
    CASE
        WHEN s.checkpoint_id IS NULL THEN NULL
        WHEN sb.type IS NOT NULL AND s.checkpoint -> 'channel_values' -> pc.channel = 'true'::jsonb
            THEN 'snapshot'
        WHEN sb.type IS NOT NULL THEN 'blob'
        ELSE 'inline'
    END AS seed_kind,
    pc.last_parent_id AS last_parent_id,
    pc.replay_writes AS replay_writes,
    pc.replay_bytes AS replay_bytes
FROM per_channel AS pc
LEFT JOIN {s}checkpoints AS s
  ON s.thread_id = %(thread_id)s
 AND s.checkpoint_ns = %(checkpoint_ns)s
 AND s.checkpoint_id = pc.seed_checkpoint_id
LEFT JOIN {s}checkpoint_blobs AS sb
  ON sb.thread_id = %(thread_id)s
 AND sb.checkpoint_ns = %(checkpoint_ns)s
 AND sb.channel = pc.channel
 AND sb.version = s.checkpoint -> 'channel_versions' ->> pc.channel
 AND sb.type <> 'empty'
ORDER BY pc.ord

-- name: table_exists
-- Whether a table exists. Parameter: name (qualified name, as to_regclass reads it).
-- Result column: found bool.
SELECT to_regclass(%(name)s) IS NOT NULL AS found

-- name: drop_schema
-- The demo's cleanup: its throwaway schema and everything in it. No parameters.
DROP SCHEMA IF EXISTS {schema} CASCADE

-- name: server_version
-- Result column: version text.
SELECT current_setting('server_version') AS version

-- name: deepest
-- The checkpoint of a thread whose load walks furthest: the most supersteps since a
-- DeltaChannel snapshot (delta_supersteps, or the metadata counters on rows without the
-- typed columns), newest first on ties. No DeltaChannel: the latest. Used by the demo to
-- show the worst case next to the latest checkpoint, which may itself be a snapshot.
-- Parameters: thread_id, checkpoint_ns. Result columns: checkpoint_id text, step bigint,
--   supersteps int (NULL: no counters).
-- Index: checkpoints_pkey prefix (thread_id, checkpoint_ns).
SELECT
    c.checkpoint_id AS checkpoint_id,
    (c.metadata ->> 'step')::bigint AS step,
    coalesce(
        (SELECT max(x) FROM unnest(c.delta_supersteps) AS x),
        (SELECT max((v.value ->> 1)::int)
         FROM jsonb_each(c.metadata -> 'counters_since_delta_snapshot') AS v
         WHERE jsonb_typeof(c.metadata -> 'counters_since_delta_snapshot') = 'object')
    ) AS supersteps
FROM {s}checkpoints AS c
WHERE c.thread_id = %(thread_id)s
  AND c.checkpoint_ns = %(checkpoint_ns)s
ORDER BY 3 DESC NULLS LAST, c.checkpoint_id DESC
LIMIT 1

-- name: at_step
-- The newest checkpoint of a thread at metadata step %(step)s (the demo compares the two
-- threads at the same point of the same session). Parameters: thread_id, checkpoint_ns,
-- step. Result column: checkpoint_id text.
SELECT c.checkpoint_id AS checkpoint_id
FROM {s}checkpoints AS c
WHERE c.thread_id = %(thread_id)s
  AND c.checkpoint_ns = %(checkpoint_ns)s
  AND (c.metadata ->> 'step')::bigint = %(step)s
ORDER BY c.checkpoint_id DESC
LIMIT 1
