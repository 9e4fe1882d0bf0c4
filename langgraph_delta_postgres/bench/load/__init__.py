"""How many agents one Postgres serves: N concurrent sessions on one server.

Each session is an agent conversation on its own thread: per turn, ``invoke`` of the
workload's real graph (two ``DeltaChannel`` fields) with a user input, then
``get_state``; on one turn in ``HISTORY_EVERY`` (staggered across sessions) also a
``get_state_history(limit=10)`` page, as a UI polling the thread would. Sessions start on
threads that already hold ``prior`` (+ a ``stagger`` offset) turns (copies, made in SQL, of
template threads that saver wrote through the same graph), so every read reconstructs a
real history; each runs ``SESSION_WARM_TURNS`` untimed turns before the clock starts.
The sessions run in up to ``CLIENT_PROCS`` client processes (``run_procs``).

Two modes, each at every concurrency of the scale (1, 4, 16, 64 sessions):

* ``asyncio``: an event loop per client process, ``ainvoke`` / ``aget_state`` on an
  ``AsyncConnectionPool``, ``AsyncDeltaPostgresSaver`` against the official ``AsyncPostgresSaver``;
* ``threads``: one thread per session, ``invoke`` / ``get_state`` on a ``ConnectionPool``,
  ``DeltaPostgresSaver`` against the official ``PostgresSaver``.

Pools hold ``min(N, POOL_CAP)`` connections, split among the client processes, all opened
and warmed before the clock starts. Each saver's pool is the one its users get: ours
opened by ``from_conn_string(dsn, pool_size=n)`` (the pool that checks a connection idle
a while before lending it), the official saver, whose ``from_conn_string`` opens one
connection, on a ``ConnectionPool`` / ``AsyncConnectionPool`` with the connection
settings its documentation gives (``autocommit``, ``prepare_threshold=0``, ``dict_row``).
Ours and the official saver each run in their own scratch database on the same server,
on rows they wrote themselves, one after the other, the order alternating level by level
and repetition by repetition so a noisy neighbour hits both; ratios are taken pair by
pair.

What the database paid, per turn (a history page counts in the turn that asked for it):

* ``pg_stat_statements`` (when the server preloads it): execution time, shared buffers
  (hit + read) and calls of the statements the run's database executed;
* CPU time of the pool's server backends (``utime + stime`` of ``/proc/<pid>/stat``, when
  the server runs on this machine): everything a backend did (parse, plan, execute,
  commit, send), whatever the extension says;
* bytes the server sent and received, counted by a loopback proxy in a separate, untimed
  pass of one session (the proxy would cost the client CPU in the timed runs);
* wait events of the pool's backends, sampled from ``pg_stat_activity`` during the run.

The section's modules: :mod:`.scale` (its constants and scales), :mod:`.server` (the
server's meters and the copies of template threads), :mod:`.sessions` (how the sessions
run, in threads, on an event loop or in client processes, and what a run measured),
:mod:`.section` (the section itself: setup, bytes per turn, the levels and repetitions,
the summary). Its report is :mod:`..report.load`.
"""
