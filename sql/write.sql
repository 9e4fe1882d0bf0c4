-- write: put and put_writes, one statement each.

-- name: parent_exists
-- Before a put, only in the hour after this saver's connections reached another server
-- (a failover, see langgraph_delta_postgres/_server.py): whether the new checkpoint's
-- parent is on the server. A run in flight across a failover to a standby that lacked
-- the last commits would otherwise write its next checkpoint under a parent the server
-- never had, and the thread's state would read as empty from there on.
-- Parameters: thread_id, checkpoint_ns, checkpoint_id (the parent's) text.
-- Result column: found bool. Index: checkpoints_pkey, one row.
SELECT EXISTS (
    SELECT FROM {s}checkpoints AS c
    WHERE c.thread_id = %(thread_id)s
      AND c.checkpoint_ns = %(checkpoint_ns)s
      AND c.checkpoint_id = %(checkpoint_id)s
) AS found

-- name: put_checkpoint
-- Stores a checkpoint and the blobs of its new non-inline values in one statement.
-- Parameters: thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
--   checkpoint jsonb (channel_values holding only inline primitives and the `true`
--   markers of _DeltaSnapshot blobs), metadata jsonb,
--   blob_data bytea: the blobs to write (new versions), concatenated (see _ops/write.py,
--   packed_blobs, for why not a bytea[]);
--   plan jsonb, the small per-channel lists in one parameter (see _ops/write.py,
--   put_plan, for why not parallel arrays):
--     blobs: [channel, version, type, offset, length] of each blob to write, cut out of
--       blob_data at its 1-based offset and length;
--     inline: channels stored inline with a non-null value;
--     probe: [channel, version] of every versioned channel not inline (those written
--       here included), with the version channel_versions names, to find out whether a
--       non-"empty" blob was already stored for it (a blob this statement writes again
--       conflicts, and is not returned by new_blobs);
--     delta: [channel, updates, supersteps] of counters_since_delta_snapshot, sorted by
--       channel (none: the delta columns are NULL).
-- stored_channels = inline ∪ blobs this statement inserted ∪ blobs already present.
-- A data-modifying CTE's rows are invisible to the rest of the statement, hence the
-- RETURNING branch next to the probe (which sees what existed before).
-- The namespace's checkpoint_epochs row is kept by the table's trigger
-- (migrations/0007_epoch_triggers.sql), as for every writer.
-- Indexes: checkpoint_blobs_pkey (conflict + probe), checkpoints_pkey (conflict).
WITH new_blobs AS (
    INSERT INTO {s}checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
    SELECT %(thread_id)s, %(checkpoint_ns)s, u.b ->> 0, u.b ->> 1, u.b ->> 2,
           substring(%(blob_data)b::bytea FROM (u.b ->> 3)::int FOR (u.b ->> 4)::int)
    FROM jsonb_array_elements(%(plan)s::jsonb -> 'blobs') AS u(b)
    ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING
    RETURNING channel, type
)
INSERT INTO {s}checkpoints (
    thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata,
    stored_channels, delta_channels, delta_updates, delta_supersteps
)
VALUES (
    %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(parent_checkpoint_id)s,
    %(checkpoint)s, %(metadata)s,
    ARRAY(
        SELECT jsonb_array_elements_text(%(plan)s::jsonb -> 'inline')
        UNION
        SELECT nb.channel FROM new_blobs AS nb WHERE nb.type <> 'empty'
        UNION
        SELECT p.c ->> 0
        FROM jsonb_array_elements(%(plan)s::jsonb -> 'probe') AS p(c)
        WHERE (
            SELECT TRUE FROM {s}checkpoint_blobs AS b
            WHERE b.thread_id = %(thread_id)s
              AND b.checkpoint_ns = %(checkpoint_ns)s
              AND b.channel = p.c ->> 0
              AND b.version = p.c ->> 1
              AND b.type <> 'empty'
            LIMIT 1
        ) IS NOT NULL
        ORDER BY 1
    ),
    (SELECT array_agg(d.c ->> 0 ORDER BY d.n)
     FROM jsonb_array_elements(%(plan)s::jsonb -> 'delta') WITH ORDINALITY AS d(c, n)),
    (SELECT array_agg((d.c ->> 1)::int ORDER BY d.n)
     FROM jsonb_array_elements(%(plan)s::jsonb -> 'delta') WITH ORDINALITY AS d(c, n)),
    (SELECT array_agg((d.c ->> 2)::int ORDER BY d.n)
     FROM jsonb_array_elements(%(plan)s::jsonb -> 'delta') WITH ORDINALITY AS d(c, n))
)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET
    checkpoint = EXCLUDED.checkpoint,
    metadata = EXCLUDED.metadata,
    stored_channels = EXCLUDED.stored_channels,
    delta_channels = EXCLUDED.delta_channels,
    delta_updates = EXCLUDED.delta_updates,
    delta_supersteps = EXCLUDED.delta_supersteps

-- name: insert_writes
-- put_writes for regular channels: the first write of a (task_id, idx) wins, so a task
-- retried after a crash cannot change what was recorded. Parameters: thread_id,
-- checkpoint_ns, checkpoint_id, task_id, task_path, data (bytea, the blobs concatenated,
-- as put_checkpoint's blob_data) and writes (jsonb): [idx, channel, type, offset, length]
-- of each write (distinct idxs), its blob cut out of data at its 1-based offset and length.
-- Whether the write is late (a write to a checkpoint that may have a child, which caches
-- may hold a chain through) is decided by the table's trigger
-- (migrations/0007_epoch_triggers.sql), as for every writer.
-- Index: checkpoint_writes_pkey (conflict).
INSERT INTO {s}checkpoint_writes
    (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob)
SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(task_id)s, %(task_path)s,
       (u.w ->> 0)::int, u.w ->> 1, u.w ->> 2,
       substring(%(data)b::bytea FROM (u.w ->> 3)::int FOR (u.w ->> 4)::int)
FROM jsonb_array_elements(%(writes)s::jsonb) AS u(w)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO NOTHING

-- name: insert_writes_batch
-- insert_writes of several put_writes calls in one statement: the calls that queued for
-- a saver's single connection while it was busy (the writes of LangGraph's parallel
-- tasks), run by the next call to get it (_ops/write.py, WriteBatch). Parameters: data
-- (bytea, every call's blobs concatenated) and writes (jsonb): [thread_id, checkpoint_ns,
-- checkpoint_id, task_id, task_path, idx, channel, type, offset, length] per write,
-- sorted by thread and namespace (the trigger's row locks are then taken in one order
-- by every such statement). The first write of a (task_id, idx) wins, as in insert_writes.
-- Index: checkpoint_writes_pkey (conflict).
INSERT INTO {s}checkpoint_writes
    (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob)
SELECT u.w ->> 0, u.w ->> 1, u.w ->> 2, u.w ->> 3, u.w ->> 4,
       (u.w ->> 5)::int, u.w ->> 6, u.w ->> 7,
       substring(%(data)b::bytea FROM (u.w ->> 8)::int FOR (u.w ->> 9)::int)
FROM jsonb_array_elements(%(writes)s::jsonb) WITH ORDINALITY AS u(w, n)
ORDER BY u.n
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO NOTHING

-- name: upsert_writes
-- put_writes when every write is a special channel (error, interrupt, resume, scheduled,
-- at the fixed negative idx of WRITES_IDX_MAP): the latest one replaces the stored one.
-- Same parameters as insert_writes.
INSERT INTO {s}checkpoint_writes
    (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob)
SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(task_id)s, %(task_path)s,
       (u.w ->> 0)::int, u.w ->> 1, u.w ->> 2,
       substring(%(data)b::bytea FROM (u.w ->> 3)::int FOR (u.w ->> 4)::int)
FROM jsonb_array_elements(%(writes)s::jsonb) AS u(w)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE SET
    channel = EXCLUDED.channel,
    type = EXCLUDED.type,
    blob = EXCLUDED.blob,
    task_path = EXCLUDED.task_path
