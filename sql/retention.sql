-- retention: the DeltaChannel keep-set, and prune that keeps what the head needs.
--
-- A statement is composed of three blocks, in this order (see _ops/retention.py):
--   a "target" block (WITH RECURSIVE target ..., wanted ...,), the shared `walk` block,
--   and a result block. So get_delta_channel_keepset and prune walk parents with the
--   very same SQL.
--
-- Every table reference filters on thread_id and checkpoint_ns (routable on Citus and
-- partitioned tables); correlated lookups are LATERAL ... LIMIT 1 or scalar subqueries
-- (fenced: one primary-key lookup per step whatever the statistics say); no
-- SEARCH / CYCLE clauses.

-- name: keepset_target
-- get_delta_channel_keepset: the target is the checkpoint %(checkpoint_id)s, or the
-- latest of the namespace when it is NULL; the channels are the caller's.
-- Parameters: thread_id, checkpoint_ns, checkpoint_id text or NULL, channels text[].
-- Index: checkpoints_pkey (equality, or a backward range scan LIMIT 1 for the latest).
WITH RECURSIVE
target AS (
    SELECT t.checkpoint_id
    FROM {s}checkpoints AS t
    WHERE t.thread_id = %(thread_id)s
      AND t.checkpoint_ns = %(checkpoint_ns)s
      AND t.checkpoint_id = %(checkpoint_id)s::text
      AND t.seed_only IS NOT TRUE
    UNION ALL
    (
        SELECT t.checkpoint_id
        FROM {s}checkpoints AS t
        WHERE t.thread_id = %(thread_id)s
          AND t.checkpoint_ns = %(checkpoint_ns)s
          AND %(checkpoint_id)s::text IS NULL
          AND t.seed_only IS NOT TRUE
        ORDER BY t.checkpoint_id DESC
        LIMIT 1
    )
),
wanted AS (
    SELECT %(channels)s::text[] AS channels
),

-- name: prune_target
-- prune of one (thread, namespace): the target is the namespace's latest checkpoint
-- (the highest id, as get_tuple reads it) when %(checkpoint_id)s is NULL, else that
-- checkpoint (delete_for_runs: a checkpoint that builds on a deleted run). The
-- channels its state needs are found from
-- the data: the DeltaChannels named by any checkpoint of the namespace (the typed
-- delta_channels column, or the metadata's counters_since_delta_snapshot for rows of
-- other writers), restricted to those the target has a version of. LangGraph replays
-- exactly the channels with a version and no stored value (a DeltaChannel, or an
-- aggregate written as a DeltaChannel before its annotation changed back: hence "any
-- checkpoint", not only the target, whose counters drop a channel that snapshots
-- there); one without a version was never written and needs nothing. A channel stored
-- at the target costs nothing: its keep-set is the target.
-- keep_last = 0 (strategy "delete" counted by dry_run) wants no channel.
-- Parameters: thread_id, checkpoint_ns, checkpoint_id text or NULL, keep_last int.
-- Indexes: checkpoints_pkey (latest: backward range scan LIMIT 1; the namespace's rows:
-- the (thread_id, checkpoint_ns) prefix).
WITH RECURSIVE
target AS (
    SELECT t.checkpoint_id, t.checkpoint -> 'channel_versions' AS versions
    FROM {s}checkpoints AS t
    WHERE t.thread_id = %(thread_id)s
      AND t.checkpoint_ns = %(checkpoint_ns)s
      AND t.checkpoint_id = %(checkpoint_id)s::text
    UNION ALL
    (
        SELECT t.checkpoint_id, t.checkpoint -> 'channel_versions' AS versions
        FROM {s}checkpoints AS t
        WHERE t.thread_id = %(thread_id)s
          AND t.checkpoint_ns = %(checkpoint_ns)s
          AND %(checkpoint_id)s::text IS NULL
          AND t.seed_only IS NOT TRUE
        ORDER BY t.checkpoint_id DESC
        LIMIT 1
    )
),
wanted AS (
    SELECT CASE WHEN %(keep_last)s::int = 0 THEN '{{}}'::text[] ELSE ARRAY(
        SELECT DISTINCT d.ch
        FROM {s}checkpoints AS c
        CROSS JOIN LATERAL unnest(coalesce(
            c.delta_channels,
            CASE WHEN jsonb_typeof(c.metadata -> 'counters_since_delta_snapshot') = 'object'
                THEN ARRAY(SELECT jsonb_object_keys(c.metadata -> 'counters_since_delta_snapshot'))
            END
        )) AS d(ch)
        WHERE c.thread_id = %(thread_id)s
          AND c.checkpoint_ns = %(checkpoint_ns)s
          AND t.versions ? d.ch
        ORDER BY 1
    ) END AS channels
    FROM target AS t
),

