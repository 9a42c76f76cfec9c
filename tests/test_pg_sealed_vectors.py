"""Recall vectors sealed on a server ledger (issue 34, "nothing erasable in the clear"; DESIGN
15): a fact's words can be read back from its vector, so by default a server stores every
vector and cell centroid AES-GCM sealed under a key derived from the word index key, bound to
its row, re-sealed by every rotation of that key. The attacks, on a real PostgreSQL server:
the vector's bytes in a raw pg_dump and in the server's data folder; a dump taken before a
forget read with the key files left after rotate-epoch; a sealed vector moved to another row;
a process holding the old index key writing after another rotated it. With the policy's
`[recall] server_vectors = "clear"`, every erasure certificate names the copies that keep the
vectors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from custody_app.domain.errors import LedgerError
from custody_app.erasure.certificate import VECTOR_COPIES
from custody_app.keys import crypto
from custody_app.keys.vectors import VectorCipher
from custody_app.ledger.facade import Ledger
from custody_app.recall import matrix as matrix_mod
from tests import pgserver, rawsql
from tests.test_epoch_keys import _key_files

CAUSE = {"kind": "tool", "ref": "sealed-vectors-test"}
SECRET = "alice's diagnosis zebrafinch-4471 at the harbor clinic"
# The packaged embedder of the tests (dense: no run of its vector is zeros). Its vectors are made
# by the background worker, after the write: a test settles it before it reads them.
EMBEDDER = '[recall]\nembedder = "minilm-l6"\n'
CLEAR = EMBEDDER + 'server_vectors = "clear"\n'


@pytest.fixture
def url(pg_url: str) -> str:
    """A fresh database on the worker's server (conftest's `pg_url`)."""
    return pg_url


def policy_file(tmp_path: Path, text: str = EMBEDDER, name: str = "policy.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def put(led: Ledger, subject: str, value: str, predicate: str = "note") -> Any:
    return led.assert_fact(subject, predicate, value, actor="agent:a", cause=CAUSE,
                           provenance="attested")


def stored_vectors(address: str) -> dict[int, bytes]:
    """recall_vec's embedding column as the server holds it, read behind the app's back."""
    with rawsql._server_connection(address) as conn:
        return {int(s): bytes(b) for s, b in
                conn.execute("SELECT fact_seq, embedding FROM recall_vec").fetchall()}


def the_vector(led: Ledger, seq: int) -> bytes:
    """The float32 bytes the index ranks a fact by (opened by the app when sealed)."""
    found = led.db.recall.vectors_of([seq])
    assert found and len(found[0][1]) == led.index.embedder.dimensions * 4
    return found[0][1]


def runs(vector: bytes) -> list[bytes]:
    """Every aligned 16-byte run of a vector (four float32s): a copy of the vector in the clear
    holds each of them."""
    return [vector[i:i + 16] for i in range(0, len(vector), 16)]


def test_no_run_of_a_vector_is_in_a_dump_or_the_data_folder(pg_server: Any, url: str,
                                                            tmp_path: Path) -> None:
    """(a) The raw float32 bytes of an indexed fact's vector, and each 16-byte run of them,
    appear nowhere in a raw pg_dump nor in the database's files and the WAL after a
    CHECKPOINT. (On the code before sealing, every run was in all three.)"""
    if pg_server.folder is None:
        pytest.skip("an external server (CUSTODY_TEST_PG_URL): no data folder to read")
    with Ledger.open(url, policy=policy_file(tmp_path)) as led:
        fact = put(led, "acct:ALICE", SECRET)
        assert led.index.settle_embedding(300)  # the worker adds the vector
        vector = the_vector(led, fact.seq)
        # The vector is what the embedder makes of the fact: the attack's target is real.
        assert np.frombuffer(vector, dtype=np.float32).any()
    dump = pgserver.plain_dump(url, tmp_path)
    files = pgserver.data_files(pg_server, url)
    assert vector.hex().encode() not in dump and vector not in files
    assert [r for r in runs(vector) if r.hex().encode() in dump] == []
    assert [r for r in runs(vector) if r in files] == []


def test_a_dump_before_a_forget_yields_no_vector_after_rotate_epoch(url: str,
                                                                   tmp_path: Path) -> None:
    """(b) A copy of the database taken before a forget: with the key file of the day it
    opens the forgotten fact's vector (the attack is real); after the forget and
    rotate-epoch, no key file that remains opens it, nor any other vector of the copy."""
    with Ledger.open(url, policy=policy_file(tmp_path)) as led:
        fact = put(led, "acct:ALICE", SECRET)
        put(led, "acct:BOB", "bob renewed the gold plan")
        assert led.index.settle_embedding(300)
        vector = the_vector(led, fact.seq)
        assert led.keys is not None
        day_key = led.keys._master
    backup = pgserver.dump(url)
    sealed = {int(r[0]): bytes(r[2]) for table, rows in backup.items()
              if table.endswith(".recall_vec") for r in rows}
    wrapped_index = next(bytes(v) for table, rows in backup.items()
                         if table.endswith("_keys.keystore_meta") for n, v in rows
                         if n == "index")
    assert sealed[fact.seq] != vector and vector not in sealed[fact.seq]
    index_key = crypto.unwrap(day_key, wrapped_index, "index")
    assert VectorCipher.fixed(index_key).open(fact.seq, sealed[fact.seq]) == vector
    with Ledger.open(url, policy=policy_file(tmp_path)) as led:
        led.forget(fact.fact_id, actor="user:dpo", reason="subject_request")
        led.rotate_epoch()
    remaining = _key_files(url)
    assert remaining and day_key not in remaining
    for key in remaining:
        try:
            index_key = crypto.unwrap(key, wrapped_index, "index")
        except crypto.DecryptError:
            continue
        for seq, blob in sealed.items():  # pragma: no cover - reached only if a key opened
            with pytest.raises(LedgerError):
                VectorCipher.fixed(index_key).open(seq, blob)


def test_a_rotation_re_seals_every_vector_and_recall_is_unchanged(url: str,
                                                                   tmp_path: Path) -> None:
    """rotate-epoch re-seals the vectors under the new index key in its own transaction: every
    stored blob changes, the old index key opens none of them, recall ranks as before."""
    policy = policy_file(tmp_path)
    with Ledger.open(url, policy=policy) as led:
        for n in range(12):
            put(led, f"acct:{n % 4}", f"note {n} about the harbor kayak and invoice {n * 7}")
        assert led.index.settle_embedding(300)
        before = [(h.fact.fact_id, h.vector_rank) for h in
                  led.recall("kayak harbor", strategy="vector").results]
        assert led.keys is not None
        old_key = led.keys.index_key
    old = stored_vectors(url)
    with Ledger.open(url, policy=policy) as led:
        led.rotate_epoch()
    new = stored_vectors(url)
    assert set(new) == set(old) and all(new[s] != old[s] for s in old)
    for seq, blob in new.items():
        with pytest.raises(LedgerError):
            VectorCipher.fixed(old_key).open(seq, blob)
    with Ledger.open(url, policy=policy) as led:
        assert [(h.fact.fact_id, h.vector_rank) for h in
                led.recall("kayak harbor", strategy="vector").results] == before
        assert led.verify().valid


def test_a_swapped_sealed_vector_is_refused_not_ranked(url: str, tmp_path: Path) -> None:
    """(c) One fact's sealed vector copied over another's row (a hand edit of the database):
    recall refuses with a stable code naming the row instead of ranking with it."""
    policy = policy_file(tmp_path)
    with Ledger.open(url, policy=policy) as led:
        a = put(led, "acct:A", "the teal kayak paddle")
        b = put(led, "acct:B", "the refund of the firmware invoice")
        assert led.index.settle_embedding(300)
    rawsql.edit(url, f"UPDATE recall_vec SET embedding = (SELECT embedding FROM recall_vec "
                     f"WHERE fact_seq = {b.seq}) WHERE fact_seq = {a.seq}")
    with Ledger.open(url, policy=policy) as led:
        with pytest.raises(LedgerError) as refused:
            led.recall("teal kayak", strategy="vector")
        assert refused.value.code == "recall_vector_unreadable"
        assert f"seq {a.seq}" in refused.value.message


def test_a_process_holding_the_old_index_key_seals_under_the_new_one(url: str,
                                                                    tmp_path: Path) -> None:
    """The index key fence covers vectors: a process opened before another rotated the epoch
    (and with it the word index key) writes a fact after; its vector is sealed under the key
    the index is under now, so every later open reads it."""
    policy = policy_file(tmp_path)
    with Ledger.open(url, policy=policy) as early:
        put(early, "acct:A", "the teal kayak paddle")
        assert early.index.settle_embedding(300)  # its worker holds the index key now
        with Ledger.open(url, policy=policy) as other:
            other.rotate_epoch()
            assert other.keys is not None
            current = other.keys.index_key
        late = put(early, "acct:B", "written by the early process after the rotation")
        assert early.index.settle_embedding(300)
    blob = stored_vectors(url)[late.seq]
    opened = VectorCipher.fixed(current).open(late.seq, blob)
    with Ledger.open(url, policy=policy) as led:
        assert the_vector(led, late.seq) == opened
        hits = led.recall("written by the early process", strategy="vector").results
        assert hits[0].fact.fact_id == late.fact_id


def test_sealed_and_clear_storage_rank_the_same(pg_server: Any, tmp_path: Path) -> None:
    """The same facts and queries on a sealed and a clear server ledger: the same hits, ranks
    and scores (the vectors opened are the vectors stored)."""
    results = []
    for text in (EMBEDDER, CLEAR):
        address = pg_server.fresh_database()
        try:
            with Ledger.open(address, policy=policy_file(tmp_path, text, "p.toml")) as led:
                for n in range(30):
                    put(led, f"acct:{n % 5}", f"{['teal', 'refund', 'gold', 'lodz'][n % 4]} "
                                              f"note {n} on invoice {n * 3} and kayak {n % 7}")
                assert led.index.settle_embedding(300)
                seen = {}
                for query in ("teal kayak", "refund invoice 9", "gold", "lodz note"):
                    for strategy in ("vector", "hybrid"):
                        seen[(query, strategy)] = [
                            (h.fact.subject, h.fact.value, h.score, h.vector_rank)
                            for h in led.recall(query, strategy=strategy).results]
                results.append(seen)
        finally:
            pg_server.drop_database(address)
    assert results[0] == results[1]


def test_with_clear_vectors_every_certificate_names_the_copies(url: str,
                                                               tmp_path: Path) -> None:
    """(d) `[recall] server_vectors = "clear"`: the vectors are stored as plain float32, and a
    forget's and a forget_subject's certificate each carry the place for the copies that keep
    them, `not-crypto-erased`, saying why (the epoch place stays last)."""
    with Ledger.open(url, policy=policy_file(tmp_path, CLEAR)) as led:
        fact = put(led, "acct:ALICE", SECRET)
        put(led, "acct:BOB", "bob's own note")
        assert led.index.settle_embedding(300)
        assert stored_vectors(url)[fact.seq] == the_vector(led, fact.seq)
        certs = [led.forget(fact.fact_id, actor="user:dpo", reason="subject_request")
                 .certificate,
                 led.forget_subject("acct:BOB", actor="user:dpo", reason="subject_request")
                 .certificate]
    for cert in certs:
        place = next(p for p in cert.places if p.place == VECTOR_COPIES)
        assert place.outcome == "not-crypto-erased"
        assert 'server_vectors = "clear"' in place.detail and "backup" in place.detail
        assert cert.places[-1].place != VECTOR_COPIES


def test_with_sealed_vectors_no_certificate_names_them(url: str, tmp_path: Path) -> None:
    with Ledger.open(url, policy=policy_file(tmp_path)) as led:
        fact = put(led, "acct:ALICE", SECRET)
        cert = led.forget(fact.fact_id, actor="user:dpo", reason="subject_request").certificate
    assert VECTOR_COPIES not in {p.place for p in cert.places}


def test_a_clear_or_older_index_is_sealed_at_the_first_read_write_open(url: str,
                                                                       tmp_path: Path) -> None:
    """Migration: an index whose vectors are in the clear (the policy said so, or it was
    built before vectors were sealed: no recorded form) is sealed in place at the next
    read-write open under a policy that wants them sealed (no re-embedding: the vector table's
    version token is kept, so other processes' in-process copies stay valid); a read-only
    open reads either."""
    with Ledger.open(url, policy=policy_file(tmp_path, CLEAR, "clear.toml")) as led:
        fact = put(led, "acct:ALICE", SECRET)
        assert led.index.settle_embedding(300)
        vector = the_vector(led, fact.seq)
        version = led.db.recall.vec_version()
    rawsql.edit(url, "DELETE FROM ledger_meta WHERE key = 'recall_vec_form'")
    assert stored_vectors(url)[fact.seq] == vector
    with Ledger.open(url, policy=policy_file(tmp_path), readonly=True) as led:
        assert the_vector(led, fact.seq) == vector  # read as stored, nothing rewritten
    assert stored_vectors(url)[fact.seq] == vector
    with Ledger.open(url, policy=policy_file(tmp_path)) as led:
        assert the_vector(led, fact.seq) == vector
        assert led.db.recall.vec_version() == version
        assert led.recall("zebrafinch diagnosis").results[0].fact.fact_id == fact.fact_id
    blob = stored_vectors(url)[fact.seq]
    assert blob != vector and vector not in blob
    with Ledger.open(url, policy=policy_file(tmp_path, CLEAR, "clear.toml")) as led:
        assert the_vector(led, fact.seq) == vector  # and back, in place too
    assert stored_vectors(url)[fact.seq] == vector


def test_a_bad_server_vectors_value_is_refused_naming_file_and_key(url: str,
                                                                   tmp_path: Path) -> None:
    with Ledger.open(url, policy=policy_file(tmp_path, CLEAR)):
        pass  # "clear" is a value the policy takes
    bad = policy_file(tmp_path, EMBEDDER + 'server_vectors = "plain"\n', "bad.toml")
    with pytest.raises(LedgerError) as refused:
        Ledger.open(url, policy=bad)
    assert refused.value.code == "policy_invalid"
    assert "server_vectors" in refused.value.message and "bad.toml" in str(
        refused.value.to_json())


def stored_centroids(address: str) -> dict[int, bytes]:
    with rawsql._server_connection(address) as conn:
        return {int(c): bytes(b) for c, b in
                conn.execute("SELECT cell, centroid FROM recall_cells").fetchall()}


def test_cell_centroids_are_sealed_re_sealed_and_bound_to_their_cell(
        url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The k-means centroids (a cell of one vector has that vector as its centroid) made by the
    background re-clustering on its own connection are stored sealed, re-sealed by
    rotate-epoch, and a centroid moved to another cell is refused, not searched with (the
    store's KNN over cells: the in-process copy, which reads no centroid, turned off) nor used
    to place a new fact (the write is refused and leaves nothing)."""
    policy = policy_file(tmp_path, "[recall]\nann_min_facts = 100\nann_probe = 1.0\n")
    with Ledger.open(url, policy=policy) as led:
        for n in range(130):
            put(led, f"acct:{n % 9}", f"note {n} about the {['teal', 'gold', 'lodz'][n % 3]} "
                                      f"kayak and invoice {n * 7}")
        led.index.settle()  # the re-clustering, in the background on its own connection
        assert led.db.recall.clustered_on() > 0
        opened = dict(led.db.recall.cells())
        before = [h.fact.fact_id for h in led.recall("teal kayak", strategy="vector").results]
    stored = stored_centroids(url)
    assert len(stored) >= 2 and set(stored) == set(opened)
    assert all(opened[c] not in stored[c] for c in stored)
    with Ledger.open(url, policy=policy) as led:
        led.rotate_epoch()
    resealed = stored_centroids(url)
    assert all(resealed[c] != stored[c] for c in stored)
    with Ledger.open(url, policy=policy) as led:
        assert dict(led.db.recall.cells()) == opened
        assert [h.fact.fact_id for h in
                led.recall("teal kayak", strategy="vector").results] == before
    first, second = sorted(resealed)[:2]
    rawsql.edit(url, f"UPDATE recall_cells SET centroid = (SELECT centroid FROM recall_cells "
                     f"WHERE cell = {second}) WHERE cell = {first}")
    monkeypatch.setattr(matrix_mod, "MAX_BYTES", 0)
    with Ledger.open(url, policy=policy) as led:
        with pytest.raises(LedgerError) as refused:
            led.recall("teal kayak", strategy="vector")
        assert refused.value.code == "recall_vector_unreadable"
        assert f"cell {first}" in refused.value.message
        head = led.db.events.head()
        with pytest.raises(LedgerError) as refused:
            put(led, "acct:new", "a fact placed by the centroids")
        assert refused.value.code == "recall_vector_unreadable"
        assert led.db.events.head() == head
