"""Connection and error helpers shared by the CLI commands: every failure a user will
meet is reported as one line that says what to do, never as a traceback."""

from __future__ import annotations

import argparse
import os
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
    if "password authentication failed" in low or "no password supplied" in low:
        return (
            f"the server rejected the login ({msg}): check the user and password in "
            "--dsn / DATABASE_URL (or PGPASSWORD, ~/.pgpass)"
        )
    if "database" in low and "does not exist" in low:
        return f"{msg}: create it (createdb NAME) or name an existing database in the DSN"
    return f"cannot reach Postgres ({msg}): {unreachable_hint}"


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


def db_error(e: psycopg.Error) -> CliError:
    return CliError(f"database error: {_one_line(e)}")


