"""Cardinality per predicate (`[cardinality]` in the policy): a second active value of a `one`
predicate without `supersedes` is flagged in the write's result and in as_of, or refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from custody_app import Ledger
from custody_app.domain.errors import LedgerError
from custody_app.domain.policy import policy_from_text
from custody_app.domain.readmodels import ContestedAsOf, ContradictingAssert

CAUSE = {"kind": "tool", "ref": "crm#1"}


def _policy(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _put(ledger: Ledger, value: str, predicate: str = "plan", **kw: object) -> object:
    return ledger.assert_fact("acct:1", predicate, value, actor="agent:bot", cause=CAUSE,
                              provenance="attested", **kw)


def test_a_second_plan_without_supersedes_is_flagged_and_as_of_marks_it(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "c.db") as ledger:
        first = _put(ledger, "pro")
        second = _put(ledger, "team")
        assert isinstance(second, ContradictingAssert)
        assert second.contradicts == [first.fact_id]  # type: ignore[attr-defined]
        assert "supersedes" in second.warning
        read = ledger.as_of(subject="acct:1")
        assert isinstance(read, ContestedAsOf)
        [c] = read.contradictions
        assert (c.subject, c.predicate, c.fact_ids) == ("acct:1", "plan",
                                                        [first.fact_id, second.fact_id])
        # A correction that names what it replaces is no contradiction.
        third = _put(ledger, "enterprise", supersedes=second.fact_id)
        assert not isinstance(third, ContradictingAssert)
        ledger.retract(first.fact_id, actor="agent:bot", reason="duplicate")
        clean = ledger.as_of(subject="acct:1")
        assert not isinstance(clean, ContestedAsOf) and "contradictions" not in clean.model_dump()


def test_many_predicates_and_a_refusing_policy(tmp_path: Path) -> None:
    policy = _policy(tmp_path, '[cardinality]\npredicates = {tag = "many"}\n'
                               'contradiction = "refuse"\n')
    with Ledger.open(tmp_path / "r.db", policy=policy) as ledger:
        _put(ledger, "vip", predicate="tag")
        assert not isinstance(_put(ledger, "eu", predicate="tag"), ContradictingAssert)
        first = _put(ledger, "pro")
        before = ledger.verify().events
        with pytest.raises(LedgerError) as info:
            _put(ledger, "team")
        assert info.value.code == "contradiction" and first.fact_id in info.value.message
        assert info.value.details["contradicts"] == [first.fact_id]
        assert ledger.verify().events == before  # refused: nothing written
        assert not isinstance(ledger.as_of(subject="acct:1"), ContestedAsOf)


def test_default_many_and_unknown_values_are_checked(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "m.db", policy=_policy(tmp_path, '[cardinality]\ndefault = "many"\n')
                     ) as ledger:
        _put(ledger, "pro")
        assert not isinstance(_put(ledger, "team"), ContradictingAssert)
    with pytest.raises(LedgerError) as info:
        policy_from_text('[cardinality]\npredicates = {plan = "two"}\n', "bad.toml")
    assert "cardinality.predicates.plan" in info.value.message


def test_a_policy_at_the_default_cardinality_keeps_its_hash() -> None:
    plain = policy_from_text("", "a.toml")
    spelled = policy_from_text('[cardinality]\ndefault = "one"\ncontradiction = "flag"\n', "b.toml")
    changed = policy_from_text('[cardinality]\ncontradiction = "refuse"\n', "c.toml")
    assert plain.hash == spelled.hash and "cardinality" not in plain.canonical
    assert changed.hash != plain.hash
