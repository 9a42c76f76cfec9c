"""A test server outlives no test run (issue 33): when the process that started it is killed
(SIGKILL: no `finally`, no atexit), the server's watchdog (tests/pgwatch.py) stops the server
and removes its temporary folder, and never any other folder."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests import pgserver

ROOT = Path(__file__).resolve().parent.parent
HOLDER = """
import sys, time
from tests import pgserver
server = pgserver.start()
print(server.folder, server.process.pid, server.watchdog.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    """Whether the pid runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def _gone(pids: list[int], folder: Path, within: float = 30.0) -> bool:
    """Wait (up to `within` seconds, a bound, not a measure) for the processes and the folder
    to be gone."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids) and not folder.exists():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def decoy() -> object:
    """A folder named as a server folder is, beside it, that no server made: it must stay."""
    folder = Path(tempfile.mkdtemp(prefix="custody-pg-"))
    (folder / "keep").write_text("not the server's", encoding="utf-8")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_server_whose_starter_is_killed_is_stopped_and_its_folder_removed(decoy: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop(pgserver.URL_ENV, None)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert line, holder.stderr.read() if holder.stderr else ""
        folder_text, postmaster_text, watchdog_text = line.split()
        folder, postmaster, watchdog = Path(folder_text), int(postmaster_text), int(watchdog_text)
        backends = _children(postmaster)
        assert folder.is_dir() and _alive(postmaster) and _alive(watchdog) and backends
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        assert _gone([postmaster, *backends, watchdog], folder), (
            [p for p in (postmaster, *backends, watchdog) if _alive(p)], folder.exists())
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert (decoy / "keep").read_text(encoding="utf-8") == "not the server's"


def test_a_server_stopped_by_its_starter_releases_its_watchdog(decoy: Path) -> None:
    server = pgserver.start()
    assert server.folder is not None and server.watchdog is not None
    folder, watchdog = server.folder, server.watchdog
    server.stop()
    assert watchdog.poll() == 0 and not folder.exists()
    assert (decoy / "keep").exists()


@pytest.mark.parametrize("where", ["outside the temporary folder", "a link to a server folder",
                                   "a differently named folder"])
def test_the_watchdog_removes_no_folder_a_server_did_not_make(
        tmp_path: Path, decoy: Path, where: str) -> None:
    """Told a folder that is not a server folder of its own making, the watchdog (its starter
    gone: end of file, no `stopped`) leaves it as it is."""
    if where == "outside the temporary folder":
        target = tmp_path / "custody-pg-elsewhere"
        target.mkdir()
    elif where == "a link to a server folder":
        target = Path(tempfile.gettempdir()) / f"custody-pg-link-{os.getpid()}"
        target.symlink_to(decoy)
    else:
        target = Path(tempfile.mkdtemp(prefix="custody-other-"))
    try:
        done = subprocess.run([sys.executable, "-I", str(ROOT / "tests" / "pgwatch.py"),
                               str(target)], input=b"", timeout=60)
        assert done.returncode == 0
        assert target.exists() and (decoy / "keep").exists()
    finally:
        if target.is_symlink():
            target.unlink()
        elif target.parent == Path(tempfile.gettempdir()):
            shutil.rmtree(target)
