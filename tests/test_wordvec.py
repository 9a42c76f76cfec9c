"""The `wordllama` embedder: wordllama's own vectors, from the files inside the installed
package, never a download, a clear refusal when the package is missing or its files damaged."""

from __future__ import annotations

import importlib.util
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from custody_app.domain.errors import LedgerError
from custody_app.ledger.facade import Ledger
from custody_app.recall import wordvec
from custody_app.recall.embedders import make_embedder

from tests.conftest import CAUSE, WRITER, ledger_bytes

pytestmark = pytest.mark.skipif(importlib.util.find_spec("wordllama") is None,
                                reason="wordllama is not installed")

ROOT = Path(__file__).resolve().parent.parent
SENTENCES = [
    "What is the name of my dog?", "We adopted a beagle puppy named Biscuit",
    "The quarterly invoice was sent to Acme Logistics.", "acct:42 plan Pro annual, 25 seats",
    "Zürich café, naïve façade, Łódź, São Paulo", "emoji 😀🐶 and CJK 東京 and RTL שלום",
    "tabs\tand\nnewlines\r\nand \x00 nul \u202e override", "<s> </s> <unk> [PAD] look like tokens",
    "a", " ", "x " * 400, "Ticket 8812 escalated: firmware crash on HUB-200 units",
]


def _words() -> list[str]:
    rng = random.Random(17)
    pool = " ".join(SENTENCES).split() + ["dog", "beagle", "refund", "ß", "ﬁ", "İ", "—", "..."]
    return pool + [" ".join(rng.choice(pool) for _ in range(rng.randint(1, 40)))
                   for _ in range(300)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> object:
    """wordllama's own model, loaded offline: its loader looks for the tokenizer in the cache
    dir's `tokenizers/`, so the shipped config is copied there and downloads are disabled."""
    from wordllama import WordLlama
    cache = tmp_path_factory.mktemp("wl-cache")
    (cache / "tokenizers").mkdir()
    shutil.copy(wordvec.package_dir() / wordvec.TOKENIZER[0], cache / "tokenizers")
    return WordLlama.load(cache_dir=cache, disable_download=True)


def test_vectors_equal_wordllamas_own_embed_bit_for_bit(reference: object) -> None:
    texts = SENTENCES + _words()
    mine = make_embedder("wordllama").embed(texts)
    theirs = reference.embed(texts, norm=True)  # type: ignore[attr-defined]
    assert mine.dtype == np.float32 and mine.shape == (len(texts), 256)
    assert np.array_equal(mine, theirs)


def test_a_text_embeds_the_same_alone_as_in_any_batch() -> None:
    """The index embeds a group at a time and a query alone: the padding of a batch must not
    change a vector."""
    emb = make_embedder("wordllama")
    texts = _words()[:150]
    together = emb.embed(texts)
    for i in range(0, 150, 7):
        assert np.array_equal(emb.embed([texts[i]])[0], together[i])
        assert np.array_equal(emb.embed_query(texts[i]), together[i])
    norms = np.linalg.norm(together, axis=1)
    assert np.allclose(norms, 1.0, atol=1e-5)


def test_a_text_with_no_tokens_is_the_zero_vector_not_nan() -> None:
    out = make_embedder("wordllama").embed(["", "dog"])
    assert not np.isnan(out).any()
    assert not out[0].any() and out[1].any()


def test_it_matches_meaning_the_hashed_default_does_not() -> None:
    """A paraphrase with no word in common: near under wordllama, not under hashed n-grams."""
    q, hit, miss = ("What is the name of my dog?", "We adopted a beagle puppy named Biscuit",
                    "The quarterly invoice was sent to Acme Logistics.")
    wl = make_embedder("wordllama")
    assert float(wl.embed_query(q) @ wl.embed([hit])[0]) > 0.4
    assert float(wl.embed_query(q) @ wl.embed([miss])[0]) < 0.1


def test_loading_imports_no_wordllama_and_no_network_code() -> None:
    """In a fresh process: the embedder loads and embeds without importing wordllama's
    package (its loader downloads), requests, urllib3, httpx or huggingface_hub."""
    code = ("import sys\n"
            "from custody_app.recall.embedders import make_embedder\n"
            "make_embedder('wordllama').embed(['a beagle named Biscuit'])\n"
            "net = ('wordllama', 'requests', 'urllib3', 'httpx', 'huggingface_hub')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in net))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_model_is_loaded_once_per_process() -> None:
    assert make_embedder("wordllama")._model is make_embedder("wordllama")._model


def _fake_install(tmp_path: Path) -> Path:
    root = tmp_path / "wordllama"
    for rel, _ in (wordvec.WEIGHTS, wordvec.TOKENIZER):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(wordvec.package_dir() / rel, root / rel)
    return root


@pytest.mark.parametrize("damage", ["flip a weight byte", "truncate the weights",
                                    "edit the tokenizer", "delete the tokenizer"])
def test_damaged_files_are_refused_naming_the_file(tmp_path: Path, damage: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    root = _fake_install(tmp_path)
    weights, tok = root / wordvec.WEIGHTS[0], root / wordvec.TOKENIZER[0]
    if damage == "flip a weight byte":
        data = bytearray(weights.read_bytes())
        data[5_000_000] ^= 0x01  # one float16 of one token's vector
        weights.write_bytes(bytes(data))
    elif damage == "truncate the weights":
        weights.write_bytes(weights.read_bytes()[:1000])
    elif damage == "edit the tokenizer":
        config = json.loads(tok.read_text(encoding="utf-8"))
        config["model"]["vocab"]["▁dog"], config["model"]["vocab"]["▁cat"] = (
            config["model"]["vocab"]["▁cat"], config["model"]["vocab"]["▁dog"])
        tok.write_text(json.dumps(config), encoding="utf-8")
    else:
        tok.unlink()
    monkeypatch.setattr(wordvec, "package_dir", lambda: root)
    monkeypatch.setattr(wordvec, "_MODEL", None)
    with pytest.raises(LedgerError) as info:
        make_embedder("wordllama")
    assert info.value.code == "embedder_damaged"
    assert str(root) in info.value.message and "reinstall" in info.value.message


def test_a_missing_package_is_refused_and_the_ledger_is_unchanged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "l.db"
    hashed = tmp_path / "hashed.toml"
    hashed.write_text('[recall]\nembedder = "hashed-ngram"\n')
    with Ledger.open(path, policy=hashed) as ledger:
        ledger.assert_fact("acct:1", "pet", "a beagle named Biscuit", actor=WRITER,
                           cause=CAUSE)
    before, keys_before = ledger_bytes(path), Path(f"{path}.keys").read_bytes()
    monkeypatch.setitem(sys.modules, "wordllama", None)  # as if it were not installed
    monkeypatch.setattr(wordvec, "_MODEL", None)
    policy = tmp_path / "p.toml"
    policy.write_text('[recall]\nembedder = "wordllama"\n')
    with pytest.raises(LedgerError) as info:
        Ledger.open(path, policy=policy)
    assert info.value.code == "embedder_unavailable"
    assert "wordllama" in info.value.message and "pip install" in info.value.message
    assert ledger_bytes(path) == before and Path(f"{path}.keys").read_bytes() == keys_before
