"""Recall's hits are read in one statement, only the k returned are decrypted and the read
models are not validated again (issue 17, recall at 10k): the result lists equal, field for
field, what the per-hit reads (facts row, event read + decrypt, salience from the fact's events)
gave before, on a seeded ledger with ties, affirms, quarantined and erased facts."""

from __future__ import annotations

import json
import math
import random
from datetime import datetime

import pytest

from custody_app.domain.commands import Recall
from custody_app.domain.lifecycle import effective_rank
from custody_app.domain.models import PROVENANCES
from custody_app.domain.readmodels import FactView, RecallHit
from custody_app.recall import search as search_mod
from custody_app.recall.index import INDEXED, RecallIndex
from custody_app.recall.salience import salience, salience_class
from tests.conftest import CAUSE, WRITER, Env, day
from tests.test_recall import DPO

WORDS = ("amber basalt cobalt dune ember fjord glacier harbor iris juniper kelp lagoon meadow "
         "nebula orchid prairie quartz reef").split()


def reference(index: RecallIndex, chosen: list[tuple[int, float]], cmd: Recall,
              statuses: tuple[str, ...], now: datetime, lex_rank: dict[int, int],
              vec_rank: dict[int, int]) -> list[RecallHit]:
    """The hydration recall ran before: a facts read, an event read + decrypt and the fact's
    events for salience, per hit, every read model validated."""
    hits = []
    for seq, score in chosen:
        fact = index.db.facts.get_by_seq(seq)
        if fact is None or INDEXED.get(fact.status) not in statuses:
            continue
        value_text = index.stored_text(fact)
        b = salience(index.db, index.policy, fact, now)
        hits.append(RecallHit(
            fact=FactView(fact_id=fact.fact_id, subject=fact.subject, predicate=fact.predicate,
                          value=None if value_text is None else json.loads(value_text),
                          space=fact.space, status=fact.status,
                          provenance=PROVENANCES[effective_rank(fact)],
                          valid_from=fact.valid_from, valid_to=fact.valid_to, actor=fact.actor,
                          erased=value_text is None),
            score=score, lexical_rank=lex_rank.get(seq), vector_rank=vec_rank.get(seq),
            salience=b if math.isfinite(b) else -99.0,
            salience_class=salience_class(index.policy, b)))
    hits.sort(key=lambda h: (-h.score, -h.salience))
    return hits[:cmd.k]


def test_hits_equal_the_per_hit_reads_field_for_field(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(17)
    ids = []
    with env.ledger.transaction():
        for i in range(160):
            # every 5th value repeats an earlier one: equal fused scores, salience decides
            words = " ".join(rng.sample(WORDS, 3)) if i % 5 else "amber basalt cobalt"
            res = env.ledger.assert_fact(
                f"acct:{i % 23}", f"note_{i % 11}" if i % 5 else f"same_{i}", words,
                actor=WRITER, cause=CAUSE, provenance="claimed" if i % 9 == 0 else "attested",
                space="org" if i % 4 else "team:a")
            ids.append(res.fact_id)
    env.at(day(3))
    for fact_id in ids[::7]:  # affirmed: a higher salience
        env.ledger.affirm(fact_id, actor=WRITER)
    env.at(day(5))
    env.ledger.forget(ids[10], actor=DPO, reason="subject_request")
    compared, tied = [0], [0]
    orig = search_mod._hydrate

    def both(*args: object) -> list[RecallHit]:
        new = orig(*args)  # type: ignore[arg-type]
        old = reference(*args)  # type: ignore[arg-type]
        assert [h.model_dump() for h in new] == [h.model_dump() for h in old]
        assert new == old
        compared[0] += 1
        scores = [h.score for h in new]
        tied[0] += len(scores) - len(set(scores))
        return new

    monkeypatch.setattr(search_mod, "_hydrate", both)
    for q in ["amber basalt cobalt", "glacier", "reef orchid meadow", "iris", "zzz nothing"]:
        for strategy in ("hybrid", "lexical", "vector"):
            for k in (1, 3, 10, 40):
                for claimed in (False, True):
                    env.ledger.recall(q, k=k, strategy=strategy, include_claimed=claimed)
                env.ledger.recall(q, k=k, strategy=strategy, space="team:a")
    assert compared[0] == 5 * 3 * 4 * 3
    assert tied[0] > 0  # some result lists held equal scores, ordered by salience
