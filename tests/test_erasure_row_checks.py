"""The proof's row checks (issue 15) say what an erasure failed to erase: an erasure made to leave
one value, one sealed text or one index row behind (the attack: a broken or hostile build of
the write path) gets a certificate that names it and is not complete, for a forget and for a
sweep's grouped erasure alike. Their clean outcome is compared with the reference path in
tests/test_sweep_group.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from custody_app.erasure.certificate import ErasureCertificate, PlaceCheck
from store.sqlite.events import EventStore
from store.sqlite.recall import RecallStore
from store.sqlite.texts import TextStore
from tests.conftest import Env, day
from tests.test_sweep_group import DPO, WINDOWS, _populate

EVENTS = "events table: value and salt of each assert"
TEXTS = "event_texts: sealed free text (cause, reasons) of each erased fact"
INDEX = "recall indexes (FTS5, sqlite-vec, its in-process copy)"


def _place(cert: ErasureCertificate, name: str) -> PlaceCheck:
    [place] = [p for p in cert.places if p.place == name]
    return place


def _erase(env: Env, how: str) -> ErasureCertificate:
    if how == "forget":
        fact = env.ledger.assert_fact(
            "acct:77", "note", {"text": "call Meera on 98450 12345"}, actor="agent:support",
            cause={"kind": "message", "ref": "m-77", "detail": "Meera asked us to call"},
            provenance="attested").fact_id
        env.at(day(101))
        cert = env.ledger.forget(fact, actor=DPO, reason="subject_request").certificate
    else:
        cert = env.ledger.sweep(actor=DPO).certificate
    assert cert is not None
    return cert


@pytest.fixture(params=["forget", "sweep"])
def erasure(request: pytest.FixtureRequest, make_env: Callable[..., Env]) -> tuple[Env, str]:
    env = make_env(WINDOWS)
    _populate(env)
    return env, request.param


def _skip_first(monkeypatch: pytest.MonkeyPatch, cls: type, single: str, many: str) -> list[Any]:
    """The store's erasure of one row (single) and of many (many) leave the first one alone."""
    skipped: list[Any] = []
    one, several = getattr(cls, single), getattr(cls, many)

    def skip_one(self: Any, key: Any) -> Any:
        if not skipped:
            skipped.append(key)
            return several(self, [])  # what a store returns for nothing done (index versions)
        return one(self, key)

    def skip_of_many(self: Any, keys: list[Any]) -> Any:
        if not skipped and keys:
            skipped.append(keys[0])
            keys = keys[1:]
        return several(self, keys)

    monkeypatch.setattr(cls, single, skip_one)
    monkeypatch.setattr(cls, many, skip_of_many)
    return skipped


def test_a_clean_erasure_passes_every_row_check(erasure: tuple[Env, str]) -> None:
    env, how = erasure
    cert = _erase(env, how)
    assert cert.complete
    for name in (EVENTS, TEXTS, INDEX, "facts projection"):
        assert _place(cert, name).outcome == "clean", name


def test_a_value_left_in_its_assert_is_found(erasure: tuple[Env, str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    env, how = erasure
    skipped = _skip_first(monkeypatch, EventStore, "erase_value", "erase_values")
    cert = _erase(env, how)
    assert len(skipped) == 1
    place = _place(cert, EVENTS)
    assert (place.outcome, place.detail) == ("found", "1 assert(s) still hold a value")
    assert not cert.complete


def test_sealed_text_left_in_place_is_found_by_its_seq(erasure: tuple[Env, str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    env, how = erasure
    skipped = _skip_first(monkeypatch, TextStore, "erase_fact", "erase_facts")
    cert = _erase(env, how)
    [fact_id] = skipped
    seqs = [seq for seq, blob in env.ledger.db.texts.of_facts([fact_id])[fact_id] if blob]
    assert seqs  # the sabotage left sealed text behind
    place = _place(cert, TEXTS)
    assert place.outcome == "found"
    assert place.detail == "still sealed: " + ", ".join(f"seq {s}" for s in seqs)
    assert not cert.complete


def test_a_vector_left_in_the_index_is_found_by_its_fact(erasure: tuple[Env, str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    env, how = erasure
    skipped = _skip_first(monkeypatch, RecallStore, "remove", "remove_many")
    apply = RecallStore.apply

    def apply_but_first(self: Any, removed: list[int], *rest: Any) -> Any:  # a forget's flush
        if not skipped and removed:
            skipped.append(removed[0])
            removed = removed[1:]
        return apply(self, removed, *rest)

    monkeypatch.setattr(RecallStore, "apply", apply_but_first)
    cert = _erase(env, how)
    [seq] = skipped
    [fact_id] = [e.fact_id for e in cert.erased if env.ledger.db.facts.get(e.fact_id).assert_seq == seq]
    place = _place(cert, INDEX)
    assert (place.outcome, place.detail) == ("found", f"still indexed: {fact_id}")
    assert not cert.complete
