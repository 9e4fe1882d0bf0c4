-- delta_history: get_delta_channel_history in one statement.
--
-- Purpose
--   For a target checkpoint (by id, or the thread's latest in the namespace when
--   checkpoint_id is NULL, resolved in this statement), walk the parent chain from the
--   target's PARENT, and per requested channel return
--     * its writes at every checkpoint from the nearest checkpoint that stores a value for
--       it (the seed checkpoint, inclusive) up to the target's parent, and
--     * that seed value: a blob (type, blob) or an inline primitive (jsonb),
--   except what the client says it already holds (the saver's decoded-value cache, see
--   langgraph_delta_postgres/_cache/cache.py): a channel whose walk reaches a checkpoint the
--   client holds the rest of the chain for stops there ('h' row), and a seed blob the
--   client holds is named, not sent (no transfer, no TOAST decompression).
--   Nothing else leaves the database: no checkpoint JSONB, no older snapshot blob.
--
-- Two statements are composed from the named blocks below (see _ops/context.py, SaverCore):
--   get_delta_channel_history   walk + select_rows + rows + order_rows
--   get_tuple                   walk + tuple_history + rows + tuple_rows +
--                               checkpoints.select_tuples + from_checkpoints +
--                               WHERE + where_target + checkpoints.tuples_of + tuple_end
--   The second reads the checkpoint and the history LangGraph asks for right after it
--   (channels_from_checkpoint) in one snapshot and one round trip; the saver hands that
--   history to the next history call on the same checkpoint (_ops/base.py, _Prefetch).
--
-- Parameters
--   %(thread_id)s text, %(checkpoint_ns)s text, %(checkpoint_id)s text or NULL,
--   %(channels)s text[] (non-empty, distinct; NULL: derived from the target, see the
--   `walk` block), %(max_depth)s int (depth guard),
--   %(held_ids)s text[]     checkpoints the client holds a chain below (may be empty),
--   %(held_tokens)s text[]  channel || chr(31) || checkpoint_id || chr(31) || the
--                           checkpoint's token (its row's xmin || '/' || the namespace's
--                           late-write count, see the `epoch` block), per held chain (a
--                           write added to a cached chain's checkpoint bumps the count;
--                           the row's xmin changes when a thread is deleted and written
--                           again: a token never matches rows, or writes, other than the
--                           ones the client read),
--   %(seed_tokens)s text[]  channel || chr(31) || version || chr(31) || xmin of the blob
--                           row, per seed blob the client holds,
--   %(nodes)s boolean       send a 'c' row per visited checkpoint (the cache builds its
--                           chains from them; false when the cache is off).
--
-- Result columns (one row set, in this order; the driver reads them by position)
--   kind        'c' visited checkpoint | 'h' held stop | 's' seed | 'w' write |
--               'x' walk stopped on bad data (see Termination) or a value gone (see
--               Values gone)
--   channel     the channel the row belongs to ('h', 's', 'w'; 'x' of a value gone)
--   task_id     the write's task ('w'); for 'c': the checkpoint's parent id; for an
--               'x' row of a value gone: the missing parent's id
--   type, blob  serialized write or seed blob; for a seed the client holds: type set,
--               blob NULL; NULL for an inline seed
--   inline      's': the inline primitive seed (no blob); 'c': jsonb array of the
--               channels whose writes at this checkpoint the statement returns
--   checkpoint_id  the checkpoint the row comes from
--   ref         'c': the checkpoint's token (row xmin '/' late-write count);
--               's' with a blob: version || chr(31) ||
--               the blob row's xmin (the seed's cache key); 'x': 'cycle', 'depth' or
--               'gone'
--   Rows come oldest checkpoint first, by `pos`: for the step-by-step walk its depth
--   (distance from the target, 1 = its parent) as 8 hex digits of 2^31-1 - depth, for a
--   verified stretch (see Range walk) the checkpoint id, whose byte order is the chain's
--   order there (the two never meet in one answer); within one checkpoint in Python's
--   writes_sort_key order (task_path, task_id, idx). Every key is compared with COLLATE
--   "C", i.e. by code point, whatever the database's default collation. Kinds interleave
--   (the client reads each row by its kind); get_tuple's 'a' row has pos '' and comes
--   first. One first key that tells almost every pair of rows apart keeps the sort cheap:
--   Postgres compares the first key in place and fetches every later key from the
--   tuple. Sorted by (kind, depth, id, ...) instead, with the range walk, the sort of a
--   4,000-row answer took 19 of the statement's 26.9 ms; by pos the whole statement
--   takes 14.5 ms (python scripts/explain_history.py --depth 2000 --channels 2, embedded
--   Postgres 18; docs/design/history-query.md). pos, task_path and idx order the rows but are
--   not sent: every column costs the client a conversion per row.

