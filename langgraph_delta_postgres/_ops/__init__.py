"""The saver's operations, with no I/O, one module per concern beside the SQL it runs.

Each operation is a generator that yields :class:`.base.Stmt` objects and receives the
rows each statement returned; its return value is the operation's result. The sync
saver (:mod:`..saver`, ``drive``) and the async saver (:mod:`..aio`, ``adrive``) only run
these generators over a psycopg cursor, so both run the same statements and the same
row -> result code. An operation's generator function is named ``_op_...`` (or, behind
an argument check, ``_...``): that name is what the DEBUG log of each statement shows.

* :mod:`.base`: ``Stmt`` / ``Op``, the config helpers, the prefetch slot (get_tuple's
  history, or a listing's rows) the next history call may take;
* :mod:`.context`: ``SaverCore``, the state every operation reads (queries, serde, cache,
  schema, counters) and the statements composed of several blocks;
* :mod:`.checkpoints` (``sql/checkpoints.sql``): get_tuple, list;
* :mod:`.listed`: list()'s prefetch, the history calls after a listing answered from its
  rows by the walk's rule;
* :mod:`.history` (``sql/delta_history.sql``): get_delta_channel_history;
* :mod:`.write` (``sql/write.sql``): put, put_writes;
* :mod:`.retention` (``sql/retention.sql``): prune, the keep-set, delete_for_runs;
* :mod:`.maintenance` (``sql/maintenance.sql``): delete_thread, copy_thread.

See docs/design/architecture.md.
"""
