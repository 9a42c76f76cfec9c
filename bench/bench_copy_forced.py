"""Run a quality bench with the in-process vector copy forced into one of its modes, to show a
mode's quality on sets far smaller than the sizes it is chosen at (sign bits from ~300k vectors
of 384 dimensions beside minilm-l6's model, int8 codes from ~60k).

    .venv/bin/python bench/bench_copy_forced.py --budget BYTES [--shortlist S] [--rescore R]
                                                BENCH [BENCH ARGS...]

BENCH is a bench module's file (bench/bench_recall.py, bench/bench_dialogue.py); it runs in
this process with every copy's budget set to BYTES (`matrix.budget`; e.g. under the int8 codes'
bytes and over the sign bits' of the set, for sign bits), and with `matrix.SHORTLIST` and
`matrix.RESCORE` set if given. The notes recall writes say which mode served
("over sign bits ..."). Nothing else changes.
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from custody_app.recall import matrix as matrix_mod  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, required=True)
    ap.add_argument("--shortlist", type=int, default=None)
    ap.add_argument("--rescore", type=int, default=None)
    ap.add_argument("bench")
    ap.add_argument("rest", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    budget = args.budget
    matrix_mod.budget = lambda model_bytes: budget
    if args.shortlist is not None:
        matrix_mod.SHORTLIST = args.shortlist
    if args.rescore is not None:
        matrix_mod.RESCORE = args.rescore
    sys.argv = [args.bench, *args.rest]
    print(f"copy budget {budget:,} bytes, SHORTLIST {matrix_mod.SHORTLIST}, RESCORE "
          f"{matrix_mod.RESCORE}", file=sys.stderr)
    runpy.run_path(args.bench, run_name="__main__")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
