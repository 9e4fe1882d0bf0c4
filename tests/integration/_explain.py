"""EXPLAIN of the statements a saver really runs, for the plan tests.

:class:`Recorder` keeps every statement (query and parameters) a connection executes, so
a test drives the saver through its public API and then looks at the plans of exactly
what was sent, whatever the SQL files hold today. :func:`explain` runs one recorded
statement again under ``EXPLAIN (ANALYZE, FORMAT JSON)``, either as a server-side
prepared statement with its generic plan (``PREPARE`` + ``EXPLAIN EXECUTE`` under
``plan_cache_mode=force_generic_plan``, what the package's connections use) or with a
custom plan (``force_custom_plan``: the values are known at planning time).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

_PARAM = re.compile(r"%\((\w+)\)[sbt]")


@dataclass(frozen=True)
class Recorded:
    query: str
    params: Mapping[str, Any]
    #: the parameters of a statement sent with ``$n`` placeholders (the drivers' raw
    #: cursor for a long statement, _rawsql.py), in order; None: named in ``params``
    positional: list[Any] | None = None


class Recorder:
    """Records the statements executed on the connections it is attached to."""

    def __init__(self) -> None:
        self.statements: list[Recorded] = []

    def attach(self, conn: psycopg.Connection[Any]) -> None:
        rec = self
        base = conn.cursor_factory

        class RecordingCursor(base):  # type: ignore[valid-type,misc]
            def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
                if isinstance(query, bytes):  # a raw cursor's: $n and a list
                    rec.statements.append(Recorded(query.decode(), {}, list(params or [])))
                else:
                    text = query if isinstance(query, str) else query.as_string(self.connection)
                    rec.statements.append(Recorded(text, dict(params or {})))
                return super().execute(query, params, **kw)

        conn.cursor_factory = RecordingCursor

    def take(self) -> list[Recorded]:
        out, self.statements = self.statements, []
        return out


def _positional(query: str) -> tuple[str, list[str]]:
    """``%(name)s`` placeholders -> ``$n`` (one number per distinct name) and the names."""
    names: list[str] = []

    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    return _PARAM.sub(sub, query), names


def explain(conn: psycopg.Connection[Any], stmt: Recorded, *, generic: bool) -> dict[str, Any]:
    """The JSON plan (top ``Plan`` node) of ``stmt``, executed under EXPLAIN ANALYZE."""
    if stmt.positional is not None:
        text, values = stmt.query, stmt.positional
    else:
        text, names = _positional(stmt.query)
        values = [stmt.params[n] for n in names]
    args = sql.SQL(", ").join(sql.Literal(v) for v in values)
    mode = "force_generic_plan" if generic else "force_custom_plan"
    conn.execute(sql.SQL("SET plan_cache_mode = {}").format(sql.Literal(mode)), prepare=False)
    conn.execute(
        sql.SQL("PREPARE lgdp_explained AS {}").format(sql.SQL(text)),
        prepare=False,
    )
    try:
        query = sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE lgdp_explained {}").format(
            sql.SQL("({})").format(args) if values else sql.SQL("")
        )
        row = conn.execute(query, prepare=False).fetchone()
    finally:
        conn.execute("DEALLOCATE lgdp_explained", prepare=False)
    assert row is not None
    doc = row[0]
    return doc[0]["Plan"]  # type: ignore[no-any-return]


def nodes(plan: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child)


def scanned(plan: Mapping[str, Any]) -> set[str]:
    """Relations a scan node of ``plan`` really read (executed at least once)."""
    return {
        n["Relation Name"]
        for n in nodes(plan)
        if "Relation Name" in n and "Operation" not in n and n.get("Actual Loops", 0) > 0
    }


def subplans_removed(plan: Mapping[str, Any]) -> int:
    return sum(int(n.get("Subplans Removed", 0)) for n in nodes(plan))
