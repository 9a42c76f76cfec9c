"""Issue 34's attack on a real PostgreSQL server, end to end: an attacker who took a `pg_dump`
and a raw copy of the server's data folder (its table files and WAL) before an erasure, and who
later holds every key file the app hosts still have. One fact is forgotten (its subject lives on,
re-keyed) and one subject is forgotten whole; then the epoch is rotated. From the copies and the
remaining keys, neither the erased values, their free text, the erased subject's id nor their
words can be recovered: the raw bytes are searched for each plaintext and for each keyed word
under every key that remains, and every remaining key is tried on every wrapped key and sealed
blob the copies hold. Before the rotation the same attack works (the old epoch still opens the
copy), and the certificate says `pending` for that place, naming the epoch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from custody_app.keys import crypto
from custody_app.keys import epoch as epochs
from custody_app.keys.values import text_bind
from custody_app.ledger.facade import Ledger
from custody_app.recall import text
from tests import pgserver
from tests.conftest import opens, sealed
from tests.epoch_crash import master_of

pytestmark = pytest.mark.postgres

ALICE = "acct:ZQX-ALICE-BACKUP-7781"  # forgotten whole
BOB = "acct:ZQX-BOB-BACKUP-7782"  # one of his facts forgotten; he lives on
ALICE_VALUE = "narwhalquill thistlebark 7781"
ALICE_TEXT = "bramblewick quarrystone 7781"
BOB_VALUE = "otterglade moonferret 7782"
BOB_TEXT = "cindermoss lanternwhip 7782"
BOB_KEPT = "bob lives in harbourtown"
PLACE = "WAL, archives, backups and replicas"
CAUSE = {"kind": "tool", "ref": "backup-attack"}


@pytest.fixture
def server_ledger(pg_server: Any) -> Iterator[tuple[Any, str]]:
    url = pg_server.fresh_database()
    try:
        yield pg_server, url
    finally:
        pg_server.drop_database(url)


def _wrapped(dump: bytes) -> list[bytes]:
    """Every bytea the dump holds (pg_dump writes them as \\x followed by hex)."""
    found = []
    for token in dump.replace(b"\t", b"\n").split(b"\n"):
        if token.startswith(b"\\\\x"):
            token = token[1:]
        if token.startswith(b"\\x") and len(token) > 2:
            try:
                found.append(bytes.fromhex(token[2:].decode()))
            except ValueError:
                continue
    return found


def _key_files(url: str) -> list[bytes]:
    """Every key the key files beside the key store hold (the epoch key and any other)."""
    folder = master_of(url).parent
    keys = [epochs.read_key(p) for p in folder.iterdir() if p.is_file()]
    return [k for k in keys if k is not None]


def _purposes(refs: list[str]) -> list[str]:
    """What a wrapped key of this ledger is bound to (AES-GCM's associated data, which must
    match): the key store's named entries, and data:<ref>:<generation> for each subject."""
    names = ["check", "forget", "pepper", "signing", "index", "index_next", "mark_key"]
    return names + [f"data:{ref}:{g}" for ref in refs for g in range(1, 6)]


def _unwrap_any(key: bytes, blob: bytes, purposes: list[str]) -> bytes | None:
    for purpose in purposes:
        try:
            return crypto.unwrap(key, blob, purpose)
        except (crypto.DecryptError, ValueError):
            continue
    return None


def _every_key(url: str, dump: bytes, purposes: list[str]) -> list[bytes]:
    """Every key an attacker can reach: the key files, and every wrapped key in the current key
    store or the dump that one of them (or one they open) unwraps, to a fixpoint."""
    found = list(_key_files(url))
    blobs = _wrapped(dump) + [bytes(v) for rows in pgserver.dump(url).values()
                              for row in rows for v in row if isinstance(v, (bytes, memoryview))]
    grew = True
    while grew:
        grew = False
        for blob in blobs:
            for key in list(found):
                opened = _unwrap_any(key, blob, purposes)
                if opened is not None and len(opened) == crypto.KEY_BYTES and opened not in found:
                    found.append(opened)
                    grew = True
    return found


def _plaintexts() -> list[bytes]:
    out = []
    for secret in (ALICE, ALICE_VALUE, ALICE_TEXT, BOB_VALUE, BOB_TEXT):
        out.append(secret.encode())
    # the distinctive words of each erased string, as the index would have seen them
    for secret in (ALICE_VALUE, ALICE_TEXT, BOB_VALUE, BOB_TEXT):
        out += [w.encode() for w in text.words(secret, stem=False) if len(w) > 6]
    return out


def _keyed_words(keys: list[bytes]) -> list[bytes]:
    words = {w for s in (ALICE_VALUE, ALICE_TEXT, BOB_VALUE, BOB_TEXT) for w in text.words(s)}
    return [text.term(k, w).encode() for k in keys for w in sorted(words)]


