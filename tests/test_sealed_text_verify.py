"""verify reads the sealed free text in one ordered scan merged with its walk over the events
(not one query per event): every hand edit of the event_texts table is still named, the scan
gives exactly the rows the point query gives, and the walk's cipher cache opens exactly what
the plain path opens and refuses what it refuses. A contract module (tests/conftest.py): each
hand edit is plain SQL with the table's guards bypassed (tests/rawsql.py), on a SQLite file and
on a server."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from custody_app.domain.sealed_text import UpgradeDigest, upgrade_digest
from custody_app.keys import crypto
from custody_app.keys.values import TextCodec
from tests import rawsql
from tests.conftest import Env


def _raw(address: Any, sql: str, args: tuple[Any, ...] = ()) -> None:
    """A hand edit through a plain connection with the protecting triggers bypassed."""
    rawsql.edit(address, (sql, args), unguarded=True)


def _facts(env: Env) -> tuple[str, str]:
    led = env.ledger
    one = led.assert_fact("acct:1", "plan", "pro", actor="agent:a", provenance="attested",
                          cause={"kind": "tool", "ref": "crm#1", "detail": "as said"}).fact_id
    led.affirm(one, actor="agent:a")  # an event without sealed text between them
    two = led.assert_fact("acct:2", "plan", "basic", actor="agent:a", provenance="attested",
                          cause={"kind": "tool", "ref": "crm#2", "detail": "on the phone"}).fact_id
    led.retract(one, actor="agent:a", reason="the customer changed plans")
    return one, two


def _verify(env: Env) -> Any:
    env.ledger.close()
    return env.reopen().verify()


def test_the_untampered_ledger_verifies(env: Env) -> None:
    _facts(env)
    report = _verify(env)
    assert report.valid, report.problem


@pytest.mark.parametrize("where", ["after the head", "before the first event", "at seq 0"])
def test_a_row_added_for_a_seq_with_no_event_fails_verify(env: Env, where: str) -> None:
    one, _ = _facts(env)
    seq = env.ledger.db.texts.of_fact(one)[0][0]
    fact_id, ref, blob, salt = env.ledger.db.texts.get(seq) or ("", "", None, None)
    head = env.ledger.db.events.count()
    stray = {"after the head": head + 5, "before the first event": -3, "at seq 0": 0}[where]
    env.ledger.close()
    _raw(env.path, "INSERT INTO event_texts(seq, fact_id, subject_ref, sealed, salt) "
         "VALUES (?, ?, ?, ?, ?)", (stray, fact_id, ref, blob, salt))
    report = env.reopen().verify()
    assert not report.valid and report.first_bad_seq == stray, report.problem
    assert f"sealed free text row {stray} belongs to no event" in (report.problem or "")


def test_rows_swapped_between_two_events_of_the_same_fact_fail_verify(env: Env) -> None:
    # The same fact: both blobs open under its binding, so only the commitments can tell.
    one, _ = _facts(env)
    (s1, _b1), (s2, _b2) = env.ledger.db.texts.of_fact(one)[:2]
    r1, r2 = env.ledger.db.texts.get(s1), env.ledger.db.texts.get(s2)
    assert r1 and r2
    env.ledger.close()
    _raw(env.path, "UPDATE event_texts SET sealed = ?, salt = ? WHERE seq = ?", (r2[2], r2[3], s1))
    _raw(env.path, "UPDATE event_texts SET sealed = ?, salt = ? WHERE seq = ?", (r1[2], r1[3], s2))
    report = env.reopen().verify()
    assert not report.valid and report.first_bad_seq == s1, report.problem
    assert "does not match its commitment" in (report.problem or "")


def test_a_row_moved_to_the_seq_of_an_event_without_text_fails_verify(env: Env) -> None:
    one, _ = _facts(env)
    seq = env.ledger.db.texts.of_fact(one)[0][0]
    env.ledger.close()
    # seq + 1 is the affirm: it has no sealed text; seq now has none either.
    _raw(env.path, "UPDATE event_texts SET seq = seq + 1 WHERE seq = ?", (seq,))
    report = env.reopen().verify()
    assert not report.valid and report.first_bad_seq == seq, report.problem


def test_a_flipped_byte_in_the_second_fact_s_text_is_named_by_its_seq(env: Env) -> None:
    _, two = _facts(env)
    seq = env.ledger.db.texts.of_fact(two)[0][0]
    blob = bytearray(env.ledger.db.texts.get(seq)[2] or b"")
    blob[len(blob) // 2] ^= 0x40
    env.ledger.close()
    _raw(env.path, "UPDATE event_texts SET sealed = ? WHERE seq = ?", (bytes(blob), seq))
    report = env.reopen().verify()
    assert not report.valid and report.first_bad_seq == seq
    assert "does not decrypt" in (report.problem or "")


@pytest.mark.parametrize("batch", [1, 2, 3, 5000])
def test_the_ordered_scan_gives_every_row_as_the_point_query_does(env: Env, batch: int) -> None:
    _facts(env)
    texts = env.ledger.db.texts
    with env.ledger.db.read():
        scanned = list(texts.iter_all(batch))
        assert [s for s, _ in scanned] == list(texts.seqs())
        assert scanned == [(s, texts.get(s)) for s in texts.seqs()]
    assert len(scanned) == 3


@pytest.mark.parametrize("snapshot", [False, True])
def test_the_walk_s_cipher_cache_opens_and_refuses_as_the_plain_path(env: Env,
                                                                     snapshot: bool) -> None:
    """Also with verify's keys, read in one query (KeyRing.snapshot_keys): a generation the
    key store never held (the fourth edit) is refused as the point query refuses it."""
    one, two = _facts(env)
    keys = env.ledger.keys
    assert keys is not None
    ciphers = (crypto.Ciphers(keys.snapshot_keys(), snapshot=True) if snapshot
               else crypto.Ciphers(keys.key_for_open))
    codec = TextCodec(keys)
    rows = [env.ledger.db.texts.get(s) for s in env.ledger.db.texts.seqs()]
    for row in rows:
        assert row is not None and row[2] is not None
        fact_id, ref, blob, _salt = row
        assert codec.open(fact_id, ref, blob, ciphers) == codec.open(fact_id, ref, blob)
        assert codec.open(fact_id, ref, blob, ciphers) is not None
        edits = [blob[:-1] + bytes([blob[-1] ^ 1]), blob[:10], b"XXX" + blob[3:],
                 blob[:3] + b"\x00\x00\x00\x63" + blob[7:]]
        for bad in edits:
            outcomes = []
            for use in (ciphers, None):
                try:
                    outcomes.append(("ok", codec.open(fact_id, ref, bad, use)))
                except crypto.DecryptError as exc:
                    outcomes.append(("refused", str(exc)))
            assert outcomes[0] == outcomes[1] and outcomes[0][0] in ("refused", "ok")
        # Under another fact's binding neither opens it.
        other = two if fact_id == one else one
        with pytest.raises(crypto.DecryptError):
            codec.open(other, ref, blob, ciphers)


@pytest.mark.parametrize("data", [b'{"cause.ref": 5}', b'{"cause.ref": null}', b'["x"]',
                                  b'{"cause.ref": ["x"]}', b'"x"'])
def test_sealed_text_that_is_not_a_map_of_field_to_text_is_refused(env: Env,
                                                                   data: bytes) -> None:
    """Opened through the walk's cipher cache or not, well sealed but not field -> text."""
    one, _ = _facts(env)
    keys = env.ledger.keys
    assert keys is not None
    row = next(r for s in env.ledger.db.texts.seqs()
               if (r := env.ledger.db.texts.get(s)) is not None and r[0] == one)
    _fact, ref, blob, _salt = row
    assert blob is not None
    generation = crypto.sealed_generation(blob)
    key = keys.key_for_read(ref, generation)
    assert key is not None
    forged = crypto.seal(key, generation, data, f"text:{one}")
    codec = TextCodec(keys)
    for use in (None, crypto.Ciphers(keys.snapshot_keys(), snapshot=True)):
        with pytest.raises(crypto.DecryptError, match="not a map of field to text"):
            codec.open(one, ref, forged, use)


def test_the_running_upgrade_digest_is_the_one_the_upgrade_records() -> None:
    # The formula the upgrade's seal_text event has always recorded, written out here.
    entries = [(3, '{"a":1}'), (4, '{"b":"Zoë"}'), (9, "{}")]
    h = hashlib.sha256()
    for seq, body in entries:
        h.update(f"{seq}:{hashlib.sha256(body.encode('utf-8')).hexdigest()}\n".encode("ascii"))
    running = UpgradeDigest()
    for seq, body in entries:
        running.add(seq, body)
    assert running.hexdigest() == upgrade_digest(entries) == h.hexdigest()
    assert (running.count, running.first) == (3, 3)
    assert upgrade_digest([]) == hashlib.sha256().hexdigest()
