"""Long statements sent in Postgres's own placeholder form, converted once.

psycopg turns a query's ``%(name)s`` placeholders into ``$1, $2, ...`` on every execute,
a regular-expression pass over the whole text, and keeps the result only for queries of
at most 4,096 bytes (``psycopg._queries``, its cache's size limit). The statements that
load a thread (``get_tuple`` of the head with its history, the history walk: 16-20 kB)
were parsed again on every call, 0.1 ms each: with this path a warm ``get_state`` of the
benchmark's 150-turn agent session takes 0.95x the time (a scratch A/B in one process,
30 interleaved rounds, four runs: 0.948-0.959). :func:`raw_form` makes that conversion
once per statement; the drivers send the result through psycopg's ``RawCursor``, its
public way to execute a query that already has ``$n`` placeholders, with the parameters
in that order. The raw cursor is of the connection's own cursor class (its
``cursor_factory``) made raw (:func:`raw_cursor_class`), so what wraps the connection's
cursors (OpenTelemetry's psycopg instrumentation, an application's cursor class) sees
these statements too; a connection whose cursors bind parameters client-side
(``ClientCursor``) or are raw already keeps psycopg's path.

Only statements whose placeholders are all ``%(name)s`` take this path: one with ``%b`` /
``%t`` (a format of its own), ``%%``, a positional ``%s`` or anything else psycopg reads
differently goes through the cursor as before, as does every statement psycopg already
caches (4,096 bytes or less). The conversion gives a repeated name the same ``$n``, as
psycopg's does, and yields the same bytes as psycopg's
(``tests/integration/test_rawsql.py``), so the prepared statements are the same too."""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from psycopg import AsyncClientCursor, AsyncCursor, AsyncRawCursor, ClientCursor, Cursor, sql
from psycopg import RawCursor as _RawCursor

#: the longest query psycopg keeps the conversion of (psycopg._queries'
#: MAX_CACHED_STATEMENT_LENGTH); a longer one is converted on every execute
PSYCOPG_CACHES_UP_TO = 4096

#: a ``%`` and what follows it: a named ``%(name)s`` (groups: the name), or anything else
#: (``%%``, ``%b``, ``%(name)b``, a ``%`` at the end...), which leaves the statement to psycopg
_PLACEHOLDER = re.compile(rb"%(?:\((\w+)\)s|.|\Z)", re.S)


class RawForm(NamedTuple):
    """A statement with ``$n`` placeholders, and the parameter each ``$n`` takes."""

    query: bytes
    names: tuple[str, ...]

    def params(self, params: Any) -> list[Any]:
        """The statement's parameters (a mapping by name), in placeholder order."""
        return [params[name] for name in self.names]


def raw_form(query: bytes) -> RawForm | None:
    """``query`` with its ``%(name)s`` placeholders as ``$n`` (the first name ``$1``, a
    name used again the same number); None when it has any other ``%``."""
    names: list[str] = []
    number: dict[str, int] = {}
    out: list[bytes] = []
    at = 0
    for m in _PLACEHOLDER.finditer(query):
        if m.group(1) is None:
            return None
        name = m.group(1).decode()
        n = number.get(name)
        if n is None:
            names.append(name)
            n = number[name] = len(names)
        out.append(query[at:m.start()])
        out.append(b"$%d" % n)
        at = m.end()
    out.append(query[at:])
    return RawForm(b"".join(out), tuple(names))


#: id of the statement object -> (the object, the client encoding its form was made
#: with, its raw form or None): the object is kept, so an id is never reused while its
#: entry is here
_FORMS: dict[int, tuple[object, str, RawForm | None]] = {}
#: more distinct statements than this (a program making new ones): the table starts over
_MAX_FORMS = 512


def long_raw_form(query: sql.Composable, conn: Any) -> RawForm | None:
    """The raw form of a statement psycopg would convert on every execute (longer than
    it caches), made once per statement object (and again for a connection of another
    client encoding); None for every other statement (the cursor's own path). A short
    statement's answer costs one dictionary lookup: the writes run through here too."""
    got = _FORMS.get(id(query))
    if got is not None and got[0] is query:
        if got[2] is None:
            return None
        encoding = conn.info.encoding
        if got[1] == encoding:
            return got[2]
    else:
        encoding = conn.info.encoding
    text = query.as_bytes(conn)
    form = raw_form(text) if len(text) > PSYCOPG_CACHES_UP_TO else None
    if len(_FORMS) >= _MAX_FORMS:
        _FORMS.clear()
    _FORMS[id(query)] = (query, encoding, form)
    return form


#: cursor class of a connection -> that class made raw (a few entries: one per class)
_RAW_CLASSES: dict[type, type] = {}


def raw_cursor_class(factory: type) -> type | None:
    """The raw cursor class for a connection whose ``cursor_factory`` is ``factory``:
    ``RawCursor`` / ``AsyncRawCursor`` for psycopg's own cursors, a subclass of the raw
    cursor and ``factory`` for a class derived from them (its ``execute`` runs, then
    psycopg's with raw queries); None for a class that binds parameters client-side or
    is not a cursor of psycopg's."""
    got = _RAW_CLASSES.get(factory)
    if got is not None:
        return got
    if factory is Cursor:
        got = _RawCursor
    elif factory is AsyncCursor:
        got = AsyncRawCursor
    elif issubclass(factory, (ClientCursor, AsyncClientCursor, _RawCursor, AsyncRawCursor)):
        return None
    elif issubclass(factory, Cursor):
        got = type(f"Raw{factory.__name__}", (_RawCursor, factory), {})
    elif issubclass(factory, AsyncCursor):
        got = type(f"Raw{factory.__name__}", (AsyncRawCursor, factory), {})
    else:
        return None
    if len(_RAW_CLASSES) >= 64:  # instrumentation may make a class per connection
        _RAW_CLASSES.clear()
    _RAW_CLASSES[factory] = got
    return got
