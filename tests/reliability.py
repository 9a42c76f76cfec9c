"""Shared machinery of the reliability suite (tests/test_reliability_*.py and
bench/bench_reliability.py): crash-and-check loops, concurrent writers, tampering cases."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from custody_app.core.texts import open_body
from custody_app.ledger.facade import Ledger

CHILD = Path(__file__).with_name("reliability_child.py")


def spawn(mode: str, path: Path, seed: int, deadline: float | None = None, *,
          forget_rate: float = 0.05) -> subprocess.Popen[str]:
    args = [sys.executable, str(CHILD), mode, str(path), str(seed)]
    if deadline is not None:
        args.append(repr(deadline))
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1",
                                 "RELIABILITY_FORGET_RATE": str(forget_rate)})


class Collector:
    """Reads a child's stdout lines on a thread; `ready` is set at the child's `ready` line."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not line.endswith("\n"):
                break  # cut off by the kill: never acknowledged
            self.lines.append(line.rstrip("\n"))
            if line == "ready\n":
                self.ready.set()

    def join(self) -> None:
        self._thread.join(timeout=30)


@dataclass
class Acks:
    """What children acknowledged: event hashes of committed ops and committed groups."""

    events: dict[str, str] = field(default_factory=dict)   # event_id -> kind
    groups: dict[str, list[str]] = field(default_factory=dict)
    facts: set[str] = field(default_factory=set)

    def add(self, lines: list[str]) -> None:
        for line in lines:
            parts = line.split(" ")
            if parts[0] == "ack":
                self.events[parts[3]] = parts[1]
                if parts[1] == "assert":
                    self.facts.add(parts[2])
            elif parts[0] == "grp":
                self.groups[parts[1]] = parts[2:]
                self.facts.update(parts[2:])

    @property
    def writes(self) -> int:
        return len(self.events) + sum(len(g) for g in self.groups.values())


def check_ledger(path: Path, acks: Acks) -> list[str]:
    """Everything a crash must not break: opens, verifies, projection equals a rebuild, every
    acknowledged write present, every group of three all there or all absent."""
    problems: list[str] = []
    with Ledger.open(path) as ledger:
        report = ledger.verify()
        if not report.valid:
            problems.append(f"verify: seq {report.first_bad_seq}: {report.problem}")
        rebuilt = ledger.rebuild()
        if rebuilt.differences:
            problems.append(f"projection differs from a rebuild: {rebuilt.differences[:3]}")
        rows = ledger.events()
        hashes = {r.hash for r in rows}
        for event_id, kind in acks.events.items():
            if event_id not in hashes:
                problems.append(f"acknowledged {kind} {event_id[:12]} is missing")
        for fact_id in acks.facts:
            if ledger.db.facts.get(fact_id) is None:
                problems.append(f"acknowledged fact {fact_id} is not in the projection")
        # cause.ref is sealed free text: read it opened, as the reads do.
        refs = Counter(open_body(ledger.db, ledger.texts, r.seq, r.body).get("cause", {}).get("ref")
                       for r in rows if r.kind == "assert")
        for ref, count in refs.items():
            if isinstance(ref, str) and ref.startswith("grp-") and count != 3:
                problems.append(f"group {ref} is half-written: {count} of 3 asserts")
        seqs = [r.seq for r in rows]
        if seqs != list(range(1, len(seqs) + 1)):
            problems.append("event seqs are not 1..n")
    return problems


@dataclass
class CrashStats:
    kills: int = 0
    early_kills: int = 0
    writes_checked: int = 0
    events: int = 0
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


