"""The embedded Postgres must not outlive the process that started it.

Postgres's postmaster is a daemon (``pg_ctl`` detaches it), so it survives its starter's
death: a ``langgraph-delta-pg postgres`` (or demo, benchmark, test session) killed with
SIGKILL, or by the OOM killer, used to leave a server running and its directory behind.
Nothing in the dying process can run then, so the guard is a second process:

:func:`guard` starts this file as a script (standard library only, nothing of the package
imported, so it starts in tens of milliseconds) with a pipe on its stdin whose only write
end the starter holds. The watchdog blocks reading it. When the starter ends for any
reason the kernel closes that end and the read returns EOF:

- the starter said ``done`` first (it stopped the server and cleaned up itself): exit;
- otherwise the starter died: do what its exit would have done. pgserver counts the
  processes that use a server in ``DATA/.handle_pids.json`` and stops the server when the
  last one ends; a starter killed with SIGKILL stays listed there for ever, and every later
  start of that directory then left its server running on exit (it was never the last).
  So the watchdog, holding pgserver's lock, takes the starter (and any other dead process)
  off that list; unless a live process still uses the server (and the data is kept), it
  stops the postmaster named in ``DATA/postmaster.pid`` (SIGQUIT, Postgres's immediate
  shutdown; SIGKILL if it is still there after 10 s) and, unless told to keep the data
  (``--dir``), removes the directory.

The watchdog is in a session of its own and ignores SIGINT, SIGTERM and SIGHUP, so a
Ctrl-C in the terminal or a signal to the starter's process group leaves it to do its
work. (``PR_SET_PDEATHSIG`` would not do: it applies to the process that sets it, and the
postmaster is not ours to change.)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

DONE = b"done\n"
STOP_TIMEOUT_S = 10.0
#: pgserver's list of the processes that use the server of a data directory (JSON pids)
HANDLES = ".handle_pids.json"
#: how long the watchdog waits for pgserver's lock before it goes on without it
LOCK_TIMEOUT_S = 30.0


def guard(data: Path, *, remove: bool, lock: Path | None = None) -> subprocess.Popen[bytes]:
    """Start the watchdog of the server in ``data``; call :func:`release` once the server
    has been stopped (and ``data`` removed, if ``remove``) the ordinary way. ``lock``:
    pgserver's inter-process lock file, held while the watchdog edits ``DATA/`` +
    :data:`HANDLES` and stops the server (for a server that pgserver started)."""
    return subprocess.Popen(
        [
            sys.executable, "-I", os.path.abspath(__file__), str(data), "1" if remove else "0",
            str(os.getpid()), str(lock) if lock is not None else "",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def release(proc: subprocess.Popen[bytes]) -> None:
    """Tell the watchdog that the starter cleaned up: it exits without touching anything."""
    try:
        assert proc.stdin is not None
        proc.stdin.write(DONE)
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie nobody reaped yet is gone for our purposes
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _postmaster_pid(data: Path) -> int | None:
    try:
        first = (data / "postmaster.pid").read_text().splitlines()[0]
        return int(first)
    except (OSError, ValueError, IndexError):
        return None


def forget_handles(data: Path, gone: int | None = None) -> list[int]:
    """Take the dead processes (and ``gone``) off pgserver's list of the processes that use
    the server of ``data`` (:data:`HANDLES`); return the ones left. Call it with pgserver's
    lock held."""
    path = data / HANDLES
    try:
        listed = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(listed, list):
        return []
    live = [p for p in listed if isinstance(p, int) and p != gone and p > 0 and _alive(p)]
    if live != listed:
        with contextlib.suppress(OSError):
            path.write_text(json.dumps(live))
    return live


@contextlib.contextmanager
def _locked(lock: str) -> Iterator[None]:
    """pgserver's inter-process lock, taken as pgserver takes it (fasteners'
    ``InterProcessLock``), waited for up to :data:`LOCK_TIMEOUT_S`; without it after that
    (a stuck holder must not keep a server running)."""
    if not lock:
        yield
        return
    try:
        import fasteners  # pgserver's own dependency: present wherever it made the lock
    except ImportError:
        yield
        return
    held = fasteners.InterProcessLock(lock)
    got = held.acquire(timeout=LOCK_TIMEOUT_S)
    try:
        yield
    finally:
        if got:
            held.release()


def stop_server(data: Path) -> None:
    """Stop the postmaster of ``data`` now, whatever it is doing (immediate shutdown)."""
    pid = _postmaster_pid(data)
    if pid is None or pid <= 1:
        return
    for sig, wait in ((signal.SIGQUIT, STOP_TIMEOUT_S), (signal.SIGKILL, STOP_TIMEOUT_S)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _alive(pid):
                return
            time.sleep(0.05)


def main(argv: list[str]) -> int:
    data, remove = Path(argv[0]), argv[1] == "1"
    starter = int(argv[2]) if len(argv) > 2 and argv[2].isdigit() else None
    lock = argv[3] if len(argv) > 3 else ""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    said = b""
    while True:  # until EOF: the starter closed the pipe, or died
        try:
            chunk = os.read(0, 64)
        except InterruptedError:
            continue
        if not chunk:
            break
        said += chunk
    if said.endswith(DONE):
        return 0
    with _locked(lock):
        others = forget_handles(data, gone=starter)
        if others and not remove:
            return 0  # a live process still uses this server: it stops it when it ends
        stop_server(data)
    if remove:
        shutil.rmtree(data, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
