"""A streaming hot standby of a Postgres, started from the same server binaries, for the
replica tests (tests/plugins/standby.py) and ``langgraph-delta-pg bench --only replicas``.

Postgres's own physical replication: ``pg_basebackup -R -X stream`` copies the primary's
cluster and writes ``primary_conninfo`` + ``standby.signal``; ``pg_ctl start`` runs it as
a hot standby on a Unix socket of its own. Needs, on the primary: ``wal_level`` replica
or logical, a free WAL sender (``max_wal_senders``), a role with the REPLICATION
attribute (a superuser has it) and a ``replication`` line in ``pg_hba.conf`` (initdb's
default has one for local and loopback connections); here: ``pg_ctl`` and ``postgres``
of the primary's major version (the embedded server's own directory,
``/usr/lib/postgresql/<major>/bin``, or ``PATH``) and a ``pg_basebackup`` of that major
version or a newer one (Postgres's pg_basebackup backs up servers of its own and older
major versions; one of the primary's version is preferred, else the oldest newer one).
:func:`.standby_plan.why_not` says which of these is missing, in one line, without
starting anything (:mod:`.standby_plan` finds what the standby runs with).

With a newer ``pg_basebackup``, ``-R`` is not used: it writes into ``primary_conninfo``
the options its own libpq knows, and the standby's older libpq refuses options it does
not (``sslnegotiation``, from 17, in a 16 standby); the module writes ``standby.signal``,
``primary_conninfo`` (the primary DSN's options without ``dbname``; host, port, user and
password as the connection resolved them) and ``primary_slot_name`` itself.

As root, the standby runs as the OS user that owns the primary's data directory (the
server refuses to run as root). A watchdog process (:mod:`.watchdog`) stops it and
removes its directory if the process that started it dies without cleaning up.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .._sql import Queries
from . import watchdog as _watchdog
from .standby_plan import StandbyUnavailable, _Plan, _plan


def lsn_int(lsn: str) -> int:
    """``'16/B374D848'`` -> an int that orders like the LSN."""
    hi, lo = lsn.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


@dataclass
class Standby:
    """A running hot standby. ``dsn_for(dbname)`` connects to one of its databases."""

    primary_dsn: str
    directory: Path
    plan: _Plan
    dsn: str = ""
    log: Path = field(default_factory=Path)

    @property
    def data(self) -> Path:
        return self.directory / "data"

    def dsn_for(self, dbname: str) -> str:
        params = conninfo_to_dict(self.dsn)
        params["dbname"] = dbname
        return make_conninfo(**params)  # type: ignore[arg-type]

    def _cmd(self, *args: str, timeout: float = 120) -> str:
        argv = list(args)
        if self.plan.os_user is not None:
            argv = ["runuser", "-u", self.plan.os_user, "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            said = " | ".join(
                ln for ln in (done.stderr or done.stdout).strip().splitlines()
                if "skipping special file" not in ln  # the embedded server's socket
            )
            raise StandbyUnavailable(
                f"{Path(args[0]).name} failed ({done.returncode}): {said[-1500:]}"
            )
        return done.stdout

    def start(self) -> None:
        s = self.plan.settings
        opts = [
            "-c listen_addresses=''", f"-c unix_socket_directories='{self.directory}'",
            f"-c port={self.plan.port}", "-c hot_standby=on", "-c fsync=off",
            # a query the replay conflicts with is cancelled after this long (the default,
            # 30 s, would hold replay back that long in the conflict test)
            "-c max_standby_streaming_delay=500ms", "-c hot_standby_feedback=off",
            "-c wal_receiver_status_interval=1s",
            *(f"-c {k}={v}" for k, v in s.items()),
        ]
        self._cmd(str(self.plan.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
                  "-w", "-t", "120", "-o", " ".join(opts), "start")

    def stop(self) -> None:
        """Stop the standby now (immediate shutdown, as a crash would)."""
        with contextlib.suppress(StandbyUnavailable, subprocess.SubprocessError):
            self._cmd(str(self.plan.bindir / "pg_ctl"), "-D", str(self.data), "-m",
                      "immediate", "-w", "stop", timeout=60)

    def running(self) -> bool:
        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=3) as c:
                c.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn, autocommit=True)

    def pause(self) -> None:
        """Stop replaying WAL (it is still received): the standby's data stands still."""
        with self.admin() as c:
            c.execute("SELECT pg_wal_replay_pause()")
            # pause takes effect between records; wait until it has
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                state = c.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()
                if state is not None and state[0] == "paused":
                    return
                time.sleep(0.01)

    def resume(self) -> None:
        with self.admin() as c:
            c.execute("SELECT pg_wal_replay_resume()")

    def replay_lsn(self) -> int:
        with self.admin() as c:
            row = c.execute("SELECT pg_last_wal_replay_lsn()::text").fetchone()
        assert row is not None and row[0] is not None
        return lsn_int(row[0])

    def catch_up(self, timeout: float = 60.0) -> None:
        """Wait until the standby has replayed everything the primary wrote so far."""
        # the primary's insert position, before a page header (sql/replicas.sql,
        # primary_lsn): the raw one is past it, and an idle primary's standby only got
        # there with the next WAL record (a catch-up waited about 15 s)
        with psycopg.connect(self.primary_dsn, autocommit=True) as p:
            row = p.execute(Queries(None)["replicas.primary_lsn"]).fetchone()
        assert row is not None
        target = lsn_int(row[0])
        deadline = time.monotonic() + timeout
        last: psycopg.OperationalError | None = None
        while True:
            try:
                if self.replay_lsn() >= target:
                    return
                last = None
            except psycopg.OperationalError as e:
                # the standby ended the session (a recovery conflict terminates a
                # standby's backends; a restart after a stop is still coming up): ask again
                last = e
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the standby did not catch up in {timeout} s"
                    + (f" (last error: {last})" if last is not None else "")
                )
            time.sleep(0.05 if last is not None else 0.005)


