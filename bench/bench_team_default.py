"""Single-assert latency on a server under the shipped default policy (minilm-l6), two trees in
one run (issue 35: before, the model embedded inside every write; after, a background worker
adds the vectors off the write path).

    PYTHONPATH=. .venv/bin/python bench/bench_team_default.py --tree /work/main --tree . \
        [--label main --label branch] [--asserts 200] [--paced 40] [--rounds 3] \
        [--out bench/results_team.md]

- one PostgreSQL 18 server of its own (tests/pgserver.start, a TCP port on 127.0.0.1, the test
  settings: fsync off); each measurement a fresh database reached over loopback TCP, in a
  process of its own with PYTHONPATH set to the tree measured (`--tree`, twice or more);
- each tree under two policies: this checkout's shipped default (minilm-l6), and the same text
  with the embedder hashed-ngram (the floor: an assert that runs no model, measured in the same
  run, in the same tree);
- back to back: --asserts asserts, each its own transaction, after 20 untimed ones; paced:
  --paced asserts 0.3 s apart (the worker embeds in those pauses, beside the next assert);
- rounds interleave the trees, so load that drifts during the run falls on both; a tree is
  named by its commit, or by its --label (an export of a commit has no .git: say which);
- after the last assert: the facts still waiting for their vector, and how long the worker
  took to embed them (`settle_embedding`).

Writes a section of --out (bench/results_team.md: its other sections, the team bench's, are
kept). No thread settings are made here (the product sets its own)."""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The child imports custody_app from the tree under test (its PYTHONPATH) and nothing of
# this checkout's; the parent puts this checkout first on its path (main).
ROOT = Path(__file__).resolve().parent.parent
HEADING = "## Single-assert latency under the shipped default (minilm-l6), before and after"
PACE_S = 0.3


def child(url: str, policy: str, asserts: int, pace: float) -> None:
    """In the tree under test (PYTHONPATH): time single asserts, then the drain (the asserts
    of bench_team.py's single-assert section)."""
    from custody_app.ledger.facade import Ledger

    rng = random.Random(7)
    predicates = ("plan", "region", "tier", "owner", "seats", "renewal")

    def put(n: int) -> None:
        ledger.assert_fact(f"acct:{rng.randrange(200)}", rng.choice(predicates),
                           {"v": f"value {n}", "seats": rng.randrange(500)},
                           actor="agent:bench", cause={"kind": "tool", "ref": "bench"},
                           provenance="attested")

    with Ledger.open(url, policy=policy) as ledger:
        for n in range(20):
            put(n)
        times = []
        for n in range(asserts):
            if pace:
                time.sleep(pace)
            t0 = time.perf_counter()
            put(n)
            times.append(time.perf_counter() - t0)
        waiting = ledger.index.unembedded()
        t0 = time.perf_counter()
        drained = ledger.index.settle_embedding(600)
        drain = time.perf_counter() - t0
        print(json.dumps({"times": times, "waiting": waiting, "drain": drain,
                          "drained": drained, "deferred": bool(ledger.index.deferred)}))


def run(tree: str, url: str, policy: Path, asserts: int, pace: float) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", url,
                           str(policy), str(asserts), str(pace)], capture_output=True,
                          text=True, env=env, cwd=tree, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: {proc.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def commit_of(tree: str) -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True,
                          text=True).stdout.strip() or "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", default=[])
    ap.add_argument("--label", action="append", default=[])
    ap.add_argument("--asserts", type=int, default=200)
    ap.add_argument("--paced", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--child", nargs=4, default=None)
    args = ap.parse_args()
    if args.child:
        url, policy, asserts, pace = args.child
        child(url, policy, int(asserts), float(pace))
        return
    sys.path.insert(0, str(ROOT))
    from bench.bench_team import MASTER, free_port, loadavg, pct
    from bench.benchenv import header, machine_note, write_section
    from tests import pgserver

    trees = args.tree or [str(ROOT)]
    labels = dict(zip(trees, args.label, strict=False))
    tmp = Path(tempfile.mkdtemp(prefix="bench-team-default-"))
    os.environ["XDG_DATA_HOME"] = str(tmp / "data")
    os.environ["CUSTODY_MASTER_KEY"] = MASTER
    shipped = (ROOT / "policies" / "default.toml").read_text(encoding="utf-8")
    assert 'embedder = "minilm-l6"\n' in shipped
    policies = {"minilm-l6": tmp / "default.toml", "floor": tmp / "floor.toml"}
    policies["minilm-l6"].write_text(shipped, encoding="utf-8")
    policies["floor"].write_text(shipped.replace('embedder = "minilm-l6"\n',
                                                 'embedder = "hashed-ngram"\n'), encoding="utf-8")
    load_start, started = loadavg(), time.time()
    port = free_port()
    server = pgserver.start(tcp_port=port)
    runs: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    try:
        for _ in range(args.rounds):
            for tree in trees:
                for name, policy in policies.items():
                    for mode, count, pace in (("back to back", args.asserts, 0.0),
                                              ("paced", args.paced, PACE_S)):
                        url = server.fresh_database()
                        db = url.split("?", 1)[0].rsplit("/", 1)[1]
                        tcp = f"postgresql://custody@127.0.0.1:{port}/{db}"
                        done = run(tree, tcp, policy, count, pace)
                        runs.setdefault((tree, name, mode), []).append(done)
                        server.drop_database(url)
                        print(tree, name, mode, f"{statistics.median(done['times']) * 1e3:.2f} ms",
                              flush=True)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    rows = ["| tree | embedder | asserts | median ms | p99 ms | max ms | median / floor's | "
            "waiting after the last | drain s |", "|---|---|---|---|---|---|---|---|---|"]
    for tree in trees:
        for mode in ("back to back", "paced"):
            floor = statistics.median([t for r in runs[(tree, "floor", mode)] for t in r["times"]])
            for name in policies:
                done = runs[(tree, name, mode)]
                times = [t for r in done for t in r["times"]]
                med = statistics.median(times)
                rows.append(
                    f"| {labels.get(tree) or f'{tree} ({commit_of(tree)})'} | {name}{' (worker)' if done[0]['deferred'] else ''}"
                    f" | {len(times)} {mode} | {med * 1e3:.2f} | {pct(times, 0.99) * 1e3:.2f} | "
                    f"{max(times) * 1e3:.2f} | {med / floor:.2f} | "
                    f"{'/'.join(str(r['waiting']) for r in done)} | "
                    f"{'/'.join(format(r['drain'], '.1f') for r in done)} |")
    command = ("PYTHONPATH=. .venv/bin/python bench/bench_team_default.py "
               + " ".join(f"--tree {t}" for t in trees)
               + "".join(f" --label {v}" for v in args.label)
               + f" --asserts {args.asserts} --paced {args.paced} --rounds {args.rounds}"
               + (f" --out {args.out}" if args.out else ""))
    notes = [f"command: `{command}`", f"/proc/loadavg at start: {load_start}",
             f"/proc/loadavg at end: {loadavg()}; whole run {time.time() - started:.0f} s",
             f"other load at the end: {machine_note()}",
             "each tree a process of its own per measurement, on a fresh database of one "
             "PostgreSQL 18 server over loopback TCP (fsync off); rounds interleave the trees; "
             f"paced asserts are {PACE_S} s apart; 'waiting' and 'drain' per round"]
    text = "\n".join([HEADING + " (issue 35)", "", header(notes), "", *rows]) + "\n"
    print(text)
    if args.out:
        write_section(args.out, HEADING, text)


if __name__ == "__main__":
    main()
