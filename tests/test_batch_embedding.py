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
from tests.conftest import SUITE_DEFAULT_POLICY
from tests.test_cli_grammar import cli
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


def _ops(count: int) -> str:
    return "".join(json.dumps({
        "op": "assert", "subject": f"user:{n % 3}", "predicate": f"note{n}",
        "value": PETS[n % len(PETS)] + f" ({n})", "actor": "agent:bench",
        "provenance": "attested", "cause": {"kind": "tool", "ref": f"t-{n}"}}) + "\n"
        for n in range(count))


def _doctor_vectors(ledger: Path) -> tuple[str, str]:
    """`custody-app doctor --json`'s vectors line: (outcome, detail)."""
    done = cli("doctor", "--json", "--ledger", ledger)
    [line] = [c for c in json.loads(done.stdout)["checks"] if c["name"] == "vectors"]
    return line["outcome"], line["detail"]


def test_a_batch_says_what_waits_and_embed_makes_every_vector_now(tmp_path: Path) -> None:
    """Real subprocesses under the shipped default (no --policy, no $CUSTODY_POLICY): a --batch
    names how many facts wait for their vector and the command that makes them; `embed` makes
    them all and exits, and a recall after it waits for none; a second `embed` finds none."""
    ledger = tmp_path / "l.db"
    ops = tmp_path / "ops.jsonl"
    ops.write_text(_ops(12), encoding="utf-8")
    done = cli("--create", "--batch", ops, "--ledger", ledger)
    assert done.returncode == 0, done.stderr
    [line] = done.stderr.splitlines()  # still the run's one line (issue 32)
    assert line == ("custody-app: batch: 12 op(s), 12 ok, 0 failed; 12 fact(s) wait for their "
                    "vector, found by their words meanwhile (`custody-app embed` makes them "
                    "now)"), line
    assert _doctor_vectors(ledger) == ("ok", (
        f"12 believed fact(s) of {ledger} wait for their vector (minilm-l6-v2-384): recall "
        "finds them by their words only until `custody-app embed` makes them (the terminal "
        "app, `serve` and the Python API make them in the background)."))
    made = cli("embed", "--json", "--ledger", ledger)
    assert made.returncode == 0, made.stderr
    assert _doctor_vectors(ledger) == ("ok", f"{ledger}: every believed fact has its vector "
                                             "(minilm-l6-v2-384).")
    assert json.loads(made.stdout) == {"embedder": "minilm-l6-v2-384", "embedded": 12,
                                       "waiting": 0, "in_write": False}
    assert "embedding believed facts: 12/12" in made.stderr
    recalled = cli("recall", "what kind of dog do I have", "--json", "--ledger", ledger)
    assert json.loads(recalled.stdout)["unembedded"] == 0, recalled.stdout
    with Ledger.open(ledger, readonly=True) as led:
        assert _vector_seqs(led) == _believed_seqs(led) and len(_believed_seqs(led)) == 12
    again = cli("embed", "--ledger", ledger)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("embedded 0 fact(s) with minilm-l6-v2-384; none waiting")


def test_under_an_embedder_of_the_write_nothing_waits(tmp_path: Path) -> None:
    """hashed-ngram embeds inside each write: a --batch says nothing of waiting vectors and
    `embed` says why it has nothing to do."""
    ledger = tmp_path / "l.db"
    ops = tmp_path / "ops.jsonl"
    ops.write_text(_ops(5), encoding="utf-8")
    done = cli("--create", "--batch", ops, "--ledger", ledger, "--policy", SUITE_DEFAULT_POLICY)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "custody-app: batch: 5 op(s), 5 ok, 0 failed\n", done.stderr
    assert _doctor_vectors(ledger) == ("ok", f"{ledger}: its embedder (hashed-ngram-v1-256) "
                                             "makes each fact's vector in the write.")
    made = cli("embed", "--ledger", ledger)
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("hashed-ngram-v1-256 makes its vectors inside each write: no "
                                  "fact waits for one"), made.stdout
