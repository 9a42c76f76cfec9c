"""Crash trials for erasure (DESIGN 13, all or nothing): a base ledger, a child that erases on
a copy of it and is killed (at a named fault point or at a random instant), and the check
that the next open shows the whole erasure or none of it, verifies, kept every acknowledged
write and reads every value no erasure touches back. On a file ledger each trial's copy is a
copy of the files; on a server ledger (issue 34) a database made from the base's as a template,
with the base's local folder (master key file, host mark, the trial's names) copied to the
copy's. Shared by tests/test_erasure_atomic.py, tests/test_erasure_server_kills.py,
bench/bench_erasure_crash.py and bench/bench_erasure_server_kills.py."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from custody_app.erasure import rekey
from custody_app.erasure.rollforward import unfinished
from custody_app.keys import crypto
from custody_app.ledger.facade import Ledger
from store.address import LedgerAddress

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

# On a server ledger (its key store is in the same database, committed in transactions of its
# own), every point a forget and a forget-subject pass, in order: tx.keys_committed#2 is the
# erasure's own transaction, #3 the one that clears its pending rows after the proof.
SERVER_POINTS: dict[str, tuple[str, ...]] = {
    "forget": ("erasure.before_commit", "tx.keys_committed#2", "erasure.ledger_committed",
               "rekey.keys_retired", "erasure.checkpointed", "tx.keys_committed#3"),
    "forget_subject": ("erasure.before_commit", "tx.keys_committed#2",
                       "erasure.ledger_committed", "erasure.keys_committed",
                       "rekey.keys_retired", "erasure.checkpointed", "tx.keys_committed#3"),
}


def meta_file(path: str | Path) -> Path:
    """The trial's names: `<ledger>.crash.json` beside a file ledger, `ledger.crash.json` in a
    server ledger's local folder."""
    return LedgerAddress(str(path)).sibling(".crash.json")


def meta(path: str | Path) -> dict[str, str]:
    return dict(json.loads(meta_file(path).read_text()))


def live_values(path: str | Path) -> dict[str, str]:
    """{fact id: value} of the facts no erasure kind touches (read back after every trial)."""
    return dict(json.loads(meta_file(path).read_text()).get("live", {}))


def build_base(path: str | Path, facts: int = 30) -> None:
    """Facts of SUBJECT (one derived from by another subject), a forget root with a derived
    fact, facts in OLD_SPACE for the sweep, and others; fact ids (and, under `live`, the
    values no erasure touches) in the trial's names file (`meta_file`)."""
    names: dict[str, str] = {}
    live: dict[str, str] = {}
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
        live[names["forget_sibling"]] = "the sibling that stays"
        for n in range(facts):
            fact_id = put(f"acct:OTHER-{n:04d}", "plan", f"other value {n}",
                          space=OLD_SPACE if n % 3 == 0 else "org")
            if n % 3:
                live[fact_id] = f"other value {n}"
    target = meta_file(path)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    target.write_text(json.dumps({**names, "live": live}))


def copy_base(base: Path, target: Path) -> None:
    for suffix in ("", ".keys", ".keys.master", ".crash.json"):
        shutil.copy2(f"{base}{suffix}", f"{target}{suffix}")


def server_copier(server: object, base_url: str) -> Callable[[str], str]:
    """Copies of a server ledger: a database made from the base's as a template (no session
    may be open on the base), and the base's local folder (master key file, host mark, the
    trial's names) copied to the copy's."""
    base_name = unquote(urlsplit(base_url).path.lstrip("/"))
    folder = LedgerAddress(base_url).sibling("").parent

    def make(name: str) -> str:
        database = f"{base_name}_{name}"
        with server.admin() as conn:  # type: ignore[attr-defined]
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{database}" TEMPLATE "{base_name}"')
        url = str(server.url(database))  # type: ignore[attr-defined]
        target = LedgerAddress(url).sibling("").parent
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(folder, target)
        return url
    return make


def drop_server_copy(server: object, url: str) -> None:
    """Drop a trial's database and its local folder."""
    database = unquote(urlsplit(url).path.lstrip("/"))
    with server.admin() as conn:  # type: ignore[attr-defined]
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    shutil.rmtree(LedgerAddress(url).sibling("").parent, ignore_errors=True)


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