def crash_run(path: Path, *, kills: int = 30, budget_s: float = 240.0, seed: int = 7) -> CrashStats:
    """Start a writer, SIGKILL it at a random moment, check the ledger; `kills` times or until
    `budget_s` runs out. About one kill in five lands during start-up (import, open, recovery)."""
    rng = random.Random(seed)
    stats = CrashStats()
    acks = Acks()
    start = time.monotonic()
    while stats.kills < kills and time.monotonic() - start < budget_s:
        proc = spawn("writer", path, seed * 1000 + stats.kills)
        out = Collector(proc)
        if rng.random() < 0.2:
            time.sleep(rng.uniform(0.0, 0.8))
            stats.early_kills += not out.ready.is_set()
        else:
            if not out.ready.wait(timeout=60):
                proc.kill()
                stats.problems.append(f"writer never got ready: {proc.stderr.read() if proc.stderr else ''}")
                break
            time.sleep(rng.uniform(0.02, 0.7))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        out.join()
        if proc.stderr is not None:
            err = proc.stderr.read()
            proc.stderr.close()
            if "Traceback" in err:
                stats.problems.append(f"writer crashed by itself: {err[-2000:]}")
        if proc.stdout is not None:
            proc.stdout.close()
        stats.kills += 1
        acks.add(out.lines)
        if not path.exists():
            continue
        found = check_ledger(path, acks)
        stats.problems += [f"after kill {stats.kills}: {p}" for p in found]
        if found:
            break
    stats.writes_checked = acks.writes
    if path.exists():
        with Ledger.open(path, readonly=True) as ledger:
            stats.events = ledger.verify().events
    stats.seconds = time.monotonic() - start
    return stats


@dataclass
class ConcurrencyStats:
    writers: int = 2
    seconds: float = 0.0
    writes_acked: int = 0
    reads: int = 0
    verifies: int = 0
    errors: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    events: int = 0


def concurrency_run(path: Path, *, seconds: float = 6.0, seed: int = 11,
                    forget_rate: float = 0.02) -> ConcurrencyStats:
    """Two writer processes and a reader process on one ledger for `seconds` (after all three
    are ready): no refusal and no crash reaches them, the chain stays linear and verifies, and
    what the reader sees only moves forward."""
    stats = ConcurrencyStats()
    with Ledger.open(path) as ledger:  # created (schema, keys) before the race starts
        ledger.checkpoint() if ledger.db.events.head() else None
    start_at = time.time() + 4.0
    deadline = start_at + seconds
    procs = [spawn("writer", path, seed + i, deadline, forget_rate=forget_rate) for i in range(2)]
    procs.append(spawn("reader", path, seed + 2, deadline))
    outs = [Collector(p) for p in procs]
    for p in procs:
        p.wait(timeout=seconds + 120)
    acks = Acks()
    for p, out in zip(procs, outs, strict=True):
        out.join()
        err = p.stderr.read() if p.stderr is not None else ""
        for stream in (p.stdout, p.stderr):
            if stream is not None:
                stream.close()
        if p.returncode != 0 or "Traceback" in err:
            stats.problems.append(f"a child exited {p.returncode}: {err[-3000:]}")
        if not out.lines or out.lines[-1] != "done":
            stats.problems.append(f"a child did not finish: last line {out.lines[-1:]}")
        stats.errors += [line for line in out.lines if line.startswith("error ")]
        acks.add(out.lines)
    seen = [tuple(int(x) for x in line.split()[1:3]) for line in outs[2].lines
            if line.startswith("seen ")]
    stats.reads = len(seen)
    if any(b < a for a, b in zip(seen, seen[1:], strict=False)):
        stats.problems.append("the reader saw the ledger move backwards")
    verifies = [line for line in outs[2].lines if line.startswith("verify ")]
    stats.verifies = len(verifies)
    stats.problems += [f"reader's verify failed: {v}" for v in verifies
                       if not v.startswith("verify True")]
    stats.writes_acked = acks.writes
    stats.problems += check_ledger(path, acks)
    with Ledger.open(path, readonly=True) as ledger:
        stats.events = ledger.verify().events
    stats.seconds = seconds
    return stats


# ---- tampering -------------------------------------------------------------------------------
@dataclass
class TamperCase:
    kind: str
    seq: int
    detected: bool
    located: bool
    problem: str


def build_tamper_base(path: Path, *, events: int = 36, checkpoint_every: int = 6) -> None:
    """A ledger of asserts, supersessions, retractions and reviews with a signed checkpoint every
    few events and one at the end (the files are closed, so copies are self-contained)."""
    cause = {"kind": "tool", "ref": "t#1"}
    rng = random.Random(3)
    with Ledger.open(path) as ledger:
        live: list[str] = []
        while ledger.db.events.count() < events:
            n = ledger.db.events.count()
            if n and n % checkpoint_every == 0:
                ledger.checkpoint()
                continue
            roll = rng.random()
            if roll < 0.6 or not live:
                r = ledger.assert_fact(f"acct:{n % 7}", "plan", {"tier": f"t{n}"}, actor="agent:a",
                                       cause=cause, provenance=rng.choice(["attested", "claimed"]))
                live.append(r.fact_id)
            elif roll < 0.8:
                ledger.retract(live.pop(0), actor="user:m", reason="wrong")
            else:
                try:
                    ledger.confirm(live[-1], actor="user:rev")
                except Exception:  # noqa: BLE001 - not quarantined: affirm it instead
                    ledger.affirm(live[-1], actor="agent:a")
        ledger.checkpoint()