-- The walk (recursive CTE, UNION ALL)
--   Row 0 is the target. Each row carries `active`, the channels still walking when it
--   is visited; `held`, those of them the client holds from here down; `seeded`, the
--   others this checkpoint stores a value for. The next step follows
--   parent_checkpoint_id with active := active - held - seeded.
--   "Stores a value": the stored_channels column (written by put, backfilled by the
--   migrations) says which channels a row claims; a claim counts only when it is backed
--   by an inline primitive in channel_values or a non-"empty" blob at the version the
--   row names (a delete racing a put can leave a claim whose blob is gone: that reads as
--   "not stored", as in the official saver; the test is the fragment
--   rules.stores_value, written once in sql/rules.sql). Only claimed channels are
--   probed, so the common step reads the row alone. A row where stored_channels is NULL (written by
--   another saver) is probed for every active channel.
--   Parent pointers are the only order: checkpoint ids are uuid6 from the writer's
--   clock, and a child written by a worker whose clock is behind sorts below its parent
--   (langgraph#8550). The walk follows parent_checkpoint_id for any id order.
--
-- Termination
--   The recursion ends when every channel is seeded or held (active becomes empty), when
--   the root is reached (parent_checkpoint_id NULL) or a parent row is missing (the join
--   finds nothing: the answer is the reachable chain's), or on bad data, with an 'x' row
--   that the caller raises as HistoryError:
--     * a cycle. Each row carries `ups`, the ids reached by an "up" step (one whose
--       parent id does not sort below its child's). A cycle contains at least one up
--       step, so within one more lap the walk takes an up step to an id already in
--       `ups`: that row is marked `looped`, emits the 'x' row and ends the walk. An
--       acyclic chain never reaches a checkpoint twice, so skewed ids never err, and
--       `ups` holds one id per clock switch (no O(depth^2) path array, and no
--       SEARCH/CYCLE clause, which distributed Postgres does not route);
--     * depth capped at %(max_depth)s with channels still walking.
--
-- Values gone
--   A claim (stored_channels) whose value is gone reads as "not stored" and the walk goes
--   on below it (see The walk). One shape of it is no corruption by hand but what a
--   maintenance call racing a run leaves: a run forks from checkpoint P (a runner that
--   loaded P before another one moved the thread on, an update_state on P); its put
--   probes the value P stored (or carried) and claims it, but commits after a prune
--   (delete_for_runs) that did not see it and deleted P with that value. The new
--   checkpoint names a value that is gone, and its parent is gone: read on, its state
--   would silently restart from the channel's empty value. So, per requested channel, a
--   checkpoint of the walk, or the target itself (`target_gone`), that claims the
--   channel without a value to back the claim emits an 'x' row (ref 'gone') when its
--   parent is missing too and the namespace still holds a checkpoint with a lower id;
--   the caller raises PrunedValueError. A delete of the whole thread racing a put leaves
--   the same claim with no older checkpoint behind it: the thread was deleted, the run
--   started it again, and that reads as before (tests/integration/test_integrity.py,
--   the issue repro). A claim whose value is gone under a parent that is still there
--   (only a deletion by hand makes one) reads as before too.
--
-- Plan shape
--   Every correlated lookup is a LATERAL subquery with LIMIT 1 / OFFSET 0 (or a scalar
--   subquery), which the planner cannot flatten into a join. Measured: on a fresh,
--   never-analyzed table the flattened form was planned as "scan the whole thread per
--   step" (1.85 s for 2,000 ancestors); the fenced form is one primary-key lookup per
--   step whatever the statistics say (python scripts/explain_history.py --depth 2000).
--
-- Range walk (the `seeds`, `span`, `stretch`, `fast` and `fast_walk` blocks)
--   A linear thread's chain is a run of consecutive ids: every checkpoint's parent is the
--   id just below it in the primary key. So before walking step by step, the statement
--   tries to read the whole chain down to the seeds as one stretch:
--     1. per channel, the newest checkpoint at or below the target's parent that claims
--        it (stored_channels; a backward scan of checkpoints_pkey);
--     2. every checkpoint of the namespace from the target's parent down to the oldest
--        of those seeds (down to the root when a channel has none): one range scan of
--        checkpoints_pkey, bounded by the depth guard;
--     3. the stretch is used only if its rows prove it is the parent chain: the first
--        is the target's parent, each row's parent is the row below it, ids descend in
--        byte order too (the output is ordered by them), every row has stored_channels,
--        it ends at the oldest seed (at the root when a channel has no seed), it is
--        shallower than the depth guard, and each seed's claim is backed by a value (as
--        in a step);
--     4. the writes of the stretch: one range scan of checkpoint_writes_pkey over the
--        same ids, each channel's kept from its seed up, and only those whose checkpoint
--        is a row of the stretch (a hashed subplan): an id range is not a chain (writes
--        whose checkpoint was never saved or was deleted sort inside it; rule 13).
--   Anything else falls back to the step-by-step walk below, unchanged: a fork
--   interleaved in the range (its row breaks the parent links), a skewed id (a child
--   sorting below its parent: the links break), rows another saver wrote after the
--   adoption (stored_channels NULL), a claim without its blob, a stretch past the depth
--   guard, and any call where the client holds part of the chain (held_ids: those walks
--   stop within a few steps). The rows of a verified stretch are ordered by their id
--   (their `pos`), which in a verified stretch is the chain's order.
--   Measured on a 2,000-deep 2-channel thread (docs/design/history-query.md, python
--   scripts/explain_history.py --depth 2000 --channels 2 [--fork], embedded Postgres 18,
--   EXPLAIN ANALYZE): 14.5 ms read as a range; 22.8 ms with a fork inside the range,
--   step by step, of which 3.3 ms went on the stretch that failed its check (the cost of
--   trying); 29.6 ms step by step before the range walk.
--   Designs measured before and not kept (3,000-deep 2-channel threads, Postgres 15,
--   server time, rows this saver wrote / rows the official wrote):
--   * the walk in stretches inside the recursion (a recursive step reading up to k rows
--     of the primary key in id order, kept while each is the parent of the one before,
--     k growing 8 -> 1024): 0.85x / 0.79x, slower: the window functions and per-row
--     array work of every step cost more than the index descents they save (the
--     stretch above is read once, with its ends known from the seeds);
--   * the writes of the whole walk in one range scan hash-joined to it: 1.17x / 1.32x
--     faster on analyzed tables, but on a never-analyzed table the planner chose a
--     nested loop over the two (1.93 s instead of 16 ms at depth 2,000): the plan would
--     depend on statistics (the stretch's writes above are filtered by two bounds and a
--     per-channel array, no join);
--   * the same range scan probing a jsonb map of the walk: 0.82x / 0.93x, slower.

-- EXPLAIN (ANALYZE, BUFFERS) on a 2,000-deep thread, with the command that produced it:
--   docs/design/history-query.md (python scripts/explain_history.py --depth 2000 --channels 2).
--
-- Indexes
--   target       checkpoints_pkey (thread_id, checkpoint_ns, checkpoint_id): equality,
--                or a backward range scan LIMIT 1 for the latest.
--   each step    checkpoints_pkey: one equality lookup per ancestor.
--   claims       checkpoint_blobs_pkey (thread_id, checkpoint_ns, channel, version),
--                at claimed seeds (and every active channel of a NULL row).
--   writes       checkpoint_writes_pkey prefix (thread_id, checkpoint_ns, checkpoint_id),
--                channel filtered on the few rows of one checkpoint.
--   seed blob    checkpoint_blobs_pkey, once per seeded channel.
--   Every table reference, the recursive term and each join included, filters on
--   thread_id and checkpoint_ns, so the statement is routable on partitioned or
--   distributed Postgres and touches only on-path ancestors.

-- name: walk
-- The target and the walk (both statements below start with this block). The channels
-- are %(channels)s, or, when it is NULL (get_tuple's prefetch, see `tuple_history`), the
-- target's DeltaChannels that LangGraph will replay (langgraph.pregel._checkpoint.
-- _delta_channels_to_replay): those its counters_since_delta_snapshot names with a
-- version and no value in what get_tuple returns: no key in channel_values (an inline
-- value, a snapshot marker or a null all count, as LangGraph reads them) and no
-- non-"empty" blob at that version (what checkpoints.tuples_of returns as the value).
WITH RECURSIVE
target AS (
    SELECT t.checkpoint_id, t.parent_checkpoint_id, t.stored_channels, t.checkpoint,
           coalesce(%(channels)s::text[], ARRAY(
               SELECT k.ch
               FROM jsonb_object_keys(CASE
                   WHEN jsonb_typeof(t.metadata -> 'counters_since_delta_snapshot') = 'object'
                       THEN t.metadata -> 'counters_since_delta_snapshot'
                   ELSE '{{}}'::jsonb
               END) AS k(ch)
               WHERE t.checkpoint -> 'channel_versions' ? k.ch
                 AND NOT coalesce(t.checkpoint -> 'channel_values' ? k.ch, FALSE)
                 -- nor a value get_tuple returns from a blob at that version (a snapshot
                 -- stored earlier and carried over): LangGraph never asks its history,
                 -- and prefetching it would send and decode the seed a second time
                 AND NOT EXISTS (
                     SELECT 1 FROM {s}checkpoint_blobs AS b
                     WHERE b.thread_id = %(thread_id)s
                       AND b.checkpoint_ns = %(checkpoint_ns)s
                       AND b.channel = k.ch
                       AND b.version = t.checkpoint -> 'channel_versions' ->> k.ch
                       AND b.type <> 'empty'
                 )
               ORDER BY 1
           )) AS channels
    FROM (
        SELECT t.checkpoint_id, t.parent_checkpoint_id, t.checkpoint, t.metadata,
               t.stored_channels
        FROM {s}checkpoints AS t
        WHERE t.thread_id = %(thread_id)s
          AND t.checkpoint_ns = %(checkpoint_ns)s
          AND t.checkpoint_id = %(checkpoint_id)s::text
          AND t.seed_only IS NOT TRUE
        UNION ALL
        (
            SELECT t.checkpoint_id, t.parent_checkpoint_id, t.checkpoint, t.metadata,
                   t.stored_channels
            FROM {s}checkpoints AS t
            WHERE t.thread_id = %(thread_id)s
              AND t.checkpoint_ns = %(checkpoint_ns)s
              AND %(checkpoint_id)s::text IS NULL
              AND t.seed_only IS NOT TRUE
            ORDER BY t.checkpoint_id DESC
            LIMIT 1
        )
    ) AS t
),
-- The channels of those the target claims (stored_channels) with no value left to back
-- the claim (no inline primitive, no non-"empty" blob at its version: the negation of
-- rules.stores_value, NULL read as not stored): see "Values gone" in the header. Read only by the 'x' rows of `rows`; probed only when the target claims
-- one of the channels (LangGraph asks the history of a channel the target has no value
-- for: a claim there is rare).
target_gone AS (
    SELECT t.checkpoint_id, t.parent_checkpoint_id, c.ch
    FROM target AS t
    CROSS JOIN LATERAL unnest(t.channels) AS c(ch)
    WHERE t.stored_channels && t.channels
      AND c.ch = ANY (t.stored_channels)
      AND NOT coalesce(jsonb_typeof(t.checkpoint -> 'channel_values' -> c.ch)
                       IN ('string', 'number', 'boolean'), FALSE)
      AND (
          SELECT TRUE FROM {s}checkpoint_blobs AS b
          WHERE b.thread_id = %(thread_id)s
            AND b.checkpoint_ns = %(checkpoint_ns)s
            AND b.channel = c.ch
            AND b.version = t.checkpoint -> 'channel_versions' ->> c.ch
            AND b.type <> 'empty'
          LIMIT 1
      ) IS NULL
),
-- The namespace's late-write count (migrations/0006_checkpoint_epochs.sql), read in this
-- statement's snapshot: part of every visited checkpoint's token (the row's xmin, '/',
-- this count: appended where a token is compared, `h` in stepwalk, or sent, the 'c'
-- rows), so a chain cached before a write was added to one of its checkpoints no longer
-- matches (contract rule 15).
epoch AS (
    SELECT coalesce((
        SELECT e.late_writes FROM {s}checkpoint_epochs AS e
        WHERE e.thread_id = %(thread_id)s
          AND e.checkpoint_ns = %(checkpoint_ns)s
    ), 0)::text AS late
),
-- The range read (see "Range walk" in the header): per channel, the newest checkpoint at
-- or below the target's parent that claims it (a backward scan of the primary key), only
-- when the client holds nothing (held chains are walked step by step: they end early).
seeds AS (
    SELECT s.ch, s.ord, t.parent_checkpoint_id AS hi, c.checkpoint_id AS seed_id,
           c.checkpoint_id IS NULL OR (
               @rules.stores_value(c, s.ch)
           ) AS stores
    FROM target AS t
    CROSS JOIN LATERAL unnest(t.channels) WITH ORDINALITY AS s(ch, ord)
    LEFT JOIN LATERAL (
        SELECT c.checkpoint_id, c.checkpoint
        FROM {s}checkpoints AS c
        WHERE c.thread_id = %(thread_id)s
          AND c.checkpoint_ns = %(checkpoint_ns)s
          AND c.checkpoint_id <= t.parent_checkpoint_id
          AND c.stored_channels @> ARRAY[s.ch]
        ORDER BY c.checkpoint_id DESC
        LIMIT 1
    ) AS c ON TRUE
    WHERE t.parent_checkpoint_id IS NOT NULL
      AND cardinality(%(held_ids)s::text[]) = 0
),
-- The stretch to read: from the target's parent down to the oldest seed, or down to
-- the root (lo NULL) when a channel has no seed.
span AS (
    SELECT min(s.hi) AS hi,
           CASE WHEN bool_and(s.seed_id IS NOT NULL) THEN min(s.seed_id) END AS lo,
           array_agg(s.ch ORDER BY s.ord) AS chans,
           array_agg(s.seed_id ORDER BY s.ord) AS seed_ids,
           bool_and(s.stores) AS stores
    FROM seeds AS s
    HAVING count(*) > 0
),
-- Every checkpoint of the namespace in that id range, newest first: one range scan of
-- the primary key (bounded by the depth guard), each row with the id below it.
stretch AS (
    SELECT r.checkpoint_id, r.parent_checkpoint_id, r.xmin, r.stored_channels,
           lead(r.checkpoint_id) OVER (ORDER BY r.checkpoint_id DESC) AS below,
           row_number() OVER (ORDER BY r.checkpoint_id DESC) AS n
    FROM span AS sp
    CROSS JOIN LATERAL (
        SELECT c.checkpoint_id, c.parent_checkpoint_id,
               c.xmin::text AS xmin,
               c.stored_channels
        FROM {s}checkpoints AS c
        WHERE c.thread_id = %(thread_id)s
          AND c.checkpoint_ns = %(checkpoint_ns)s
          AND c.checkpoint_id <= sp.hi
          AND c.checkpoint_id >= coalesce(sp.lo, '')
        ORDER BY c.checkpoint_id DESC
        LIMIT %(max_depth)s
    ) AS r
    WHERE sp.stores
),
-- The stretch is used only if it IS the parent chain: it starts at the target's parent,
-- every row's parent is the row below it (so no fork, no other thread's row, no skewed
-- id sits in the range), every row says which channels it stores (rows another saver
-- wrote after adoption do not), it ends at the oldest seed (at the root when a channel
-- has no seed), it is shallower than the depth guard, and every seed found really
-- stores a value. Otherwise (no row here) the walk goes step by step.
fast AS (
    SELECT sp.hi, sp.lo, sp.chans, sp.seed_ids
    FROM span AS sp
    WHERE sp.stores
      AND (
          SELECT bool_and(coalesce(
                     st.stored_channels IS NOT NULL
                     AND (CASE
                         WHEN st.below IS NOT NULL THEN st.parent_checkpoint_id = st.below
                             AND st.below COLLATE "C" < st.checkpoint_id COLLATE "C"
                         -- the lowest row: the oldest seed, or the root
                         ELSE CASE WHEN sp.lo IS NOT NULL THEN st.checkpoint_id = sp.lo
                                   ELSE st.parent_checkpoint_id IS NULL END
                     END),
                     FALSE  -- a NULL (a root above the range's end) fails too
                 ))
                 AND max(st.checkpoint_id) = sp.hi
                 AND max(st.n) < %(max_depth)s
          FROM stretch AS st
      )
),
-- The verified stretch as walk rows (all at depth 1: their order is the id order): the
-- seeds' rows always, every row when the cache asks for 'c' rows.
fast_walk AS (
    SELECT
        1 AS depth,
        st.checkpoint_id,
        st.parent_checkpoint_id,
        st.xmin,
        ARRAY(
            SELECT z.ch FROM unnest(f.chans, f.seed_ids) AS z(ch, sid)
            WHERE z.sid IS NULL OR z.sid <= st.checkpoint_id
        ) AS active,
        '{{}}'::text[] AS held,
        ARRAY(
            SELECT z.ch FROM unnest(f.chans, f.seed_ids) AS z(ch, sid)
            WHERE z.sid = st.checkpoint_id
        ) AS seeded,
        -- a verified stretch holds no claim without its value (`fast`)
        '{{}}'::text[] AS claimed,
        FALSE AS looped
    FROM fast AS f
    CROSS JOIN stretch AS st
    WHERE %(nodes)s OR st.checkpoint_id = ANY (f.seed_ids)
),
stepwalk AS (
    SELECT
        0 AS depth,
        t.checkpoint_id AS checkpoint_id,
        t.parent_checkpoint_id AS parent_checkpoint_id,
        NULL::text AS xmin,
        t.channels AS active,
        '{{}}'::text[] AS held,
        '{{}}'::text[] AS seeded,
        '{{}}'::text[] AS claimed,
        '{{}}'::text[] AS ups,
        FALSE AS looped
    FROM target AS t
    WHERE NOT EXISTS (SELECT 1 FROM fast)
    UNION ALL
    SELECT
        w.depth + 1 AS depth,
        p.checkpoint_id AS checkpoint_id,
        p.parent_checkpoint_id AS parent_checkpoint_id,
        p.xmin AS xmin,
        n.active AS active,
        h.held AS held,
        CASE
            -- the common step: the row is ours and claims none of the active channels
            WHEN p.stored_channels IS NOT NULL AND NOT (p.stored_channels && n.active)
                THEN '{{}}'::text[]
            ELSE ARRAY(
                SELECT ch FROM unnest(n.active) AS ch
                WHERE ch <> ALL (h.held)
                  AND (p.stored_channels IS NULL OR ch = ANY (p.stored_channels))
                  AND (
                      @rules.stores_value(p, ch)
                  )
            )
        END AS seeded,
        -- the active channels the row claims (not held): those of them not seeded are
        -- claims whose value is gone ("Values gone" in the header); on the common step
        -- (the row claims none) no array is built
        CASE
            WHEN p.stored_channels IS NULL OR NOT (p.stored_channels && n.active)
                THEN '{{}}'::text[]
            ELSE ARRAY(
                SELECT ch FROM unnest(n.active) AS ch
                WHERE ch = ANY (p.stored_channels) AND ch <> ALL (h.held)
            )
        END AS claimed,
        CASE WHEN p.checkpoint_id < w.checkpoint_id THEN w.ups
             ELSE w.ups || p.checkpoint_id
        END AS ups,
        NOT (p.checkpoint_id < w.checkpoint_id) AND p.checkpoint_id = ANY (w.ups) AS looped
    FROM stepwalk AS w
    CROSS JOIN LATERAL (
        SELECT CASE
            WHEN cardinality(w.held) = 0 AND cardinality(w.seeded) = 0 THEN w.active
            ELSE ARRAY(
                SELECT ch FROM unnest(w.active) AS ch
                WHERE ch <> ALL (w.held) AND ch <> ALL (w.seeded)
            )
        END AS active
    ) AS n
    CROSS JOIN LATERAL (
        SELECT p.checkpoint_id, p.parent_checkpoint_id, p.stored_channels, p.checkpoint,
               p.xmin::text AS xmin
        FROM {s}checkpoints AS p
        WHERE p.thread_id = %(thread_id)s
          AND p.checkpoint_ns = %(checkpoint_ns)s
          AND p.checkpoint_id = w.parent_checkpoint_id
        LIMIT 1
    ) AS p
    CROSS JOIN LATERAL (
        SELECT CASE
            WHEN p.checkpoint_id = ANY (%(held_ids)s::text[]) THEN ARRAY(
                SELECT ch FROM unnest(n.active) AS ch
                WHERE ch || chr(31) || p.checkpoint_id || chr(31) || p.xmin || '/'
                      || (SELECT e.late FROM epoch AS e) = ANY (%(held_tokens)s::text[])
            )
            ELSE '{{}}'::text[]
        END AS held
    ) AS h
    WHERE NOT w.looped
      AND w.depth < %(max_depth)s
      AND cardinality(n.active) > 0
),
-- Every visited checkpoint: the step-by-step walk's or the verified stretch's (`fast`
-- says which: the writes of the stretch are read by one range scan, see `rows`), with
-- `pos`, the key that orders the result (see "Result columns" in the header).
walk AS (
    SELECT w.depth, w.checkpoint_id, w.parent_checkpoint_id, w.xmin, w.active, w.held,
           w.seeded, w.claimed, w.looped, FALSE AS fast,
           lpad(to_hex(2147483647 - w.depth), 8, '0') AS pos
    FROM stepwalk AS w
    UNION ALL
    SELECT f.depth, f.checkpoint_id, f.parent_checkpoint_id, f.xmin, f.active, f.held,
           f.seeded, f.claimed, f.looped, TRUE AS fast, f.checkpoint_id AS pos
    FROM fast_walk AS f
)

-- name: select_rows
-- get_delta_channel_history: walk + select_rows + rows + order_rows.
SELECT r.kind, r.channel, r.task_id, r.type, r.blob, r.inline, r.checkpoint_id, r.ref
FROM (

-- name: rows
-- The result rows (see the header), with the columns that order them.
    SELECT
        'w'::text AS kind,
        w.pos AS pos,
        cw.channel AS channel,
        cw.task_id AS task_id,
        cw.task_path AS task_path,
        cw.idx AS idx,
        cw.type AS type,
        cw.blob AS blob,
        NULL::jsonb AS inline,
        w.checkpoint_id AS checkpoint_id,
        NULL::text AS ref
    FROM walk AS w
    CROSS JOIN LATERAL (
        SELECT x.channel, x.task_id, x.task_path, x.idx, x.type, x.blob
        FROM {s}checkpoint_writes AS x
        WHERE x.thread_id = %(thread_id)s
          AND x.checkpoint_ns = %(checkpoint_ns)s
          AND x.checkpoint_id = w.checkpoint_id
          AND x.channel = ANY (w.active)
          AND x.channel <> ALL (w.held)
        OFFSET 0
    ) AS cw
    WHERE w.depth > 0 AND NOT w.looped AND NOT w.fast
    UNION ALL
    -- the verified stretch's writes: one range scan of checkpoint_writes_pkey, each
    -- channel's from its seed up, and only those of the stretch's checkpoints: writes
    -- whose checkpoint was never saved (a put that failed after the next step's writes
    -- landed) or was deleted sort inside the range too, and are not on the chain
    -- (contract rule 13). Measured on a 1,000-deep 2-channel thread, generic plans,
    -- interleaved, the statement's time over the range scan without the check (scratch
    -- A/B, 121 rounds, Postgres 15): this hashed subplan 1.05x; a lookup of
    -- checkpoint_writes_pkey per checkpoint of the stretch 1.08-1.11x; a join or
    -- semi-join on the stretch 13-50x (planned as a nested loop over the CTE); a probe of
    -- checkpoints_pkey per write 1.5x.
    SELECT
        'w'::text AS kind,
        cw.checkpoint_id AS pos,
        cw.channel AS channel,
        cw.task_id AS task_id,
        cw.task_path AS task_path,
        cw.idx AS idx,
        cw.type AS type,
        cw.blob AS blob,
        NULL::jsonb AS inline,
        cw.checkpoint_id AS checkpoint_id,
        NULL::text AS ref
    FROM fast AS f
    CROSS JOIN LATERAL (
        SELECT x.checkpoint_id, x.channel, x.task_id, x.task_path, x.idx, x.type, x.blob
        FROM {s}checkpoint_writes AS x
        WHERE x.thread_id = %(thread_id)s
          AND x.checkpoint_ns = %(checkpoint_ns)s
          AND x.checkpoint_id <= f.hi
          AND x.checkpoint_id >= coalesce(f.lo, '')
          AND x.channel = ANY (f.chans)
        OFFSET 0
    ) AS cw
    WHERE cw.checkpoint_id >= coalesce(f.seed_ids[array_position(f.chans, cw.channel)], '')
      -- only writes of the stretch's checkpoints: a hashed subplan (built once, probed
      -- per write); `IS TRUE` keeps the planner from turning it into a join
      AND (cw.checkpoint_id IN (SELECT s2.checkpoint_id FROM stretch AS s2)) IS TRUE
    UNION ALL
    SELECT
        's'::text AS kind,
        w.pos AS pos,
        s.ch AS channel,
        NULL::text AS task_id,
        NULL::text AS task_path,
        NULL::integer AS idx,
        b.type AS type,
        CASE WHEN b.token = ANY (%(seed_tokens)s::text[]) THEN NULL ELSE b.blob END AS blob,
        CASE WHEN b.type IS NULL THEN p.inline END AS inline,
        w.checkpoint_id AS checkpoint_id,
        p.version || chr(31) || b.xmin AS ref
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
        SELECT x.type, x.blob, x.xmin::text AS xmin,
               s.ch || chr(31) || x.version || chr(31) || x.xmin::text AS token
        FROM {s}checkpoint_blobs AS x
        WHERE x.thread_id = %(thread_id)s
          AND x.checkpoint_ns = %(checkpoint_ns)s
          AND x.channel = s.ch
          AND x.version = p.version
          AND x.type <> 'empty'
        LIMIT 1
    ) AS b ON TRUE
    WHERE w.depth > 0 AND NOT w.looped AND cardinality(w.seeded) > 0
    UNION ALL
    SELECT
        'h'::text AS kind,
        w.pos AS pos,
        hc.ch AS channel,
        NULL::text AS task_id,
        NULL::text AS task_path,
        NULL::integer AS idx,
        NULL::text AS type,
        NULL::bytea AS blob,
        NULL::jsonb AS inline,
        w.checkpoint_id AS checkpoint_id,
        NULL::text AS ref
    FROM walk AS w
    CROSS JOIN LATERAL unnest(w.held) AS hc(ch)
    WHERE w.depth > 0 AND NOT w.looped AND cardinality(w.held) > 0
    UNION ALL
    SELECT
        'c'::text AS kind,
        w.pos AS pos,
        NULL::text AS channel,
        w.parent_checkpoint_id AS task_id,
        NULL::text AS task_path,
        NULL::integer AS idx,
        NULL::text AS type,
        NULL::bytea AS blob,
        to_jsonb(ARRAY(SELECT ch FROM unnest(w.active) AS ch WHERE ch <> ALL (w.held)))
            AS inline,
        w.checkpoint_id AS checkpoint_id,
        w.xmin || '/' || (SELECT e.late FROM epoch AS e) AS ref
    FROM walk AS w
    WHERE %(nodes)s AND w.depth > 0 AND NOT w.looped
    UNION ALL
    SELECT
        'x'::text AS kind,
        w.pos AS pos,
        NULL::text AS channel,
        NULL::text AS task_id,
        NULL::text AS task_path,
        NULL::integer AS idx,
        NULL::text AS type,
        NULL::bytea AS blob,
        NULL::jsonb AS inline,
        w.checkpoint_id AS checkpoint_id,
        CASE WHEN w.looped THEN 'cycle' ELSE 'depth' END AS ref
    FROM walk AS w
    WHERE w.looped
       OR (w.depth >= %(max_depth)s
           AND w.parent_checkpoint_id IS NOT NULL
           AND EXISTS (
               SELECT 1 FROM unnest(w.active) AS ch
               WHERE ch <> ALL (w.held) AND ch <> ALL (w.seeded)
           ))
    UNION ALL
    -- A value gone ("Values gone" in the header): per channel a checkpoint of the walk (or
    -- the target) claims but has no value for, when that checkpoint's parent is gone too
    -- and the namespace still holds an older checkpoint. task_id: the missing parent.
    -- The two lookups run only for such a claim.
    SELECT
        'x'::text AS kind,
        g.pos AS pos,
        g.ch AS channel,
        g.parent_checkpoint_id AS task_id,
        NULL::text AS task_path,
        NULL::integer AS idx,
        NULL::text AS type,
        NULL::bytea AS blob,
        NULL::jsonb AS inline,
        g.checkpoint_id AS checkpoint_id,
        'gone'::text AS ref
    FROM (
        SELECT w.pos, z.ch, w.checkpoint_id, w.parent_checkpoint_id
        FROM walk AS w
        CROSS JOIN LATERAL unnest(w.claimed) AS z(ch)
        WHERE w.depth > 0 AND NOT w.looped AND cardinality(w.claimed) > 0
          AND z.ch <> ALL (w.seeded)
        UNION ALL
        SELECT lpad(to_hex(2147483647), 8, '0'), tg.ch, tg.checkpoint_id,
               tg.parent_checkpoint_id
        FROM target_gone AS tg
    ) AS g
    WHERE g.parent_checkpoint_id IS NOT NULL
      AND (
          SELECT TRUE FROM {s}checkpoints AS p
          WHERE p.thread_id = %(thread_id)s
            AND p.checkpoint_ns = %(checkpoint_ns)s
            AND p.checkpoint_id = g.parent_checkpoint_id
          LIMIT 1
      ) IS NULL
      AND (
          SELECT TRUE FROM {s}checkpoints AS o
          WHERE o.thread_id = %(thread_id)s
            AND o.checkpoint_ns = %(checkpoint_ns)s
            AND o.checkpoint_id < g.checkpoint_id
          LIMIT 1
      ) IS NOT NULL

