"""The watchdog of one test server (tests/pgserver.py): a tiny process started with the server
that outlives whatever kills the pytest process that started it (SIGKILL, ctrl-C twice).

It reads its stdin, a pipe whose only writer is the starting process: `pid N` names the
server's postmaster once started, `stopped` says the server was stopped and its folder removed
by the starter itself. End of file without `stopped` means the starter died: the watchdog then
stops that postmaster (SIGINT, PostgreSQL's fast shutdown; SIGKILL after a grace period) and
removes the server's own temporary folder, the one named on its command line, nothing else.

Run by file path with `python -I` (standard library only, no import of the project).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

PREFIX = "custody-pg-"
GRACE_SECONDS = 20.0


def owned(folder: Path) -> bool:
    """Whether `folder` is a server folder pgserver makes: `custody-pg-*` directly in the
    temporary folder, a real directory (not a link to somewhere else)."""
    return (folder.name.startswith(PREFIX) and folder.parent == Path(tempfile.gettempdir())
            and folder.is_dir() and not folder.is_symlink())


def _is_our_postmaster(pid: int, folder: Path) -> bool:
    """The pid is still a process whose command line names this server's data folder (a pid
    reused by another process after the server exited is left alone)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(folder / "data").encode() in cmdline


def stop_postmaster(pid: int, folder: Path) -> None:
    if not _is_our_postmaster(pid, folder):
        return
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + GRACE_SECONDS
    while _is_our_postmaster(pid, folder):
        if time.monotonic() > deadline:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + GRACE_SECONDS
        time.sleep(0.02)


def main(argv: list[str]) -> int:
    folder = Path(argv[1])
    pid: int | None = None
    for raw in sys.stdin.buffer:
        line = raw.decode("ascii", "replace").strip()
        if line == "stopped":
            return 0
        if line.startswith("pid "):
            pid = int(line[4:])
    # End of file without "stopped": the starting process is gone.
    if pid is not None:
        stop_postmaster(pid, folder)
    if owned(folder):
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ctrl-C to the terminal is not our end
    sys.exit(main(sys.argv))
