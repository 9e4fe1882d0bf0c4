"""The seed rule, "this checkpoint stores a value for this channel", is written once in SQL
(the fragment ``rules.stores_value``, sql/rules.sql, which the walks include) and once in
Python (``_Listed._seed_of``, _ops/listed.py: a listing answers the history calls after
it from its rows, with no statement). The two must agree on every row: generated
checkpoint rows (claims, inline values of every JSON type, versions, blobs "empty" or
not, at the named version or another) are stored, listed by the saver, and each
(row, channel) is asked of the Python rule and of the fragment on the server."""

from __future__ import annotations

import itertools
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import empty_checkpoint
from psycopg.types.json import Jsonb

import langgraph_delta_postgres._ops.base as core
from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._sql import include_fragments, render

CHANNELS = ["a", "b", "c"]
VERSIONS = ["v1", "v2", "v3"]

#: The fragment as the walks use it: a claim (stored_channels, NULL: every channel) backed
#: by the fragment; coalesce: the fragment is NULL where the inline type is NULL and no
#: blob backs the claim (the walks read that as not stored, in a WHERE or an ARRAY filter)
RULE = """
SELECT c.checkpoint_id, ch,
       (c.stored_channels IS NULL OR ch = ANY (c.stored_channels))
       AND coalesce((
           @rules.stores_value(c, ch)
       ), FALSE) AS stores
FROM {s}checkpoints AS c
CROSS JOIN unnest(%(channels)s::text[]) AS ch
WHERE c.thread_id = %(thread_id)s
  AND c.checkpoint_ns = %(checkpoint_ns)s
"""

JSON_VALUES = st.one_of(
    st.text(max_size=3), st.integers(-(2**70), 2**70), st.booleans(), st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.just({}), st.just([]), st.just({"x": 1}), st.just([1, "y"]), st.just(""),
    st.just(0), st.just(False),
)
ROW = st.fixed_dictionaries({
    "claims": st.none() | st.just(CHANNELS) | st.lists(st.sampled_from(CHANNELS), unique=True),
    # a channel_values key per channel, or none; or no channel_values at all / JSON null
    "values": st.one_of(
        st.dictionaries(st.sampled_from(CHANNELS), JSON_VALUES, min_size=1),
        st.just("absent"), st.just(None),
    ),
    "versions": st.dictionaries(st.sampled_from(CHANNELS), st.sampled_from(VERSIONS), min_size=2),
})
#: the thread's blobs: (channel, version) -> "empty" or a value's blob
BLOBS = st.dictionaries(
    st.tuples(st.sampled_from(CHANNELS), st.sampled_from(VERSIONS)),
    st.sampled_from(["empty", "value"]),
    min_size=3,
)

_threads = itertools.count()


def test_python_seed_rule_agrees_with_the_sql_fragment(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        saver = DeltaPostgresSaver(conn)
        rule = render(include_fragments(RULE), None)
        seen = {True: 0, False: 0}

        @settings(max_examples=150, deadline=None, derandomize=True, print_blob=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(rows=st.lists(ROW, min_size=1, max_size=5), blobs=BLOBS)
        def run(rows: list[dict[str, Any]], blobs: dict[tuple[str, str], str]) -> None:
            tid = f"seed-{next(_threads)}"
            parent = None
            for i, r in enumerate(rows):
                cp: dict[str, Any] = dict(empty_checkpoint())
                cp["id"] = f"00000000-0000-6000-8000-{i:012}"
                cp["channel_versions"] = r["versions"]
                if r["values"] == "absent":
                    del cp["channel_values"]
                else:
                    cp["channel_values"] = r["values"]
                conn.execute(
                    "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id,"
                    " parent_checkpoint_id, type, checkpoint, metadata, stored_channels)"
                    " VALUES (%s, '', %s, %s, NULL, %s, '{}', %s)",
                    (tid, cp["id"], parent, Jsonb(cp), r["claims"]),
                )
                parent = cp["id"]
            for (ch, version), kind in blobs.items():
                typ, blob = ("empty", None) if kind == "empty" else saver.serde.dumps_typed(
                    f"{ch}@{version}"
                )
                conn.execute(
                    "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel,"
                    " version, type, blob) VALUES (%s, '', %s, %s, %s, %s)",
                    (tid, ch, version, typ, blob),
                )
            # the Python rule, on the rows as the saver's listing read them
            core._PREFETCH.set(None)
            listed_tuples = list(saver.list({"configurable": {"thread_id": tid}}))
            listed = core._PREFETCH.get()
            assert isinstance(listed, core._Listed)
            assert len(listed_tuples) == len(rows) == len(listed.rows)
            python = {
                (cid, ch): listed._seed_of(row, ch) is not listed._NONE
                for (_, cid), row in listed.rows.items()
                for ch in CHANNELS
            }
            core._PREFETCH.set(None)
            # the fragment, on the server
            sql_rule = {
                (cid, ch): stores
                for cid, ch, stores in conn.execute(
                    rule, {"channels": CHANNELS, "thread_id": tid, "checkpoint_ns": ""}
                ).fetchall()
            }
            assert python == sql_rule
            for v in python.values():
                seen[v] += 1

        run()
        # both answers occur often (the generated rows are not all one kind)
        assert min(seen.values()) > 200, seen
