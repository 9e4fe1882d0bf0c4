-- checkpoints: reading checkpoint tuples (get_tuple, list).
--
-- A list query is `select_tuples` + `from_checkpoints`, then `WHERE` and the predicates the call needs joined
-- with AND, then one of the ordering blocks, then `tuples_of`. get_tuple's is the same
-- without an ordering block: by id with `where_thread`, `where_ns`, `where_id`; for the
-- latest inside delta_history.tuple_history, with `where_target`. Every block is a
-- fragment of that one statement; Python only picks which fragments, never writes SQL.
-- The fragments up to the ordering block pick the checkpoint rows (a subquery on
-- `checkpoints` alone: its ORDER BY / LIMIT make it an optimization fence); `tuples_of`
-- then looks up the blobs and writes of the kept rows only. `list(limit=1)` on a
-- 3,000-checkpoint thread used to run these lookups for all 3,000 rows before the LIMIT
-- applied, because the sort on checkpoint_id (no index gives that order when the
-- namespace is not fixed, nor without a thread) sat above the joins.
--
-- The select list and the FROM are two blocks (`select_tuples`, `from_checkpoints`), so
-- that list of a thread can put `listed_claims` between them (see there): a statement is
-- `select_tuples` [+ `listed_claims`] + `from_checkpoints` + the rest.
--
-- Result columns (of the whole statement), newest first
--   thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id  text
--   checkpoint, metadata                                           jsonb
--   blob_channels, blob_types text[], blob_values bytea[]   the non-"empty" blobs at the
--       versions the checkpoint names (the stored values that are not inline)
--   write_task_ids, write_channels, write_types text[], write_blobs bytea[]
--       the checkpoint's pending writes, in writes_sort_key order (COLLATE "C": code
--       point order, as Python compares strings)
--   send_types text[], send_blobs bytea[]   for a checkpoint older than format v4 only:
--       the parent's TASKS writes, which LangGraph then kept as pending sends
--   blob_tokens text[]   per blob: channel || chr(31) || version || chr(31) || the blob
--       row's xmin, the key of its decoded value (the same token as a history seed's,
--       delta_history.sql; a thread deleted and written again has new xmins)
--   stored_channels text[]   with `listed_claims` only: the row's claims (NULL: a row
--       another saver wrote)
-- Parameters: %(tasks)s (the TASKS channel name), %(held_values)s text[] (see below) and
-- those of the chosen predicates.
--
-- Values the client holds: %(held_values)s lists the tokens of blobs whose decoded value
-- the client already holds (the saver's cache, _cache/store.py: a snapshot carried over
-- from checkpoint to checkpoint, or the seed of a history it read); such a blob comes as
-- NULL in blob_values, with its token in blob_tokens. Empty: every blob is sent.
-- Indexes: checkpoints_pkey for the predicates (list without a thread scans);
-- checkpoint_blobs_pkey per channel version; checkpoint_writes_pkey prefix per checkpoint.

-- name: select_tuples
SELECT
    c.thread_id AS thread_id,
    c.checkpoint_ns AS checkpoint_ns,
    c.checkpoint_id AS checkpoint_id,
    c.parent_checkpoint_id AS parent_checkpoint_id,
    c.checkpoint AS checkpoint,
    c.metadata AS metadata,
    bl.channels AS blob_channels,
    bl.types AS blob_types,
    bl.blobs AS blob_values,
    wr.task_ids AS write_task_ids,
    wr.channels AS write_channels,
    wr.types AS write_types,
    wr.blobs AS write_blobs,
    se.types AS send_types,
    se.blobs AS send_blobs,
    bl.tokens AS blob_tokens

-- name: listed_claims
-- list of a thread only (between `select_tuples` and `from_checkpoints`): the rows'
-- stored_channels, so that the history calls after the listing (get_state_history: one
-- per entry, _ops/listed.py) read a seed from these rows by the walk's rule, "stores a
-- value" (delta_history.sql, "The walk": a claim backed by an inline primitive or a
-- non-"empty" blob at the row's version, rules.stores_value; a NULL row probed for
-- every channel; tests/integration/test_seed_rule.py checks the Python copy against the
-- fragment). The other reads (get_tuple, list without a thread) do not send it.
, c.stored_channels AS stored_channels