def _copy(base: Path, target: Path) -> None:
    import shutil
    for suffix in ("", ".keys", ".keys.master", ".pub"):
        if Path(f"{base}{suffix}").exists():
            shutil.copyfile(f"{base}{suffix}", f"{target}{suffix}")


def _raw(path: Path) -> Any:
    import sqlite3
    con = sqlite3.connect(path)
    con.execute("DROP TRIGGER IF EXISTS events_append_only_update")
    con.execute("DROP TRIGGER IF EXISTS events_append_only_delete")
    con.execute("DROP TRIGGER IF EXISTS events_no_replace")
    return con


def _flip(text: str, at: int) -> str:
    c = text[at]
    return text[:at] + ("0" if c != "0" else "1") + text[at + 1:]


def _recompute_from(con: Any, seq: int) -> None:
    """Re-hash every event from `seq` on exactly as the ledger does (what an attacker with the
    file and this code can do), so a plain chain walk passes."""
    from custody_app.domain.chain import GENESIS, event_hash
    prev = GENESIS
    for s, body, old_hash in con.execute("SELECT seq, body, hash FROM events ORDER BY seq").fetchall():
        if s < seq:
            prev = old_hash
            continue
        new_hash = event_hash(prev, body)
        con.execute("UPDATE events SET prev_hash = ?, hash = ? WHERE seq = ?", (prev, new_hash, s))
        prev = new_hash


# The key store's own refusals of a ledger edited below its mark (DESIGN 14): detection at
# open, before verify runs.
MARK_REFUSALS = ("ledger_forked", "ledger_rolled_back", "keystore_mismatch",
                 "keystore_rolled_back")


def markless_keystore(path: Path) -> Path:
    """A copy of the ledger's key store (and master key) without its high-water marks and
    ledger binding: what verify locates by itself is seen through it, once the key store's
    own marks have refused the edited ledger."""
    import shutil
    import sqlite3
    copy = Path(f"{path}.markless.keys")
    shutil.copyfile(f"{path}.keys", copy)
    shutil.copyfile(f"{path}.keys.master", f"{copy}.master")
    con = sqlite3.connect(copy)
    con.execute("DROP TRIGGER IF EXISTS ledger_marks_no_delete")
    con.execute("DROP TRIGGER IF EXISTS keystore_meta_no_delete")
    con.execute("DELETE FROM ledger_marks")
    con.execute("DELETE FROM keystore_meta WHERE name = 'ledger'")
    restore_keystore_triggers(con)
    con.commit()
    con.close()
    forget_recorded_mark(path)
    return copy


def restore_keystore_triggers(con: Any) -> None:
    """Put back the key store's write-once triggers a helper dropped to delete rows (a key
    store without them is refused for writes and named by verify)."""
    from store.sqlite.keystore import expected_triggers
    have = {name for (name,) in con.execute("SELECT name FROM sqlite_schema WHERE type = 'trigger'")}
    for name, sql in expected_triggers().items():
        if name not in have:
            con.execute(sql)


def forget_recorded_mark(path: Path) -> None:
    """Delete the ledger's record of its key store's newest mark (without it, a key store
    without marks is not refused as rolled back): what a verifier holding the keys and no
    marks needs."""
    import sqlite3
    con = sqlite3.connect(path)
    with con:
        con.execute("DELETE FROM ledger_meta WHERE key = 'keystore_mark'")
    con.close()


def verify_or_refusal(path: Path) -> tuple[Any, str | None]:
    """(verify's report, the key store's refusal code or None): a ledger the marks refuse is
    verified through a markless copy of its key store, so the report still locates the edit."""
    from custody_app.domain.errors import LedgerError
    try:
        with Ledger.open(path, readonly=True) as ledger:
            return ledger.verify(), None
    except LedgerError as exc:
        if exc.code not in MARK_REFUSALS:
            raise
        with Ledger.open(path, readonly=True, keystore=markless_keystore(path)) as ledger:
            return ledger.verify(), exc.code


