"""The key fence against the LATEST destruction (DESIGN 13): work begun before a subject's
erasure never obtains a key for it, not even one that newer work minted afterwards."""

from __future__ import annotations

from datetime import timedelta

import pytest

from custody_app.domain.errors import LedgerError
from custody_app.domain.timeutil import ManualClock
from custody_app.ledger.facade import Ledger
from tests.conftest import CAUSE, T0, Env, day

SUBJECT = "acct:ZQX-FENCE-4242"


def write(ledger: Ledger, value: str) -> str:
    return ledger.assert_fact(SUBJECT, "plan", value, actor="agent:w", cause=CAUSE,
                              provenance="attested").fact_id


@pytest.mark.parametrize("used_key_before", [False, True])
def test_old_work_cannot_take_the_key_newer_work_minted(env: Env, used_key_before: bool) -> None:
    """The first release's hole: refused until newer work re-keyed the subject, then the old
    work obtained the new key and wrote."""
    clock_old = ManualClock(T0 + timedelta(hours=1))
    old = Ledger.open(env.path, clock=clock_old, id_seed=99)  # its work begins on day 1
    try:
        if used_key_before:
            write(old, "ZQX-OLD-CACHED-01")  # caches the live key in the old process
        env.at(day(2))
        env.ledger.forget_subject(SUBJECT, actor="user:dpo", reason="subject_request")
        env.at(day(3))
        with env.ledger.unit_of_work():  # newer work: re-keys the subject (generation 2)
            write(env.ledger, "ZQX-NEW-WORK-0002")
        clock_old.set(T0 + timedelta(days=4))
        count = old.db.events.count()
        with pytest.raises(LedgerError) as info:
            write(old, "ZQX-OLD-AFTER-003")
        assert info.value.code == "key_fenced"
        assert old.db.events.count() == count
        # Asking again (the key is now cached in no one's favour) is refused again.
        with pytest.raises(LedgerError):
            write(old, "ZQX-OLD-AFTER-004")
        with old.unit_of_work():  # new work in the old process may write
            write(old, "ZQX-OLD-NEWWORK-5")
    finally:
        old.close()
    assert env.ledger.verify().valid


def test_the_same_process_is_fenced_after_it_re_keyed_in_new_work(env: Env) -> None:
    """One ledger object: work begun before the erasure stays fenced after a nested unit of
    work re-keyed the subject and cached the new key."""
    env.at(day(2))
    with env.ledger.unit_of_work():  # work A begins on day 2
        env.at(day(3))
        env.ledger.forget_subject(SUBJECT, actor="user:dpo", reason="subject_request")
        env.at(day(4))
        with env.ledger.unit_of_work():  # work B begins after the erasure and re-keys
            write(env.ledger, "ZQX-B-REKEYED-01")
        with pytest.raises(LedgerError) as info:
            write(env.ledger, "ZQX-A-STALE-0002")
        assert info.value.code == "key_fenced"


def _holds(obj: object, secret: bytes, seen: set[int] | None = None) -> bool:
    """Whether `secret` is among the bytes reachable from `obj`'s attributes and containers."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return False
    seen.add(id(obj))
    if isinstance(obj, bytes | bytearray):
        return bytes(obj) == secret
    if isinstance(obj, dict):
        return any(_holds(k, secret, seen) or _holds(v, secret, seen) for k, v in obj.items())
    if isinstance(obj, list | tuple | set | frozenset):
        return any(_holds(item, secret, seen) for item in obj)
    return False


def test_a_forgotten_subjects_digest_key_goes_with_its_key(env: Env) -> None:
    """The forgotten-value digest key derived from a subject's live key is kept beside that key
    (derived once, not at every assert) and dropped with it: after another process forgets the
    subject, this one derives none and holds no copy; after this process forgets it, neither."""
    other = Ledger.open(env.path, clock=ManualClock(T0 + timedelta(hours=1)), id_seed=98)
    try:
        assert other.keys is not None
        ref = other.keys.subject_ref(SUBJECT)
        with other.transaction():
            write(other, "ZQX-CACHED-DIGEST-1")  # the live key and its digest key cached here
            derived = other.keys.digest_key(ref)
            assert derived is not None and _holds(vars(other.keys), derived)
        env.at(day(2))
        env.ledger.forget_subject(SUBJECT, actor="user:dpo", reason="subject_request")
        with other.transaction():  # another connection's commit: the cached keys are dropped
            assert other.keys.digest_key(ref) is None
        assert not _holds(vars(other.keys), derived)
    finally:
        other.close()
    env.at(day(3))
    with env.ledger.unit_of_work():
        write(env.ledger, "ZQX-REKEYED-VALUE-2")  # a new key (generation 2) for new work
    keys = env.ledger.keys
    assert keys is not None
    ref = keys.subject_ref(SUBJECT)
    again = keys.digest_key(ref)
    assert again is not None and again != derived
    env.at(day(4))
    env.ledger.forget_subject(SUBJECT, actor="user:dpo", reason="subject_request")
    assert keys.digest_key(ref) is None
    assert not _holds(vars(keys), again)
