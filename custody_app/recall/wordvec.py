"""The `wordllama` embedder: a static token-embedding table (WordLlama l2_supercat, 256 dims)
averaged over a text's tokens. Its weights and tokenizer ship inside the `wordllama` wheel; this
module reads those two files itself and never imports `wordllama` (whose loader reaches for the
network when a file is missing), so nothing is ever downloaded."""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from custody_app.domain.errors import LedgerError
from custody_app.recall import packaged
from custody_app.recall.norms import unit_rows

Vectors = npt.NDArray[np.float32]

# The files of wordllama 0.4.0.post1 (pinned exactly in pyproject's extra): vectors must be reproducible, so a
# file that differs from these bytes is refused rather than silently giving other vectors.
WEIGHTS = ("weights/l2_supercat_256.safetensors",
           "64b47a2dc493cb8e85944076601189739852d7b64e0e1eedcb1937a251cd9fd5")
TOKENIZER = ("tokenizers/l2_supercat_tokenizer_config.json",
             "93248f2a9ec36c7b35f700a033d5f36228aae48db61aee31007fa49062cdeb68")
TENSOR = "embedding.weight"
VOCAB, DIMS = 32000, 256
INSTALL = "pip install 'custody-app[wordvec]' (wordllama 0.4.0.post1)"


def package_dir() -> Path:
    """Where the installed `wordllama` package lives (found without importing it)."""
    return packaged.package_dir("wordllama", "wordllama", INSTALL)


def _table(data: bytes, path: str) -> npt.NDArray[np.float16]:
    """The token table from safetensors bytes (8-byte header length, JSON header, raw data)."""
    try:
        (size,) = struct.unpack("<Q", data[:8])
        meta = json.loads(data[8:8 + size])[TENSOR]
        start, end = meta["data_offsets"]
        ok = meta["dtype"] == "F16" and meta["shape"] == [VOCAB, DIMS]
    except (struct.error, ValueError, KeyError, TypeError):
        ok = False
    if not ok:  # unreachable past the hash check; kept so a new pin cannot load nonsense
        raise LedgerError("embedder_damaged", f"the wordllama weights {path} are not a "
                          f"{VOCAB}x{DIMS} float16 table", file=path)
    table = np.frombuffer(data, dtype="<f2", count=VOCAB * DIMS,
                          offset=8 + size + start).reshape(VOCAB, DIMS)
    assert end - start == table.nbytes
    return table


class _Model:
    """The table (float16, 16 MB, as shipped) and the tokenizer; one per process."""

    def __init__(self) -> None:
        root = package_dir()
        weights = packaged.read_checked(root / WEIGHTS[0], WEIGHTS[1], "wordllama", INSTALL)
        config = packaged.read_checked(root / TOKENIZER[0], TOKENIZER[1], "wordllama",
                                        INSTALL)
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise LedgerError("embedder_unavailable", "the wordllama embedder needs the "
                              f"tokenizers package; {INSTALL}") from None
        self.table = _table(weights, str(root / WEIGHTS[0]))
        self.tokenizer: Any = Tokenizer.from_str(config.decode("utf-8"))


_MODEL: _Model | None = None
_LOCK = threading.Lock()


def model() -> _Model:
    """The loaded model, loaded and checked once per process."""
    global _MODEL
    with _LOCK:
        if _MODEL is None:
            _MODEL = _Model()
        return _MODEL


class WordLlamaEmbedder:
    """Mean of the WordLlama l2_supercat token vectors of a text (Llama-2 tokenizer, no special
    tokens), L2-normalised: `wordllama`'s own `embed(texts, norm=True)`, reproduced exactly
    (tests/test_wordvec.py). Static: it knows that "dog" is near "beagle" and "puppy", not
    what a sentence says; word order does not count."""

    # Tokens gathered at once: a value may hold 1 MiB of JSON, up to ~1M tokens, which as one
    # float32 gather would take 1 GB (and padding a batch to it, 64 times that).
    CHUNK = 4096

    def __init__(self) -> None:
        self._model = model()

    @property
    def name(self) -> str:
        return f"wordllama-l2-supercat-{DIMS}"

    @property
    def dimensions(self) -> int:
        return DIMS

    @property
    def fusion_weight(self) -> float:
        # Tuned on the labelled set only (bench/results_recall.md, fusion weights): recall@10
        # 0.914 at 1, 2 and 3 (0.907 at 0.5), and MRR falls above 1.
        return 1.0

    def embed(self, texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), DIMS), dtype=np.float32)
        for row, text in enumerate(texts):
            # One text at a time through the tokenizer: its batch call would start a thread
            # pool on two shared cores; the ids are the same.
            out[row] = self._mean(self._model.tokenizer.encode(text, add_special_tokens=False).ids)
        return unit_rows(out)  # a text with no tokens: the zero vector, not NaN

    def _mean(self, ids: list[int]) -> npt.NDArray[np.float32]:
        """wordllama's avg_pool of one text: the float32 sum of its token rows in token order
        (numpy sums a reduced axis row after row, so its padded batch's masked rows, each +-0,
        change nothing), divided by the token count. Summed CHUNK tokens at a time, each chunk
        after the running total, so the additions keep their order."""
        table = self._model.table
        seq = np.clip(np.asarray(ids, dtype=np.int64), 0, VOCAB - 1)
        if not len(seq):
            return np.zeros(DIMS, dtype=np.float32)
        total: npt.NDArray[np.float32] = table[seq[:self.CHUNK]].astype(np.float32).sum(
            axis=0, dtype=np.float32)
        for start in range(self.CHUNK, len(seq), self.CHUNK):
            part = seq[start:start + self.CHUNK]
            block = np.empty((len(part) + 1, DIMS), dtype=np.float32)
            block[0], block[1:] = total, table[part]
            total = block.sum(axis=0, dtype=np.float32)
        mean: npt.NDArray[np.float32] = total / np.float32(len(seq))
        return mean

    def embed_query(self, text: str) -> Vectors:
        row: Vectors = self.embed([text])[0]
        return row
