"""`--batch` under the shipped default (minilm-l6) starts no embedding worker: a bulk ingest does
not load the model (~140 MB; a 2,000-fact `--batch` peaked at 257 MB with it, 76 MB without,
bench/results_memory.md). Nothing is lost: its facts are indexed lexically in their writes, found
by recall meanwhile, and the next writable open's worker gives every one of them its vector."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from custody_app.interfaces.cli.main import main
from custody_app.ledger.facade import Ledger
from custody_app.recall import minilm
from custody_app.recall.embedding import EmbeddingWorker
from tests.test_embedding_worker import PETS, _believed_seqs, _vector_seqs


def test_a_batch_loads_no_model_and_the_next_open_embeds_every_fact_it_wrote(
        tmp_path: Path, shipped_default: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    started: list[str] = []
    start = EmbeddingWorker.start
    monkeypatch.setattr(EmbeddingWorker, "start",
                        lambda self: started.append(self.path) or start(self))
    monkeypatch.setattr(minilm, "_MODEL", None)
    ops = tmp_path / "ops.jsonl"
    ops.write_text("".join(json.dumps({
        "op": "assert", "subject": f"user:{n % 3}", "predicate": f"note{n}",
        "value": PETS[n % len(PETS)] + f" ({n})", "actor": "agent:bench",
        "provenance": "attested", "cause": {"kind": "tool", "ref": f"t-{n}"}}) + "\n"
        for n in range(30)))
    ledger_path = tmp_path / "l.db"
    assert main(["--create", "--batch", str(ops), "--ledger", str(ledger_path)]) == 0
    capsys.readouterr()
    assert started == [] and minilm._MODEL is None  # no worker, no model loaded
    with Ledger.open(ledger_path, readonly=True) as ledger:
        assert ledger.embedder.name == "minilm-l6-v2-384"
        assert _vector_seqs(ledger) == set() and len(_believed_seqs(ledger)) == 30
        # Found by their words meanwhile, and recall says how many wait for a vector.
        result = ledger.recall("beagle puppy", k=10)
        assert result.unembedded == 30 and len(result.results) == 5
    with Ledger.open(ledger_path) as ledger:  # the next writable open embeds the backlog
        assert started == [str(ledger.db.path)]
        assert ledger.index.settle_embedding(300)
        assert _vector_seqs(ledger) == _believed_seqs(ledger)
        assert ledger.recall("what kind of dog do I have", k=1, strategy="vector").unembedded == 0
