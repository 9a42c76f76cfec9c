"""The `wordllama` embedder: wordllama's own vectors, from the files inside the installed
package, never a download, a clear refusal when the package is missing or its files damaged."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from custody_app.domain.errors import LedgerError
from custody_app.ledger.facade import Ledger
from custody_app.recall import wordvec
from custody_app.recall.embedders import make_embedder
from tests.conftest import CAUSE, WRITER, ledger_bytes
from tests.embedder_refusals import (
    imported_by_embedding,
    open_is_refused_unchanged,
    read_only_refuses_its_vectors,
)

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


@pytest.mark.parametrize("chunk", [wordvec.WordLlamaEmbedder.CHUNK, 7])
def test_vectors_equal_wordllamas_own_embed_bit_for_bit(reference: object, chunk: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Also for long texts summed a chunk at a time (wordllama pads a batch of 64 to its
    longest text instead: a 1 MiB value would take gigabytes)."""
    monkeypatch.setattr(wordvec.WordLlamaEmbedder, "CHUNK", chunk)
    texts = SENTENCES + _words() + ["😀 dog " * 3000, "x" * 20000]
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
    wl, hashed = make_embedder("wordllama"), make_embedder("hashed-ngram")
    assert float(wl.embed_query(q) @ wl.embed([hit])[0]) > 0.4
    assert float(wl.embed_query(q) @ wl.embed([miss])[0]) < 0.1
    # hashed-ngram: the paraphrase is about as far as the unrelated sentence (0.11 and 0.10)
    assert float(hashed.embed_query(q) @ hashed.embed([hit])[0]) < 0.2


def test_loading_imports_no_wordllama_and_no_network_code() -> None:
    """In a fresh process: the embedder loads and embeds without importing wordllama's
    package (its loader downloads), requests, urllib3, httpx or huggingface_hub."""
    assert imported_by_embedding("wordllama", (
        "wordllama", "requests", "urllib3", "httpx", "huggingface_hub")) == "[]"


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


def _uninstalled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wordllama", None)  # as if it were not installed
    monkeypatch.setattr(wordvec, "_MODEL", None)


def test_a_missing_package_is_refused_and_the_ledger_is_unchanged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    open_is_refused_unchanged(tmp_path, "wordllama", lambda: _uninstalled(monkeypatch))


def test_a_read_only_open_never_compares_vectors_of_another_embedder(tmp_path: Path) -> None:
    """A read-only open cannot re-embed: its queries are embedded by the embedder that made the
    stored vectors (the same dimensions here, so a mix would rank silently and wrongly)."""
    path = tmp_path / "l.db"
    hashed, wl = tmp_path / "hashed.toml", tmp_path / "wl.toml"
    hashed.write_text('[recall]\nembedder = "hashed-ngram"\n')
    wl.write_text('[recall]\nembedder = "wordllama"\n')
    with Ledger.open(path, policy=hashed) as ledger:
        for i in range(30):
            ledger.assert_fact(f"acct:{i}", "note", f"unrelated note {i} about invoices",
                               actor=WRITER, cause=CAUSE, provenance="attested")
        target = ledger.assert_fact("acct:99", "pet", "zyxwv beagle qrstu",
                                    actor=WRITER, cause=CAUSE,
                                    provenance="attested").fact_id
        expected = [h.fact.fact_id for h in ledger.recall("zyxwv qrstu", k=5,
                                                         strategy="vector").results]
    assert expected[0] == target
    before = ledger_bytes(path)
    with Ledger.open(path, policy=wl, readonly=True) as ro:
        res = ro.recall("zyxwv qrstu", k=5, strategy="vector")
        assert res.embedder == "hashed-ngram-v1-256"
        assert [h.fact.fact_id for h in res.results] == expected
    assert ledger_bytes(path) == before


def test_a_read_only_open_refuses_vector_recall_when_no_embedder_here_made_the_vectors(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    read_only_refuses_its_vectors(tmp_path, "wordllama", "wordllama-l2-supercat-256",
                                  "a beagle named Biscuit", "beagle",
                                  lambda: _uninstalled(monkeypatch))


def test_a_ledger_indexed_by_hashed_ngram_re_embeds_at_open_with_progress(tmp_path: Path) -> None:
    """A real file written under hashed-ngram, opened by the console script under a policy
    naming wordllama: every believed fact is re-embedded at open, in batches of 100, each
    reported on stderr; the indexes then agree with the facts and the paraphrase is found."""
    path = tmp_path / "l.db"
    hashed, wl = tmp_path / "hashed.toml", tmp_path / "wl.toml"
    hashed.write_text('[recall]\nembedder = "hashed-ngram"\n')
    wl.write_text('[recall]\nembedder = "wordllama"\n')
    with Ledger.open(path, policy=hashed) as ledger, ledger.transaction():
        for i in range(249):
            ledger.assert_fact(f"acct:{i}", "note", f"invoice {i} sent to the billing contact",
                               actor=WRITER, cause=CAUSE, provenance="attested")
        dog = ledger.assert_fact("user:maya", "said", "We adopted a beagle puppy named Biscuit",
                                 actor=WRITER, cause=CAUSE, provenance="attested").fact_id
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
    done = subprocess.run([sys.executable, "-m", "custody_app", "recall", "my dog's name",
                           "--strategy", "vector", "-k", "3", "--json", "--ledger", str(path),
                           "--policy", str(wl)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    steps = re.findall(r"re-embedding believed facts for the new embedder: ([\d,]+)/([\d,]+)",
                       done.stderr)
    assert steps == [("100", "250"), ("200", "250"), ("250", "250")]
    out = json.loads(done.stdout)
    assert out["embedder"] == "wordllama-l2-supercat-256"
    assert out["results"][0]["fact"]["fact_id"] == dog
    with Ledger.open(path, policy=wl) as again:  # current now: no second re-embedding
        assert again.index.is_current() and again.index.differences() == []
        assert again.verify().valid


def test_a_value_of_a_mebibyte_embeds_in_bounded_memory() -> None:
    """A 1 MiB value (~260k tokens) beside short texts: gathered a chunk at a time, never
    padded to the longest text (that was ~270 MB per text of the batch, twice over)."""
    emb = make_embedder("wordllama")
    texts = ["a short note"] * 3 + ["dog " * (1 << 18)]
    tracemalloc.start()
    try:
        out = emb.embed(texts)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"peak {peak / 2**20:.0f} MiB"
    assert np.array_equal(out[3], emb.embed(["dog " * (1 << 18)])[0])
