"""Kill trials for rotate-index-key (DESIGN 14, all or nothing across the two files): a base
ledger, a child that rotates the word index key on a copy and is killed (at a named commit
boundary or at a random instant), then a read-write open (which rolls a recorded intent
forward) and the judgement: `old` (the old key with the old index), `new` (the new key with
the new index) or `neither`. Shared by tests/test_rotate_atomic.py and bench/bench_reliability.py."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from custody_app.erasure.rotate import index_key_problem
from custody_app.keys.keyring import KeyRing
from custody_app.ledger.facade import Ledger
from custody_app.recall import text

ROOT = Path(__file__).resolve().parent.parent
# The commit boundaries a rotation passes (tx.keys_committed: its ledger transaction's).
BOUNDARIES = ("rotate.intent_committed", "rotate.before_commit", "tx.keys_committed",
              "rotate.ledger_committed", "rotate.keys_committed")
PROBES = 5


def probe_word(n: int) -> str:
    return f"zqxprobe{n:04d}word"


def build_base(path: Path, facts: int = 120) -> None:
    cause = {"kind": "tool", "ref": "base"}
    with Ledger.open(path) as led:
        for n in range(facts):
            led.assert_fact(f"acct:ROT-{n:04d}", "note", f"{probe_word(n)} plain text {n}",
                            actor="agent:base", cause=cause, provenance="attested")


def index_key(path: Path) -> bytes:
    keys = KeyRing.open(path)
    try:
        return keys.index_key
    finally:
        keys.close()


def copy_base(base: Path, target: Path) -> None:
    for suffix in ("", ".keys", ".keys.master"):
        shutil.copy2(f"{base}{suffix}", f"{target}{suffix}")


def run_child(path: Path, *, fault: str = "", kill: float | None = None) -> tuple[bool, str]:
    """(killed, stdout) of one rotation on `path`."""
    env = {k: v for k, v in os.environ.items() if k != "CUSTODY_FAULT"}
    proc = subprocess.run([sys.executable, "-m", "tests.rotate_crash_child", str(path), fault,
                           "" if kill is None else f"{kill:.6f}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.returncode == -signal.SIGKILL, proc.stdout


def judge(path: Path, old_key: bytes) -> str:
    """Open read-write (rolling forward), then: `old` or `new` when every probe word is found
    by lexical recall under the key store's index key, no rotation is left pending and verify
    holds; otherwise `neither: why`."""
    with Ledger.open(path) as led:
        assert led.keys is not None
        key = led.keys.index_key
        problems = []
        if led.keys.pending_index_key() is not None:
            problems.append("a rotation still pending after the open")
        for n in range(PROBES):
            match = f'"{text.term(key, text.words(probe_word(n))[0])}"'
            if not led.db.recall.lexical(match, 5):
                problems.append(f"probe {n} not found")
        if (problem := index_key_problem(led)) is not None:
            problems.append(problem)
        if not led.verify().valid:
            problems.append("verify failed")
    if problems:
        return "neither: " + "; ".join(problems[:3])
    return "old" if key == old_key else "new"


def window(base: Path, work: Path, runs: int = 3) -> float:
    """The median duration of an unkilled rotation on a copy of the base."""
    took = []
    for n in range(runs):
        target = work / f"window{n}.db"
        copy_base(base, target)
        _, out = run_child(target)
        took.append(float(out.split("done ")[1].split()[0]))
    return sorted(took)[len(took) // 2]


def trials(base: Path, work: Path, *, kills: int, seed: int) -> dict[str, object]:
    """Each boundary once, then `kills` random instants in [0, 1.2 x window]; the outcome
    counts (old/new/neither) and the first problems."""
    old_key = index_key(base)
    outcomes: Counter[str] = Counter()
    problems: list[str] = []
    at_boundary: dict[str, str] = {}
    started = time.perf_counter()
    for n, point in enumerate(BOUNDARIES):
        target = work / f"b{n}.db"
        copy_base(base, target)
        killed, _ = run_child(target, fault=point)
        outcome = judge(target, old_key)
        at_boundary[point] = outcome if killed else f"not killed: {outcome}"
        outcomes[outcome.split(":")[0]] += 1
        if outcome.startswith("neither") or not killed:
            problems.append(f"{point}: {at_boundary[point]}")
    span = window(base, work) * 1.2
    rng = random.Random(seed)
    killed_count = 0
    for n in range(kills):
        target = work / f"r{n}.db"
        copy_base(base, target)
        killed, _ = run_child(target, kill=rng.uniform(0, span))
        killed_count += killed
        outcome = judge(target, old_key)
        outcomes[outcome.split(":")[0]] += 1
        if outcome.startswith("neither"):
            problems.append(f"random trial {n}: {outcome}")
        for suffix in ("", ".keys", ".keys.master", "-wal", "-shm"):
            Path(f"{target}{suffix}").unlink(missing_ok=True)
    return {"boundaries": at_boundary, "outcomes": dict(outcomes), "problems": problems,
            "random": kills, "killed": killed_count, "window_s": span / 1.2,
            "seconds": time.perf_counter() - started}
