"""Subject ids on a PostgreSQL server (issue 34, "nothing erasable in the clear"), attacked on a
real server: the id is in no byte of a raw `pg_dump` nor of any file of the server's data
folder (table files and WAL, after a CHECKPOINT); a dump taken before a forget_subject yields
no id with any key file left once the epoch is rotated (and did before: the attack is real);
a single-fact forget re-keys the subject and its id still reads, sealed under the new
generation only; a sealed id moved to another subject's row is refused, never shown as that
subject."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from custody_app.domain.errors import LedgerError
from custody_app.keys import crypto
from custody_app.ledger.facade import Ledger
from tests import pgserver, rawsql
from tests.test_epoch_keys import _key_files, _opens

SUBJECT = "acct:ZQX-SUBJECT-4242"
OTHER = "acct:QQW-OTHER-7373"
CAUSE = {"kind": "tool", "ref": "crm#1"}


@pytest.fixture
def url(pg_url: str) -> str:
    """A fresh database on the worker's server (conftest's `pg_url`)."""
    return pg_url


def _put(led: Ledger, subject: str, predicate: str, value: str) -> str:
    return led.assert_fact(subject, predicate, value, actor="agent:a", cause=CAUSE,
                           provenance="attested").fact_id


def _data_files_holding(server: Any, needle: bytes) -> list[str]:
    """Every file under the server's data folder (table files, WAL, ...) holding `needle`."""
    assert server.folder is not None, "needs a server of the tests' own (its data folder)"
    found = []
    for path in sorted((Path(server.folder) / "data").rglob("*")):
        if path.is_file() and needle in path.read_bytes():
            found.append(str(path))
    return found


def _checkpoint(url: str) -> None:
    """Every dirty page written to the table files (the WAL holds them already)."""
    rawsql.edit(url, "CHECKPOINT")


def test_no_subject_id_in_a_raw_dump_nor_in_the_data_folder(url: str, pg_server: Any,
                                                            tmp_path: Path) -> None:
    with Ledger.open(url) as led:
        fact = _put(led, SUBJECT, "plan", "gold")
        _put(led, SUBJECT, "email", "someone at example")
        _put(led, OTHER, "plan", "basic")
        led.retract(fact, actor="agent:a", reason="superseded by hand")
        # Every surface still names the subject by its id.
        assert led.why(fact).fact.subject == SUBJECT
        assert {f.subject for f in led.as_of().facts} == {SUBJECT, OTHER}
    _checkpoint(url)
    needle = SUBJECT.encode()
    assert needle not in pgserver.plain_dump(url, tmp_path)
    assert _data_files_holding(pg_server, needle) == []
    # What the columns hold instead: the peppered ref, and the id sealed once in `subjects`.
    with Ledger.open(url) as led:
        assert led.keys is not None
        ref, other = led.keys.subject_ref(SUBJECT), led.keys.subject_ref(OTHER)
    assert {r[0] for r in rawsql.query(url, "SELECT DISTINCT subject FROM facts")} == {
        ref, other}
    sealed = rawsql.query(url, "SELECT sealed FROM subjects WHERE subject_ref = ?", (ref,))
    assert len(sealed) == 1 and sealed[0][0] is not None and needle not in sealed[0][0]