def test_copies_taken_before_an_erasure_yield_nothing_once_the_epoch_is_rotated(
        server_ledger: tuple[Any, str], tmp_path: Path) -> None:
    server, url = server_ledger
    if server.folder is None:
        pytest.skip("an existing server named by URL: its data folder is not ours to read")
    with Ledger.open(url) as led:
        assert led.keys is not None
        alice = led.assert_fact(ALICE, "diagnosis", ALICE_VALUE, actor="agent:a",
                                cause={**CAUSE, "detail": ALICE_TEXT}, provenance="attested")
        bob = led.assert_fact(BOB, "salary", BOB_VALUE, actor="agent:a",
                              cause={**CAUSE, "detail": BOB_TEXT}, provenance="attested")
        kept = led.assert_fact(BOB, "city", BOB_KEPT, actor="agent:a", cause=CAUSE,
                               provenance="attested")
        blobs = {f: (sealed(led, f), [bytes(b) for _, b in led.db.texts.of_fact(f)
                                      if b is not None])
                 for f in (alice.fact_id, bob.fact_id)}
        refs = {f: led.keys.subject_ref(s) for f, s in ((alice.fact_id, ALICE),
                                                        (bob.fact_id, BOB))}
        old_index = led.keys.index_key
    copies = tmp_path / "copies"
    copies.mkdir()
    dump = pgserver.plain_dump(url, copies)
    folder = pgserver.data_files(server, url)
    # Nothing erasable is in the clear in either copy even now: every value and free text is
    # sealed, the subject ids too, the words keyed.
    for plain in _plaintexts():
        assert plain not in dump, plain
        assert plain not in folder, plain
    # ... and the copies do hold the sealed forms (the attack has something to work on)
    for value_blob, text_blobs in blobs.values():
        assert value_blob.hex().encode() in dump
        assert all(b.hex().encode() in dump for b in text_blobs)

    with Ledger.open(url) as led:
        one = led.forget(bob.fact_id, actor="user:dpo", reason="subject_request").certificate
        whole = led.forget_subject(ALICE, actor="user:dpo", reason="subject_request")
        epoch = led.keys.epoch  # type: ignore[union-attr]
        for cert in (one, whole.certificate):
            place = {p.place: p for p in cert.places}[PLACE]
            assert place.outcome == "pending" and f"the epoch {epoch}" in place.detail, place
            assert cert.complete is False

        # Why pending: before the rotation the key files of the day still open the copy.
        purposes = _purposes(list(refs.values()))
        keys = _every_key(url, dump, purposes)
        assert len(keys) > len(_key_files(url))  # the key files opened the copy's wrapped keys
        value_blob, text_blobs = blobs[alice.fact_id]
        assert opens(keys, value_blob, alice.fact_id)
        assert opens(keys, text_blobs[0], text_bind(alice.fact_id))

        rotated = led.rotate_epoch()
        assert sorted(c.operation for c in rotated.certificates) == ["forget", "forget_subject"]
        for cert in rotated.certificates:
            assert {p.place: p for p in cert.places}[PLACE].outcome == "crypto-erased"
            assert cert.complete is True
        assert led.why(kept.fact_id).fact.value == BOB_KEPT  # bob lives on
        assert led.why(kept.fact_id).fact.subject == BOB
        assert led.verify().valid

    keys = _every_key(url, dump, purposes)
    assert keys and old_index not in keys
    for fact_id, (value_blob, text_blobs) in blobs.items():
        assert not opens(keys, value_blob, fact_id), fact_id
        assert not [b for b in text_blobs if opens(keys, b, text_bind(fact_id))], fact_id
    # every wrapped key in the dump stays shut to every key that remains
    assert len(_wrapped(dump)) > 10
    for blob in _wrapped(dump):
        for key in keys:
            assert _unwrap_any(key, blob, purposes) is None
    # no keyed word of the erased strings under any remaining key is in either copy
    for term in _keyed_words(keys):
        assert term not in dump and term not in folder


def test_the_copy_bytes_are_read_from_the_servers_own_files(
        server_ledger: tuple[Any, str], tmp_path: Path) -> None:
    """The attack reads what it says it reads: a marker written through the server turns up in
    the raw data folder copy (so an absence above is not a copy that missed the tables)."""
    server, url = server_ledger
    if server.folder is None:
        pytest.skip("an existing server named by URL: its data folder is not ours to read")
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE marker(t text)")
        conn.execute("INSERT INTO marker VALUES ('zqx-raw-copy-marker-5531')")
    assert b"zqx-raw-copy-marker-5531" in pgserver.data_files(server, url)
    dump = pgserver.plain_dump(url, tmp_path)
    assert b"zqx-raw-copy-marker-5531" in dump
