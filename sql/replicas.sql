-- replicas: the statements of the routing saver (langgraph_delta_postgres/replicas/_ops.py)
-- that decide whether a read may be answered by a streaming hot standby.
--
-- A standby's data is the primary's as of the WAL it has replayed. A checkpoint row never
-- changes once written, so what a read needs is known to be final on the standby when:
-- the standby has replayed past an LSN the caller knows covers the writes it must see
-- (the routing saver's own writes, a token), or, for a read of a checkpoint by id, the
-- checkpoint is there and (for its pending writes) has a child there. See docs/replicas.md.
--
-- Snapshots: a statement's snapshot is taken when it starts, and pg_last_wal_replay_lsn()
-- is evaluated later, while it runs; so the replay position one statement reports is only
-- known to be covered by the snapshot of a LATER statement. The routing saver runs `guard`
-- on the connection that then runs the read, as the statement before it (replay never
-- goes back while the connection lives; a restart of the standby ends the connection).

-- name: guard
-- Run on a standby before a routed read, on the connection that then runs it.
-- Parameters: thread_id, checkpoint_ns text; checkpoint_id text (NULL: no checkpoint to
--   look for; present and sealed are then false); floor text
--   (an LSN, or NULL) and max_wait_ms int: a standby behind the floor is waited for, up
--   to max_wait_ms, polling its replay position every millisecond (a read of the latest
--   checkpoint has the primary's insert position as its floor, which any write to any
--   database of the cluster moves: without the wait a busy primary's standby is always
--   a few milliseconds behind it). The guard's own snapshot is taken before the wait;
--   the read's, after it.
-- Result columns: standby bool (pg_is_in_recovery(): false on a primary, or a promoted
--   standby, which the saver then does not use as a replica); replay_lsn text (NULL when
--   not a standby); present bool: the checkpoint is there; sealed bool: it has a child
--   there. A child's id sorts above its parent's (uuid6 from the writing host's clock);
--   a child written by a host whose clock is behind (contract 5a) is not found, so its
--   parent counts as not sealed and the read goes to the primary: conservative.
-- Indexes: checkpoints_pkey (the checkpoint; and the range of newer ids of the thread and
--   namespace, in id order, for its child: the very next row). "Has a child" is asked as "the next checkpoint of the namespace, in id order, is its
--   child": one index row each. A child that is not the next row (a fork's sibling
--   sorts between them) is not seen, and the read goes to the primary: conservative.
--   Asked as "any newer checkpoint whose parent it is", Postgres chose a bitmap scan that
--   read every newer id of the thread for each checkpoint (with a page of 10 on a
--   40-turn thread, as page_gate asks it: 0.36 ms a statement, against 0.12 without).
WITH RECURSIVE waited (replayed) AS (
    SELECT pg_last_wal_replay_lsn()
    UNION ALL
    SELECT (
        SELECT pg_last_wal_replay_lsn() FROM (SELECT pg_sleep(0.001)) AS s
        WHERE w.replayed IS NOT NULL  -- correlated: evaluated again for every row
    )
    FROM waited AS w
    WHERE w.replayed < %(floor)s::pg_lsn
      AND clock_timestamp()
          < statement_timestamp() + %(max_wait_ms)s::int * interval '1 millisecond'
)
SELECT
    pg_is_in_recovery() AS standby,
    (SELECT max(replayed) FROM waited)::text AS replay_lsn,
    EXISTS (
        SELECT FROM {s}checkpoints AS c
        WHERE c.thread_id = %(thread_id)s
          AND c.checkpoint_ns = %(checkpoint_ns)s
          AND c.checkpoint_id = %(checkpoint_id)s::text
    ) AS present,
    coalesce((
        SELECT c.parent_checkpoint_id = %(checkpoint_id)s::text FROM {s}checkpoints AS c
        WHERE c.thread_id = %(thread_id)s
          AND c.checkpoint_ns = %(checkpoint_ns)s
          AND c.checkpoint_id > %(checkpoint_id)s::text
        ORDER BY c.checkpoint_id LIMIT 1
    ), false) AS sealed

-- name: page_gate
-- A predicate the routing saver's replica saver adds to a history page's own statement
-- (list of one thread and namespace, before= and limit=, no filter): the page
-- is read only if, in that statement's snapshot, the server is a standby, the before
-- checkpoint is there and each of the page's checkpoints has a child there ("has a
-- child" as in guard). With a token, the guard runs before it too, for the floor. Uncorrelated: Postgres evaluates it once, as a one-time filter gating the
-- whole scan, so a page that comes back is final in the very snapshot it was read from;
-- one that comes back empty is read again on the primary (either the gate was closed or
-- the page is empty: the end of the history). Without a token, one round trip.
-- Parameters: the list statement's thread_id, checkpoint_ns, before, limit.
(
    SELECT pg_is_in_recovery()
       AND EXISTS (
           SELECT FROM {s}checkpoints AS g
           WHERE g.thread_id = %(thread_id)s
             AND g.checkpoint_ns = %(checkpoint_ns)s
             AND g.checkpoint_id = %(before)s
       )
       AND NOT EXISTS (
           SELECT FROM (
               SELECT g.checkpoint_id FROM {s}checkpoints AS g
               WHERE g.thread_id = %(thread_id)s
                 AND g.checkpoint_ns = %(checkpoint_ns)s
                 AND g.checkpoint_id < %(before)s
               ORDER BY g.checkpoint_id DESC
               LIMIT %(limit)s
           ) AS p
           WHERE NOT coalesce((
               SELECT k.parent_checkpoint_id = p.checkpoint_id FROM {s}checkpoints AS k
               WHERE k.thread_id = %(thread_id)s
                 AND k.checkpoint_ns = %(checkpoint_ns)s
                 AND k.checkpoint_id > p.checkpoint_id
               ORDER BY k.checkpoint_id LIMIT 1
           ), false)
       )
)

-- name: sealed_ids
-- After a history page (list with before=) was read on a standby: which of its
-- checkpoints have a child there (the page is kept only if all of them do: a checkpoint
-- without a child may still receive pending writes).
-- Parameters: thread_id text; checkpoint_ns, checkpoint_ids text[] (parallel: a list
--   without a namespace may return rows of several).
-- Result columns: checkpoint_ns, checkpoint_id text, one row per sealed checkpoint.
-- Indexes: checkpoints_pkey, as in `guard`, per checkpoint of the page.
SELECT u.checkpoint_ns, u.checkpoint_id
FROM unnest(%(checkpoint_ns)s::text[], %(checkpoint_ids)s::text[])
    AS u(checkpoint_ns, checkpoint_id)
WHERE coalesce((
    SELECT c.parent_checkpoint_id = u.checkpoint_id FROM {s}checkpoints AS c
    WHERE c.thread_id = %(thread_id)s
      AND c.checkpoint_ns = u.checkpoint_ns
      AND c.checkpoint_id > u.checkpoint_id
    ORDER BY c.checkpoint_id LIMIT 1
), false)

-- name: primary_lsn
-- On the primary: an LSN at or past the commit record of every transaction that has
-- committed so far (the insert position: with synchronous_commit=off a commit returns
-- before its record is written, so the write position could be behind it). A standby
-- that has replayed up to it sees all of them. When the insert position is at the start
-- of a WAL page, it points past the page's header (24 bytes; 40 at a segment's start),
-- while a standby's replay position stops at the end of the last record, before that
-- header: on an idle primary no standby ever reached it (until the next record, up to
-- 15 s later), and every latest read waited replica_wait and then went to the primary.
-- The header holds no record: the position before it covers the same commits. (64-bit
-- builds' header sizes.) No parameters.
-- Result columns: lsn text; timeline int (the primary's, as in server.identity: a
-- change means a promotion, and the replicas are checked again).
-- Touches no table.
SELECT
    (
        SELECT CASE  -- the position before a page header (above)
            WHEN mod(w.lsn - '0/0'::pg_lsn,
                     pg_size_bytes(current_setting('wal_segment_size'))) = 40
                THEN w.lsn - 40::numeric
            WHEN mod(w.lsn - '0/0'::pg_lsn, current_setting('wal_block_size')::numeric) = 24
                THEN w.lsn - 24::numeric
            ELSE w.lsn
        END
        FROM (SELECT pg_current_wal_insert_lsn() AS lsn) AS w
    )::text AS lsn,
    ('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))::bit(32)::int
        AS timeline

-- name: head
-- Appended to primary_lsn (composed by the routing saver: one statement, the floor
-- expression written once), on the primary before a read of a thread's latest
-- checkpoint (get_tuple or history without checkpoint_id): the read's floor. The LSN is
-- evaluated after the statement's snapshot was taken, so it is at or past the commit of
-- every write committed before the read began, whoever made it (any process, any
-- worker); a replica that has replayed past it gives an answer no older than the
-- primary's at that moment. head: the namespace's newest checkpoint id (NULL: the thread
-- has none there, and the primary answers without a replica).
-- Parameters: thread_id, checkpoint_ns text.
-- Result columns (with primary_lsn's): lsn text; timeline int; head text.
-- Index: checkpoints_pkey (thread_id, checkpoint_ns, checkpoint_id), backwards, one row.
, (SELECT c.checkpoint_id FROM {s}checkpoints AS c
   WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
     AND c.seed_only IS NOT TRUE
   ORDER BY c.checkpoint_id DESC LIMIT 1) AS head

-- name: bound_session
-- On a replica connection, at its first use: bound every statement of the session
-- (a query that runs longer, or waits for a lock longer -- a lock replayed from the
-- primary is held on the standby until its commit is replayed, which a
-- recovery_min_apply_delay postpones -- is cancelled, and the read goes to the
-- primary). Parameters: statement_timeout, lock_timeout text (e.g. '2000ms').
-- Result columns: the two settings as set. Session-level (is_local false): the
-- connection is in autocommit, or the setting is committed with the read.
SELECT
    set_config('statement_timeout', %(statement_timeout)s, false) AS statement_timeout,
    set_config('lock_timeout', %(lock_timeout)s, false) AS lock_timeout
