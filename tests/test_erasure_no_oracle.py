"""Erasure leaves no oracle (DESIGN 14): after forget_subject, nothing in the ledger or its key
store (master key included) confirms a guess of an erased value; a single-fact forget still
recognises the value written again; `verify` compares the forgotten-value digests with the fold
of the erasure events. Real ledger and key store files."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

from custody_app.domain.chain import canonical
from custody_app.keys import crypto
from custody_app.keys.keyring import load_master
from tests.conftest import Env

SUBJECT = "patient:ZQX-ORACLE-0001"
ERASED = "type 2 diabetes mellitus"
GUESSES = ["asthma", "hypertension", ERASED, "migraine", "none"]
DPO = "user:dpo"


def keys_in(keystore: Path) -> list[bytes]:
    """Every key an attacker holding the key store and its master key can unwrap, with the
    keys derived from them as the code derives them."""
    master = load_master(keystore, create=False)
    con = sqlite3.connect(keystore)
    try:
        meta = con.execute("SELECT name, value FROM keystore_meta").fetchall()
        subjects = con.execute("SELECT subject_ref, generation, wrapped FROM subject_keys "
                               "WHERE wrapped IS NOT NULL").fetchall()
    finally:
        con.close()
    out = []
    for name, wrapped in meta:
        try:
            out.append(crypto.unwrap(master, bytes(wrapped), name))
        except crypto.DecryptError:
            continue
    for ref, generation, wrapped in subjects:
        key = crypto.unwrap(master, bytes(wrapped), f"data:{ref}:{generation}")
        out += [key, bytes.fromhex(crypto.keyed_digest(key, "custody", "forgotten digests"))]
    return out + [master]


def confirmed(path: Path, refs: list[str], predicate: str,
              keystore: Path | None = None) -> list[str]:
    """The guesses whose digest (under any key, in any form the code has used) is in the
    ledger file's bytes (`keystore`: the key store to take keys from, else the ledger's)."""
    data = b"".join(p.read_bytes() for p in path.parent.iterdir()
                    if p.name.startswith(path.name) and not p.name.endswith((".keys", "master")))
    hits = []
    keys = keys_in(keystore or Path(f"{path}.keys"))
    for guess in GUESSES:
        text = canonical(guess)
        forms = {hashlib.sha256(text.encode()).hexdigest()}
        for key in keys:
            forms.add(crypto.keyed_digest(key, "value", text))
            forms.add(crypto.keyed_digest(key, "previously", predicate, text))
            for ref in refs:
                forms.add(crypto.keyed_digest(key, "previously", ref, predicate, text))
        if any(form.encode() in data for form in forms):
            hits.append(guess)
    return hits


def test_after_forget_subject_no_digest_confirms_a_guess(env: Env) -> None:
    first = env.put(SUBJECT, "diagnosis", ERASED)
    assert env.ledger.keys is not None
    ref = env.ledger.keys.subject_ref(SUBJECT)
    env.ledger.forget(first, actor=DPO, reason="subject_request")  # a digest kept: fact forget
    env.put(SUBJECT, "diagnosis", "hypertension")
    env.put("patient:ZQX-ORACLE-0002", "diagnosis", "asthma")  # another subject's live value
    result = env.ledger.forget_subject(SUBJECT, actor=DPO, reason="subject_request")
    assert result.certificate.complete
    assert env.ledger.verify().valid
    env.ledger.close()
    env.ledger = env.reopen()
    hits = confirmed(env.path, [ref], "diagnosis")
    assert ERASED not in hits and "hypertension" not in hits, hits


def test_a_single_fact_forget_still_recognises_the_value(env: Env) -> None:
    fact = env.put(SUBJECT, "diagnosis", ERASED)
    env.ledger.forget(fact, actor=DPO, reason="subject_request")
    again = env.ledger.assert_fact(SUBJECT, "diagnosis", ERASED, actor="agent:support",
                                   cause={"kind": "message", "ref": "m"}, provenance="attested")
    assert again.status == "quarantined" and again.provenance == "claimed"
    assert env.ledger.verify().valid


def test_digest_none_keeps_nothing(make_env: Callable[..., Env]) -> None:
    env = make_env('[erasure]\ndigest = "none"\n')
    fact = env.put(SUBJECT, "diagnosis", ERASED)
    env.ledger.forget(fact, actor=DPO, reason="subject_request")
    rows = env.ledger.db.conn.execute("SELECT count(*) FROM forgotten_digests").fetchone()[0]
    assert rows == 0
    assert ERASED not in confirmed(env.path, [], "diagnosis")


def test_verify_fails_on_a_deleted_digest_row(env: Env) -> None:
    fact = env.put(SUBJECT, "diagnosis", ERASED)
    forgot = env.ledger.forget(fact, actor=DPO, reason="subject_request")
    env.ledger.close()
    con = sqlite3.connect(env.path)
    con.execute("DELETE FROM forgotten_digests")
    con.commit()
    con.close()
    report = env.reopen().verify()
    assert not report.valid and report.problem is not None
    assert "forgotten_digests" in report.problem and f"seq {forgot.seq}" in report.problem
    # ... and the forgotten value would have come back believed: it is recognised no more
    again = env.ledger.assert_fact(SUBJECT, "diagnosis", ERASED, actor="agent:support",
                                   cause={"kind": "message", "ref": "m"}, provenance="attested")
    assert again.status == "active"


def test_verify_fails_on_a_digest_row_without_its_erasure_event(env: Env) -> None:
    env.put(SUBJECT, "diagnosis", ERASED)
    env.ledger.close()
    con = sqlite3.connect(env.path)
    con.execute("INSERT INTO forgotten_digests VALUES ('abcdef0123456789', 'diagnosis', 'ff')")
    con.commit()
    con.close()
    report = env.reopen().verify()
    assert not report.valid and report.problem is not None
    assert "forgotten_digests" in report.problem and "abcdef012345" in report.problem


def test_a_backup_taken_between_forget_and_forget_subject_confirms_nothing(
        env: Env, tmp_path: Path) -> None:
    """The backup holds the digest row and the forget event's digest of the single-fact forget;
    once forget_subject destroyed the subject's key, the current key store confirms neither."""
    first = env.put(SUBJECT, "diagnosis", ERASED)
    assert env.ledger.keys is not None
    ref = env.ledger.keys.subject_ref(SUBJECT)
    env.ledger.forget(first, actor=DPO, reason="subject_request")
    env.ledger.close()
    backup = tmp_path / "backup"
    backup.mkdir()
    for name in ("ledger.db", "ledger.db-wal"):
        if (env.path.parent / name).exists():
            shutil.copyfile(env.path.parent / name, backup / name)
    env.reopen()
    env.ledger.forget_subject(SUBJECT, actor=DPO, reason="subject_request")
    env.ledger.close()
    env.reopen()
    hits = confirmed(backup / "ledger.db", [ref], "diagnosis", Path(f"{env.path}.keys"))
    assert ERASED not in hits, hits
