"""verify's CPU time per event on a ledger whose events a registered Ed25519 writer key signed
(the other verify benches build ledgers whose writers hold no key): verify as it runs, and the
same walk with the per-event signature check left out, on the same file, in one process.

    .venv/bin/python bench/bench_verify_signed.py --sizes 20000 100000 --keep DIR \\
        [--rounds 3] [--out bench/results_verify.md] [--build-only]

Each ledger (about SIZE events: half asserts by `agent:w`, half affirms of its live facts, in
transactions of 5,000; every one signed by agent:w's key, which the policy registers) is built
once under `--keep` (DIR: a folder from mktemp -d) and opened read-only for the runs. Rounds
are interleaved (with, without); best of the rounds, this process's CPU time (wall time beside
it). "Without" replaces SignatureAudit.check for that call only: everything else verify does is
the same. The 1-minute load average (/proc/loadavg) is read at the start and the end. Writes a
section into `--out` (replacing an earlier one of this bench) and prints it. No thread settings
are made here and nothing asserts on time.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_verify import kinds  # noqa: E402
from bench.benchenv import header, machine_note  # noqa: E402
from custody_app.evidence import signatures  # noqa: E402
from custody_app.keys.writer_keys import WriterKey  # noqa: E402
from custody_app.ledger.facade import Ledger  # noqa: E402

SECTION = "## Writer signatures (issue 31): verify with and without the signature check"
WRITER = "agent:w"
# Fixed bench material, never a real key: the writer key whose public half the policy registers.
KEY = WriterKey.from_raw(bytes([7]) * 32)
CAUSE = {"kind": "tool", "ref": "bench"}
GROUP = 5000


def policy_text() -> str:
    return f'[provenance]\nwriter_keys = {{"{WRITER}" = "{KEY.signer}"}}\n'


def build(path: Path, events: int, seed: int = 11) -> int:
    """About `events` events by the keyed writer (half asserts, half affirms), signed."""
    rng = random.Random(seed)
    policy = path.with_suffix(".toml")
    policy.write_text(policy_text(), encoding="utf-8")
    with Ledger.open(path, policy=policy) as led:
        assert led.present_writer_key(WRITER, KEY)
        live: list[str] = []
        while led.db.events.count() < events:
            with led.transaction():
                for i in range(min(GROUP, events - led.db.events.count())):
                    if len(live) < 200 or rng.random() < 0.5:
                        r = led.assert_fact(f"acct:{rng.randrange(5000)}", "note",
                                            {"n": i, "text": "x" * rng.randrange(200)},
                                            actor=WRITER, cause=CAUSE, provenance="attested")
                        live.append(r.fact_id)
                    else:
                        led.affirm(live[rng.randrange(len(live))], actor=WRITER)
        return led.db.events.count()


def ledger_for(keep: Path, size: int) -> tuple[Path, int, float | None]:
    """The signed ledger of `size` events under `keep`, built once and reused."""
    keep.mkdir(parents=True, exist_ok=True)
    path, done = keep / f"signed{size}.db", keep / f"signed{size}.built"
    if done.exists():
        return path, int(done.read_text().split()[0]), None
    for stale in keep.glob(f"signed{size}.db*"):
        stale.unlink()
    t0 = time.perf_counter()
    count = build(path, size)
    built = time.perf_counter() - t0
    done.write_text(f"{count} {built:.0f}\n")
    return path, count, built


@contextmanager
def without_signature_check() -> Iterator[None]:
    """verify's walk with SignatureAudit.check answering 'nothing wrong' at once."""
    real = signatures.SignatureAudit.check
    signatures.SignatureAudit.check = lambda self, row, body: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        signatures.SignatureAudit.check = real  # type: ignore[method-assign]


def timed_verify(led: Ledger) -> tuple[float, float, int]:
    """(wall s, CPU s of this process, events) of one verify that must pass."""
    w0, c0 = time.perf_counter(), time.process_time()
    report = led.verify()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    assert report.valid, report.problem
    return wall, cpu, report.events


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def measure(path: Path, rounds: int) -> dict[str, Any]:
    runs: dict[str, list[tuple[float, float]]] = {"with": [], "without": []}
    events = 0
    with Ledger.open(path, readonly=True) as led:
        signed = sum(1 for r in led.db.events.iter_all() if r.signature is not None)
        for _ in range(rounds):
            wall, cpu, events = timed_verify(led)
            runs["with"].append((wall, cpu))
            with without_signature_check():
                wall, cpu, events = timed_verify(led)
            runs["without"].append((wall, cpu))
    return {"events": events, "signed": signed, "runs": runs}


def table(results: list[tuple[int, dict[str, Any]]]) -> list[str]:
    lines = ["| events | signed | run | best wall (s) | best CPU (s) | CPU µs/event | "
             "CPU of each round (s) |", "|---|---|---|---|---|---|---|"]
    for _size, res in results:
        for name in ("with", "without"):
            runs = res["runs"][name]
            cpu = min(c for _, c in runs)
            wall = min(w for w, _ in runs)
            label = "verify" if name == "with" else "verify, signature check left out"
            lines.append(f"| {res['events']:,} | {res['signed']:,} | {label} | {wall:.2f} | "
                         f"{cpu:.2f} | {cpu / res['events'] * 1e6:.1f} | "
                         f"{', '.join(f'{c:.2f}' for _, c in runs)} |")
        per = {n: min(c for _, c in res["runs"][n]) / res["events"] * 1e6
               for n in ("with", "without")}
        lines.append(f"| {res['events']:,} | | the signature check | | | "
                     f"{per['with'] - per['without']:.1f} | |")
    return lines


def write_section(out: Path, text: str) -> None:
    old = out.read_text(encoding="utf-8") if out.exists() else ""
    if SECTION in old:
        before, rest = old.split(SECTION, 1)
        after = rest.split("\n## ", 1)
        old = before.rstrip("\n") + ("\n\n## " + after[1] if len(after) > 1 else "")
    out.write_text(old.rstrip("\n") + "\n\n" + text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[20000, 100000])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--keep", type=Path, required=True, help="where the ledgers are built")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results_verify.md")
    p.add_argument("--build-only", action="store_true", help="build the ledgers, measure nothing")
    args = p.parse_args(argv)
    built: list[str] = []
    for size in args.sizes:
        path, count, seconds = ledger_for(args.keep, size)
        if seconds is not None:
            built.append(f"{count:,} events built in {seconds:.0f} s")
    if args.build_only:
        print("; ".join(built) or "already built")
        return 0
    start, others = loadavg(), machine_note()
    results = [(size, measure(ledger_for(args.keep, size)[0], args.rounds)) for size in args.sizes]
    end = loadavg()
    mix = kinds(ledger_for(args.keep, args.sizes[-1])[0])
    text = "\n".join([
        SECTION, "",
        "    .venv/bin/python bench/bench_verify_signed.py --sizes "
        + " ".join(map(str, args.sizes)) + f" --keep DIR --rounds {args.rounds}", "",
        header([f"ledger ({args.sizes[-1]:,}): {mix}; every event but the first policy event "
                "signed by the writer key the policy registers for agent:w (the policy event by "
                "the ledger's own key)",
                f"{args.rounds} rounds interleaved (with, without), best of the rounds, this "
                "process's CPU time",
                f"load (1-minute average, /proc/loadavg): {start} at the start, {end} at the end; "
                f"other processes at the start: {others}"]
               + ([f"build: {'; '.join(built)}"] if built else [])), "",
        *table(results), ""])
    write_section(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
