"""A real agent workload: a ``deepagents`` coding session driven by a scripted model.

``deepagents.create_deep_agent`` (0.7.x) builds its state with ``DeltaChannel`` on
``messages`` (``DeepAgentState``, ``snapshot_frequency=50``) and on ``files``
(``FilesystemState``, ``snapshot_frequency=50``); the rest (the summarization event and
session id) are ``LastValue`` fields. The model is :class:`..scripted_model.ScriptedChatModel`
(no network, deterministic): each user turn is answered with ``write_file`` /
``read_file`` / ``edit_file`` / ``ls`` / ``write_todos`` calls, every tenth turn hands a
subtask to the general-purpose subagent (``task``), and a small context window
(``profile={"max_input_tokens": ...}``) makes deepagents' summarization middleware
trigger every few turns (it calls the same scripted model for the summary).

Each saver runs the same session on its own thread: ours (``DeltaPostgresSaver``), the
official ``PostgresSaver`` 3.2, ``InMemorySaver`` and the floor (:mod:`.floor`:
``InMemorySaver`` plus one ``SELECT 1`` round trip per write call, the least a saver that
writes each call to Postgres adds), turn ``i`` for every saver before turn ``i + 1`` (the
order rotates each turn), each turn timed as ``invoke``. Then, in
interleaved rounds (:class:`..timing.Interleaved`), through the graph:

* ``get_state`` of the thread's head: ours on the saver that ran the session (warm), ours
  on a new saver (its first call, on a connection of its own opened for the round, as a
  new process has), ours with ``cache_bytes=0``, the official saver that ran the session
  and a new one (opened for the round as ours), and ``InMemorySaver``; a new saver of
  ours is compared with a new official one, the others with the one that ran the session;
* a history page, ``get_state_history(limit=10)``;
* a whole history pass, every entry of ``get_state_history``.

Every Postgres saver is opened by its ``from_conn_string`` (one connection each; the new
savers' opening is not timed, and is reported apart as ``open_ms``).

The session also runs, turn by turn in the same rotation, through ``ainvoke`` on
``AsyncDeltaPostgresSaver`` and the official ``AsyncPostgresSaver`` (each opened by its
``from_conn_string``, on an event loop of this process), for the turn latency of the
async savers against the sync ones.

Final states are compared across savers (with generated ids and timestamps -- the
summarization session id, file timestamps -- normalized: they differ between any two
runs of the agent, whatever the saver).

The section's modules: :mod:`.session` (the agent, its scripted model's scales and the
session's turns, also used by the scripts in ``scripts/``), :mod:`.floor` (the floor
saver) and :mod:`.section` (the section: the runs, the loads, the comparisons, ``bench
--only agent``).
"""
