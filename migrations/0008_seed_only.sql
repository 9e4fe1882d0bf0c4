-- 0008_seed_only: checkpoints that prune keeps only as seeds.
--
-- seed_only
--     TRUE on a checkpoint that prune (or delete_for_runs) kept only because a checkpoint
--     it left visible rebuilds a DeltaChannel's state from it (a seed, or a step between
--     a seed and the kept checkpoints: the keep-set). Such a checkpoint may no longer read
--     what it read before the prune (its own seeds can be gone), so every read path of
--     this package treats it as deleted: list / get_state_history do not return it, and
--     get_tuple, get_delta_channel_history and get_delta_channel_keepset of its id answer
--     as for a missing checkpoint. The history walk of a visible checkpoint still goes
--     through it (that is why it is kept). NULL: a visible checkpoint (every row written
--     by a put, this package's or another saver's). A prune never clears it.
--     Savers that do not know the column (the official saver, a release before this one)
--     list such a checkpoint and read it as its remaining rows allow: docs/retention.md.
--
-- Adding a nullable column without a default is a catalog-only change: no table rewrite.

ALTER TABLE {s}checkpoints ADD COLUMN IF NOT EXISTS seed_only BOOLEAN;
