-- server: which Postgres server a connection reaches. A saver checks each connection
-- once, at its first use (langgraph_delta_postgres/_server.py): a history cache is only
-- valid for the server (cluster and timeline) it was filled from, and a replica is only
-- used when it is a hot standby of the primary's cluster, on the primary's timeline.

-- name: identity
-- The server of this connection. No parameters.
-- Result columns: system_identifier text (pg_control_system(): the cluster, kept by every
--   standby made from it and by a promoted one); in_recovery bool (a hot standby);
--   timeline int: on a primary, the timeline it inserts WAL on (the first 8 hex digits of
--   its current WAL file's name: right after a promotion, pg_control_checkpoint() still
--   names the old one until the next checkpoint); on a standby, the timeline its WAL
--   receiver streams (visible to superusers and pg_read_all_stats), else the timeline of
--   its last restartpoint (behind for a while after the primary changed timeline: the
--   replica is then refused until it passes one, which is conservative).
-- Touches no table; executable by any role.
SELECT
    s.system_identifier::text AS system_identifier,
    pg_is_in_recovery() AS in_recovery,
    CASE WHEN pg_is_in_recovery() THEN
        coalesce(
            (SELECT r.received_tli FROM pg_stat_wal_receiver AS r
             WHERE r.received_tli IS NOT NULL LIMIT 1),
            (pg_control_checkpoint()).timeline_id
        )
    ELSE
        ('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))::bit(32)::int
    END AS timeline
FROM pg_control_system() AS s
