"""A forget records the ledger's head in the key store (rollback detection) in a thread beside
its proof: when it returns the mark is durable and is the erasure's head, and a failure of
the mark is raised by the forget as before (the reference path writes it before the proof)."""

from __future__ import annotations

import pytest

import custody_app.erasure.forget as forget_module
from custody_app.keys.keyring import KeyRing
from store.errors import StoreFull
from tests.conftest import Env

DPO = "user:dpo"


@pytest.mark.parametrize("beside", [True, False])
def test_the_mark_is_the_erasures_head_when_forget_returns(
        env: Env, monkeypatch: pytest.MonkeyPatch, beside: bool) -> None:
    monkeypatch.setattr(forget_module, "MARK_BESIDE_PROOF", beside)
    fact = env.put("acct:42", "contact", {"email": "someone@example.org"})
    result = env.ledger.forget(fact, actor=DPO, reason="subject_request")
    assert result.certificate.complete
    assert env.ledger.keys is not None
    mark = env.ledger.keys.store.high_water()
    head = env.ledger.db.events.head()
    assert mark is not None and head is not None and (mark[0], mark[1]) == (head[0], head[1])
    assert head[0] == result.seq


@pytest.mark.parametrize("beside", [True, False])
def test_a_failed_mark_is_raised_by_the_forget(
        env: Env, monkeypatch: pytest.MonkeyPatch, beside: bool) -> None:
    monkeypatch.setattr(forget_module, "MARK_BESIDE_PROOF", beside)
    fact = env.put("acct:42", "contact", {"email": "someone@example.org"})

    def full(self: KeyRing, *args: object, **kwargs: object) -> None:
        raise StoreFull("the disk is full: the key store write was rolled back")

    monkeypatch.setattr(KeyRing, "record_mark", full)
    with pytest.raises(Exception) as raised:
        env.ledger.forget(fact, actor=DPO, reason="subject_request")
    assert "disk is full" in str(raised.value)
    assert env.status(fact) == "forgotten"  # the ledger committed first, as before
