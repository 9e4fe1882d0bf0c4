-- rules: fragments of SQL that several statements share, written once.
--
-- A fragment is not a statement: it is a piece of one, included where a statement has a
-- line `@rules.NAME(arg, ...)` (langgraph_delta_postgres/_sql.py, raw_blocks). The loader
-- puts the fragment there, every line indented as the `@` line was, each parameter
-- ($row, ...) replaced by its argument, before the statement is rendered for a schema:
-- the statement the server gets is the one it would get with the fragment written in.
-- A fragment's comments are not sent (like every statement's).

-- fragment: stores_value($row, $ch)
-- The seed rule: checkpoint row $row holds a value for channel $ch, i.e. an inline
-- primitive (jsonb string, number or boolean in channel_values: not a snapshot marker,
-- not null) or a non-"empty" blob at the version channel_versions names. The walks stop
-- a channel at the first checkpoint that holds one (its seed). A claim
-- (stored_channels) is the fast negative the including statement tests first; a claim
-- this rule does not back counts as not stored ("Values gone" in delta_history.sql).
-- $row: the alias of a `checkpoints` row; $ch: a text expression, the channel.
-- Needs %(thread_id)s and %(checkpoint_ns)s (the row's thread and namespace) and the
-- alias b free. A boolean, or NULL when neither holds and the inline type is NULL (no
-- key, or channel_values missing): wrap it in coalesce(..., FALSE) where NULL matters.
-- Included by: delta_history.walk (its `seeds` and its step-by-step walk),
-- retention.walk and inspect.walk_depth. _ops/listed.py holds the same rule
-- in Python for listed rows; tests/integration/test_seed_rule.py checks that the two
-- agree.
-- Index: checkpoint_blobs_pkey (one probe, LIMIT 1).
jsonb_typeof($row.checkpoint -> 'channel_values' -> $ch)
    IN ('string', 'number', 'boolean')
OR (
    SELECT TRUE FROM {s}checkpoint_blobs AS b
    WHERE b.thread_id = %(thread_id)s
      AND b.checkpoint_ns = %(checkpoint_ns)s
      AND b.channel = $ch
      AND b.version = $row.checkpoint -> 'channel_versions' ->> $ch
      AND b.type <> 'empty'
    LIMIT 1
) IS NOT NULL