@contextlib.contextmanager
def standby_of(primary_dsn: str) -> Iterator[Standby]:
    """Start a hot standby of ``primary_dsn``'s cluster; stop it and remove its
    directory on exit. Raises :class:`StandbyUnavailable` (one line) when it can't."""
    plan = _plan(primary_dsn)
    directory = Path(tempfile.mkdtemp(prefix="lgdp-standby-"))
    if plan.os_user is not None:
        pw = pwd.getpwnam(plan.os_user)
        os.chown(directory, pw.pw_uid, pw.pw_gid)
    directory.chmod(0o700)
    sb = Standby(primary_dsn, directory, plan, log=directory / "log")
    user = conninfo_to_dict(primary_dsn).get("user")
    params = {"host": str(directory), "port": plan.port, "dbname": "postgres"}
    if user:
        params["user"] = str(user)
    sb.dsn = make_conninfo(**params)
    # A replication slot of its own, made before the backup starts: the primary keeps
    # the WAL the standby has not received yet (without one, a checkpoint on a busy
    # primary removed a segment the backup still had to stream, and a standby stopped
    # for a test could not catch up after its restart). Dropped on exit; slots left by a
    # process that died are dropped by the next start (see _drop_stale_slots).
    slot = f"{SLOT_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:8]}"
    _drop_stale_slots(primary_dsn)
    guard = _watchdog.guard(sb.data, remove=False)
    try:
        for attempt in range(BACKUP_ATTEMPTS):
            # A database created or dropped on the primary while the backup copies it
            # can fail the copy (a file that vanished): try again, from scratch.
            try:
                same = plan.basebackup_major == plan.major
                sb._cmd(str(plan.basebackup), "-d", primary_dsn, "-D", str(sb.data),
                        *(["-R"] if same else []), "-X", "stream", "-C", "-S", slot,
                        "-c", "fast", "--no-sync", timeout=600)
                if not same:
                    _write_standby_config(sb.data, primary_dsn, slot, plan.os_user)
                break
            except StandbyUnavailable:
                if attempt == BACKUP_ATTEMPTS - 1:
                    raise
                _drop_slot(primary_dsn, slot)
                shutil.rmtree(sb.data, ignore_errors=True)
                time.sleep(0.5 * (attempt + 1))
        sb.start()
        yield sb
    finally:
        sb.stop()
        _drop_slot(primary_dsn, slot)
        shutil.rmtree(directory, ignore_errors=True)
        _watchdog.release(guard)


def _write_standby_config(data: Path, primary_dsn: str, slot: str, os_user: str | None) -> None:
    """What ``pg_basebackup -R`` writes, in options the standby's own libpq knows: the
    primary DSN's options without ``dbname``, with host, port, user and password as the
    connection resolved them (from the environment or a passfile too)."""
    params: dict[str, Any] = {
        k: v for k, v in conninfo_to_dict(primary_dsn).items() if k != "dbname"
    }
    try:
        with psycopg.connect(primary_dsn, autocommit=True, connect_timeout=10) as conn:
            info = conn.info
            params.setdefault("host", info.host)
            params.setdefault("port", str(info.port))
            params.setdefault("user", info.user)
            if info.password:
                params.setdefault("password", info.password)
    except psycopg.Error as e:
        raise StandbyUnavailable(f"the primary is not reachable ({str(e).strip()[:200]})") from e
    conninfo = make_conninfo(**params).replace("'", "''")
    with open(data / "postgresql.auto.conf", "a", encoding="utf-8") as f:
        f.write(f"\nprimary_conninfo = '{conninfo}'\nprimary_slot_name = '{slot}'\n")
    signal = data / "standby.signal"
    signal.touch()
    if os_user is not None:
        pw = pwd.getpwnam(os_user)
        os.chown(signal, pw.pw_uid, pw.pw_gid)


#: replication slots of the standbys this module starts: PREFIX<pid>_<random>
SLOT_PREFIX = "lgdp_standby_"
#: pg_basebackup runs before giving up (see standby_of)
BACKUP_ATTEMPTS = 4


def _drop_slot(primary_dsn: str, slot: str) -> None:
    with contextlib.suppress(psycopg.Error), psycopg.connect(
        primary_dsn, autocommit=True, connect_timeout=10
    ) as conn:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = %s AND NOT active", (slot,)
        )


def _drop_stale_slots(primary_dsn: str) -> None:
    """Drop inactive slots of standbys started on this machine by processes that are
    gone (a test run killed before its cleanup): a slot nobody uses keeps WAL forever."""
    with contextlib.suppress(psycopg.Error), psycopg.connect(
        primary_dsn, autocommit=True, connect_timeout=10
    ) as conn:
        rows = conn.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE NOT active "
            "AND slot_name LIKE %s", (SLOT_PREFIX.replace("_", r"\_") + "%",)
        ).fetchall()
        for (name,) in rows:
            pid = name.removeprefix(SLOT_PREFIX).split("_")[0]
            if pid.isdigit() and not _watchdog._alive(int(pid)):
                conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))