def test_a_dump_from_before_a_subject_erasure_yields_no_id_after_the_epoch_rotates(
        url: str, tmp_path: Path) -> None:
    with Ledger.open(url) as led:
        erased = _put(led, SUBJECT, "plan", "gold")
        _put(led, OTHER, "plan", "basic")
        assert led.keys is not None
        ref = led.keys.subject_ref(SUBJECT)
        before_epoch = led.keys._master
    backup = pgserver.dump(url)  # every row of the database, before the erasure
    assert not any(SUBJECT in repr(row) for rows in backup.values() for row in rows)
    keys = [(str(r), int(g), bytes(w)) for r, g, w, *_ in backup["custody_keys.subject_keys"]
            if w is not None]
    blobs = {str(r): bytes(b) for r, b in backup["custody.subjects"] if b is not None}
    assert ref in blobs

    def ids_opened(with_keys: list[bytes]) -> set[str]:
        """Every subject id the backup's sealed ids yield under the backup's wrapped keys,
        each unwrapped with one of `with_keys`."""
        out = set()
        for master in with_keys:
            for r, g, wrapped in keys:
                if r not in blobs or not _opens(master, wrapped, f"data:{r}:{g}"):
                    continue
                key = crypto.unwrap(master, wrapped, f"data:{r}:{g}")
                try:
                    out.add(crypto.open_sealed(key, blobs[r], f"subject:{r}").decode())
                except crypto.DecryptError:
                    pass
        return out

    # The attack works while the epoch of the backup lives: the id comes out.
    assert SUBJECT in ids_opened([before_epoch])
    with Ledger.open(url) as led:
        led.forget_subject(SUBJECT, actor="user:dpo", reason="subject_request")
        assert SUBJECT in ids_opened(_key_files(url))  # the erasure alone: the epoch is live
        led.rotate_epoch()
    remaining = _key_files(url)
    assert remaining and before_epoch not in remaining
    assert SUBJECT not in ids_opened(remaining)
    assert OTHER not in ids_opened(remaining)  # nothing of that backup opens any more
    # And the live database: the erased subject's sealed id is gone, its facts are named
    # by the hash as on SQLite.
    assert rawsql.query(url, "SELECT sealed FROM subjects WHERE subject_ref = ?", (ref,)) == [
        (None,)]
    with Ledger.open(url) as led:
        assert led.keys is not None
        assert {f.subject for f in led.as_of().facts} == {OTHER}
        assert led.why(erased).fact.subject == f"erased:{ref[:16]}"
        assert led.verify().valid


def test_a_single_fact_forget_re_keys_and_the_subject_still_reads(url: str) -> None:
    with Ledger.open(url) as led:
        gone = _put(led, SUBJECT, "plan", "gold")
        kept = _put(led, SUBJECT, "email", "someone at example")
        assert led.keys is not None
        ref = led.keys.subject_ref(SUBJECT)
    (first,) = rawsql.query(url, "SELECT sealed FROM subjects WHERE subject_ref = ?", (ref,))
    with Ledger.open(url) as led:
        result = led.forget(gone, actor="user:dpo", reason="subject_request")
        assert "(its sealed id too)" in {p.place: p for p in result.certificate.places}[
            "key store: the subject's data key"].detail
    with Ledger.open(url) as led:  # a new process: nothing cached, the id opened afresh
        assert led.why(kept).fact.subject == SUBJECT
        assert [f.fact_id for f in led.as_of().facts] == [kept]
        assert led.verify().valid
        # Sealed under the new generation; the one it was sealed under first is destroyed.
        (now,) = rawsql.query(url, "SELECT sealed FROM subjects WHERE subject_ref = ?", (ref,))
        assert crypto.sealed_generation(now[0]) > crypto.sealed_generation(first[0])
        assert led.keys is not None
        assert led.keys.key_for_read(ref, crypto.sealed_generation(first[0])) is None
        # Still written and read by its id.
        again = _put(led, SUBJECT, "plan", "silver")
        assert led.why(again).fact.subject == SUBJECT


def test_a_sealed_id_moved_to_another_subject_is_refused_never_shown(url: str) -> None:
    with Ledger.open(url) as led:
        mine = _put(led, SUBJECT, "plan", "gold")
        _put(led, OTHER, "plan", "basic")
        assert led.keys is not None
        ref, other = led.keys.subject_ref(SUBJECT), led.keys.subject_ref(OTHER)
    # An owner of the tables copies the other subject's sealed id over this one's.
    rawsql.edit(url, ("UPDATE subjects SET sealed = (SELECT sealed FROM subjects "
                      "WHERE subject_ref = ?) WHERE subject_ref = ?", (other, ref)),
                unguarded=True)
    with Ledger.open(url) as led:
        with pytest.raises(LedgerError) as refused:
            led.why(mine)
        assert refused.value.code == "subject_unreadable"
        assert OTHER not in refused.value.message and ref[:16] in refused.value.message
        with pytest.raises(LedgerError) as again:
            led.as_of()
        assert again.value.code == "subject_unreadable"