-- name: from_checkpoints
-- Opens the subquery on `checkpoints` that the predicates, the ordering block and
-- `tuples_of` close (stored_channels is read here for `listed_claims`).
FROM (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
           c.checkpoint, c.metadata, c.stored_channels
    FROM {s}checkpoints AS c

-- name: tuples_of
-- Closes the subquery opened by select_tuples; the outer ORDER BY costs no sort (the
-- subquery's rows come in that order, and the planner knows it).
) AS c
CROSS JOIN LATERAL (
    SELECT array_agg(b.channel) AS channels,
           array_agg(b.type) AS types,
           -- a blob the client holds decoded is named by its token, not sent (no
           -- transfer, no TOAST decompression): see "Values the client holds" above
           array_agg(CASE WHEN b.token = ANY (%(held_values)s::text[]) THEN NULL
                          ELSE b.blob END) AS blobs,
           array_agg(b.token) AS tokens
    FROM jsonb_each_text(c.checkpoint -> 'channel_versions') AS v
    CROSS JOIN LATERAL (
        -- LIMIT 1 keeps this a primary-key lookup per channel, whatever the statistics
        SELECT x.channel, x.type, x.blob,
               x.channel || chr(31) || x.version || chr(31) || x.xmin::text AS token
        FROM {s}checkpoint_blobs AS x
        WHERE x.thread_id = c.thread_id
          AND x.checkpoint_ns = c.checkpoint_ns
          AND x.channel = v.key
          AND x.version = v.value
          AND x.type <> 'empty'
        LIMIT 1
    ) AS b
) AS bl
CROSS JOIN LATERAL (
    SELECT array_agg(w.task_id ORDER BY w.task_path COLLATE "C", w.task_id COLLATE "C", w.idx)
               AS task_ids,
           array_agg(w.channel ORDER BY w.task_path COLLATE "C", w.task_id COLLATE "C", w.idx)
               AS channels,
           array_agg(w.type ORDER BY w.task_path COLLATE "C", w.task_id COLLATE "C", w.idx)
               AS types,
           array_agg(w.blob ORDER BY w.task_path COLLATE "C", w.task_id COLLATE "C", w.idx)
               AS blobs
    FROM {s}checkpoint_writes AS w
    WHERE w.thread_id = c.thread_id
      AND w.checkpoint_ns = c.checkpoint_ns
      AND w.checkpoint_id = c.checkpoint_id
) AS wr
LEFT JOIN LATERAL (
    SELECT array_agg(sw.type ORDER BY sw.task_path COLLATE "C", sw.task_id COLLATE "C", sw.idx)
               AS types,
           array_agg(sw.blob ORDER BY sw.task_path COLLATE "C", sw.task_id COLLATE "C", sw.idx)
               AS blobs
    FROM {s}checkpoint_writes AS sw
    WHERE (c.checkpoint ->> 'v')::int < 4
      AND sw.thread_id = c.thread_id
      AND sw.checkpoint_ns = c.checkpoint_ns
      AND sw.checkpoint_id = c.parent_checkpoint_id
      AND sw.channel = %(tasks)s
) AS se ON TRUE
ORDER BY c.checkpoint_id DESC

-- name: keys_newest
-- list without a thread, with a limit: `select_tuples` + `from_checkpoints` + this +
-- `WHERE` and the predicates + `order_newest_limit` + `keys_end` + `tuples_of`. Only the
-- keys of the newest rows go through the sort (a top-N sort of every checkpoint of every thread: no index gives
-- checkpoint_id order across threads), and the kept rows are then read by position and
-- key. Before, each row entered the sort whole (checkpoint and metadata: ~800 bytes a row
-- here): with 300-10,000 small threads list(None, limit=1|10) measured 0.79-1.10x the
-- official saver (a full scan + top-N sort in both; 1.4-1.7x in issue 22), now 0.53-0.89x.
-- The inner alias `c` shadows the outer one, so the usual predicate blocks apply to it.
-- `ctid` in the select list keeps the inner scan a Seq Scan: under enable_seqscan=off an
-- Index Only Scan of checkpoints_pkey (all the key columns) would win, which is 2x faster
-- again on an all-visible table but 1.1-1.2x slower than the official saver at 10,000
-- threads without a VACUUM (a heap fetch per row). Numbers and command:
-- docs/design/list-and-writes.md. The join on the key as well as ctid keeps it right on
-- partitioned tables (a ctid is unique only within one partition).
JOIN (
    SELECT c.ctid AS row_id, c.thread_id, c.checkpoint_ns, c.checkpoint_id
    FROM {s}checkpoints AS c

-- name: keys_end
-- Closes keys_newest: its rows, newest first, joined to their checkpoint rows.
) AS k
    ON c.ctid = k.row_id
   AND c.thread_id = k.thread_id
   AND c.checkpoint_ns = k.checkpoint_ns
   AND c.checkpoint_id = k.checkpoint_id
ORDER BY c.checkpoint_id DESC

-- name: where_thread
c.thread_id = %(thread_id)s

-- name: where_ns
c.checkpoint_ns = %(checkpoint_ns)s

-- name: where_id
c.checkpoint_id = %(checkpoint_id)s

-- name: where_visible
-- Every read of tuples: a checkpoint prune kept only as a seed is not returned (it may
-- no longer read what it read before: migrations/0008_seed_only.sql).
c.seed_only IS NOT TRUE

-- name: where_filter
c.metadata @> %(filter)s

-- name: where_before
c.checkpoint_id < %(before)s

-- name: order_newest
ORDER BY c.checkpoint_id DESC

-- name: order_newest_limit
ORDER BY c.checkpoint_id DESC LIMIT %(limit)s

-- name: where_target
-- get_tuple (composed with delta_history.tuple_history, which reads its history in the
-- same statement): the target the walk resolved (by id, or the latest by a backward
-- primary-key scan with a literal LIMIT 1: with LIMIT $n the planner never trusted a
-- generic plan and re-planned on every call), so both read the same checkpoint; and
-- only for the result's 'a' row (r: the sorted history rows the tuple is joined to
-- LATERAL), a one-time filter on every other row.
c.thread_id = %(thread_id)s
AND c.checkpoint_ns = %(checkpoint_ns)s
AND c.checkpoint_id = (SELECT t.checkpoint_id FROM target AS t)
AND c.seed_only IS NOT TRUE
AND r.kind = 'a'
