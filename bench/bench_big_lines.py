"""Memory and time of `custody-app --batch` on hostile line sizes, against a one-op floor.

    .venv/bin/python bench/bench_big_lines.py [--big-mb 100] [--out bench/results_big_lines.md]

Prints the table; writes it only with --out.

Each case is a real `custody-app --batch FILE` process on a fresh ledger in a temporary folder;
its peak RSS from GNU time, its wall time from here. The floor is the same process running one small
op. Cases: one line of `--big-mb` MB (refused unread past 4 Mi characters: `line_too_large`), a
line just past the limit, and a value just under the value limit (accepted, stored). Before this
bound, one 100 MB line was read whole and the process was killed past 21 GB (measured at commit
1734f62; not re-measured here: it takes the machine's memory). No timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from custody_app.domain.commands import MAX_VALUE_CHARS  # noqa: E402
from custody_app.ledger.ops import MAX_LINE_CHARS  # noqa: E402

CLI = str(Path(sys.executable).parent / "custody-app")
TIME = "/usr/bin/time"  # GNU time


def op(value: object) -> str:
    return json.dumps({"op": "assert", "subject": "acct:1", "predicate": "note", "value": value,
                       "actor": "user:a", "cause": {"kind": "tool", "ref": "r"}}) + "\n"


def measure(folder: Path, name: str, text: str) -> tuple[float, float, str]:
    """(peak RSS MB, wall s, first result's code or 'ok') of one batch process. The RSS is
    GNU time's (%M, the child's own high-water mark): a fork of this process would count the
    case texts it holds."""
    batch = folder / f"{name}.jsonl"
    batch.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
    started = time.monotonic()
    done = subprocess.run([TIME, "-f", "%M", CLI, "--create", "--batch", str(batch), "--ledger",
                           str(folder / f"{name}.db")], capture_output=True, text=True, env=env)
    wall = time.monotonic() - started
    first = json.loads(done.stdout.splitlines()[0])
    batch.unlink()
    return int(done.stderr.strip().splitlines()[-1]) / 1024, wall, (
        "ok" if first["ok"] else first["error"]["code"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big-mb", type=int, default=100)
    parser.add_argument("--out", help="also write the table there (bench/results_big_lines.md)")
    args = parser.parse_args()
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cases = [("floor: one small op", op("pro")),
                 (f"one line of {args.big_mb} MB", op("x" * (args.big_mb * 1_000_000))),
                 ("a line 1 character past the limit", op("x" * (MAX_LINE_CHARS - len(op("")) + 2))),
                 ("a value 1 character under the value limit", op("w " * ((MAX_VALUE_CHARS - 3) // 2)))]
        rows = [(label, *measure(folder, f"c{i}", text)) for i, (label, text) in enumerate(cases)]
    load_after = Path("/proc/loadavg").read_text().split()[:3]
    floor_rss, floor_wall = rows[0][1], rows[0][2]
    lines = [f"# Batch on hostile line sizes ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
             "", f"Machine: {os.cpu_count()} cores, shared; load average before "
             f"{' '.join(load_before)}, after {' '.join(load_after)} (1, 5, 15 min).", "",
             "| case | first result | peak RSS (MB) | x floor | wall (s) | x floor |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {label} | {code} | {rss:,.0f} | {rss / floor_rss:.2f}x | {wall:.2f} | "
              f"{wall / floor_wall:.2f}x |" for label, rss, wall, code in rows]
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
