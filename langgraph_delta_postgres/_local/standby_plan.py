"""Whether a streaming hot standby of a Postgres can be started here, and with what
(:func:`why_not`, :func:`_plan`): the primary's ``wal_level``, its role's REPLICATION
attribute and the settings a standby must match; ``pg_ctl`` and ``postgres`` of the
primary's major version (the embedded server's own directory,
``/usr/lib/postgresql/<major>/bin``, or ``PATH``) and a ``pg_basebackup`` of that major
version or a newer one; as root, the OS user to run it as. Nothing is started here:
:mod:`.standby` starts the standby from the plan."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psycopg

#: settings a hot standby must have at least as high as its primary (Postgres refuses
#: to start, or pauses recovery, otherwise)
_AT_LEAST_PRIMARY = (
    "max_connections", "max_worker_processes", "max_wal_senders",
    "max_prepared_transactions", "max_locks_per_transaction",
)


class StandbyUnavailable(RuntimeError):
    """A standby of this primary cannot be started here; the message says why."""


@dataclass
class _Plan:
    bindir: Path  # pg_ctl and postgres (and initdb, where there) of the primary's major
    os_user: str | None  # None: run as ourselves
    port: str
    settings: dict[str, str]
    major: int  # the primary's major version
    basebackup: Path  # a pg_basebackup of that major version or a newer one
    basebackup_major: int



def _major_of_binary(path: Path) -> int | None:
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for word in out.split():
        head = word.split(".")[0]
        if head.isdigit():
            return int(head)
    return None


#: Debian's and Ubuntu's server packages: <this>/<major>/bin
_SYSTEM_PG = Path("/usr/lib/postgresql")


def _candidates() -> list[Path]:
    candidates: list[Path] = []
    with contextlib.suppress(Exception):
        from pgserver._commands import POSTGRES_BIN_PATH

        candidates.append(Path(POSTGRES_BIN_PATH))
    return candidates


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _bindir(major: int) -> Path | None:
    candidates = _candidates()
    candidates.append(_SYSTEM_PG / str(major) / "bin")
    if (on_path := shutil.which("pg_ctl")) is not None:
        candidates.append(Path(os.path.realpath(on_path)).parent)
    for d in candidates:
        if _executable(d / "pg_ctl") and _executable(d / "postgres"):
            if _major_of_binary(d / "postgres") == major:
                return d
    return None


def _basebackup(major: int, bindir: Path | None) -> tuple[Path, int] | None:
    """A ``pg_basebackup`` that can back up a server of ``major``, and its major version:
    one of that major version, else the oldest newer one (a pg_basebackup refuses a server
    newer than itself)."""
    dirs = [*([bindir] if bindir is not None else []), *_candidates(),
            *sorted(_SYSTEM_PG.glob("*/bin"))]
    if (on_path := shutil.which("pg_basebackup")) is not None:
        dirs.append(Path(os.path.realpath(on_path)).parent)
    found: list[tuple[int, Path]] = []
    for d in dict.fromkeys(dirs):
        if _executable(p := d / "pg_basebackup"):
            got = _major_of_binary(p)
            if got is not None and got >= major:
                found.append((got, p))
    if not found:
        return None
    got, path = min(found, key=lambda f: f[0])
    return path, got


def _plan(primary_dsn: str) -> _Plan:
    try:
        with psycopg.connect(primary_dsn, autocommit=True, connect_timeout=10) as conn:
            row = conn.execute(
                "SELECT current_setting('server_version_num')::int / 10000, "
                "current_setting('wal_level'), current_setting('port'), "
                "(SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user), "
                "pg_is_in_recovery()"
            ).fetchone()
            assert row is not None
            major, wal_level, port, can_replicate, in_recovery = row
            settings = {
                name: str(conn.execute("SELECT current_setting(%s)", (name,)).fetchone()[0])  # type: ignore[index]
                for name in _AT_LEAST_PRIMARY
            }
            data_dir: str | None = None
            with contextlib.suppress(psycopg.Error):
                data_dir = str(conn.execute("SHOW data_directory").fetchone()[0])  # type: ignore[index]
    except psycopg.Error as e:
        raise StandbyUnavailable(f"the primary is not reachable ({str(e).strip()[:200]})") from e
    if in_recovery:
        raise StandbyUnavailable("the server is itself a standby")
    if wal_level not in ("replica", "logical"):
        raise StandbyUnavailable(f"the primary runs with wal_level={wal_level} (needs replica)")
    if not can_replicate:
        raise StandbyUnavailable("the primary's role has no REPLICATION attribute")
    bindir = _bindir(int(major))
    if bindir is None:
        raise StandbyUnavailable(
            f"no pg_ctl/postgres of major version {major} found (embedded server, "
            f"/usr/lib/postgresql/{major}/bin, PATH)"
        )
    if (basebackup := _basebackup(int(major), bindir)) is None:
        raise StandbyUnavailable(
            f"no pg_basebackup of major version {major} or newer found (embedded server, "
            f"/usr/lib/postgresql/*/bin, PATH)"
        )
    os_user: str | None = None
    if os.geteuid() == 0:
        owner = None
        if data_dir is not None:
            with contextlib.suppress(OSError, KeyError):
                owner = pwd.getpwuid(os.stat(data_dir).st_uid).pw_name
        if owner is None or owner == "root":
            for name in ("postgres", "pgserver"):
                with contextlib.suppress(KeyError):
                    pwd.getpwnam(name)
                    owner = name
                    break
        if owner is None or owner == "root":
            raise StandbyUnavailable("running as root and no postgres OS user to run a standby")
        os_user = owner
    return _Plan(bindir, os_user, str(port), settings, int(major), *basebackup)


def why_not(primary_dsn: str) -> str | None:
    """Why a standby of this primary cannot be started here (None: it can be tried)."""
    try:
        _plan(primary_dsn)
    except StandbyUnavailable as e:
        return str(e)
    return None
