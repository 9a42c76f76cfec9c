"""Issue 35: verify against its floor, reading and hashing every event, measured in the same run
on the same file (run through `bench/bench_verify.py --read-floor LEDGER[,LEDGER...]`).

- floor: plain APSW, read-only, the event columns verify reads (every column of `events` and
  the writer signature beside it, in seq order) and sha256(prev_hash || body) of each event,
  compared with its stored hash: the chain's own definition of an event's hash (the body is
  stored as the canonical text that was hashed). No other table read, nothing opened.
- second floor, the crypto a sealed ledger adds: the floor's loop plus, for each event, its body
  parsed (orjson) and, for each sealed value and sealed free text, the blob opened under its
  subject's key (AES-256-GCM; the key store read in one query as verify reads it, each key
  unwrapped as first met) and its salted commitment recomputed (sha256): what any verify of
  DESIGN 13 must do per event, with no other check, no fold, no derived table (a plain loop,
  no error handling).
- verify (API): `Ledger.open(path, readonly=True).verify()`, the call timed (the open beside it).
- verify (CLI): `custody-app verify --ledger PATH` as a user runs it, a real subprocess; its
  CPU time from the child's rusage (interpreter start and imports included).
- verify --deep (API): the recall indexes' content re-derived as well, reported on its own.
- profile: one API verify under cProfile, its time split by check (the audits' entry points),
  shares of the profiled time, scaled to the unprofiled CPU time of the same run.

Floor and verify alternate `rounds` times; best of the rounds. CPU time is the figure to read
on this shared machine (wall time includes time spent descheduled). No thread variable set.
"""

from __future__ import annotations

import cProfile
import hashlib
import os
import pstats
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw

from bench.benchenv import ROOT, header, machine_note, write_section
from custody_app.ledger.facade import Ledger
from store.rows import EVENT_COLUMNS

HEADING = "## Issue 35: verify against reading and hashing every event (current)"
_SELECT = (f"SELECT {', '.join('e.' + c for c in EVENT_COLUMNS)}, s.signature FROM events e "
           "LEFT JOIN event_signatures s ON s.seq = e.seq ORDER BY e.seq")
_PREV, _BODY, _HASH = (EVENT_COLUMNS.index(c) for c in ("prev_hash", "body", "hash"))


def read_and_hash(path: Path) -> tuple[int, int]:
    """(events, events whose hash did not match): the floor's whole work."""
    con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    sha = hashlib.sha256
    count = bad = 0
    try:
        for row in con.execute(_SELECT):
            count += 1
            if sha(row[_PREV].encode("ascii") + row[_BODY].encode("utf-8")).hexdigest() != row[_HASH]:
                bad += 1  # an upgraded event's hash covers its body before the upgrade
    finally:
        con.close()
    return count, bad


_TEXTS = "SELECT seq, fact_id, subject_ref, sealed, salt FROM event_texts ORDER BY seq"