def test_the_sealed_ids_rule_refuses_a_plain_edit(url: str) -> None:
    with Ledger.open(url) as led:
        _put(led, SUBJECT, "plan", "gold")
        _put(led, OTHER, "plan", "basic")
        assert led.keys is not None
        ref, other = led.keys.subject_ref(SUBJECT), led.keys.subject_ref(OTHER)
    assert len(rawsql.query(url, "SELECT subject_ref FROM subjects")) == 2
    before = pgserver.dump(url)
    for statement in (("UPDATE subjects SET sealed = (SELECT sealed FROM subjects WHERE "
                       "subject_ref = ?) WHERE subject_ref = ?", (other, ref)),
                      ("UPDATE subjects SET subject_ref = ? WHERE subject_ref = ?",
                       ("0" * 64, ref)),
                      ("DELETE FROM subjects WHERE subject_ref = ?", (ref,)),
                      "TRUNCATE subjects",
                      # an assert's subject moved to another subject's ref (its body names
                      # its own), or back to the id in the clear
                      ("UPDATE events SET subject = ? WHERE subject = ?", (other, ref)),
                      ("UPDATE events SET subject = ? WHERE subject = ?", (SUBJECT, ref))):
        with pytest.raises(rawsql.Refused):
            rawsql.edit(url, statement)
    assert pgserver.dump(url) == before


def _as_made_before(url: str, refs: dict[str, str]) -> None:
    """The ledger as the code before sealed ids left it (the schema before that step, each id
    in the clear in its facts and events, no `subjects`): what an upgrade meets."""
    from store.postgres.schema import MIGRATIONS, run_migration_sealed_subjects

    statements: list[rawsql.Statement] = ["DROP TABLE subjects",
                                          "DELETE FROM ledger_meta WHERE key = 'subject_ids'"]
    for subject, ref in refs.items():
        statements += [("UPDATE facts SET subject = ? WHERE subject = ?", (subject, ref)),
                       ("UPDATE events SET subject = ? WHERE subject = ?", (subject, ref))]
    statements.append(("UPDATE schema_version SET version = ?",
                       (MIGRATIONS.index(run_migration_sealed_subjects),)))
    rawsql.edit(url, *statements, unguarded=True)


def test_a_ledger_made_before_has_its_ids_sealed_by_its_first_read_write_open(
        url: str, pg_server: Any, tmp_path: Path) -> None:
    with Ledger.open(url) as led:
        mine = _put(led, SUBJECT, "plan", "gold")
        _put(led, SUBJECT, "email", "someone at example")
        gone = _put(led, OTHER, "plan", "basic")
        led.forget(gone, actor="user:dpo", reason="error")  # its only fact: re-keyed
        assert led.keys is not None
        refs = {SUBJECT: led.keys.subject_ref(SUBJECT), OTHER: led.keys.subject_ref(OTHER)}
    _as_made_before(url, refs)
    assert any(r[0] == SUBJECT for r in rawsql.query(url, "SELECT subject FROM facts"))
    with Ledger.open(url) as led:
        assert led.why(mine).fact.subject == SUBJECT
        assert led.why(gone).fact.subject == OTHER  # forgotten alone: its subject stays
        assert {f.subject for f in led.as_of(subject=SUBJECT).facts} == {SUBJECT}
        assert led.verify().valid
    stored = {r[0] for r in rawsql.query(url, "SELECT subject FROM facts UNION "
                                              "SELECT subject FROM events")}
    assert stored <= {*refs.values(), None}
    _checkpoint(url)
    assert SUBJECT.encode() not in pgserver.plain_dump(url, tmp_path)
