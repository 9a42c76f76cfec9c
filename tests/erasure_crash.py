"""Crash trials for erasure (DESIGN 13, all or nothing): a base ledger, a child that erases on
a copy of it and is killed (at a named fault point or at a random instant), and the check
that the next open shows the whole erasure or none of it, verifies, and kept every
acknowledged write. Shared by tests/test_erasure_atomic.py and bench/bench_erasure_crash.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from custody_app.erasure import rekey
from custody_app.erasure.rollforward import unfinished
from custody_app.keys import crypto
from custody_app.ledger.facade import Ledger

ROOT = Path(__file__).resolve().parent.parent
SUBJECT = "acct:CRASH-SUBJECT-0001"
OLD_SPACE = "team:old"
FORGET_ROOT = "forget_root"
KINDS = ("forget", "forget_subject", "sweep", "reindex")
# The named points each kind passes (tx.keys_committed#2: the erasure's own transaction).
POINTS: dict[str, tuple[str, ...]] = {
    "forget": ("erasure.before_commit", "tx.keys_committed#2", "erasure.ledger_committed",
               "rekey.keys_retired", "erasure.checkpointed"),
    "forget_subject": ("erasure.before_commit", "tx.keys_committed#2",
                       "erasure.ledger_committed", "erasure.keys_committed",
                       "erasure.checkpointed"),
    "sweep": ("erasure.before_commit", "tx.keys_committed#2", "erasure.ledger_committed",
              "rekey.keys_retired", "erasure.checkpointed"),
    "reindex": ("reindex.before_commit", "tx.keys_committed#2"),
}


def meta(path: str | Path) -> dict[str, str]:
    return dict(json.loads(Path(f"{path}.crash.json").read_text()))


def build_base(path: Path, facts: int = 30) -> None:
    """Facts of SUBJECT (one derived from by another subject), a forget root with a derived
    fact, facts in OLD_SPACE for the sweep, and others; fact ids in `<path>.crash.json`."""
    names: dict[str, str] = {}
    cause = {"kind": "tool", "ref": "base"}
    with Ledger.open(path) as led:
        def put(subject: str, predicate: str, value: object, **kw: object) -> str:
            return led.assert_fact(subject, predicate, value, actor="agent:base", cause=cause,
                                   provenance="attested", **kw).fact_id
        names["subject_plan"] = put(SUBJECT, "plan", "subject plan value")
        names["subject_note"] = put(SUBJECT, "note", {"text": "subject note value"})
        names["subject_derived"] = put("acct:DERIVED-01", "summary", "derived from subject",
                                       sources=[names["subject_plan"]])
        names[FORGET_ROOT] = put("acct:FORGET-0001", "plan", "the value to forget")
        names["forget_derived"] = put("acct:FORGET-0002", "summary", "derived from the root",
                                      sources=[names[FORGET_ROOT]])
        # The root's subject lives on: the forget re-keys it (issue 34).
        names["forget_sibling"] = put("acct:FORGET-0001", "tier", "the sibling that stays")
        root = led.db.facts.get(names[FORGET_ROOT])
        assert root is not None
        event = led.db.events.get(root.assert_seq)
        assert event is not None and event.value is not None
        names["forget_root_blob"] = bytes(event.value).hex()
        for n in range(facts):
            put(f"acct:OTHER-{n:04d}", "plan", f"other value {n}",
                space=OLD_SPACE if n % 3 == 0 else "org")
    Path(f"{path}.crash.json").write_text(json.dumps(names))


def copy_base(base: Path, target: Path) -> None:
    for suffix in ("", ".keys", ".keys.master", ".crash.json"):
        shutil.copy2(f"{base}{suffix}", f"{target}{suffix}")


@dataclass
class Trial:
    kind: str
    point: str | None
    delay: float | None
    killed: bool
    outcome: str  # "whole", "none", or a problem
    acked: bool
    landed: str = "after"  # "before" the erasure began, "mid" (begun, not returned), "after"


def landed(killed: bool, lines: list[str]) -> str:
    """Where a kill fell: the child prints `go` just before the erasure and `done` as soon as it
    returns, so a kill between the two stopped it mid-way."""
    if not killed or any(ln.startswith("done") for ln in lines):
        return "after"
    return "mid" if "go" in lines else "before"


def erasure_seconds(lines: list[str]) -> float | None:
    """The erasure's own duration, as the unkilled child measured it."""
    done = [ln for ln in lines if ln.startswith("done ")]
    return float(done[0].split()[1]) if done else None


