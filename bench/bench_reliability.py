"""Reliability figures: kills survived, writes checked, hostile inputs tried, tampering caught.

    .venv/bin/python bench/bench_reliability.py [--kills 60] [--concurrency-s 20]
                                                [--hostile 5000] [--out bench/results_reliability.md]

Runs, on real files in a temporary directory, the same machinery as tests/test_reliability_*.py
at a larger size:

- crash: a writer process (tests/reliability_child.py) appends through the Python API and prints
  each acknowledgement after its commit; it is SIGKILLed at a random moment (about one in five
  during start-up), `--kills` times. After each kill the ledger is opened and checked: `verify`,
  projection == rebuild, every acknowledged event and fact present, no group of three asserts
  (one transaction) half there.
- concurrency: two writer processes and a reader process for `--concurrency-s` seconds.
- hostile input: `--hostile` hypothesis-generated batch lines through the batch runner's
  `run_op`; each failure must carry a code other than internal_error and change nothing.
- tampering: every modelled tampering of a 36-event ledger with a signed checkpoint every six
  events, each on its own copy.
- eval: the built-in scenarios against the ledger and the naive overwrite baseline.
- rotate-index-key (`--rotate-only`, appended to `--out` between its markers instead of
  replacing the file): a child rotating the word index key on a copy is SIGKILLed at each
  commit boundary and at `--rotate-kills` random instants (fixed seed); the next read-write
  open must show the old key with the old index or the new key with the new index
  (tests/rotate_crash.py).

Counts, not speed: no timing is asserted anywhere; seconds are reported for context only.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from hypothesis import HealthCheck, given, settings  # noqa: E402

from bench.benchenv import header, machine_note  # noqa: E402
from custody_app.domain.timeutil import ManualClock  # noqa: E402
from custody_app.evaluation import LedgerMemory, OverwriteMemory, evaluate, load_scenarios  # noqa: E402
from custody_app.ledger.facade import Ledger  # noqa: E402
from tests.hostile import check_line, hostile_lines, valid_setup  # noqa: E402
from tests.reliability import (  # noqa: E402
    build_tamper_base,
    concurrency_run,
    crash_run,
    tamper_cases,
)
from tests.rotate_crash import build_base as build_rotate_base  # noqa: E402
from tests.rotate_crash import trials as rotate_trials  # noqa: E402

ROTATE_MARKERS = ("<!-- rotate-index-key-trials -->", "<!-- /rotate-index-key-trials -->")


def hostile(tmp: Path, examples: int) -> dict[str, object]:
    tried = {"lines": 0, "ok": 0, "failed_checks": 0}
    codes: Counter[str] = Counter()
    with Ledger.open(tmp / "hostile.db", clock=ManualClock()) as ledger:
        aliases = valid_setup(ledger)

        @settings(max_examples=examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(line=hostile_lines)
        def run(line: str) -> None:
            tried["lines"] += 1
            out = check_line(ledger, aliases, tried["lines"], line)
            tried["ok"] += out["ok"]
            if out["ok"]:
                if out["op"] not in ("as_of", "history", "why", "verify", "recall"):
                    valid_setup(ledger, aliases)
            else:
                codes[out["error"]["code"]] += 1

        run()
        valid = ledger.verify().valid and not ledger.rebuild().differences
    return {**tried, "codes": codes, "valid": valid}


def rotate_section(tmp: Path, kills: int, facts: int) -> str:
    """The rotate-index-key kill trials as a markdown section (between ROTATE_MARKERS)."""
    start = f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; other load at start: " \
        f"{machine_note()}"
    base = tmp / "rotate-base.db"
    build_rotate_base(base, facts=facts)
    work = tmp / "rotate"
    work.mkdir()
    result = rotate_trials(base, work, kills=kills, seed=31)
    outcomes = result["outcomes"]
    assert isinstance(outcomes, dict)
    boundaries = result["boundaries"]
    assert isinstance(boundaries, dict)
    problems = result["problems"]
    assert isinstance(problems, list)
    total = sum(outcomes.values())
    lines = [
        ROTATE_MARKERS[0], "",
        "## rotate-index-key kill trials (all or nothing across key store and ledger)", "",
        f"- run: `bench/bench_reliability.py --rotate-only --rotate-kills {kills}` on a ledger "
        f"of {facts} believed facts; random delays (seed 31) uniform in [0, 1.2 x window], "
        f"window = the median unkilled rotation, {float(result['window_s']) * 1000:.0f} ms "
        "(counted by a timer thread the child starts as the rotation begins)",
        f"- run at {start}; at the end: {machine_note()}",
        "- judged after the next read-write open (which rolls a recorded intent forward): "
        "old = the old key with the old index, new = the new key with the new index, neither = "
        "a probe word not found by lexical recall under the key store's key, a rotation left "
        "pending, an index under another key, or verify failing",
        "",
        "| trials | of which at a commit boundary | random instants (killed before returning) "
        "| old | new | neither | time |",
        "|---|---|---|---|---|---|---|",
        f"| {total} | {len(boundaries)} | {result['random']} ({result['killed']}) | "
        f"{outcomes.get('old', 0)} | {outcomes.get('new', 0)} | {outcomes.get('neither', 0)} | "
        f"{float(result['seconds']):.0f} s |",
        "",
        "| commit boundary | outcome |", "|---|---|",
        *[f"| `{point}` | {outcome} |" for point, outcome in boundaries.items()],
        "",
        f"- problems: {'none' if not problems else '; '.join(map(str, problems[:5]))}",
        "", ROTATE_MARKERS[1]]
    return "\n".join(lines)


def append_section(path: Path, section: str) -> None:
    """Replace the marked section of `path` (or append it)."""
    text = path.read_text() if path.exists() else ""
    head, sep, rest = text.partition(ROTATE_MARKERS[0])
    if sep:
        rest = rest.partition(ROTATE_MARKERS[1])[2]
        text = head + section + rest
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=60)
    ap.add_argument("--concurrency-s", type=float, default=20.0)
    ap.add_argument("--hostile", type=int, default=5000)
    ap.add_argument("--out", default=None)
    ap.add_argument("--rotate-only", action="store_true",
                    help="run only the rotate-index-key kill trials")
    ap.add_argument("--rotate-kills", type=int, default=60)
    ap.add_argument("--rotate-facts", type=int, default=300)
    args = ap.parse_args(argv)
    if args.rotate_only:
        with tempfile.TemporaryDirectory(prefix="custody-rot-") as tmp_name:
            section = rotate_section(Path(tmp_name), args.rotate_kills, args.rotate_facts)
        print(section)
        if args.out:
            append_section(Path(args.out), section)
        return 0
    notes = [f"other load at start: {machine_note()}"]
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="custody-rel-") as tmp_name:
        tmp = Path(tmp_name)
        t = time.monotonic()
        crash = crash_run(tmp / "crash.db", kills=args.kills, budget_s=900.0, seed=21)
        rows.append(f"| crash (SIGKILL at random moments) | {crash.kills} kills survived "
                    f"({crash.early_kills} during start-up), {crash.writes_checked:,} acknowledged "
                    f"writes checked after every kill, {crash.events:,} events at the end | "
                    f"{'none' if not crash.problems else '; '.join(crash.problems[:3])} | "
                    f"{time.monotonic() - t:.0f} s |")
        t = time.monotonic()
        conc = concurrency_run(tmp / "conc.db", seconds=args.concurrency_s, seed=23)
        rows.append(f"| concurrency (2 writer processes + 1 reader, {conc.seconds:.0f} s) | "
                    f"{conc.writes_acked:,} writes acknowledged and checked, {conc.reads:,} reads "
                    f"(never backwards), {conc.verifies} full verifies by the reader, "
                    f"{len(conc.errors)} errors reached a caller | "
                    f"{'none' if not conc.problems else '; '.join(conc.problems[:3])} | "
                    f"{time.monotonic() - t:.0f} s |")
        t = time.monotonic()
        h = hostile(tmp, args.hostile)
        codes = h["codes"]
        assert isinstance(codes, Counter)
        top = ", ".join(f"{c} {n}" for c, n in codes.most_common(8))
        rows.append(f"| hostile batch lines (hypothesis) | {h['lines']:,} inputs tried: "
                    f"{sum(codes.values()):,} refused with a code ({top}), {h['ok']} valid and "
                    f"accepted; 0 crashes, 0 internal errors, 0 failed ops that changed the "
                    f"ledger; verify and rebuild clean after: {h['valid']} | none | "
                    f"{time.monotonic() - t:.0f} s |")
        t = time.monotonic()
        build_tamper_base(tmp / "base.db")
        cases = tamper_cases(tmp / "base.db", tmp)
        caught = [c for c in cases if c.detected and c.located]
        kinds = Counter(c.kind for c in caught)
        total = Counter(c.kind for c in cases)
        detail = ", ".join(f"{k} {kinds[k]}/{total[k]}" for k in sorted(total))
        rows.append(f"| tampering (each case on its own copy) | {len(caught)}/{len(cases)} cases "
                    f"detected and located: {detail} | "
                    f"{'none' if len(caught) == len(cases) else f'{len(cases) - len(caught)} missed'} | "
                    f"{time.monotonic() - t:.0f} s |")
        t = time.monotonic()
        result = evaluate(load_scenarios(), [LedgerMemory(), OverwriteMemory()])
        led, base = result.systems
        rows.append(f"| eval ({result.scenario_count} built-in scenarios, {led.reads} scored reads) | "
                    f"ledger {led.correct}/{led.reads} correct, {led.stale} stale, "
                    f"{led.contradictions} contradictions, {led.blast_radius} blast radius; naive "
                    f"overwrite baseline {base.correct}/{base.reads} correct, {base.stale} stale, "
                    f"{base.blast_radius} blast radius, {base.op_errors} refusals it missed | "
                    f"{'none' if led.perfect else 'ledger below perfect'} | "
                    f"{time.monotonic() - t:.0f} s |")
    notes += ["not in the table: the limits of tampering detection (a cut-off tail, and a "
              "rewrite after the last signed checkpoint, go unnoticed; see docs/limits.md)",
              f"other load at end: {machine_note()}",
              "the machine is shared with other agents' test runs: seconds are context only"]
    table = "\n".join(["| check | figures | problems found | time |", "|---|---|---|---|", *rows])
    text = header(notes) + "\n\n" + table
    print(text)
    if args.out:
        Path(args.out).write_text("# custody-app reliability figures\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
