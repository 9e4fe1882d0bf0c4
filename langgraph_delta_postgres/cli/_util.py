"""Connection and error helpers shared by the CLI commands: every failure a user will
meet is reported as one line that says what to do, never as a traceback."""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

CONNECT_TIMEOUT_S = 10


class CliError(Exception):
    """A failure to report as ``error: <message>`` with exit code ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------- connecting


def resolve_dsn(args: argparse.Namespace) -> str | None:
    dsn = getattr(args, "dsn", None) or os.environ.get("DATABASE_URL")
    return str(dsn) if dsn else None


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text.removeprefix("connection failed: ") or type(e).__name__


def explain_connect_error(e: BaseException, *, unreachable_hint: str) -> str:
    """One line: what went wrong connecting, and what to do about it."""
    msg = _one_line(e)
    low = msg.lower()
    if isinstance(e, psycopg.ProgrammingError) or "invalid dsn" in low or "invalid conn" in low:
        return (
            f"the connection string is not valid ({msg}); expected e.g. "
            "postgresql://user:password@host:5432/dbname"
        )
    if "no password supplied" in low:  # libpq's own: the server asked for a password
        return (
            f"the server asked for a password and none was given ({msg}): put it in "
            "--dsn / DATABASE_URL (or PGPASSWORD, ~/.pgpass)"
        )
    said = _SERVER_SAID.search(msg)
    if said is None:  # no answer from a server: the network, the host, the port
        return f"cannot reach Postgres ({msg}): {unreachable_hint}"
    # Postgres answered and refused: say what it said, then what to check
    text = said.group(1)
    low = text.lower()
    if "password authentication failed" in low:
        hint = ": check the user and password in --dsn / DATABASE_URL (or PGPASSWORD, ~/.pgpass)"
    elif low.startswith("role") and "does not exist" in low:
        hint = ": check the user name in --dsn / DATABASE_URL"
    elif low.startswith("database") and "does not exist" in low:
        hint = ": create it (createdb NAME) or name an existing database in the DSN"
    elif "pg_hba" in low:  # "no pg_hba.conf entry for host ..."
        hint = ": the server's pg_hba.conf does not let this user in from here"
    else:
        hint = ""
    return f"Postgres refused the connection: {text}{hint}"


#: A server's error in libpq's connection message ("... failed: FATAL:  role ...").
_SERVER_SAID = re.compile(r"\b(?:FATAL|ERROR|PANIC):\s+(.*)")


def setup_required(e: psycopg.Error, schema: str | None) -> CliError:
    """A statement found the tables missing (UndefinedTable/UndefinedColumn): say to run
    ``langgraph-delta-pg migrate``, as the savers' SetupRequiredError does."""
    from ..errors import setup_required as _setup_required

    return CliError(str(_setup_required(e, schema, cli=True)))


def connect(dsn: str, *, unreachable_hint: str) -> psycopg.Connection[Any]:
    """An autocommit connection, or :class:`CliError` with a one-line explanation."""
    kwargs: dict[str, Any] = {"autocommit": True}
    try:
        params = conninfo_to_dict(dsn)
        if "connect_timeout" not in params and "PGCONNECT_TIMEOUT" not in os.environ:
            kwargs["connect_timeout"] = CONNECT_TIMEOUT_S
        return psycopg.connect(dsn, **kwargs)
    except psycopg.Error as e:
        raise CliError(explain_connect_error(e, unreachable_hint=unreachable_hint)) from None


#: What a database command says without --dsn or DATABASE_URL.
NO_DSN = "no database: pass --dsn or set DATABASE_URL"
#: What to check when no server answers at the DSN a user gave.
CHECK_DSN = "is Postgres running there? check host and port in --dsn"


def connect_to(
    args: argparse.Namespace, *, unreachable_hint: str = CHECK_DSN
) -> psycopg.Connection[Any]:
    """The connection of a command's ``--dsn`` (or ``DATABASE_URL``), or :class:`CliError`
    (none given, or :func:`connect`'s)."""
    dsn = resolve_dsn(args)
    if not dsn:
        raise CliError(NO_DSN)
    return connect(dsn, unreachable_hint=unreachable_hint)


def db_error(e: psycopg.Error) -> CliError:
    return CliError(f"database error: {_one_line(e)}")