def run_child(kind: str, path: str | Path, *, point: str | None = None, delay: float | None = None,
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


def check(kind: str, path: str | Path, lines: list[str]) -> tuple[str, bool]:
    """Open read-write (rolling forward) and judge: (outcome, acknowledged write present).
    Whatever the outcome, every value no erasure touches must read back (a re-key that lost a
    key, or re-sealed a value under a key it then destroyed, shows here), and the open must
    have finished every scrub the erasure left pending (its certificate re-issued)."""
    names = meta(path)
    live = live_values(path)
    with Ledger.open(path) as led:
        problems: list[str] = []
        if not led.verify().valid:
            problems.append("verify failed")
        if led.rebuild().differences:
            problems.append("projection differs from the fold")
        for fact_id, value in live.items():
            try:
                got = led.why(fact_id).fact.value
            except Exception as exc:  # the judgement names what failed; the trial goes on
                got = f"{type(exc).__name__}: {exc}"[:120]
            if got != value:
                problems.append(f"live fact {fact_id} reads {got!r}")
                break
        if led.db.erasure.pending() or led.db.erasure.rewrite_due() is not None:
            problems.append("pending scrubs left after the open")
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


class Forker:
    """A `tests.erasure_crash_child serve` process: it has imported the code once and forks a
    child per trial (a child of its own would spend most of its second importing)."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("CUSTODY_FAULT", None)
        env.pop("CRASH_KILL_AFTER", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.erasure_crash_child", "serve"], cwd=ROOT, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(self, kind: str, path: str | Path, *, point: str | None = None,
            inside: float | None = None) -> tuple[bool, list[str]]:
        """(was it killed, its output lines) of one forked child's erasure."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"kind": kind, "path": str(path), "fault": point,
                                          "inside": inside}) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            raise AssertionError(f"the forking child exited ({self.proc.poll()})")
        got = json.loads(answer)
        if got["rc"] not in (0, -signal.SIGKILL):
            raise AssertionError(f"child failed ({got['rc']}): {got['lines'][-20:]}")
        return got["rc"] == -signal.SIGKILL, list(got["lines"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> Forker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def server_trial(kind: str, server: object, make_copy: Callable[[str], str], forker: Forker,
                 n: int, *, point: str | None = None, inside: float | None = None) -> Trial:
    """One trial on a server ledger: a copy made from the base's database as a template, the
    forked child killed at `point` or `inside` seconds into the erasure, judged (a read-write
    open in this process, not the child's), then dropped."""
    target = make_copy(f"{kind}_{n}")
    try:
        killed, lines = forker.run(kind, target, point=point, inside=inside)
        outcome, acked = check(kind, target, lines)
    finally:
        drop_server_copy(server, target)
    return Trial(kind, point, inside, killed, outcome, acked, landed(killed, lines))


def server_window(kind: str, server: object, make_copy: Callable[[str], str], forker: Forker,
                  runs: int = 3) -> float:
    """The median seconds an unkilled erasure takes on a copy of the base (the child's own
    timing, from its `go` to its return)."""
    took = []
    for n in range(runs):
        target = make_copy(f"{kind}_w{n}")
        try:
            _, lines = forker.run(kind, target)
        finally:
            drop_server_copy(server, target)
        seconds = erasure_seconds(lines)
        assert seconds is not None, f"{kind} did not finish when nobody killed it: {lines}"
        took.append(seconds)
    return sorted(took)[len(took) // 2]


def server_trials(kind: str, server: object, make_copy: Callable[[str], str], forker: Forker,
                  *, kills: int, seed: int) -> dict[str, object]:
    """Each named point once, then kills at instants drawn uniformly over the erasure's
    measured duration (fixed seed) until `kills` of them landed mid-erasure (at most 4 x
    `kills` tries; a kill drawn past the end stops nothing and is judged too). Returns the
    trials, the outcome counts and every problem (anything but whole or none, an acknowledged
    write missing, a named point that did not stop it mid-way, a finished erasure not whole)."""
    started = time.perf_counter()
    named = [server_trial(kind, server, make_copy, forker, n, point=point)
             for n, point in enumerate(SERVER_POINTS[kind])]
    span = server_window(kind, server, make_copy, forker)
    rng = random.Random(seed)
    randoms: list[Trial] = []
    while sum(t.landed == "mid" for t in randoms) < kills and len(randoms) < 4 * kills:
        randoms.append(server_trial(kind, server, make_copy, forker, 100 + len(randoms),
                                    inside=rng.uniform(0, span)))
    problems = [f"{t.point or f'{t.delay:.4f} s'}: {t.outcome}" + ("" if t.acked else
                                                                    " (acknowledged write lost)")
                for t in named + randoms
                if t.outcome not in ("whole", "none") or not t.acked
                or (t.landed == "after" and t.outcome != "whole")]
    problems += [f"{t.point}: did not stop the erasure mid-way ({t.landed})" for t in named
                 if t.landed != "mid"]
    mid = [t for t in named + randoms if t.landed == "mid"]
    return {"kind": kind, "named": named, "randoms": randoms, "window_s": span,
            "killed_mid": sum(t.landed == "mid" for t in randoms),
            "whole": sum(t.outcome == "whole" for t in mid),
            "none": sum(t.outcome == "none" for t in mid),
            "broken": sum(t.outcome not in ("whole", "none") for t in named + randoms),
            "problems": problems, "seconds": time.perf_counter() - started}
