"""Certificates never turn a leak into `shared` (DESIGN 14): `shared` is a live record not
derived from the erased facts, never the erased fact's own rows, and a retry never calls complete
what an earlier certificate for the same erasure found leaking. Real ledger files."""

from __future__ import annotations

from tests.conftest import Env

SUBJECT = "acct:SPACE-AND-SUBJECT-0001"
DPO = "user:dpo"


def shared_rows(cert: object) -> list[str]:
    return [w for p in cert.places for h in p.hits  # type: ignore[attr-defined]
            if h.classification == "shared" for w in h.where]


def test_a_subject_that_is_also_a_space_stays_a_leak_on_retry(env: Env) -> None:
    own = env.put(SUBJECT, "plan", "a plan of the subject", space=SUBJECT)
    first = env.ledger.forget_subject(SUBJECT, actor=DPO, reason="subject_request").certificate
    assert not first.complete
    assert any(h.classification == "leak" for p in first.places for h in p.hits)
    assert not any(own in w for w in shared_rows(first))
    again = env.ledger.forget_subject(SUBJECT, actor=DPO, reason="subject_request").certificate
    assert not again.complete, again.render()
    assert not any(own in w for w in shared_rows(again)), shared_rows(again)
    assert any(h.classification == "leak" for p in again.places for h in p.hits)


def test_a_live_record_of_another_subject_is_still_shared(env: Env) -> None:
    """The other side: the subject id as the space of another subject's live fact is shared
    (listed with where), and the erasure of a subject without such a fact of its own is
    complete."""
    other = env.put("acct:SOMEONE-ELSE-0001", "plan", "another plan", space=SUBJECT)
    env.put(SUBJECT, "plan", "a plan of the subject")
    cert = env.ledger.forget_subject(SUBJECT, actor=DPO, reason="subject_request").certificate
    assert cert.complete, cert.render()
    assert any(other in w for w in shared_rows(cert))