-- name: order_rows
) AS r
ORDER BY r.pos COLLATE "C", r.task_path COLLATE "C", r.task_id COLLATE "C", r.idx

-- name: tuple_history
-- get_tuple with its history prefetched: walk + tuple_history + rows + tuple_rows +
-- checkpoints.select_tuples + checkpoints.from_checkpoints + WHERE +
-- checkpoints.where_target + checkpoints.tuples_of + tuple_end. One statement, so the tuple and the history of the channels LangGraph will
-- ask for next come from one snapshot (a prune committed between two statements could
-- delete the checkpoint get_tuple returned, and its history would read empty), and the
-- load costs one round trip instead of two.
-- Result: the history rows as the standalone statement sends them (its 8 columns, in its
-- order), after one first row of kind 'a' that carries the channel list the walk used
-- (hist_channels: %(channels)s, or derived from the target, see `walk`) and the tuple's
-- columns (those of checkpoints.select_tuples; NULL on every other row, and on the 'a'
-- row too when the checkpoint does not exist). One sort, as in the standalone statement:
-- parallel arrays of the rows instead (one row in all) cost 8 ordered aggregates on the
-- server and an array parse per column on the client, measured 1.6x slower than these
-- rows on a 785-row history.
-- The sort sees the narrow rows only: the tuple (its blobs aggregated into arrays, often
-- megabytes) is joined after it, LATERAL and gated on the 'a' row (where_target), so the
-- planner runs it once, for that row, and the join keeps the sorted order, which the
-- outer ORDER BY names by the subquery's own columns (no second sort; test_plans). Sorted
-- after the join, the tuple went through the sort and, past work_mem, to disk: 29 ms
-- instead of 14 for a 4 MB snapshot (EXPLAIN ANALYZE, 100-turn coding_b thread).
SELECT r.kind, r.channel, r.task_id, r.type, r.blob, r.inline, r.checkpoint_id, r.ref,
       CASE WHEN r.kind = 'a' THEN (SELECT t.channels FROM target AS t) END AS hist_channels,
       tu.*
FROM (
    SELECT r.kind, r.pos COLLATE "C" AS pos_c, r.channel,
           r.task_id, r.task_path COLLATE "C" AS path_c, r.task_id COLLATE "C" AS task_c,
           r.idx, r.type, r.blob, r.inline, r.checkpoint_id, r.ref
    FROM (

-- name: tuple_rows
    UNION ALL
    SELECT 'a'::text, ''::text, NULL::text, NULL::text, NULL::text, NULL::integer, NULL::text,
           NULL::bytea, NULL::jsonb, NULL::text, NULL::text
    ) AS r
    ORDER BY r.pos COLLATE "C", r.task_path COLLATE "C", r.task_id COLLATE "C", r.idx
) AS r
LEFT JOIN LATERAL (

-- name: tuple_end
) AS tu ON TRUE
ORDER BY r.pos_c, r.path_c, r.task_c, r.idx