def run_child(kind: str, path: Path, *, point: str | None = None, delay: float | None = None,
              inside: float | None = None) -> tuple[bool, list[str], float]:
    """Run the child; kill it `delay` seconds after its `go` line (or let `point` kill it, or
    its own timer `inside` seconds into the erasure). Returns (was it killed, its stdout lines,
    seconds from `go` to its exit)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("CUSTODY_FAULT", None)
    env.pop("CRASH_KILL_AFTER", None)
    if point is not None:
        env["CUSTODY_FAULT"] = point
    if inside is not None:
        env["CRASH_KILL_AFTER"] = f"{inside:.6f}"
    proc = subprocess.Popen([sys.executable, "-m", "tests.erasure_crash_child", kind, str(path)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    went = time.perf_counter()
    for line in proc.stdout:
        if not line.endswith("\n"):
            break
        lines.append(line.rstrip("\n"))
        if line == "go\n":
            went = time.perf_counter()
        if line == "go\n" and delay is not None:
            time.sleep(delay)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=60)
    seconds = time.perf_counter() - went
    stderr = proc.stderr.read() if proc.stderr else ""
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"child failed ({proc.returncode}): {stderr[-2000:]}")
    lines += [ln for ln in (proc.stdout.read() or "").splitlines()]
    return proc.returncode == -signal.SIGKILL, lines, seconds


def check(kind: str, path: Path, lines: list[str]) -> tuple[str, bool]:
    """Open read-write (rolling forward) and judge: (outcome, acknowledged write present)."""
    names = meta(path)
    with Ledger.open(path) as led:
        problems: list[str] = []
        if not led.verify().valid:
            problems.append("verify failed")
        if led.rebuild().differences:
            problems.append("projection differs from the fold")
        acked = [ln.split()[1] for ln in lines if ln.startswith("ack ")]
        present = all(led.history(f).status == "active" for f in acked)
        outcome = _outcome(led, kind, names)
        if problems:
            outcome = "; ".join(problems + [outcome])
    return outcome, present


def _state(led: Ledger, fact_ids: list[str]) -> set[str]:
    """'erased' or 'kept' for each fact: status and value must agree."""
    out = set()
    for fid in fact_ids:
        view = led.history(fid)
        facts = [f for f in led.as_of(include="claimed").facts if f.fact_id == fid]
        if view.status in ("forgotten", "expired") and not facts:
            out.add("erased")
        elif view.status == "active" and facts and facts[0].value is not None:
            out.add("kept")
        else:
            out.add(f"half:{fid}:{view.status}")
    return out


def _outcome(led: Ledger, kind: str, names: dict[str, str]) -> str:
    if kind == "reindex":
        believed = {f.fact_id for f in led.as_of(include="claimed").facts}
        seqs = {led.db.facts.get(f).assert_seq: f for f in believed}  # type: ignore[union-attr]
        indexed = led.db.recall.which_indexed(list(seqs))
        return "whole" if set(seqs) == indexed and led.index.is_current() else \
            f"index holds {len(indexed)} of {len(seqs)} believed facts"
    if kind == "forget":
        states = _state(led, [names[FORGET_ROOT], names["forget_derived"]])
        states |= {f"sibling:{s}" for s in _state(led, [names["forget_sibling"]]) - {"kept"}}
        states |= _old_keys(led, names, erased=states == {"erased"})
    elif kind == "sweep":
        old = [f for f in _all_ids(led) if led.db.facts.get(f).space == OLD_SPACE]  # type: ignore[union-attr]
        states = _state(led, old)
    else:
        ids = [names["subject_plan"], names["subject_note"], names["subject_derived"]]
        states = _state(led, ids)
        assert led.keys is not None
        ref = led.keys.subject_ref(SUBJECT)
        tombstone = any(t[1] == ref for t in led.db.erasure.tombstones())
        if unfinished(led):
            states.add("half:key store destruction unfinished after open")
        if tombstone != (states == {"erased"}):
            states.add(f"half:tombstone={tombstone}")
        if tombstone and led.keys.store.last_destroyed(ref) is None:
            states.add("half:key live")
    if rekey.unfinished(led):
        states.add("half:a re-key's old generations live after open")
    if states == {"erased"}:
        return "whole"
    if states == {"kept"}:
        return "none"
    return ", ".join(sorted(states))


def _old_keys(led: Ledger, names: dict[str, str], *, erased: bool) -> set[str]:
    """After a whole forget, the key that sealed the root's value is gone and its subject's
    other fact is under a newer one; after none, the old key still opens the value."""
    assert led.keys is not None
    blob = bytes.fromhex(names["forget_root_blob"])
    ref = led.keys.subject_ref("acct:FORGET-0001")
    old = led.keys.key_for_read(ref, crypto.sealed_generation(blob))
    if erased and old is not None:
        return {"half:the forgotten value's old key lives"}
    if not erased and old is None:
        return {"half:the kept value's key is gone"}
    return set()


def _all_ids(led: Ledger) -> list[str]:
    return [f.fact_id for f in led.db.facts.dump()[0]]


def trial(kind: str, base: Path, work: Path, n: int, *, point: str | None = None,
          delay: float | None = None, inside: float | None = None) -> Trial:
    target = work / f"{kind}-{n}.db"
    copy_base(base, target)
    killed, lines, _ = run_child(kind, target, point=point, delay=delay, inside=inside)
    outcome, acked = check(kind, target, lines)
    for extra in ("", "-wal", "-shm", ".keys", ".keys.master", ".crash.json", ".keys-journal"):
        Path(f"{target}{extra}").unlink(missing_ok=True)
    return Trial(kind, point, delay if inside is None else inside, killed, outcome, acked,
                 landed(killed, lines))