def read_hash_and_open(path: Path) -> tuple[int, int]:
    """The second floor: (events, values and texts opened)."""
    import orjson

    from custody_app.keys.crypto import Ciphers
    with Ledger.open(path, readonly=True) as led:
        keys = led.keys
        assert keys is not None
        ciphers = Ciphers(keys.snapshot_keys(), snapshot=True)
        con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        sha = hashlib.sha256
        count = opened = 0
        try:
            texts = iter(con.execute(_TEXTS))
            text = next(texts, None)
            for row in con.execute(_SELECT):
                count += 1
                seq, body_text = row[0], row[_BODY]
                sha(row[_PREV].encode("ascii") + body_text.encode("utf-8")).hexdigest()
                body = orjson.loads(body_text)
                value, salt = row[8], row[9]
                if value is not None:
                    plain = ciphers.open_blob(body["subject_ref"], value,
                                              row[5])
                    if plain is not None:
                        sha(bytes.fromhex(salt) + plain).hexdigest()
                        opened += 1
                while text is not None and text[0] < seq:
                    text = next(texts, None)
                if text is not None and text[0] == seq and text[3] is not None:
                    plain = ciphers.open_blob(text[2], text[3],
                                              f"text:{text[1]}")
                    if plain is not None:
                        sealed = orjson.dumps(orjson.loads(plain), option=orjson.OPT_SORT_KEYS)
                        sha(bytes.fromhex(text[4]) + sealed).hexdigest()
                        opened += 1
        finally:
            con.close()
    return count, opened


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def cli(path: Path, root: Path = ROOT) -> tuple[float, float, int]:
    """(wall, CPU of the child, exit code) of `custody-app verify` in a subprocess, run from
    the checkout `root` (this one, or an older commit's worktree for the figure before)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    wall = time.perf_counter()
    # Run from `root`: `python -m` puts the working folder first on sys.path, ahead of PYTHONPATH.
    proc = subprocess.Popen([sys.executable, "-m", "custody_app", "verify", "--ledger", str(path)],
                            env=env, cwd=root, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - wall, usage.ru_utime + usage.ru_stime, proc.returncode


# The audits' entry points: (label, file suffix, function). Nested entries are subtracted from
# the one that calls them (the value commitment is opened inside the chain check).
CHECKS = (
    ("read the events (the store's paged iterator)", "store/sqlite/events.py", "iter_all"),
    ("chain: hash, link, mirrored columns, body parse", "custody_app/domain/chain.py", "_check"),
    ("value commitments (open the sealed value, sha256)", "custody_app/evidence/verify.py",
     "opener"),
    ("signed checkpoints", "custody_app/evidence/checkpoints.py", "check"),
    ("receipts", "custody_app/evidence/receipts.py", "check"),
    ("sealed free text (open, commitment, strays)", "custody_app/evidence/textaudit.py", "check"),
    ("kinds, valueless asserts, the fold", "custody_app/evidence/integrity.py", "check"),
    ("writer signatures, policy in force", "custody_app/evidence/signatures.py", "check"),
    ("the same for a plain affirm", "custody_app/evidence/signatures.py", "plain"),
    ("derived tables (fed in the walk)", "custody_app/core/derived.py", "check"),
    ("finish: sealed text left over", "custody_app/evidence/textaudit.py", "finish"),
    ("finish: valueless, policy texts, tombstones, projection vs fold",
     "custody_app/evidence/integrity.py", "finish"),
    ("finish: derived tables vs fold", "custody_app/core/derived.py", "finish"),
    ("recall indexes hold the believed facts", "custody_app/recall/index.py", "differences"),
    ("erasure: forgotten-value digests, word index key", "custody_app/erasure/checks.py",
     "erasure_checks"),
)


def profile(path: Path, cpu: float) -> list[str]:
    """Markdown rows: each check's share of one profiled verify, scaled to `cpu` seconds."""
    with Ledger.open(path, readonly=True) as led:
        prof = cProfile.Profile()
        prof.enable()
        led.verify()
        prof.disable()
    stats: dict[Any, Any] = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    total = sum(tt for _cc, _nc, tt, _ct, _callers in stats.values())
    cum: dict[str, float] = {}
    for label, suffix, func in CHECKS:
        cum[label] = sum(v[3] for (file, _line, name), v in stats.items()
                         if file.endswith(suffix) and name == func)
    cum[CHECKS[1][0]] -= cum[CHECKS[2][0]]
    rows = [f"| {label} | {cum[label] / total:.1%} | {cum[label] / total * cpu:.2f} |"
            for label, _s, _f in CHECKS]
    rest = total - sum(cum.values())
    rows.append(f"| everything else (the walk loop, with a plain affirm's link, text and hash "
                f"checked inline; dispatch, key store, ledger id) | "
                f"{rest / total:.1%} | {rest / total * cpu:.2f} |")
    return rows


