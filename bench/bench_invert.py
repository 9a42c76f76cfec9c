"""What a copy of the vector table reveals: the words of a fact, read back from its stored vector
with a dictionary of candidate words and the embedder itself (public code and weights, no key).

    .venv/bin/python bench/bench_invert.py [--embedders hashed-ngram,wordllama] [--out FILE]

For each fact of `bench/data/recall_set.json` the attacker holds its stored vector (the
embedding of its indexed text, as recall builds it) and a dictionary: every word of 4 letters or
more in the set's facts (1,069 words; a real attacker would use a larger list of likely words,
names and numbers, at a lower hit rate). Each dictionary word is embedded alone and ranked by
cosine with the fact's vector; "read back" = the share of the fact's own dictionary words among
its top n, n = how many it has (precision and recall are then equal). A chance ranking would
score about n / 1,069. Prints markdown (and writes it to `--out`); writes nothing else.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.benchenv import header, machine_note  # noqa: E402
from custody_app.recall.embedders import make_embedder  # noqa: E402
from custody_app.recall.text import fact_text  # noqa: E402

DATA = ROOT / "bench" / "data" / "recall_set.json"


def words_of(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"\w{4,}", text)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--embedders", default="hashed-ngram,wordllama")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    facts = json.loads(DATA.read_text(encoding="utf-8"))["facts"]
    texts = [fact_text(f["subject"], f["predicate"], f["value"]) for f in facts]
    own = [words_of(t) for t in texts]
    dictionary = sorted(set().union(*own))
    rows = ["| embedder | facts | dictionary words | fact's words read back (top n of the "
            "dictionary) | by chance | facts read back whole |", "|---|---:|---:|---:|---:|---:|"]
    for name in [e for e in args.embedders.split(",") if e.strip()]:
        emb = make_embedder(name)
        stored = emb.embed(texts)  # what the vector table holds for these facts
        probes = emb.embed(dictionary)
        read, chance, whole = [], [], []
        for v, mine in zip(stored, own, strict=True):
            if not mine:
                continue
            top = np.argsort(-(probes @ v), kind="stable")[:len(mine)]
            got = {dictionary[i] for i in top}
            read.append(len(got & mine) / len(mine))
            chance.append(len(mine) / len(dictionary))
            whole.append(got == mine)
        rows.append(f"| {emb.name} | {len(read)} | {len(dictionary):,} | {np.mean(read):.3f} | "
                    f"{np.mean(chance):.3f} | {np.mean(whole):.1%} |")
    text = header([f"other load at end: {machine_note()}"]) + "\n\n" + "\n".join(rows)
    print(text)
    if args.out:
        Path(args.out).write_text("# vectors read back\n\n" + text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
