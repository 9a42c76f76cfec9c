"""What a benchmark report says about where it ran: commit, machine, and other load."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import apsw

ROOT = Path(__file__).resolve().parent.parent


def machine_note() -> str:
    """Other processes using at least 20% of a CPU (this 2-core machine is shared)."""
    ps = subprocess.run(["ps", "-eo", "pid,pcpu,args", "--sort=-pcpu"], capture_output=True,
                        text=True).stdout.splitlines()[1:]
    busy = []
    for line in ps:
        parts = line.split(None, 2)
        if len(parts) < 3 or int(parts[0]) == os.getpid():
            continue
        if float(parts[1]) >= 20.0:
            busy.append(f"pid {parts[0]} {parts[1]}% CPU: {parts[2][:90]}")
    return "; ".join(busy) if busy else "no other process above 20% CPU"


def header(notes: list[str], versions: str = "") -> str:
    """Date, commit (and whether product code was dirty), machine, and the given notes."""
    def git(*cmd: str) -> str:
        return subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    dirty = git("status", "--porcelain", "--", "store", "custody_app")
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), "unknown CPU")
    return "\n".join([
        f"- date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- commit: {git('rev-parse', '--short', 'HEAD')}"
        + (" (uncommitted changes in store/ or custody_app/)" if dirty else " (clean product code)"),
        f"- machine: {os.cpu_count()} cores, {cpu}, {platform.system()} {platform.release()}, "
        f"load average now {os.getloadavg()[0]:.2f}; Python {platform.python_version()}, "
        f"SQLite {apsw.sqlite_lib_version()}{versions}",
        *[f"- {n}" for n in notes]])


def write_section(path: Path, heading: str, text: str) -> None:
    """Replace the section headed `heading` in `path` (up to the next `## ` heading) with
    `text`, or append it."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    start = old.find(heading)
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + text + "\n"
    else:
        end = old.find("\n## ", start + len(heading))
        new = old[:start] + text + "\n" + (old[end + 1:] if end >= 0 else "")
    path.write_text(new, encoding="utf-8")


def emit(text: str, out: str | None) -> None:
    """Print a report, and append it to `out` when one is named."""
    print(text)
    if out:
        with open(out, "a", encoding="utf-8") as fh:
            fh.write("\n" + text)


def policy_with_embedder(tmp: Path, embedder: str) -> Path:
    """The shipped default policy with its embedder replaced, written into `tmp`."""
    src = (ROOT / "policies" / "default.toml").read_text(encoding="utf-8")
    path = tmp / f"{embedder}.toml"
    path.write_text(re.sub(r'(?m)^embedder = "[^"]*"$', f'embedder = "{embedder}"', src),
                    encoding="utf-8")
    return path
