-- 0003_delta_columns: typed delta metadata on checkpoints.
--
-- delta_channels / delta_updates / delta_supersteps
--     counters_since_delta_snapshot, promoted out of the metadata JSON as three parallel
--     arrays: for delta_channels[i], delta_updates[i] supersteps wrote to it and
--     delta_supersteps[i] supersteps passed since its last _DeltaSnapshot. NULL when the
--     metadata has no counters (threads without DeltaChannel). The metadata JSON keeps
--     the counters too: LangGraph reads them from there.
-- stored_channels
--     the channels this checkpoint stores a value for (a non-"empty" blob at the version
--     named in channel_versions, or a non-null inline primitive, including the inline
--     `true` marker of a _DeltaSnapshot). This is what lets the history query stop a
--     channel's walk from the checkpoint row alone. NULL means "unknown" (a row written
--     by another saver after this migration): readers then probe checkpoint_blobs.
--
-- Adding nullable columns without defaults is a catalog-only change: no table rewrite.

ALTER TABLE {s}checkpoints ADD COLUMN IF NOT EXISTS stored_channels TEXT[];
ALTER TABLE {s}checkpoints ADD COLUMN IF NOT EXISTS delta_channels TEXT[];
ALTER TABLE {s}checkpoints ADD COLUMN IF NOT EXISTS delta_updates INTEGER[];
ALTER TABLE {s}checkpoints ADD COLUMN IF NOT EXISTS delta_supersteps INTEGER[];
