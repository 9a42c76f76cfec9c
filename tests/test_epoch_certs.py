"""Issue 34, "the certificate is re-issued when they complete", across processes, on a SQLite
file and on a real PostgreSQL server: an erasure's certificate waiting on its epoch is kept in
the ledger (content-free, with a MAC), so a `rotate-epoch` run by another process (a real
subprocess for the CLI) re-issues it crypto-erased and complete, once; a stored certificate
forged or edited in the database is not re-issued; a rotation cut short after the key store
committed leaves its certificates for the next one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from custody_app.erasure import epoch_certs
from custody_app.erasure.certificate import COPIES_PLACES
from custody_app.ledger.facade import Ledger
from tests import rawsql

ROOT = Path(__file__).resolve().parent.parent
CAUSE = {"kind": "tool", "ref": "epoch-cert-test"}
SECRET = "alice's diagnosis zebrafinch-4471"
OTHER = "bob note quokka-9182 kept"


def _erase_two(address: str) -> tuple[str, str]:
    """In one process: a subject erasure of acct:ALICE and a forget of one of acct:BOB's two
    facts (which re-keys BOB); (ALICE's subject hash, BOB's forgotten fact id)."""
    with Ledger.open(address) as led:
        led.assert_fact("acct:ALICE-7", "diagnosis", SECRET, actor="agent:a", cause=CAUSE,
                        provenance="attested")
        bob = led.assert_fact("acct:BOB-7", "note", OTHER, actor="agent:a", cause=CAUSE,
                              provenance="attested")
        led.assert_fact("acct:BOB-7", "plan", "pro plan kept", actor="agent:a", cause=CAUSE,
                        provenance="attested")
        alice = led.forget_subject("acct:ALICE-7", actor="user:dpo", reason="subject_request")
        forgot = led.forget(bob.fact_id, actor="user:dpo", reason="subject_request")
        for cert in (alice.certificate, forgot.certificate):
            assert [p.outcome for p in cert.places if p.place in COPIES_PLACES] != [
                "crypto-erased"]
        return alice.subject_hash, bob.fact_id


def _copies(cert: object) -> str:
    places = {p.place: p for p in cert.places}  # type: ignore[attr-defined]
    return next(places[name].outcome for name in COPIES_PLACES if name in places)


def _meta(address: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in rawsql.query(
        address, "SELECT key, value FROM ledger_meta WHERE key LIKE 'epoch_certificate%'")}


def test_another_process_rotation_reissues_the_certificates_once(address: str) -> None:
    subject_hash, fact_id = _erase_two(address)
    stored = _meta(address)
    # Two records and their index; content-free: no value, free text or plaintext subject id,
    # no digest of an erased string, no ledger address.
    assert len(stored) == 3
    blob = json.dumps(stored)
    for secret in (SECRET, OTHER, "acct:ALICE-7", "zebrafinch", "quokka", "epoch-cert-test"):
        assert secret not in blob
    with Ledger.open(address) as led:  # another process: nothing in memory
        rotated = led.rotate_epoch()
        certs = {c.operation: c for c in rotated.certificates}
        assert sorted(certs) == ["forget", "forget_subject"]
        assert certs["forget_subject"].subject_hash == subject_hash
        assert certs["forget"].root == fact_id
        for cert in certs.values():
            assert _copies(cert) == "crypto-erased" and cert.complete is True
            assert cert.issued_at == rotated.at and cert.ledger == led.db.path
            assert not [p.place for p in cert.places if p.outcome in ("pending", "found")]
        assert "2 certificate(s) re-issued" in rotated.detail
        assert led.rotate_epoch().certificates == []  # a second rotation re-issues nothing
    assert _meta(address) == {}
    with Ledger.open(address) as led:
        assert led.rotate_epoch().certificates == []


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "custody_app", *args], cwd=ROOT,
                          env=dict(os.environ), capture_output=True, text=True, timeout=180)


def test_the_cli_rotate_epoch_prints_a_certificate_another_process_issued(
        address: str) -> None:
    with Ledger.open(address) as led:
        led.assert_fact("acct:ALICE-7", "diagnosis", SECRET, actor="agent:a", cause=CAUSE,
                        provenance="attested")
        led.assert_fact("acct:CAROL-7", "diagnosis", OTHER, actor="agent:a", cause=CAUSE,
                        provenance="attested")
    done = _cli("forget-subject", "--ledger", address, "acct:ALICE-7", "--reason",
                "subject_request", "--json")
    # exit 1 on a server: its certificate is not complete while its epoch is live
    assert done.returncode == (1 if rawsql.is_server(address) else 0), done.stderr
    subject_hash = json.loads(done.stdout)["subject_hash"]
    done = _cli("rotate-epoch", "--ledger", address, "--json")
    assert done.returncode == 0, done.stderr
    certs = json.loads(done.stdout)["certificates"]
    assert [(c["operation"], c["subject_hash"], c["complete"]) for c in certs] == [
        ("forget_subject", subject_hash, True)]
    assert "crypto-erased" in {p["outcome"] for p in certs[0]["places"]}
    done = _cli("forget-subject", "--ledger", address, "acct:CAROL-7", "--reason",
                "subject_request")
    assert done.returncode == (1 if rawsql.is_server(address) else 0), done.stderr
    done = _cli("rotate-epoch", "--ledger", address)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("Subject erasure certificate") == 1
    assert "[crypto-erased]" in done.stdout and "complete: yes" in done.stdout
    assert SECRET not in done.stdout and "acct:CAROL-7" not in done.stdout
    done = _cli("rotate-epoch", "--ledger", address, "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["certificates"] == []


def test_a_forged_or_edited_stored_certificate_is_not_reissued(address: str) -> None:
    """Real means: its MAC (a key derived from the key store's marks key) holds, and every
    erased fact it names is the chain's erasure event at its seq with its hash. An edit in the
    database (an outcome turned clean, a subject hash swapped), a record copied to another seq,
    and a record with a valid MAC naming a fact the chain never erased are dropped, not
    re-issued; the real one is."""
    subject_hash, fact_id = _erase_two(address)
    stored = _meta(address)
    seqs = json.loads(stored[epoch_certs.INDEX])
    records = {s: json.loads(stored[epoch_certs.RECORD.format(seq=s)]) for s in seqs}
    real_seq = next(s for s, r in records.items()
                    if r["certificate"]["operation"] == "forget_subject")
    edited_seq = next(s for s in seqs if s != real_seq)
    edited = records[edited_seq]
    edited["certificate"]["subject_hash"] = subject_hash  # claims to be another erasure
    for place in edited["certificate"]["places"]:
        place["outcome"] = "clean" if place["outcome"] == "found" else place["outcome"]
    copied = dict(records[real_seq], seq=1)  # a real record replayed at another seq
    with Ledger.open(address) as led:
        # As only a holder of the key store's master key could: a valid MAC over a record that
        # names a live fact the chain never erased.
        live = led.assert_fact("acct:DAVE-7", "note", "dave kept note", actor="agent:a",
                               cause=CAUSE, provenance="attested")
        event = led.db.events.get(live.seq)
        assert event is not None
        body = json.loads(json.dumps(records[real_seq]["certificate"]))
        body["erased"] = [dict(body["erased"][0] if body["erased"] else {
            "kind": "forget", "status_before": "active", "root": None, "digest_kind": "none",
            "digest": None}, fact_id=live.fact_id, seq=live.seq, event_id=event.hash)]
        body["operation"], body["subject_hash"] = "forget", None
        minted = {"seq": live.seq, "certificate": body,
                  "mac": led.keys.certificate_mac(  # type: ignore[union-attr]
                      epoch_certs._canonical(live.seq, body))}
    rawsql.edit(
        address,
        ("UPDATE ledger_meta SET value = ? WHERE key = ?",
         (json.dumps(edited), epoch_certs.RECORD.format(seq=edited_seq))),
        ("INSERT INTO ledger_meta (key, value) VALUES (?, ?)",
         (epoch_certs.RECORD.format(seq=1), json.dumps(copied))),
        ("INSERT INTO ledger_meta (key, value) VALUES (?, ?)",
         (epoch_certs.RECORD.format(seq=live.seq), json.dumps(minted))),
        ("UPDATE ledger_meta SET value = ? WHERE key = ?",
         (json.dumps(sorted([*seqs, 1, live.seq])), epoch_certs.INDEX)))
    with Ledger.open(address) as led:
        rotated = led.rotate_epoch()
        assert [(c.operation, c.subject_hash) for c in rotated.certificates] == [
            ("forget_subject", subject_hash)]
        assert "3 stored certificate(s) failed their MAC or matched no erasure" in rotated.detail
        assert led.rotate_epoch().certificates == []
    assert _meta(address) == {}
    assert fact_id  # the edited forget's erasure itself stands: only its record was dropped


def test_a_rotation_cut_short_leaves_its_certificates_to_the_next(
        address: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kill after the key store committed the rotation and before the ledger transaction
    that re-issues and drops the records: the next rotation re-issues them, crypto-erased at
    the first rotation (which covered them), and only once."""
    subject_hash, _ = _erase_two(address)

    def killed(*_args: object, **_kw: object) -> None:
        raise KeyboardInterrupt("killed after the key store committed")

    with Ledger.open(address) as led:
        first_at = led.erasures().erasures[0].tx_at
        monkeypatch.setattr(epoch_certs, "reissue", killed)
        with pytest.raises(KeyboardInterrupt):
            led.rotate_epoch()
        monkeypatch.undo()
    assert len(_meta(address)) == 3
    with Ledger.open(address) as led:
        listed = led.erasures()
        assert {r.epoch for r in listed.erasures} == {"crypto-erased"}
        covered_at = listed.erasures[0].epoch_destroyed_at
        assert covered_at is not None and covered_at > first_at
        rotated = led.rotate_epoch()
        assert sorted(c.operation for c in rotated.certificates) == ["forget", "forget_subject"]
        for cert in rotated.certificates:
            place = {p.place: p for p in cert.places}
            detail = next(place[n].detail for n in COPIES_PLACES if n in place)
            assert _copies(cert) == "crypto-erased" and f"destroyed at {covered_at}" in detail
        assert led.rotate_epoch().certificates == []
    assert subject_hash
