"""File-batch ingest rate before and after the held-open batch runner, in the same run.

    .venv/bin/python bench/bench_batch.py [--ops 3000] [--rounds 3] [--base COMMIT] [--out FILE]

"before" is `custody_app/interfaces/batch.py` as of `--base` (default 5f6d36b, the commit the
held-open runner was built on), loaded from git beside today's one, so both run over the same
ledger code, on the same JSON Lines file, in one process, alternating round by round, each on a
fresh ledger file. Also timed: today's runner with `held_open=True` fed by the file at full speed
(as `cat FILE | custody-app --batch -` is), and the console script itself, `--batch FILE` and
`--batch -` from a pipe. Not a test: it prints a markdown table. The machine is shared: the load
average is printed next to the figures.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchenv import header, machine_note  # noqa: E402
from custody_app import Ledger  # noqa: E402
from custody_app.interfaces import batch as batch_now  # noqa: E402


def workload(n_ops: int) -> str:
    """Asserts over 300 subjects; every 4th supersedes that key's last fact, every 10th is a read."""
    lines, last = [], {}
    for i in range(n_ops):
        subject, predicate = f"acct:{i % 300}", f"p{i % 7}"
        if i % 10 == 9:
            lines.append({"op": "as_of", "subject": subject})
            continue
        op: dict[str, Any] = {"op": "assert", "ref": f"f{i}", "subject": subject,
                              "predicate": predicate, "value": {"note": f"value {i}", "n": i},
                              "actor": "agent:bench", "provenance": "attested",
                              "cause": {"kind": "tool", "ref": f"crm#{i}"}}
        if i % 4 == 3 and (subject, predicate) in last:
            op["supersedes"] = f"@{last[(subject, predicate)]}"
        last[(subject, predicate)] = f"f{i}"
        lines.append(op)
    return "".join(json.dumps(line) + "\n" for line in lines)


def load_base(commit: str) -> ModuleType:
    text = subprocess.run(["git", "show", f"{commit}:custody_app/interfaces/batch.py"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "batch_base.py"
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("batch_base", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["batch_base"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def in_process(module: ModuleType, text: str, tmp: Path, tag: str, **kw: Any) -> float:
    path = tmp / f"{tag}.db"
    for suffix in ("", "-wal", "-shm", ".keys", ".keys.master"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    out = io.StringIO()
    with Ledger.open(path) as ledger:
        start = time.perf_counter()
        outcome = module.run_batch(ledger, io.StringIO(text), out, **kw)
        elapsed = time.perf_counter() - start
    assert outcome.failed == 0, out.getvalue()[:500]
    return elapsed


def console(text_file: Path, tmp: Path, tag: str, piped: bool) -> float:
    path = tmp / f"{tag}.db"
    for suffix in ("", "-wal", "-shm", ".keys", ".keys.master"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "custody_app", "--create", "--batch", "-" if piped else str(text_file),
           "--ledger", str(path)]
    env = {k: v for k, v in os.environ.items() if k not in ("CUSTODY_LEDGER", "CUSTODY_POLICY")}
    start = time.perf_counter()
    with open(text_file, "rb") as src:
        done = subprocess.run(cmd, stdin=src if piped else subprocess.DEVNULL,
                              capture_output=True, env=env)
    elapsed = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-500:]
    return elapsed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ops", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--base", default="5f6d36b")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    base = load_base(args.base)
    text = workload(args.ops)
    n = len(text.splitlines())
    load_start = Path("/proc/loadavg").read_text().strip()
    note_start = machine_note()
    runs: dict[str, list[float]] = {k: [] for k in ("base", "now", "held", "cli_file", "cli_pipe")}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        ops_file = tmp / "ops.jsonl"
        ops_file.write_text(text, encoding="utf-8")
        for _ in range(args.rounds):
            runs["base"].append(in_process(base, text, tmp, "base", sign=True))
            runs["now"].append(in_process(batch_now, text, tmp, "now", sign=True))
            runs["held"].append(in_process(batch_now, text, tmp, "held", sign=True, held_open=True))
            runs["cli_file"].append(console(ops_file, tmp, "cli_file", piped=False))
            runs["cli_pipe"].append(console(ops_file, tmp, "cli_pipe", piped=True))
    load_end = Path("/proc/loadavg").read_text().strip()
    med = {k: statistics.median(v) for k, v in runs.items()}
    label = {"base": f"run_batch as of {args.base} (before), file input",
             "now": "run_batch now (after), file input",
             "held": "run_batch now, held_open=True, input at full speed",
             "cli_file": "console script `--batch FILE` (after; includes start-up)",
             "cli_pipe": "console script `--batch -` piped from the file (after; includes start-up)"}
    floor = {"base": "base", "now": "base", "held": "base", "cli_file": "cli_file",
             "cli_pipe": "cli_file"}
    rows = [f"| {label[k]} | {n / med[k]:,.0f} ops/s | {med[k]:.2f} s "
            f"({', '.join(f'{x:.2f}' for x in runs[k])}) | {med[k] / med[floor[k]]:.2f}x {floor[k]} |"
            for k in runs]
    report = "\n".join([
        "# Batch ingest rate: file batch before and after the held-open runner", "",
        header([f"load average at start: {load_start}; at end: {load_end}",
                f"other load at start: {note_start}", f"other load at the end: {machine_note()}",
                f"{n:,} ops per run (90% asserts, a quarter of them supersessions; 10% as_of), "
                f"median of {args.rounds} alternating rounds, a fresh ledger each"]),
        "", "| runner | rate | median (each round) | ratio to floor |", "|---|---|---|---|", *rows,
        "", "Ratio = median time over the floor's median time in the same run (below 1.00x: faster); "
        "near 1.00x means file-batch throughput is unchanged. The floor of the two console rows "
        "is `--batch FILE`. Both runner rows run over today's ledger code: they isolate the "
        "runner, not the per-assert cardinality lookup added in the same branch.", ""])
    sys.stdout.write(report)
    if args.out:
        args.out.write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
