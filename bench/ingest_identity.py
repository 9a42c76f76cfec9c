"""Byte identity of ingest across two versions of the code (issue 35): a fixed corpus ingested
with a fixed clock, fixed fact ids and a seeded randomness stream, through `--batch` (in
process) and through the Python API, each on a copy of one starting ledger; then every table
of the ledger and of its key store is digested row by row.

    .venv/bin/python bench/ingest_identity.py --tree /work/main --tree . [--ops 2000]

Each `--tree` runs in a subprocess of its own with PYTHONPATH set to that tree, on copies of
the same starting files (made once, by the first tree), and the digests are compared table by
table: any difference is printed and the exit status is 1. The seeding (os.urandom replaced by
seeded streams, one for the main thread and one for any other: salts, nonces, subject keys,
index version tokens) happens only in this script's child process,
never in the product. Tables that differ between two runs of the same tree (background work
whose timing is not fixed, such as the vector cells' re-clustering) are named and left out.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
SEED = 20261206
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
SUFFIXES = ("", ".keys", ".keys.master")

# Lines beyond bench_ledger's workload, for the paths it does not take: identifiers redacted in
# values, keys, cause details and reasons; holds, releases, a forget; reads served to a session.
EXTRA = [
    {"op": "assert", "ref": "x1", "subject": "acct:x1", "predicate": "contact",
     "value": {"email": "ana.silva@example.com", "phone": "+44 20 7946 0958",
               "card 4111 1111 1111 1111": "on file", "iban": "GB82 WEST 1234 5698 7654 32"},
     "actor": "agent:intake", "cause": {"kind": "message", "ref": "msg_1",
                                        "detail": "from ana.silva@example.com, A/c no. 123456789012"},
     "provenance": "attested", "session": "sess-x"},
    {"op": "assert", "ref": "x2", "subject": "acct:x1", "predicate": "aadhaar",
     "value": "id 2345 6789 0124 and PAN ABCPE1234F", "actor": "agent:intake",
     "cause": {"kind": "tool", "ref": "crm_9"}, "session": "sess-x"},
    {"op": "hold", "fact_id": "@x1", "actor": "user:legal", "reason": "case 7, call +1 415 555 2671"},
    {"op": "release", "fact_id": "@x1", "actor": "user:legal", "reason": "case closed"},
    {"op": "confirm", "fact_id": "@x2", "actor": "reviewer:rev-1", "reason": "checked"},
    {"op": "as_of", "subject": "acct:x1", "session": "sess-x"},
    {"op": "recall", "query": "customer billing invoice", "session": "sess-x"},
    {"op": "forget", "fact_id": "@x2", "actor": "user:dpo", "reason": "subject_request"},
]


def corpus(ops: int) -> list[dict[str, Any]]:
    sys.path.insert(0, str(HERE.parent))
    import bench_contract_floor as F
    import bench_ledger as B
    work = B.make_workload(ops, SEED, START)
    lines = [json.loads(line) for line in F.corpus(work).splitlines()]
    out: list[dict[str, Any]] = []
    for i, line in enumerate(lines + EXTRA):
        at = START + timedelta(seconds=2 * i)
        out += [{"op": "clock", "set": at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}, line]
    return out


def seed_randomness(seed: int) -> None:
    """os.urandom from a seeded stream (this child process only): one for the main thread, one
    for every other. A background thread's draws (the embedding worker's and the
    re-clustering's index version tokens) come at moments the clock decides; taken from the
    main thread's stream, they shifted the salts and nonces of every event written after
    them, so that a change of when the worker runs read as a change of the events."""
    main, others = random.Random(seed), random.Random(seed + 1)
    lock = threading.Lock()

    def draw(n: int) -> bytes:
        with lock:
            rng = main if threading.current_thread() is threading.main_thread() else others
            return rng.randbytes(n)
    os.urandom = draw
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from custody_app.keys import crypto

    def signing_key() -> bytes:  # the ledger's checkpoint key, made at its first checkpoint
        return Ed25519PrivateKey.from_private_bytes(os.urandom(32)).private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
            serialization.NoEncryption())

    crypto.new_signing_key = signing_key


def digest_file(path: str, tree: str) -> dict[str, str]:
    """Table -> sha256 of its rows (sorted; the tree's own path, which the policies table
    names as the policy file's place, written as <tree>)."""
    import apsw
    con = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
    out = {}
    for name, sql in con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' "
                                 "AND name NOT LIKE 'sqlite_%' ORDER BY name").fetchall():
        if sql and sql.upper().startswith("CREATE VIRTUAL"):
            continue  # its shadow tables hold its rows
        rows = sorted(repr(r).replace(tree, "<tree>")
                      for r in con.execute(f'SELECT * FROM "{name}"'))
        out[name] = hashlib.sha256("\n".join(rows).encode()).hexdigest()
    con.close()
    return out


