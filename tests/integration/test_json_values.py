"""The JSON a put sends (``_ops/write.py``, ``json_bytes``: orjson for plain values,
``json.dumps`` for the rest) and the values it stores inline.

- ``json_bytes`` makes the document ``json.dumps`` makes: the same ``jsonb`` in Postgres
  for generated values, and the same error where ``json.dumps`` raises.
- A NaN or an infinity is a channel value like any other (a blob): it reads back as
  InMemorySaver returns it. Inline, it failed the put (JSON has no spelling for it; the
  statement was refused with "Token "NaN" is invalid").
- A checkpoint whose JSON could hold a NaN elsewhere (a float version, a key LangGraph's
  Checkpoint does not have) is written with ``json.dumps`` as before: Postgres refuses it
  rather than storing null.
"""

from __future__ import annotations

import datetime
import enum
import json
import math
from typing import Any, TypedDict

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._ops.write import json_bytes


class Color(enum.IntEnum):
    RED = 1


class Name(str):
    pass


_scalars = (
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text() | st.just("lone \udc80 surrogate")  # orjson refuses it: json.dumps's turn
    | st.just(Color.RED) | st.builds(Name, st.text(max_size=3))
)
_keys = (
    st.text(max_size=5) | st.integers(-3, 3)
    | st.booleans() | st.none()
)
JSON_LIKE = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(_keys, inner, max_size=4),
    max_leaves=20,
)


def _in_postgres(conn: psycopg.Connection[Any], doc: str) -> tuple[str, str]:
    """What Postgres makes of a JSON document: its jsonb, or the error's SQLSTATE."""
    try:
        row = conn.execute("SELECT %s::jsonb::text", (doc,)).fetchone()
    except psycopg.Error as e:
        return ("refused", str(e.sqlstate))
    assert row is not None
    return ("jsonb", row[0])


def test_json_bytes_is_json_dumps_in_postgres(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:

        @settings(max_examples=300, deadline=None, derandomize=True, print_blob=True,
                  suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(JSON_LIKE)
        def check(value: Any) -> None:
            ours, theirs = json_bytes(value).decode(), json.dumps(value)
            assert json.loads(ours) == json.loads(theirs)
            assert _in_postgres(conn, ours) == _in_postgres(conn, theirs)

        check()


@pytest.mark.parametrize("value", [
    datetime.datetime(2026, 1, 1), {1.5j: 1}, {"k": object()}, [datetime.date(2026, 1, 1)],
])
def test_json_bytes_raises_where_json_dumps_raises(value: Any) -> None:
    with pytest.raises(TypeError):
        json.dumps(value)
    with pytest.raises(TypeError):
        json_bytes(value)


class FloatState(TypedDict):
    x: float
    y: float


def _node(state: FloatState) -> dict[str, float]:
    nxt = {0.0: math.nan, 1.0: math.inf}.get(state["x"], -math.inf)
    return {"x": nxt}


def _history(saver: Any) -> list[str]:
    g = StateGraph(FloatState)
    g.add_node("n", _node)
    g.add_edge(START, "n")
    g.add_edge("n", END)
    graph = g.compile(checkpointer=saver)
    cfg: RunnableConfig = {"configurable": {"thread_id": "floats"}}
    for x in (0.0, 1.0, 2.0):
        graph.invoke({"x": x, "y": math.nan}, cfg)  # y: put once, then carried over
    # repr: nan == nan is False, and the comparison is of what each checkpoint holds
    return [repr(s.values) for s in graph.get_state_history(cfg)]


def test_non_finite_floats_read_back_as_in_memory(dsn: str) -> None:
    expected = _history(InMemorySaver())
    assert "nan" in " ".join(expected) and "inf" in " ".join(expected)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert _history(DeltaPostgresSaver(conn)) == expected


def _put(conn: psycopg.Connection[Any], **change: Any) -> None:
    cfg: RunnableConfig = {"configurable": {"thread_id": "odd", "checkpoint_ns": ""}}
    cp = empty_checkpoint()
    cp["channel_values"] = {"x": 1}
    cp["channel_versions"] = {"x": "1"}
    cp.update(change)  # type: ignore[typeddict-item]
    DeltaPostgresSaver(conn).put(cfg, cp, {}, {"x": "1"})


@pytest.mark.parametrize("change", [
    {"channel_versions": {"x": math.nan}},
    {"versions_seen": {"n": {"x": math.inf}}},
    {"extra": [math.nan]},
], ids=["version", "versions_seen", "extra_key"])
def test_a_nan_outside_the_values_is_refused_as_before(dsn: str, change: dict[str, Any]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InvalidTextRepresentation, match="NaN|Infinity"):
            _put(conn, **change)
        _put(conn)  # the same checkpoint without it is stored
        row = conn.execute("SELECT count(*) FROM checkpoints").fetchone()
        assert row == (1,)
