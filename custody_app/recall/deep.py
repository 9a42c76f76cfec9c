"""`verify --deep`: the recall indexes' content against the believed facts indexed afresh.
The cheap check (`RecallIndex.differences`) proves which rows exist; this one re-derives every
row's keyed words, scope tokens, vector and filter columns from the fact and its value, and
names the first rows that differ (by the fact's assert seq)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np

from custody_app.recall import text
from custody_app.recall.index import INDEXED, RecallIndex
from store.rows import FactRow, vec_row

StoredVec = tuple[int, bytes, str, int, int]  # fact_seq, vector, status, space/subject codes

# Vectors are compared with a tolerance: an embedder's float sums may differ in the last bit
# between a batch of 1 and a batch of many.
ATOL = 1e-5
SHOWN = 3


def content_differences(index: RecallIndex) -> list[str]:
    """Where a stored row's content differs from the row the fact would get now."""
    index.flush()
    db = index.db
    believed = {f.assert_seq: f for status in INDEXED for f in db.facts.with_status(status)}
    key = index.key()
    lexical_bad: list[int] = []
    vector_bad: list[int] = []
    for chunk in _stored_vectors(index):
        facts = [(seq, believed[seq], vec, rest) for seq, vec, *rest in chunk if seq in believed]
        texts: list[tuple[int, FactRow, str]] = []
        for seq, fact, _, _ in facts:
            value = index.stored_text(fact)
            if value is not None:
                texts.append((seq, fact, text.fact_text(fact.subject, fact.predicate,
                                                        json.loads(value))))
        if not texts:
            continue
        stored_lexical = db.recall.lexical_of([seq for seq, _, _ in texts])
        fresh = _unit(index.embedder.embed([body for _, _, body in texts]))
        stored = {seq: (vec, rest) for seq, _, vec, rest in facts}
        for (seq, fact, body), vector in zip(texts, fresh, strict=True):
            terms = " ".join(text.term(key, w) for w in text.words(body))
            row = stored_lexical.get(seq)  # a missing row is the cheap check's to report
            if row is not None and row != (terms, index.scope(fact.space, fact.subject, key)):
                lexical_bad.append(seq)
            vec, rest = stored[seq]
            want = vec_row(seq, 0, b"", INDEXED[fact.status], fact.space,
                           index.subject_ref(fact.subject))
            have = np.frombuffer(vec, dtype=np.float32)
            if (have.shape != vector.shape or not np.allclose(have, vector, atol=ATOL)
                    or tuple(rest) != want[3:]):
                vector_bad.append(seq)
    # Believed facts without a vector (a model's vectors come after the write): their lexical
    # rows are compared too.
    waiting = sorted(set(believed) - {seq for seq, _ in db.recall.indexed()[1]})
    for i in range(0, len(waiting), 1000):
        part = [believed[seq] for seq in waiting[i:i + 1000]]
        stored_lexical = db.recall.lexical_of([f.assert_seq for f in part])
        for fact in part:
            value = index.stored_text(fact)
            row = stored_lexical.get(fact.assert_seq)
            if value is None or row is None:
                continue  # a missing row is the cheap check's to report
            body = text.fact_text(fact.subject, fact.predicate, json.loads(value))
            terms = " ".join(text.term(key, w) for w in text.words(body))
            if row != (terms, index.scope(fact.space, fact.subject, key)):
                lexical_bad.append(fact.assert_seq)
    out = []
    if lexical_bad:
        out.append(f"recall_fts (lexical index) content differs from the fact indexed afresh "
                   f"for {len(lexical_bad)} fact(s){_seqs(sorted(lexical_bad))}")
    if vector_bad:
        out.append(f"recall_vec (vector index) content differs from the fact indexed afresh "
                   f"for {len(vector_bad)} fact(s){_seqs(sorted(vector_bad))}")
    return out


def _stored_vectors(index: RecallIndex) -> Iterator[list[StoredVec]]:
    """The vector rows a page at a time; a sealed one that does not open reads as no bytes,
    a row that differs from the fact (recall itself refuses it)."""
    with index.lenient_vectors():
        yield from index.db.recall.iter_vectors()


def _unit(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length as the index writes them (zero rows kept)."""
    norms = np.linalg.norm(vectors, axis=1)
    off = (norms != 0) & (np.abs(norms - 1.0) >= 1e-6)
    if off.any():
        vectors = vectors.copy()
        vectors[off] = (vectors[off] / norms[off, None]).astype(np.float32)
    return vectors.astype(np.float32, copy=False)


def _seqs(seqs: list[int]) -> str:
    more = ", ..." if len(seqs) > SHOWN else ""
    return " (assert seq " + ", ".join(map(str, seqs[:SHOWN])) + more + ")"