def measure(path: Path, rounds: int, before: Path | None = None) -> dict[str, Any]:
    floor, crypto, api, clis, old = [], [], [], [], []
    opened = 0.0
    events = bad = 0
    for _ in range(rounds):
        wall, cpu, (events, bad) = timed(lambda: read_and_hash(path))
        floor.append((wall, cpu))
        wall, cpu, _ = timed(lambda: read_hash_and_open(path))
        crypto.append((wall, cpu))
        w0 = time.perf_counter()
        with Ledger.open(path, readonly=True) as led:
            opened = time.perf_counter() - w0
            wall, cpu, report = timed(led.verify)
        assert report.valid, report.problem
        api.append((wall, cpu))
        wall, cpu, code = cli(path)
        assert code == 0, f"custody-app verify exited {code}"
        clis.append((wall, cpu))
        if before is not None:
            wall, cpu, code = cli(path, before)
            assert code == 0, f"the verify before exited {code}"
            old.append((wall, cpu))
    with Ledger.open(path, readonly=True) as led:
        wall, cpu, report = timed(lambda: led.verify(deep=True))
    assert report.valid, report.problem
    return {"events": events, "bad": bad, "floor": floor, "crypto": crypto, "api": api,
            "cli": clis, "before": old,
            "deep": [(wall, cpu)], "open": opened}


def _commit(root: Path | None) -> str:
    if root is None:
        return ""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                          text=True).stdout.strip()


def kinds(path: Path) -> str:
    con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        counts = list(con.execute("SELECT kind, count(*) FROM events GROUP BY kind "
                                  "ORDER BY count(*) DESC"))
    finally:
        con.close()
    total = sum(n for _, n in counts)
    return ", ".join(f"{k} {n / total:.0%}" if n * 100 >= total else f"{k} {n}"
                     for k, n in counts)


def run(paths: list[Path], rounds: int, out: Path | None, do_profile: bool = True,
        before: Path | None = None) -> str:
    load0 = os.getloadavg()[0]
    note0 = machine_note()
    table = ["| ledger | events | run | best wall (s) | best CPU (s) | CPU / floor CPU | "
             "wall / floor wall | CPU µs/event | CPU of each round (s) |",
             "|---|---|---|---|---|---|---|---|---|"]
    profiles: list[str] = []
    described: list[str] = []
    for path in paths:
        got = measure(path, rounds, before)
        n = got["events"]
        described.append(f"{path.name}: {n:,} events ({kinds(path)}); hashes not matching "
                         f"the stored one in the floor: {got['bad']}; open (read-only) "
                         f"{got['open'] * 1e3:.0f} ms beside the API call")
        fw, fc = min(w for w, _ in got["floor"]), min(c for _, c in got["floor"])
        for name, key in (("floor: read + sha256", "floor"),
                          ("second floor: + parse, open and commit each sealed value and text",
                           "crypto"), ("verify (API)", "api"),
                          ("custody-app verify (CLI subprocess)", "cli"),
                          (f"custody-app verify before (CLI, {_commit(before)})", "before"),
                          ("verify --deep (API), reported apart", "deep")):
            runs = got[key]
            if not runs:
                continue
            w, c = min(x for x, _ in runs), min(y for _, y in runs)
            table.append(f"| {path.name} | {n:,} | {name} | {w:.2f} | {c:.2f} | {c / fc:.1f}x | "
                         f"{w / fw:.1f}x | {c / n * 1e6:.1f} | "
                         f"{', '.join(f'{y:.2f}' for _, y in runs)} |")
        if do_profile:
            cpu = min(c for _, c in got["api"])
            profiles += ["", f"Profile of one API verify of {path.name} ({n:,} events), "
                         f"cProfile, shares of the profiled time scaled to the best unprofiled "
                         f"CPU time ({cpu:.2f} s):", "",
                         "| check | share | ≈ CPU s |", "|---|---|---|", *profile(path, cpu)]
        print("\n".join(table), flush=True)
    load1 = os.getloadavg()[0]
    text = "\n".join([
        HEADING, "",
        "    .venv/bin/python bench/bench_verify.py --read-floor L100K.db,L1M.db --rounds R "
        "[--before OLD_CHECKOUT]", "",
        header([f"{rounds} rounds interleaved (floor, API, CLI), best of the rounds; --deep once",
                f"load (1-minute average): {load0:.2f} at the start, {load1:.2f} at the end",
                f"other processes at the start: {note0}", *described]),
        "", *table, *profiles])
    if out is not None:
        write_section(out, HEADING, text)
    return text