-- name: walk
-- The parent walk shared by the keep-set and prune (the same walk as delta_history).
-- Parameters: thread_id, checkpoint_ns, keep_last int (>= 1 keeps that many checkpoints
-- of the chain whatever they store; the keep-set API passes 1; 0: no walk), max_depth.
--
-- Row 0 is a stub whose parent is the target, so the target is visited (depth 1) and
-- tested like any ancestor: a value stored at the target ends that channel's walk there
-- (the keep-set of a snapshot is {target}). Each row carries
--   active  the channels still walking when the row is visited,
--   seeded  those of them this checkpoint stores a value for,
--   ups     the ids reached by an "up" step: a parent whose id does NOT sort below its
--           child's (ids are uuid6 from the writer's clock, so a worker whose clock is
--           behind writes children that sort below their parents, langgraph#8550);
--   met_twice  this step is an up step to an id already in ups: a cycle.
-- The next step follows parent_checkpoint_id with active := active - seeded (from the
-- keep_last-th checkpoint on: the first keep_last checkpoints are kept whatever they
-- store, and the walk goes on from the oldest of them for every channel).
--
-- "Stores a value" for channel ch at checkpoint p: an inline primitive (jsonb string,
-- number or boolean in channel_values) or a non-'empty' blob at the version
-- channel_versions names. stored_channels (when not NULL) is a fast negative: a channel
-- it does not name is not stored. A claim it makes must be backed by its blob or inline
-- value (a delete racing a put can leave a claim whose blob is gone): a claim with
-- neither counts as NOT stored, as the official saver reads it. The test is the fragment
-- rules.stores_value (sql/rules.sql), which the history walk includes too.
--
-- %(settled)s text[], %(settled_at)s text: channels that need nothing older than the
-- checkpoint settled_at, whatever it stores (prune(graph=...): compaction stored their
-- value there, or proved that nothing older reaches them); they count as seeded at that
-- checkpoint, wherever the walk meets it (a run may have moved the head since the
-- compaction chose it: it is then deeper than keep_last, and still the place they stop).
-- '{{}}' and NULL: none (the keep-set, delete_for_runs, prune without a graph).
--
-- Termination: every channel seeded past the keep_last-th row (active empty), the root
-- (parent_checkpoint_id NULL), a missing parent (the LATERAL finds nothing), a cycle
-- (met_twice: any cycle contains an up step, so it is met within one extra lap; a skewed
-- but acyclic chain never repeats an id; ups holds one id per clock switch), or the depth
-- guard %(max_depth)s. met_twice rows and rows at the guard with channels still active
-- are the errors the result blocks report.
--
-- Indexes: checkpoints_pkey (one equality lookup per step); checkpoint_blobs_pkey (the
-- probe, only for an active channel the row may store).
walk AS (
    SELECT
        0 AS depth,
        NULL::text AS checkpoint_id,
        t.checkpoint_id AS parent_checkpoint_id,
        wd.channels AS active,
        '{{}}'::text[] AS seeded,
        '{{}}'::text[] AS ups,
        FALSE AS met_twice
    FROM target AS t
    CROSS JOIN wanted AS wd
    WHERE %(keep_last)s::int > 0
    UNION ALL
    SELECT
        w.depth + 1 AS depth,
        p.checkpoint_id AS checkpoint_id,
        p.parent_checkpoint_id AS parent_checkpoint_id,
        n.active AS active,
        CASE
            WHEN cardinality(n.active) = 0
              OR (p.stored_channels IS NOT NULL AND NOT (p.stored_channels && n.active)
                  AND NOT (p.checkpoint_id = %(settled_at)s::text
                           AND %(settled)s::text[] && n.active))
                THEN '{{}}'::text[]
            ELSE ARRAY(
                SELECT ch FROM unnest(n.active) AS ch
                WHERE (p.checkpoint_id = %(settled_at)s::text AND ch = ANY (%(settled)s::text[]))
                   OR ((p.stored_channels IS NULL OR ch = ANY (p.stored_channels))
                  AND (
                      @rules.stores_value(p, ch)
                  ))
            )
        END AS seeded,
        CASE WHEN s.down THEN w.ups ELSE w.ups || p.checkpoint_id END AS ups,
        NOT s.down AND p.checkpoint_id = ANY (w.ups) AS met_twice
    FROM walk AS w
    CROSS JOIN LATERAL (
        SELECT CASE
            WHEN w.depth < %(keep_last)s::int OR cardinality(w.seeded) = 0 THEN w.active
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
    -- the stub's step to the target is "down": it is no step of the chain
    CROSS JOIN LATERAL (
        SELECT coalesce(p.checkpoint_id < w.checkpoint_id, TRUE) AS down
    ) AS s
    WHERE NOT w.met_twice
      AND w.depth < %(max_depth)s
      AND (cardinality(n.active) > 0 OR w.depth < %(keep_last)s::int)
),
bad AS (
    SELECT w.checkpoint_id, w.met_twice AS cycle
    FROM walk AS w
    WHERE w.met_twice
       OR (w.depth >= %(max_depth)s
           AND w.parent_checkpoint_id IS NOT NULL
           AND (w.depth < %(keep_last)s::int
                OR EXISTS (SELECT 1 FROM unnest(w.active) AS ch WHERE ch <> ALL (w.seeded))))
    LIMIT 1
)

-- name: keepset_result
-- Result columns: kind 'k' (a kept checkpoint) or 'x' (the walk stopped on bad data: a
-- cycle or the depth guard; the caller raises HistoryError), checkpoint_id, cycle (on
-- the 'x' row: true for a cycle, false for the depth guard; NULL on 'k' rows).
-- No row: the target does not exist.
SELECT 'k'::text AS kind, w.checkpoint_id AS checkpoint_id, NULL::boolean AS cycle
FROM walk AS w
WHERE w.depth > 0 AND NOT w.met_twice
UNION ALL
SELECT 'x'::text AS kind, b.checkpoint_id AS checkpoint_id, b.cycle AS cycle
FROM bad AS b

-- name: prune_result
-- prune of one (thread, namespace): keep the walk's checkpoints, their writes and every
-- blob version a kept checkpoint's channel_versions names; delete every other
-- checkpoint, write and blob of the namespace (none when %(dry_run)s), and mark the kept
-- checkpoints past the keep_last latest seed_only (see `hide`). Nothing is deleted or
-- marked when the walk stopped on bad data.
-- One statement, so one snapshot: a checkpoint committed after it started is neither
-- seen nor deleted. Writes go by the checkpoints deleted (a run can commit a step's
-- writes before its checkpoint: those are kept).
-- Parameters: as the blocks before, and dry_run boolean.
-- Result: one row: checkpoints, writes, blobs (rows deleted, or that would be), bytes
-- (pg_column_size of their stored values: checkpoint + metadata jsonb, write and blob
-- bytea; as stored, i.e. compressed, without reading TOAST), kept (checkpoints kept),
-- hidden (kept checkpoints newly marked seed_only, or that would be), bad (the checkpoint where the walk
-- stopped on bad data, else NULL), bad_cycle (true: that was a cycle, false: the depth
-- guard, NULL: no bad data).
-- Indexes: the three primary keys, by their (thread_id, checkpoint_ns) prefix; writes
-- and the hide look their checkpoint up by checkpoints_pkey.
,
kept AS (
    SELECT coalesce(array_agg(DISTINCT w.checkpoint_id), '{{}}'::text[]) AS ids
    FROM walk AS w
    WHERE w.depth > 0
),
kept_versions AS (
    SELECT DISTINCT v.key AS channel, v.value AS version
    FROM kept AS k
    CROSS JOIN LATERAL unnest(k.ids) AS i(checkpoint_id)
    CROSS JOIN LATERAL (
        SELECT x.checkpoint -> 'channel_versions' AS versions
        FROM {s}checkpoints AS x
        WHERE x.thread_id = %(thread_id)s
          AND x.checkpoint_ns = %(checkpoint_ns)s
          AND x.checkpoint_id = i.checkpoint_id
        LIMIT 1
    ) AS x
    CROSS JOIN LATERAL jsonb_each_text(x.versions) AS v
),
doomed AS (
    SELECT c.ctid AS tid, c.checkpoint_id,
           pg_column_size(c.checkpoint) + pg_column_size(c.metadata) AS bytes
    FROM {s}checkpoints AS c, kept AS k
    WHERE c.thread_id = %(thread_id)s
      AND c.checkpoint_ns = %(checkpoint_ns)s
      AND c.checkpoint_id <> ALL (k.ids)
      AND NOT EXISTS (SELECT 1 FROM bad)
),
doomed_writes AS (
    SELECT cw.ctid AS tid, coalesce(pg_column_size(cw.blob), 0) AS bytes
    FROM {s}checkpoint_writes AS cw, kept AS k
    WHERE cw.thread_id = %(thread_id)s
      AND cw.checkpoint_ns = %(checkpoint_ns)s
      AND cw.checkpoint_id <> ALL (k.ids)
      AND NOT EXISTS (SELECT 1 FROM bad)
      -- a scalar subquery, not EXISTS: a semi-join was planned as a scan of the
      -- namespace's checkpoints per write (measured: 200 rows a probe, 80 ms for 600)
      AND (
          SELECT TRUE FROM {s}checkpoints AS c
          WHERE c.thread_id = %(thread_id)s
            AND c.checkpoint_ns = %(checkpoint_ns)s
            AND c.checkpoint_id = cw.checkpoint_id
          LIMIT 1
      ) IS NOT NULL
),
doomed_blobs AS (
    SELECT b.ctid AS tid, coalesce(pg_column_size(b.blob), 0) AS bytes
    FROM {s}checkpoint_blobs AS b
    WHERE b.thread_id = %(thread_id)s
      AND b.checkpoint_ns = %(checkpoint_ns)s
      AND NOT EXISTS (SELECT 1 FROM bad)
      AND NOT EXISTS (
          SELECT 1 FROM kept_versions AS kv
          WHERE kv.channel = b.channel AND kv.version = b.version
      )
),
-- The deletes fetch the doomed rows by their ctid (a TID scan, one fetch a row): a join
-- with the doomed CTE was planned as a nested loop over the CTE per table row (the CTE
-- is estimated at one row), quadratic in the namespace's size. All of the statement
-- reads one snapshot, so the ctids are those rows; a row another transaction updated
-- meanwhile no longer matches its ctid and is left alone.
del_checkpoints AS (
    DELETE FROM {s}checkpoints AS c
    WHERE NOT %(dry_run)s
      AND c.thread_id = %(thread_id)s
      AND c.checkpoint_ns = %(checkpoint_ns)s
      AND c.ctid = ANY (ARRAY(SELECT d.tid FROM doomed AS d))
),
del_writes AS (
    DELETE FROM {s}checkpoint_writes AS cw
    WHERE NOT %(dry_run)s
      AND cw.thread_id = %(thread_id)s
      AND cw.checkpoint_ns = %(checkpoint_ns)s
      AND cw.ctid = ANY (ARRAY(SELECT d.tid FROM doomed_writes AS d))
),
del_blobs AS (
    DELETE FROM {s}checkpoint_blobs AS b
    WHERE NOT %(dry_run)s
      AND b.thread_id = %(thread_id)s
      AND b.checkpoint_ns = %(checkpoint_ns)s
      AND b.ctid = ANY (ARRAY(SELECT d.tid FROM doomed_blobs AS d))
),
-- The kept checkpoints past the keep_last latest are kept only as seeds: they may not
-- read what they read before (their own seeds can be older than the oldest kept), so
-- they are marked seed_only, and no read path returns them again (migration 0008). No
-- kept checkpoint is changed otherwise: its parent_checkpoint_id stays what it was,
-- even when that parent is deleted (its parent_config reads as before; loading it
-- answers as for a deleted checkpoint).
hidden AS (
    SELECT coalesce(array_agg(DISTINCT w.checkpoint_id), '{{}}'::text[]) AS ids
    FROM walk AS w
    WHERE w.depth > %(keep_last)s::int
      AND NOT EXISTS (SELECT 1 FROM bad)
),
newly_hidden AS (
    SELECT c.ctid AS tid
    FROM {s}checkpoints AS c, hidden AS h
    WHERE c.thread_id = %(thread_id)s
      AND c.checkpoint_ns = %(checkpoint_ns)s
      AND c.checkpoint_id = ANY (h.ids)
      AND c.seed_only IS NOT TRUE
),
hide AS (
    UPDATE {s}checkpoints AS c
    SET seed_only = TRUE
    WHERE NOT %(dry_run)s
      AND c.thread_id = %(thread_id)s
      AND c.checkpoint_ns = %(checkpoint_ns)s
      AND c.ctid = ANY (ARRAY(SELECT n.tid FROM newly_hidden AS n))
)
SELECT
    (SELECT count(*) FROM doomed) AS checkpoints,
    (SELECT count(*) FROM doomed_writes) AS writes,
    (SELECT count(*) FROM doomed_blobs) AS blobs,
    (SELECT coalesce(sum(d.bytes), 0) FROM doomed AS d)
        + (SELECT coalesce(sum(d.bytes), 0) FROM doomed_writes AS d)
        + (SELECT coalesce(sum(d.bytes), 0) FROM doomed_blobs AS d) AS bytes,
    (SELECT cardinality(k.ids) FROM kept AS k) AS kept,
    (SELECT count(*) FROM newly_hidden) AS hidden,
    (SELECT b.checkpoint_id FROM bad AS b) AS bad,
    (SELECT b.cycle FROM bad AS b) AS bad_cycle

-- name: compact_chain
-- prune(graph=...), before the prune statement of a namespace: the latest visible
-- checkpoint and its ancestors, up to %(keep_last)s of them (the ones prune leaves
-- visible; the last is where compaction stores each DeltaChannel's full value). Per row,
-- of the channels %(channels)s (the graph's DeltaChannels): the version it names,
-- whether it stores a value (as `walk` reads it: an inline primitive or a non-'empty'
-- blob at that version; the rule of rules.stores_value, written here with EXISTS), and
-- whether it has pending writes to them.
-- Parameters: thread_id, checkpoint_ns, keep_last int, channels text[].
-- Result columns, by depth (1 = the latest): depth, checkpoint_id, seed_only,
-- versions jsonb (channel_versions), stored text[], written text[].
-- Indexes: checkpoints_pkey (the latest: backward scan LIMIT 1; each parent by
-- equality); checkpoint_blobs_pkey (one probe per channel and row);
-- checkpoint_writes_pkey (the row's prefix).
WITH RECURSIVE chain AS (
    SELECT 1 AS depth, h.checkpoint_id, h.parent_checkpoint_id, h.seed_only, h.checkpoint
    FROM (
        SELECT t.checkpoint_id, t.parent_checkpoint_id, t.seed_only, t.checkpoint
        FROM {s}checkpoints AS t
        WHERE t.thread_id = %(thread_id)s
          AND t.checkpoint_ns = %(checkpoint_ns)s
          AND t.seed_only IS NOT TRUE
        ORDER BY t.checkpoint_id DESC
        LIMIT 1
    ) AS h
    UNION ALL
    SELECT c.depth + 1, p.checkpoint_id, p.parent_checkpoint_id, p.seed_only, p.checkpoint
    FROM chain AS c
    CROSS JOIN LATERAL (
        SELECT p.checkpoint_id, p.parent_checkpoint_id, p.seed_only, p.checkpoint
        FROM {s}checkpoints AS p
        WHERE p.thread_id = %(thread_id)s
          AND p.checkpoint_ns = %(checkpoint_ns)s
          AND p.checkpoint_id = c.parent_checkpoint_id
        LIMIT 1
    ) AS p
    WHERE c.depth < %(keep_last)s::int
)
SELECT
    c.depth,
    c.checkpoint_id,
    c.seed_only,
    c.checkpoint -> 'channel_versions' AS versions,
    ARRAY(
        SELECT ch FROM unnest(%(channels)s::text[]) AS ch
        WHERE jsonb_typeof(c.checkpoint -> 'channel_values' -> ch)
                  IN ('string', 'number', 'boolean')
           OR EXISTS (
               SELECT 1 FROM {s}checkpoint_blobs AS b
               WHERE b.thread_id = %(thread_id)s
                 AND b.checkpoint_ns = %(checkpoint_ns)s
                 AND b.channel = ch
                 AND b.version = c.checkpoint -> 'channel_versions' ->> ch
                 AND b.type <> 'empty'
           )
    ) AS stored,
    ARRAY(
        SELECT DISTINCT w.channel FROM {s}checkpoint_writes AS w
        WHERE w.thread_id = %(thread_id)s
          AND w.checkpoint_ns = %(checkpoint_ns)s
          AND w.checkpoint_id = c.checkpoint_id
          AND w.channel = ANY (%(channels)s::text[])
    ) AS written
FROM chain AS c
ORDER BY c.depth

-- name: compact_store
-- prune(graph=...): store each DeltaChannel's full value at one checkpoint, as a put of
-- a snapshot step stores it (the official saver's format): the serialized
-- _DeltaSnapshot as the blob at the version the checkpoint names (replacing the
-- 'empty' row a put left there, or inserting it), and the inline marker `true` in its
-- channel_values; stored_channels names them (left NULL on a row another saver wrote:
-- readers probe). Nothing else of the checkpoint changes (its metadata, counters
-- included, its parent, its writes). The caller checked that no other checkpoint left
-- visible reads another value at that version.
-- Parameters: thread_id, checkpoint_ns, checkpoint_id; channels, versions, types text[],
-- blobs bytea[] (parallel arrays). No result.
-- Indexes: checkpoint_blobs_pkey (the conflict target), checkpoints_pkey.
WITH v AS (
    SELECT v.channel, v.version, v.type, v.blob
    FROM unnest(%(channels)s::text[], %(versions)s::text[], %(types)s::text[],
                %(blobs)b::bytea[]) AS v(channel, version, type, blob)
), stored AS (
    INSERT INTO {s}checkpoint_blobs AS b (thread_id, checkpoint_ns, channel, version, type, blob)
    SELECT %(thread_id)s, %(checkpoint_ns)s, v.channel, v.version, v.type, v.blob FROM v
    ON CONFLICT (thread_id, checkpoint_ns, channel, version)
    DO UPDATE SET type = excluded.type, blob = excluded.blob
)
UPDATE {s}checkpoints AS c
SET checkpoint = jsonb_set(
        c.checkpoint, '{{channel_values}}',
        coalesce(c.checkpoint -> 'channel_values', '{{}}'::jsonb)
            || (SELECT jsonb_object_agg(v.channel, TRUE) FROM v)
    ),
    stored_channels = CASE WHEN c.stored_channels IS NOT NULL THEN ARRAY(
        SELECT DISTINCT x FROM unnest(c.stored_channels || %(channels)s::text[]) AS x
        ORDER BY 1
    ) END
WHERE c.thread_id = %(thread_id)s
  AND c.checkpoint_ns = %(checkpoint_ns)s
  AND c.checkpoint_id = %(checkpoint_id)s

-- name: run_children
-- delete_for_runs: the checkpoints that build on the runs: not of the runs themselves,
-- with a parent that is. Their state may be rebuilt through the runs' checkpoints (a
-- DeltaChannel's writes and seed): delete_for_runs keeps each one's keep-set.
-- A run's checkpoints are those of the thread it ran on (as maintenance.delete_runs
-- reads them): a row whose metadata names another thread_id is a copy, and survives.
-- Parameter: run_ids text[]. Result columns: thread_id, checkpoint_ns, checkpoint_id.
-- Index: checkpoints_run_id_idx (metadata ->> 'run_id', migration 0005); each child
-- by the parent id within the run checkpoint's thread and namespace.
SELECT child.thread_id AS thread_id,
       child.checkpoint_ns AS checkpoint_ns,
       child.checkpoint_id AS checkpoint_id
FROM {s}checkpoints AS dead
JOIN {s}checkpoints AS child
  ON child.thread_id = dead.thread_id
 AND child.checkpoint_ns = dead.checkpoint_ns
 AND child.parent_checkpoint_id = dead.checkpoint_id
WHERE dead.metadata ->> 'run_id' = ANY (%(run_ids)s::text[])
  AND coalesce(dead.metadata ->> 'thread_id', dead.thread_id) = dead.thread_id
  AND (coalesce(child.metadata ->> 'run_id', '') <> ALL (%(run_ids)s::text[])
       OR coalesce(child.metadata ->> 'thread_id', child.thread_id) <> child.thread_id)
ORDER BY 1, 2, 3

-- name: lock_thread
-- prune / delete_for_runs: a transaction-scoped advisory lock on the thread, so two
-- maintenance calls on one thread take turns (each computes what to keep from its own
-- snapshot). Puts do not take it and need not: see prune_result. Parameter: thread_id.
SELECT pg_advisory_xact_lock(hashtext('langgraph_delta_postgres.maintenance'),
                             hashtext(%(thread_id)s))

-- name: thread_heads
-- prune: one thread's namespaces, each with its latest visible checkpoint's timestamp
-- (for prune(before=...)). A namespace left with seed-only checkpoints alone (nothing
-- visible needs them any more, e.g. after delete_for_runs) is listed with visible FALSE
-- and its latest row's ts: prune deletes its rows, and only such namespaces do not make
-- the thread recent. Parameter: thread_id. Result columns: checkpoint_ns, ts (text,
-- ISO 8601, or NULL), visible boolean. It filters on thread_id only: it is what lists
-- the namespaces. Index: checkpoints_pkey (thread_id prefix; every row of the thread).
SELECT DISTINCT ON (c.checkpoint_ns) c.checkpoint_ns, c.checkpoint ->> 'ts' AS ts,
       c.seed_only IS NOT TRUE AS visible
FROM {s}checkpoints AS c
WHERE c.thread_id = %(thread_id)s
ORDER BY c.checkpoint_ns, c.seed_only IS TRUE, c.checkpoint_id DESC

-- name: thread_page
-- langgraph-delta-pg prune --older-than: the next %(limit)s thread ids in id order, after
-- %(after)s (or from the first when %(first)s), by a loose index scan: one primary-key
-- probe per thread, however many checkpoints each has. A listing of threads: it filters
-- on thread_id ranges, not on one thread. Parameters: after text, first boolean,
-- limit int. Result column: thread_id. Index: checkpoints_pkey (thread_id prefix).
WITH RECURSIVE t AS (
    (
        SELECT c.thread_id
        FROM {s}checkpoints AS c
        WHERE %(first)s OR c.thread_id > %(after)s
        ORDER BY c.thread_id
        LIMIT 1
    )
    UNION ALL
    SELECT (
        SELECT c.thread_id
        FROM {s}checkpoints AS c
        WHERE c.thread_id > t.thread_id
        ORDER BY c.thread_id
        LIMIT 1
    )
    FROM t
    WHERE t.thread_id IS NOT NULL
)
SELECT t.thread_id FROM t WHERE t.thread_id IS NOT NULL LIMIT %(limit)s

-- name: count_threads
-- langgraph-delta-pg prune --older-than: how many threads there are (the progress bar's
-- total), by the same loose index scan as thread_page. Result column: n.
WITH RECURSIVE t AS (
    (SELECT c.thread_id FROM {s}checkpoints AS c ORDER BY c.thread_id LIMIT 1)
    UNION ALL
    SELECT (
        SELECT c.thread_id
        FROM {s}checkpoints AS c
        WHERE c.thread_id > t.thread_id
        ORDER BY c.thread_id
        LIMIT 1
    )
    FROM t
    WHERE t.thread_id IS NOT NULL
)
SELECT count(*) AS n FROM t WHERE t.thread_id IS NOT NULL
