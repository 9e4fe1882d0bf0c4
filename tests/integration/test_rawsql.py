"""Long statements sent in their ``$n`` form (``_rawsql.py``): the conversion is psycopg's
own, byte for byte; what it does not cover stays psycopg's; the statements that take
the path (a thread's load) read what they read before and are prepared as before."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from psycopg._queries import PostgresQuery  # the reference: psycopg's own conversion
from psycopg.adapt import Transformer

from langgraph_delta_postgres import DeltaPostgresSaver
from langgraph_delta_postgres._rawsql import (
    PSYCOPG_CACHES_UP_TO,
    long_raw_form,
    raw_cursor_class,
    raw_form,
)


def _psycopg_form(query: bytes, names: set[str]) -> tuple[bytes, list[str] | None]:
    q = PostgresQuery(Transformer())
    q.convert(query, {n: None for n in names})
    return q.query, q._order


_NAME = st.sampled_from(["thread_id", "checkpoint_ns", "a", "b_2", "x"])
_TEXT = st.text(st.characters(blacklist_characters="%", codec="utf-8"), max_size=12)
QUERIES = st.lists(st.tuples(_TEXT, _NAME), min_size=1, max_size=12).map(
    lambda parts: ("".join(f"{t}%({n})s" for t, n in parts) + " end").encode()
)


@settings(max_examples=300, deadline=None, derandomize=True, print_blob=True)
@given(QUERIES)
def test_raw_form_is_psycopgs_conversion(query: bytes) -> None:
    form = raw_form(query)
    assert form is not None
    names = set(form.names)
    assert (form.query, list(form.names)) == _psycopg_form(query, names)
    assert form.params({n: n.upper() for n in names}) == [n.upper() for n in form.names]


@pytest.mark.parametrize("query", [
    b"SELECT %(a)b", b"SELECT %(a)t", b"SELECT '100%%'", b"SELECT %s", b"SELECT %(a)s, %",
    b"SELECT %(a b)s",
])
def test_other_placeholders_stay_psycopgs(query: bytes) -> None:
    assert raw_form(query) is None


def test_the_loads_take_it_and_read_as_before(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=2) as conn:
        saver = DeltaPostgresSaver(conn)
        long = [saver.tuple_history_query(), saver.history_query()]
        for q in long:
            assert len(q.as_bytes(conn)) > PSYCOPG_CACHES_UP_TO
            form = long_raw_form(q, conn)
            assert form is not None and long_raw_form(q, conn) is form  # made once
            text = q.as_bytes(conn)
            assert (form.query, list(form.names)) == _psycopg_form(text, set(form.names))
        # a short statement stays on the cursor's path (psycopg caches its conversion)
        assert long_raw_form(saver.tuple_by_id_query(), conn) is None

        cfg: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        for i in range(3):
            cp = empty_checkpoint()
            cp["id"] = f"00000000-0000-6000-8000-{i:012d}"
            cp["channel_values"] = {"n": i, "v": [i]}
            cp["channel_versions"] = {"n": str(i + 1), "v": str(i + 1)}
            cfg = saver.put(cfg, cp, {"step": i}, dict(cp["channel_versions"]))
        latest: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        got = [saver.get_tuple(latest) for _ in range(4)]
        assert all(g is not None and g.checkpoint["channel_values"] == {"n": 2, "v": [2]}
                   for g in got)
        hist = saver.get_delta_channel_history(config=cfg, channels=["v"])
        assert set(hist) == {"v"}
        # prepared after prepare_threshold uses, as before: the statement text is the
        # one psycopg would have made, so the server-side statement is the same
        rows: list[Any] = conn.execute(
            "SELECT statement FROM pg_prepared_statements WHERE statement LIKE '%RECURSIVE%'"
        ).fetchall()
        assert any(r[0].encode() == long_raw_form(long[0], conn).query for r in rows)  # type: ignore[union-attr]


class _Recording(psycopg.Cursor[Any]):
    """A connection's own cursor class (as OpenTelemetry's instrumentation or an
    application sets one): it must see the long statements too."""

    seen: list[Any] = []

    def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
        type(self).seen.append((type(self), query))
        return super().execute(query, params, **kw)


def test_the_connections_cursor_class_sees_them(dsn: str) -> None:
    _Recording.seen = []
    with psycopg.connect(dsn, autocommit=True, cursor_factory=_Recording) as conn:
        saver = DeltaPostgresSaver(conn)
        cfg: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        cp = empty_checkpoint()
        saver.put(cfg, cp, {}, {})
        assert saver.get_tuple(cfg) is not None
    raw = [(cls, q) for cls, q in _Recording.seen if isinstance(q, bytes)]
    assert raw, "the load did not go through the connection's cursor class"
    assert all(issubclass(cls, psycopg.RawCursor) and issubclass(cls, _Recording)
               for cls, _ in raw)
    assert any(q.lstrip().startswith(b"WITH RECURSIVE") and b"$1" in q for _, q in raw)


def test_which_cursor_classes_go_raw() -> None:
    """psycopg's cursors and classes derived from them go raw; a class that binds
    parameters client-side, or is raw already, keeps psycopg's path."""
    assert raw_cursor_class(psycopg.Cursor) is psycopg.RawCursor
    assert raw_cursor_class(psycopg.AsyncCursor) is psycopg.AsyncRawCursor
    made = raw_cursor_class(_Recording)
    assert made is not None and issubclass(made, psycopg.RawCursor)
    assert issubclass(made, _Recording) and raw_cursor_class(_Recording) is made
    for cls in (psycopg.ClientCursor, psycopg.AsyncClientCursor, psycopg.RawCursor, object):
        assert raw_cursor_class(cls) is None
