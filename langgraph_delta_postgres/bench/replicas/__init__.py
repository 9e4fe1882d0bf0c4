"""Benchmark of the routing saver (``langgraph-delta-pg bench --only replicas``): what a
streaming hot standby takes off the primary.

Setup: a scratch database on the server (``--dsn``, or the embedded one), a hot standby
of that server started from the same binaries (:mod:`..._local.standby`), and ``THREADS``
threads of the ``coding_a`` workload, ``TURNS`` user turns each, written through the
real graph (two DeltaChannel fields).

A round runs, for ``SECONDS`` seconds, ``WRITERS`` writer threads (each invoking turns on
a thread of its own, as fast as it can) and ``READERS`` reader threads (each paging
history as a UI does, ``PAGES_PER_S`` pages a second:
``get_state_history(limit=10, before=<a random checkpoint of a random thread>)``, which
is one ``list`` and one history call per state). Two modes, alternating order round by
round: ``primary`` (every saver a DeltaPostgresSaver on the primary) and ``replica``
(every saver a RoutingSaver with the standby; readers are other processes: no token).

Measured per round: the CPU time (``/proc/<pid>/stat``, when the server runs on this
machine) of the readers' own backends on the primary, per history page served: what
serving the pages cost the primary; the primary's statement time over all sessions
(writers included), from ``pg_stat_database.active_time`` of the scratch database (time
its backends spent running statements; flushed when the round's connections close, so
read after they have), per page; the standby's the same way; the writers' turn latencies
(p50, p99).
Ratios are taken round pair by round pair, and their median reported.

The section's modules: :mod:`.rounds` (a round of one mode, and how its savers are
opened), :mod:`.latency` (a routed read against the same read on the standby),
:mod:`.turn_loss` (turns lost when workers alternate on shared threads), :mod:`.section`
(the section: threads written, rounds in pairs, ratios, ``bench --only replicas``).
"""