def child(start: Path, work: Path, ops: int) -> dict[str, Any]:
    """Run in the tree under test: ingest through batch and API, return the digests."""
    seed_randomness(SEED)
    import io

    from custody_app.domain.timeutil import ManualClock
    from custody_app.interfaces.batch import run_batch
    from custody_app.ledger.facade import Ledger
    from custody_app.ledger.ops import Aliases, run_op
    from custody_app.recall.embedding import EmbeddingWorker
    # A model embedder's worker runs when the writes pause, so what a recall in the corpus
    # finds by vector (and serves, and records) would depend on the clock: it is held through
    # the ingest (recall is lexical meanwhile, in every tree alike) and let run to the end
    # after it, so its vectors are compared too.
    start_worker = EmbeddingWorker.start
    EmbeddingWorker.start = lambda self: None  # type: ignore[method-assign]
    lines = corpus(ops)
    tree = str(Path(os.environ["PYTHONPATH"]).resolve())
    result: dict[str, Any] = {}
    for mode in ("batch", "api"):
        path = work / f"{mode}.db"
        for suffix in SUFFIXES:
            shutil.copyfile(f"{start}{suffix}", f"{path}{suffix}")
        ledger = Ledger.open(path, clock=ManualClock(START), id_seed=SEED)
        out = io.StringIO()
        with ledger:
            if mode == "batch":
                text = "".join(json.dumps(line) + "\n" for line in lines)
                outcome = run_batch(ledger, io.StringIO(text), out)
                failed = outcome.failed
            else:  # one op at a time, each its own transaction, as an API caller writes
                aliases, failed = Aliases(), 0
                for n, line in enumerate(lines, start=1):
                    if line["op"] == "clock":
                        ledger.clock.set(datetime.fromisoformat(line["set"].replace("Z", "+00:00")))
                        continue
                    res = run_op(ledger, aliases, n, json.dumps(line))
                    failed += not res["ok"]
                    out.write(json.dumps(res, sort_keys=True) + "\n")
            ledger.index.maintenance.join()
            if ledger.index.embedding is not None:
                start_worker(ledger.index.embedding)
                if not ledger.index.settle_embedding(1800):
                    raise SystemExit("the embedding worker did not finish")
        digests = {f"ledger.{k}": v for k, v in digest_file(str(path), tree).items()}
        digests.update({f"keys.{k}": v for k, v in digest_file(f"{path}.keys", tree).items()})
        said = out.getvalue().replace(str(work), "<work>")  # certificates name the ledger's path
        (work / f"{mode}.out").write_text(said)
        digests["results"] = hashlib.sha256(said.encode()).hexdigest()
        result[mode] = {"failed": failed, "digests": digests}
    return result


def make_start(start: Path) -> None:
    seed_randomness(SEED)
    from custody_app.ledger.facade import Ledger
    with Ledger.open(start) as ledger:
        ledger.db.put_meta("ledger_id", "0" * 32)  # fixed: chained into the first event


def run_tree(tree: str, args: list[str]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
    proc = subprocess.run([sys.executable, str(HERE), *args], env=env, capture_output=True,
                          text=True, cwd=tree)
    if proc.returncode:
        raise SystemExit(f"{tree}: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", default=[])
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--child", nargs=2, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--make-start", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.make_start:
        make_start(Path(args.make_start))
        print(json.dumps({}))
        return 0
    if args.child:
        print(json.dumps(child(Path(args.child[0]), Path(args.child[1]), args.ops)))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="ingest-identity-"))
    try:
        start = tmp / "start.db"
        run_tree(args.tree[0], ["--make-start", str(start)])
        results = []
        for i, tree in enumerate([args.tree[0], *args.tree]):  # the first tree twice: noise
            work = tmp / f"run{i}"
            work.mkdir()
            results.append(run_tree(tree, ["--child", str(start), str(work), "--ops",
                                           str(args.ops)]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    bad = 0
    for mode in ("batch", "api"):
        a, b = results[0][mode]["digests"], results[1][mode]["digests"]
        noisy = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
        print(f"{mode}: failed ops {[r[mode]['failed'] for r in results]}; tables that differ "
              f"between two runs of {args.tree[0]} (left out): {sorted(noisy) or 'none'}")
        for tree, res in zip(args.tree[1:], results[2:], strict=True):
            d = res[mode]["digests"]
            diff = sorted(k for k in a.keys() | d.keys() if k not in noisy and a.get(k) != d.get(k))
            same = len([k for k in a if k not in noisy and a.get(k) == d.get(k)])
            print(f"  {tree} against {args.tree[0]}: {same} tables identical; differ: "
                  f"{diff or 'none'}")
            bad += len(diff)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
