"""Fuzz run over the four hostile surfaces: batch lines, policy files, output paths, MCP messages.

    .venv/bin/python bench/bench_fuzz.py [--cases 10000] [--out bench/results_fuzz.md]

Each surface gets `--cases` hypothesis-generated cases (randomized: a new seed each run; the
suite's fixed-seed versions are tests/test_reliability_hostile.py and tests/test_hostile_*.py)
on real files, and counts: cases tried, crashes (an exception that is not a coded refusal, an
`internal_error`, or a dead server), hangs (a case taking over 2 s, or an MCP request with no
reply within 2 s) and failed operations that changed the ledger (event count, chain head and
sha256 of the ledger, its WAL and its key store, compared before and after every refused case).
Batch, policy and path cases run in process; MCP messages go to one real `custody-app serve`
over stdio, each followed by a ping, and to one real `custody-app serve --http` (a fixed seed,
`--seed`, for the MCP surfaces). An MCP request without a reply is counted; so is a reply to a
notification or a response (JSON-RPC 2.0 forbids one).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from bench.benchenv import header, machine_note  # noqa: E402
from bench.fuzz_cases import HANG_S, Tally, file_state, paths, policy_texts, writers  # noqa: E402  # noqa: E402
from bench.fuzz_mcp import mcp_requests  # noqa: E402
from bench.fuzz_mcp_http import mcp_http_requests  # noqa: E402
from custody_app.domain.errors import LedgerError  # noqa: E402
from custody_app.domain.policy import load_policy  # noqa: E402
from custody_app.domain.timeutil import ManualClock  # noqa: E402
from custody_app.files.output import write_output  # noqa: E402
from custody_app.keys.keyring import write_public_key  # noqa: E402
from custody_app.ledger.facade import Ledger  # noqa: E402
from custody_app.ledger.ops import Aliases, result_line, run_op  # noqa: E402
from tests.hostile import hostile_lines, valid_setup  # noqa: E402


def fuzz(strategy: st.SearchStrategy[Any], cases: int, body: Callable[[Any], None]) -> None:
    @settings(max_examples=cases, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def run(case: Any) -> None:
        body(case)
    run()


def batch_lines(tmp: Path, cases: int) -> Tally:
    tally, db = Tally(), tmp / "batch.db"
    setup_refused: list[str] = []
    with Ledger.open(db, clock=ManualClock()) as ledger:
        aliases: Aliases = valid_setup(ledger)

        def settled() -> tuple[Any, ...]:
            # A background WAL checkpoint (store.sqlite.checkpointer) started by an earlier accepted
            # write copies pages into the file at any moment: wait for it before hashing.
            if ledger.db.checkpointer is not None:
                ledger.db.checkpointer.wait()
            return (ledger.db.events.count(), ledger.db.events.head(), file_state(db))

        def one(line: str) -> None:
            tally.cases += 1
            before = settled()
            start = time.monotonic()
            try:
                out = json.loads(result_line(run_op(ledger, aliases, tally.cases, line)))
            except Exception as exc:  # noqa: BLE001 - a crash is what we count
                tally.crashes += 1
                tally.note(f"crash {exc!r}", line)
                return
            tally.hangs += time.monotonic() - start > HANG_S
            if out["ok"]:
                if out["op"] not in ("as_of", "history", "why", "verify", "recall"):
                    try:
                        valid_setup(ledger, aliases)
                    except LedgerError as exc:
                        # The harness's own re-setup refused (e.g. acct:1 erased at the very
                        # instant the next work begins): counted and shown, not a case result.
                        setup_refused.append(exc.code)
                return
            tally.refused += 1
            if out["error"]["code"] == "internal_error":
                tally.crashes += 1
                tally.note("internal_error", line)
            if settled() != before:
                tally.changed += 1
                tally.note("changed", line)

        fuzz(hostile_lines, cases, one)
        assert ledger.verify().valid
    if setup_refused:
        tally.extra = (f"the harness's re-setup of acct:1 after an accepted line was refused "
                       f"{len(setup_refused)} times ({', '.join(sorted(set(setup_refused)))})")
    return tally


def policy_files(tmp: Path, cases: int) -> Tally:
    tally, db, policy = Tally(), tmp / "policy.db", tmp / "p.toml"
    with Ledger.open(db) as ledger:
        valid_setup(ledger)

    def one(text: bytes) -> None:
        tally.cases += 1
        policy.write_bytes(text)
        start = time.monotonic()
        before = file_state(db)
        try:
            loaded = load_policy(policy)
            with Ledger.open(db, policy=loaded) as ledger:
                ledger.sweep(dry_run=True)
        except LedgerError:
            tally.refusal(db, before, text)
        except Exception as exc:  # noqa: BLE001
            tally.crashes += 1
            tally.note(f"crash {exc!r}", text)
        tally.hangs += time.monotonic() - start > HANG_S

    fuzz(policy_texts(), cases, one)
    return tally


def _path_fixture(tmp: Path) -> tuple[Path, str, list[Path]]:
    work = tmp / "paths"
    work.mkdir()
    db = work / "l.db"
    with Ledger.open(db) as ledger:
        fact = valid_setup(ledger).names["a1"][0]
        ledger.checkpoint()
    with Ledger.open(work / "other.db") as other:
        valid_setup(other)
        other.checkpoint()
    (work / "link-to-ledger").symlink_to(db)
    (work / "link-to-keys").symlink_to(f"{db}.keys")
    os.link(f"{db}.keys", work / "hard-keys")
    (work / "dangling").symlink_to(work / "nowhere")
    os.mkfifo(work / "fifo")
    (work / "dir").mkdir()
    (work / "writer.key").write_text("ab" * 32 + "\n")
    (work / "eval.pem").write_text("-----BEGIN PRIVATE KEY-----\nx\n")
    (work / "eval.pem.pub").write_text("-----BEGIN PUBLIC KEY-----\nx\n")
    precious = [db, Path(f"{db}.keys"), Path(f"{db}.keys.master"), Path(f"{db}.pub"),
                work / "other.db", work / "other.db.keys", work / "other.db.keys.master",
                work / "writer.key", work / "eval.pem", work / "eval.pem.pub"]
    return db, fact, precious


def output_paths(tmp: Path, cases: int) -> Tally:
    tally = Tally()
    db, fact, precious = _path_fixture(tmp)
    work = db.parent
    hashes = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in precious}
    fixed = set(work.iterdir())
    with Ledger.open(db) as ledger:
        def one(case: tuple[str, str, bool]) -> None:
            name, writer, force = case
            tally.cases += 1
            (work / "notes.txt").write_text("a user's own notes")
            target = work / name if not name.startswith("/") else Path(name)
            start = time.monotonic()
            try:
                if writer == "export":
                    ledger.export(target, force=force)
                elif writer == "pack":
                    ledger.write_pack(fact, target, force=force)
                elif writer == "report":
                    write_output(target, "{}\n", force=force)
                else:
                    write_public_key(target.with_suffix("") if target.suffix == ".pub" else target,
                                     ledger.keys.public_pem() if ledger.keys else "")
            except LedgerError:
                tally.refused += 1
            except Exception as exc:  # noqa: BLE001
                tally.crashes += 1
                tally.note(f"crash {exc!r}", case)
            tally.hangs += time.monotonic() - start > HANG_S
            if any(hashlib.sha256(p.read_bytes()).hexdigest() != h for p, h in hashes.items()) or (
                    not force and (work / "notes.txt").read_text() != "a user's own notes"):
                tally.changed += 1
                tally.note("a precious file changed", case)
                for p in precious:
                    hashes[p] = hashlib.sha256(p.read_bytes()).hexdigest()
            for made in set(work.iterdir()) - fixed:  # new outputs go, so names stay "new"
                if made.is_file() and not made.is_symlink() and made.name != "notes.txt":
                    made.unlink()

        fuzz(st.tuples(paths, writers, st.booleans()), cases, one)
    return tally


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--only", choices=("batch", "policy", "paths", "mcp", "mcp-http"),
                    action="append")
    ap.add_argument("--seed", type=int, default=32,
                    help="hypothesis seed of the MCP surfaces (fixed: a run can be repeated)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    notes = [f"load average at start: {open('/proc/loadavg').read().strip()}",
             f"other load at start: {machine_note()}"]
    surfaces = {"batch lines (batch runner's run_op)": ("batch", batch_lines),
                "policy files (load, open, dry-run sweep)": ("policy", policy_files),
                "output paths (export, pack, report, public key)": ("paths", output_paths),
                "MCP requests (real stdio server)": ("mcp", mcp_requests),
                "MCP requests (real HTTP server)": ("mcp-http", mcp_http_requests)}
    rows = []
    for name, (key, surface) in surfaces.items():
        if args.only and key not in args.only:
            continue
        tmp = Path(tempfile.mkdtemp(prefix=f"custody-fuzz-{key}-"))
        try:
            start = time.monotonic()
            tally = (surface(tmp, args.cases, args.seed) if key.startswith("mcp")
                     else surface(tmp, args.cases))
            rows.append(tally.row(name, time.monotonic() - start))
            print(rows[-1], flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    notes += [f"load average at end: {open('/proc/loadavg').read().strip()}",
              f"other load at end: {machine_note()}",
              "counts, not speed: seconds are context only (shared 2-core machine)"]
    table = "\n".join(["| surface | cases | refused with a code | crashes | hangs > 2 s | failed "
                       "ops that changed the ledger | examples | time |",
                       "|---|---|---|---|---|---|---|---|", *rows])
    text = header(notes) + "\n\n" + table
    print(text)
    if args.out:
        Path(args.out).write_text("# custody-app fuzz run\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
