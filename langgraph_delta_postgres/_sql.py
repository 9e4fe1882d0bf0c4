"""Load the SQL of ``sql/*.sql`` and render it for one Postgres schema.

Files hold either one statement, or named blocks that start with ``-- name: NAME``, and
fragments, ``-- fragment: NAME($param, ...)``: a piece of SQL that statements share,
written once (``sql/rules.sql``). A statement includes one with a line
``@FILE.NAME(arg, ...)``; :func:`raw_blocks` puts the fragment's text there, each line
indented as that line was and each ``$param`` replaced by its argument, so the statement
is byte for byte the one with the fragment written in.
``{s}`` in a statement is the table prefix: empty (the connection's ``search_path``, like
the official saver) or ``"schema".`` composed with :class:`psycopg.sql.Identifier`;
``{schema}`` is the bare identifier. Parameters are named (``%(name)s``). Literal braces
are written ``{{`` / ``}}``.

In a built wheel the top-level ``sql/`` and ``migrations/`` directories are packaged as
``langgraph_delta_postgres/sql`` and ``.../migrations``; in a source checkout they are
read from the repository root.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from psycopg import sql

if TYPE_CHECKING:
    from psycopg.abc import AdaptContext

_BLOCK = re.compile(r"^-- (name|fragment): (\w+)(?:\(([^)]*)\))?\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"^([ \t]*)@(\w+)\.(\w+)\(([^)]*)\)[ \t]*$", re.MULTILINE)


class Fragment(NamedTuple):
    """A ``-- fragment:`` block: its parameters (``$row``, ...) and its text."""

    params: tuple[str, ...]
    text: str


def data_dir(name: str) -> Traversable:
    """The packaged data directory ``name`` (``"sql"`` or ``"migrations"``)."""
    packaged = resources.files("langgraph_delta_postgres").joinpath(name)
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parent.parent / name
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(
        f"langgraph_delta_postgres: the {name}/ directory is missing from this installation"
    )


def _strip_comments(text: str) -> str:
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("--")]
    return "\n".join(lines).strip()


@cache
def _parse(filename: str) -> tuple[dict[str, str], dict[str, Fragment]]:
    text = data_dir("sql").joinpath(filename).read_text(encoding="utf-8")
    parts = _BLOCK.split(text)
    if len(parts) == 1:
        return {filename.removesuffix(".sql"): _strip_comments(text)}, {}
    blocks: dict[str, str] = {}
    frags: dict[str, Fragment] = {}
    for i in range(1, len(parts), 4):
        kind, name, params, body = parts[i: i + 4]
        if kind == "name":
            blocks[name] = _strip_comments(body)
        else:
            names = tuple(p.strip() for p in (params or "").split(",") if p.strip())
            frags[name] = Fragment(names, _strip_comments(body))
    return blocks, frags


def fragments(filename: str) -> dict[str, Fragment]:
    """``{fragment name: Fragment}`` of one file."""
    return _parse(filename)[1]


def include_fragments(text: str) -> str:
    """``text`` with every ``@FILE.NAME(args)`` line replaced by that fragment."""

    def one(m: re.Match[str]) -> str:
        indent, stem, name, args = m.groups()
        frag = fragments(stem + ".sql").get(name)
        if frag is None:
            raise KeyError(f"no fragment {name!r} in sql/{stem}.sql (included as {m[0]!r})")
        values = [a.strip() for a in args.split(",")] if args.strip() else []
        if len(values) != len(frag.params):
            raise ValueError(f"{m[0].strip()!r}: {stem}.{name} takes {frag.params}")
        bound = dict(zip(frag.params, values, strict=True))
        body = re.sub(r"\$\w+", lambda p: bound.get(p[0], p[0]), frag.text)
        return "\n".join(indent + ln if ln else ln for ln in body.splitlines())

    return _INCLUDE.sub(one, text)


@cache
def raw_blocks(filename: str) -> dict[str, str]:
    """``{block name: SQL text}`` of one file, fragments included; a file without names
    is one block named after the file (without ``.sql``)."""
    return {name: include_fragments(text) for name, text in _parse(filename)[0].items()}


def sql_files() -> list[str]:
    return sorted(p.name for p in data_dir("sql").iterdir() if p.name.endswith(".sql"))


#: Postgres truncates identifiers longer than this many bytes (NAMEDATALEN - 1), so two
#: longer schema names that share their first 63 bytes would name one schema.
MAX_IDENTIFIER_BYTES = 63


#: Postgres's own schemas (``pg_*`` are reserved by the server too): no tables of ours.
SYSTEM_SCHEMAS = frozenset({"information_schema", "pg_catalog", "pg_toast"})


def check_schema(schema: str | None) -> str | None:
    """``schema`` if it is a usable schema name (or None), else :class:`ValueError`.

    Every entry point (savers, migrations, CLI, inspect) builds its statements through
    :class:`Queries`, which calls this.
    """
    if schema is None:
        return None
    if not isinstance(schema, str) or not schema:
        raise ValueError("schema must be a non-empty string or None")
    if "\x00" in schema:
        raise ValueError(f"schema name {schema!r} contains a NUL character")
    if schema.lower() in SYSTEM_SCHEMAS or schema.lower().startswith("pg_"):
        raise ValueError(
            f"schema {schema!r} is a Postgres system schema: the checkpoint tables must "
            "live in a schema of their own (or in the search_path's, with schema=None)"
        )
    size = len(schema.encode("utf-8"))
    if size > MAX_IDENTIFIER_BYTES:
        raise ValueError(
            f"schema name {schema!r} is {size} bytes long; Postgres keeps only the first "
            f"{MAX_IDENTIFIER_BYTES} bytes of a name, so it would share a schema with every "
            f"name that starts the same way: use at most {MAX_IDENTIFIER_BYTES} bytes"
        )
    return schema


def prefix(schema: str | None) -> sql.Composable:
    if schema is None:
        return sql.SQL("")
    return sql.Composed([sql.Identifier(schema), sql.SQL(".")])


def render(text: str, schema: str | None) -> sql.Composed:
    ident: sql.Composable = sql.Identifier(schema) if schema else sql.SQL("public")
    return sql.SQL(text).format(s=prefix(schema), schema=ident)


class Statement(sql.Composed):
    """A rendered statement that keeps its bytes: psycopg asks a ``Composed`` for them on
    every ``execute`` (walking its parts, escaping the schema's identifier, encoding),
    a measurable part of a small write's client time. Kept when the text is ASCII, whose
    bytes are the same in every client encoding Postgres offers; otherwise rendered per
    call as before."""

    def __init__(self, composed: sql.Composed) -> None:
        super().__init__(list(composed))
        text = composed.as_string(None)
        self._ascii = text.encode("ascii") if text.isascii() else None

    def as_bytes(self, context: AdaptContext | None = None) -> bytes:
        if self._ascii is not None:
            return self._ascii
        return super().as_bytes(context)


class Queries:
    """Every statement of ``sql/``, rendered once for a schema; ``q["file.block"]``."""

    def __init__(self, schema: str | None) -> None:
        self.schema = check_schema(schema)
        self._cache: dict[str, sql.Composed] = {}

    def __getitem__(self, key: str) -> sql.Composed:
        q = self._cache.get(key)
        if q is None:
            filename, _, block = key.partition(".")
            q = Statement(render(raw_blocks(filename + ".sql")[block or filename], self.schema))
            self._cache[key] = q
        return q

    def join(self, *keys: str, sep: str = " ") -> sql.Composed:
        return sql.SQL(sep).join([self[k] for k in keys])
