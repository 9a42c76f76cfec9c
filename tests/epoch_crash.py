"""Kill trials for rotate-epoch (issue 34: a kill at any instant of a rotation leaves the old
epoch or the new one usable, never neither): a base ledger, a child that rotates its epoch on a
copy and is killed (at a named crash point or after a random delay, fixed seed), then a
read-write open and the judgement: `old` or `new` (which epoch key the master file holds) when
the open works, no `.next` is left, every live value reads back and verify holds; otherwise
`neither: why`. On a server ledger each trial's copy is a database made from the base's as a
template, with the base's master key file copied to the copy's own key file path."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

from custody_app.keys import epoch as epochs
from custody_app.keys.keyring import keystore_path_for, master_path_for
from custody_app.ledger.facade import Ledger

ROOT = Path(__file__).resolve().parent.parent
# Every crash point a rotation passes, in order (rotate.*: its word index re-keying first).
POINTS = ("rotate.intent_committed", "rotate.before_commit", "rotate.ledger_committed",
          "rotate.keys_committed", "epoch.next_written", "epoch.before_commit",
          "epoch.keys_committed", "epoch.zeroed", "epoch.promoted")
CAUSE = {"kind": "tool", "ref": "epoch-base"}
SUBJECTS = 12


def value_of(n: int) -> str:
    return f"sealed value {n:03d} of subject EPOCH-{n:03d} zqx{n:04d}"


def build_base(path: str | Path) -> dict[str, str]:
    """A ledger with a value per subject, free text, and one subject already erased; returns
    {fact id: value} of the live facts."""
    values: dict[str, str] = {}
    with Ledger.open(path) as led:
        for n in range(SUBJECTS):
            result = led.assert_fact(f"acct:EPOCH-{n:03d}", "note", value_of(n),
                                     actor="agent:base", cause=CAUSE, provenance="attested")
            values[result.fact_id] = value_of(n)
        gone = led.assert_fact("acct:EPOCH-GONE", "note", "erased before any rotation",
                               actor="agent:base", cause=CAUSE, provenance="attested")
        led.forget_subject("acct:EPOCH-GONE", actor="user:dpo", reason="subject_request")
        assert gone.fact_id not in values
    return values


def master_of(ledger: str | Path) -> Path:
    return master_path_for(keystore_path_for(ledger))


def key_in(path: Path) -> bytes | None:
    return epochs.read_key(path)


def run_child(ledger: str | Path, *, fault: str = "", kill: float | None = None) -> tuple[bool, str]:
    """(killed, stdout) of one rotation of `ledger`'s epoch in a child process."""
    env = {k: v for k, v in os.environ.items() if k != "CUSTODY_FAULT"}
    proc = subprocess.run([sys.executable, "-m", "tests.epoch_crash_child", str(ledger), fault,
                           "" if kill is None else f"{kill:.6f}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180)
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.returncode == -signal.SIGKILL, proc.stdout


def judge(ledger: str | Path, values: dict[str, str], old_key: bytes) -> str:
    """Open read-write, read every live value back and verify: `old`/`new` by the master file's
    key, or `neither: why`."""
    problems = []
    try:
        with Ledger.open(ledger) as led:
            for fact_id, value in values.items():
                got = led.why(fact_id).fact.value
                if got != value:
                    problems.append(f"{fact_id} reads {got!r}")
            if not led.verify().valid:
                problems.append("verify failed")
            assert led.keys is not None
            held = led.keys.epoch
    except Exception as exc:  # the judgement names what failed; the trial goes on
        return f"neither: {type(exc).__name__}: {exc}"[:300]
    master = master_of(ledger)
    if epochs.next_path(master).exists():
        problems.append(".next left after the open")
    key = key_in(master)
    if key is None or epochs.epoch_id(key) != held:
        problems.append("the master file is not the epoch the open used")
    if problems:
        return "neither: " + "; ".join(problems[:3])
    return "old" if key == old_key else "new"


def window(make_copy: Callable[[str], str | Path], runs: int = 2) -> float:
    """The median duration of an unkilled rotation on a copy of the base."""
    took = []
    for n in range(runs):
        _, out = run_child(make_copy(f"w{n}"))
        took.append(float(out.split("done ")[1].split()[0]))
    return sorted(took)[len(took) // 2]


def trials(make_copy: Callable[[str], str | Path], values: dict[str, str], old_key: bytes, *,
           kills: int, seed: int, points: tuple[str, ...] = POINTS) -> dict[str, object]:
    """Each crash point once, then SIGKILLs after a random delay in [0, window] (the child's
    rotation alone: its open is before the timer) until `kills` children were killed; outcome
    counts and problems."""
    outcomes: Counter[str] = Counter()
    problems: list[str] = []
    at_point: dict[str, str] = {}
    started = time.perf_counter()
    for n, point in enumerate(points):
        target = make_copy(f"p{n}")
        killed, _ = run_child(target, fault=point)
        outcome = judge(target, values, old_key)
        at_point[point] = outcome if killed else f"not killed: {outcome}"
        outcomes[outcome.split(":")[0]] += 1
        if outcome.startswith("neither") or not killed:
            problems.append(f"{point}: {at_point[point]}")
    span = window(make_copy)
    rng = random.Random(seed)
    killed_count = tried = 0
    # Until `kills` children were really killed mid-rotation (a delay past the rotation's end
    # kills nothing; each such trial is judged too), at most 4 x `kills` tries.
    while killed_count < kills and tried < 4 * kills:
        target = make_copy(f"r{tried}")
        killed, _ = run_child(target, kill=rng.uniform(0, span))
        killed_count += killed
        outcome = judge(target, values, old_key)
        outcomes[outcome.split(":")[0]] += 1
        if outcome.startswith("neither"):
            problems.append(f"random trial {tried}: {outcome}")
        tried += 1
    return {"points": at_point, "outcomes": dict(outcomes), "problems": problems,
            "random": tried, "killed": killed_count, "window_s": span,
            "seconds": time.perf_counter() - started}


def file_copier(base: Path, work: Path) -> Callable[[str], Path]:
    """Copies of a file ledger (the ledger, its key store and master key file)."""
    def make(name: str) -> Path:
        target = work / f"{name}.db"
        for suffix in ("", ".keys", ".keys.master"):
            shutil.copy2(f"{base}{suffix}", f"{target}{suffix}")
        return target
    return make


def server_copier(server: object, base_url: str) -> Callable[[str], str]:
    """Copies of a server ledger: a database from the base's as a template, and the base's
    master key file at the copy's key file path."""
    base_name = unquote(urlsplit(base_url).path.lstrip("/"))
    base_key = master_of(base_url)

    def make(name: str) -> str:
        url = str(server.url(f"{base_name}_{name}"))  # type: ignore[attr-defined]
        with server.admin() as conn:  # type: ignore[attr-defined]
            conn.execute(f'CREATE DATABASE "{base_name}_{name}" TEMPLATE "{base_name}"')
        target = master_of(url)
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        shutil.copy2(base_key, target)
        return url
    return make