def tamper_cases(base: Path, work: Path) -> list[TamperCase]:
    """Every tampering of the base ledger we model, each verified on its own copy."""
    from custody_app.domain.chain import canonical
    with Ledger.open(base, readonly=True) as ledger:
        rows = ledger.events()
        checkpointed = sorted(json.loads(r.body)["checkpoint_seq"] for r in rows
                              if r.kind == "checkpoint")
    last = rows[-1].seq
    plans: list[tuple[str, int, Any]] = []
    for r in rows:
        plans.append(("changed byte: body", r.seq, ("body", _flip(r.body, len(r.body) // 2))))
        plans.append(("changed byte: hash", r.seq, ("hash", _flip(r.hash, 7))))
        plans.append(("changed byte: prev_hash", r.seq, ("prev_hash", _flip(r.prev_hash, 7))))
        plans.append(("changed byte: tx_at", r.seq, ("tx_at", _flip(r.tx_at, 20))))
        if r.value is not None:
            blob = bytearray(r.value)
            blob[len(blob) // 2] ^= 0x01
            plans.append(("changed byte: value", r.seq, ("value", bytes(blob))))
        if r.seq < last:  # a cut-off tail is not detectable: see docs/limits.md
            plans.append(("deleted event", r.seq, None))
            plans.append(("reordered events", r.seq, None))
        if r.seq <= checkpointed[-1] and r.kind == "assert":
            body = json.loads(r.body)
            body["space"] = "team:attacker"
            plans.append(("chain recomputed after an edit", r.seq, canonical(body)))
    cases: list[TamperCase] = []
    for n, (kind, seq, edit) in enumerate(plans):
        copy = work / f"case{n}.db"
        _copy(base, copy)
        con = _raw(copy)
        if kind.startswith("changed byte"):
            column, new = edit
            con.execute(f"UPDATE events SET {column} = ? WHERE seq = ?", (new, seq))
        elif kind == "deleted event":
            con.execute("DELETE FROM events WHERE seq = ?", (seq,))
        elif kind == "reordered events":
            con.execute("UPDATE events SET seq = -1 WHERE seq = ?", (seq,))
            con.execute("UPDATE events SET seq = ? WHERE seq = ?", (seq, seq + 1))
            con.execute("UPDATE events SET seq = ? WHERE seq = -1", (seq + 1,))
        else:
            con.execute("UPDATE events SET body = ? WHERE seq = ?", (edit, seq))
            _recompute_from(con, seq)
        con.commit()
        con.close()
        report, _refused = verify_or_refusal(copy)
        bad, problem = report.first_bad_seq, report.problem or ""
        if kind == "chain recomputed after an edit":
            covering = min(c for c in checkpointed if c >= seq)
            located = bad == covering and f"at or before event {covering}" in problem and (
                all(c >= seq for c in checkpointed) or
                f"after event {max(c for c in checkpointed if c < seq)} " in problem)
        else:
            located = bad == seq
        cases.append(TamperCase(kind, seq, not report.valid, located, problem))
        for suffix in ("", "-wal", "-shm", ".keys", ".keys.master", ".pub",
                       ".markless.keys", ".markless.keys.master"):
            Path(f"{copy}{suffix}").unlink(missing_ok=True)
    return cases


def plain_walk_passes_after_recompute(base: Path, work: Path, seq: int) -> bool:
    """The chain-recompute attack is real: without the checkpoints a plain walk accepts it."""
    from custody_app.domain.chain import canonical, verify_chain
    copy = work / "plain.db"
    _copy(base, copy)
    con = _raw(copy)
    body = json.loads(con.execute("SELECT body FROM events WHERE seq = ?", (seq,)).fetchone()[0])
    body["space"] = "team:attacker"
    con.execute("UPDATE events SET body = ? WHERE seq = ?", (canonical(body), seq))
    _recompute_from(con, seq)
    con.commit()
    con.close()
    with Ledger.open(copy, readonly=True, keystore=markless_keystore(copy)) as ledger:
        return verify_chain(ledger.events()).valid
