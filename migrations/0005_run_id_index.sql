-- 0005_run_id_index: an index for delete_for_runs, which finds a run's checkpoints by
-- metadata ->> 'run_id' (without it, a scan of the whole checkpoints table per call).
-- Rows without a run_id (graphs run outside Agent Server) index as NULL.
--
-- CREATE INDEX CONCURRENTLY does not block writes but cannot run inside a transaction
-- block; an interrupted build leaves an INVALID index behind, so the file drops any
-- index of that name first (the runner re-runs the whole file when its ledger row is
-- missing, and re-running it is harmless):
-- migrate: no-transaction

DROP INDEX CONCURRENTLY IF EXISTS {s}checkpoints_run_id_idx;

CREATE INDEX CONCURRENTLY checkpoints_run_id_idx
    ON {s}checkpoints ((metadata ->> 'run_id'));
