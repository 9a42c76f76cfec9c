"""Recall over the facts believed now: hybrid FTS5 bm25 + sqlite-vec KNN, fused, with salience."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from custody_app.domain.commands import Recall
from custody_app.domain.lifecycle import effective_rank
from custody_app.domain.models import PROVENANCES
from custody_app.domain.readmodels import FactView, RecallHit, RecallResult
from custody_app.domain.retention import window_for
from custody_app.domain.timeutil import parse_time
from custody_app.recall import text
from custody_app.recall.cells import unit
from store.rows import FactRow

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore

# Status in the indexes for each fact status; a fact in any other status is not indexed.
INDEXED = {"active": "live", "quarantined": "quarantined"}
RRF_K = 60
_STATUS_TOKEN = {"live": "zslive", "quarantined": "zsquarantined"}


def _scope(ledger: LedgerCore, status: str, space: str, subject: str) -> str:
    key = ledger._index_key()
    return " ".join([_STATUS_TOKEN[status], text.term(key, "space:" + space),
                     text.term(key, "subject:" + subject)])


def _index_one(ledger: LedgerCore, fact: FactRow, status: str, value_text: str) -> None:
    key = ledger._index_key()
    body = text.fact_text(fact.subject, fact.predicate, json.loads(value_text))
    terms = " ".join(text.term(key, w) for w in text.words(body))
    vector = unit(ledger.embedder.embed([body])[0])
    assert ledger.keys is not None
    ledger.db.recall.add(fact.assert_seq, terms, _scope(ledger, status, fact.space, fact.subject),
                         ledger.cells.cell_for(ledger, vector), vector.tobytes(), status,
                         fact.space, ledger.keys.subject_ref(fact.subject), ledger.embedder.name)


def sync(ledger: LedgerCore, changes: list[tuple[FactRow, str | None]],
         fresh: dict[str, str]) -> None:
    """Keep the indexes equal to the believed facts, in the transaction of the event that
    changed belief. `fresh` holds value texts just written (no need to decrypt them)."""
    delta = 0
    for fact, old in changes:
        want = INDEXED.get(fact.status)
        had = INDEXED.get(old) if old is not None else None
        if want == had:
            continue
        if want is None:
            ledger.db.recall.remove(fact.assert_seq)
            delta -= 1
        elif had is None:
            value_text = fresh.get(fact.fact_id) or _stored_text(ledger, fact)
            if value_text is not None:
                _index_one(ledger, fact, want, value_text)
                delta += 1
        else:
            ledger.db.recall.set_status(fact.assert_seq, want,
                                        _scope(ledger, want, fact.space, fact.subject))
    if delta:
        ledger.cells.added(ledger, delta)


def _stored_text(ledger: LedgerCore, fact: FactRow) -> str | None:
    event = ledger.db.events.get(fact.assert_seq)
    if event is None or event.value is None:
        return None
    return ledger.values.open(fact.fact_id, json.loads(event.body)["subject_ref"], event.value)


def rebuild_index(ledger: LedgerCore, progress: Callable[[int, int], None] | None = None) -> int:
    """Drop and rebuild both indexes for the policy's embedder, re-embedding every believed
    fact (inside the caller's write transaction). Returns how many facts were indexed."""
    ledger.db.recall.create(ledger.embedder.name, ledger.embedder.dimensions)
    believed = [f for status in INDEXED for f in ledger.db.facts.with_status(status)]
    for n, fact in enumerate(sorted(believed, key=lambda f: f.assert_seq), start=1):
        value_text = _stored_text(ledger, fact)
        if value_text is not None:
            _index_one(ledger, fact, INDEXED[fact.status], value_text)
        if progress is not None and (n % 500 == 0 or n == len(believed)):
            progress(n, len(believed))
    ledger.cells.rebuilt(ledger)
    return len(believed)


def index_differences(ledger: LedgerCore) -> list[str]:
    """Where the indexes disagree with the believed facts (what verify reports)."""
    want = {f.assert_seq: INDEXED[status] for status in INDEXED
            for f in ledger.db.facts.with_status(status)}
    lexical, vector = ledger.db.recall.indexed()
    out: list[str] = []
    if set(lexical) != set(want):
        out.append(f"lexical index holds {len(set(lexical) - set(want))} fact(s) not believed and "
                   f"misses {len(set(want) - set(lexical))}")
    if dict(vector) != want:
        out.append("vector index does not match the believed facts and their statuses")
    return out


def salience(ledger: LedgerCore, fact: FactRow, now: datetime) -> float:
    """ACT-R base-level activation B = ln(sum of dt^-d) over assert and affirm times."""
    pol = ledger.policy.policy.recall
    override = window_for(fact.space, {k: str(v) for k, v in pol.decay_by_space.items()})
    decay = float(override[1]) if override else pol.decay
    total = 0.0
    for event in ledger.db.events.for_fact(fact.fact_id):
        if event.kind in ("assert", "affirm"):
            days = (now - parse_time(event.tx_at)).total_seconds() / 86400
            total += max(days, 0.5) ** -decay
    return math.log(total) if total > 0 else float("-inf")


def salience_class(ledger: LedgerCore, value: float) -> str:
    pol = ledger.policy.policy.recall
    return "hot" if value >= pol.hot else "cold" if value < pol.cold else "warm"


def fused(lexical: list[int], vector: list[int],
          vector_weight: float = 1.0) -> list[tuple[int, float]]:
    """Weighted reciprocal rank fusion: sum of weight / (RRF_K + rank) over both rankings."""
    scores: dict[int, float] = {}
    for weight, ranking in ((1.0, lexical), (vector_weight, vector)):
        for rank, seq in enumerate(ranking, start=1):
            scores[seq] = scores.get(seq, 0.0) + weight / (RRF_K + rank)
    return sorted(scores.items(), key=lambda item: -item[1])


def _top_with_ties(fused: list[tuple[int, float]], k: int) -> list[tuple[int, float]]:
    """The k best, and any further ones whose score ties the k-th (salience orders those):
    only these are read and decrypted."""
    out = [(seq, round(score, 6)) for seq, score in fused[:k]]
    for seq, score in fused[k:]:
        if round(score, 6) != out[-1][1]:
            break
        out.append((seq, round(score, 6)))
    return out


# A query term found in more than this share of the believed facts (and in more than
# COMMON_TERM_DOCS of them) adds little to bm25 but makes FTS5 score every one of them: it is
# dropped, unless it is the only term. At 100k facts 5% cut the median number of scored rows
# from ~15k to ~4k (bench/results_recall.md); small ledgers keep every term.
COMMON_TERM_SHARE = 0.05
COMMON_TERM_DOCS = 500


def _useful_terms(ledger: LedgerCore, terms: list[str]) -> list[str]:
    """The query terms worth scoring: present somewhere, and not in nearly every fact."""
    statuses = list(_STATUS_TOKEN.values())
    freq = ledger.db.recall.doc_freq([*terms, *statuses])
    if freq is None or len(terms) < 2:
        return terms
    total = max(sum(freq.pop(s) for s in statuses), 1)
    limit = max(COMMON_TERM_SHARE * total, COMMON_TERM_DOCS)
    kept = [t for t in terms if 0 < freq.get(t, 0) <= limit]
    return kept or terms


def lexical_match(ledger: LedgerCore, words: list[str], include_claimed: bool,
                  space: str | None, subject: str | None) -> str:
    """The FTS5 MATCH expression for query words, with the filters inside it."""
    key = ledger._index_key()
    terms = _useful_terms(ledger, [text.term(key, w) for w in dict.fromkeys(words)])
    match = "terms: (" + " OR ".join(terms) + ")"
    if not include_claimed:
        # The index holds believed facts only, so live = not quarantined: FTS5 checks the
        # short quarantined doclist instead of walking a live token that every fact has.
        match += " NOT scope: " + _STATUS_TOKEN["quarantined"]
    if space is not None:
        match += " AND scope: " + text.term(key, "space:" + space)
    if subject is not None:
        match += " AND scope: " + text.term(key, "subject:" + subject)
    return match


def _vector_search(ledger: LedgerCore, cmd: Recall, statuses: tuple[str, ...],
                   pool: int) -> tuple[list[int], list[int] | None]:
    """sqlite-vec KNN over the cells nearest the query; when those cells hold fewer matches
    than the pool (a rare space or subject filter), over every vector instead."""
    query = unit(ledger.embedder.embed_query(cmd.query))
    assert ledger.keys is not None
    subject_ref = ledger.keys.subject_ref(cmd.subject) if cmd.subject is not None else None
    cells = ledger.cells.probe(ledger, query, pool)
    found = ledger.db.recall.vector(query.tobytes(), pool, statuses, cmd.space, subject_ref,
                                    cells)
    if cells is not None and len(found) < pool:
        cells = None
        found = ledger.db.recall.vector(query.tobytes(), pool, statuses, cmd.space, subject_ref)
    return [seq for seq, _ in found], cells


def recall(ledger: LedgerCore, cmd: Recall) -> RecallResult:
    statuses = ("live", "quarantined") if cmd.include_claimed else ("live",)
    words = text.words(cmd.query)
    pool = max(cmd.k * 4, 50)
    lexical: list[int] = []
    if words and cmd.strategy != "vector":
        match = lexical_match(ledger, words, cmd.include_claimed, cmd.space, cmd.subject)
        lexical = [seq for seq, _ in ledger.db.recall.lexical(match, pool)]
    vector: list[int] = []
    cells: list[int] | None = None
    if cmd.strategy != "lexical":
        vector, cells = _vector_search(ledger, cmd, statuses, pool)
    # Hybrid needs query words; a query of stopwords only is answered by vectors alone.
    strategy = cmd.strategy if cmd.strategy != "hybrid" or words else "vector"
    now = parse_time(ledger._now())
    ranked = fused(lexical, vector, ledger.embedder.fusion_weight)
    hits: list[RecallHit] = []
    lex_rank = {seq: i for i, seq in enumerate(lexical, start=1)}
    vec_rank = {seq: i for i, seq in enumerate(vector, start=1)}
    for seq, score in _top_with_ties(ranked, cmd.k):
        fact = ledger.db.facts.get_by_seq(seq)
        if fact is None:
            continue
        value_text = _stored_text(ledger, fact)
        b = salience(ledger, fact, now)
        hits.append(RecallHit(
            fact=FactView(fact_id=fact.fact_id, subject=fact.subject, predicate=fact.predicate,
                          value=None if value_text is None else json.loads(value_text),
                          space=fact.space, status=fact.status,
                          provenance=PROVENANCES[effective_rank(fact)],
                          valid_from=fact.valid_from, valid_to=fact.valid_to, actor=fact.actor,
                          erased=value_text is None),
            score=score, lexical_rank=lex_rank.get(seq), vector_rank=vec_rank.get(seq),
            salience=b if math.isfinite(b) else -99.0, salience_class=salience_class(ledger, b)))
    # Salience only breaks ties between equal fused scores.
    hits.sort(key=lambda h: (-h.score, -h.salience))
    parts = []
    if strategy != "vector":
        parts.append(f"FTS5 bm25 gave {len(lexical)} candidate(s)")
    if strategy != "lexical":
        where = ("every vector" if cells is None else
                 f"the {len(cells)} nearest of {ledger.cells.count_cells(ledger)} k-means cells")
        parts.append(f"sqlite-vec KNN ({ledger.embedder.name}, cosine) over {where} gave "
                     f"{len(vector)}")
    note = (f"ranked inside SQLite: {' and '.join(parts)}, filtered to {'/'.join(statuses)} "
            f"facts inside the search; fused by reciprocal rank (k={RRF_K}, vector weight "
            f"{ledger.embedder.fusion_weight:g}); salience breaks ties")
    return RecallResult(query=cmd.query, strategy=strategy, note=note,
                        embedder=ledger.embedder.name, results=hits[:cmd.k])
