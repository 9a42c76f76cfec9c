"""A server erasure certificate says what it proved, place by place (issue 34): the rows (nulled,
the subject's key destroyed), the transactions older than the erasure that may still read the
replaced row versions (`pending`, named, until they end), and those old row versions (VACUUM,
then the raw pages read back through pageinspect and searched for the erased strings: `clean`,
`found` with where, or `unverifiable` with why). A pending place is re-checked at the next write,
open or `finish_scrubs`, and the certificate re-issued. The WAL and the copies made from it are
not checkable here (`unverifiable`; the epoch place is another helper's). A SQLite ledger's
certificate has none of these places: its files are byte-scanned."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from custody_app.erasure.certificate import SERVER_COPIES
from store.postgres import pages, residue
from tests.conftest import SUITE_DEFAULT_POLICY, Env

SNAPSHOTS = residue.SNAPSHOTS_PLACE
OLD = residue.OLD_VERSIONS_PLACE
SECRET = "a rare condition named xyzzy"
ROOT = Path(__file__).resolve().parent.parent


def _places(cert: Any) -> dict[str, Any]:
    return {p.place: p for p in cert.places}


def _admin(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


def _with_pageinspect(url: str) -> str:
    with _admin(url) as conn:
        conn.execute("CREATE EXTENSION pageinspect")
    return url


@pytest.fixture
def inspected(pg_url: str) -> str:
    """A database whose superuser role may read raw pages (pageinspect installed)."""
    return _with_pageinspect(pg_url)


@pytest.fixture
def env(inspected: str, tmp_path: Path) -> Iterator[Env]:
    """A ledger whose policy rotates the epoch after each erasure, so the place for the
    server's WAL and the copies made from it is settled at once (crypto-erased) and these
    tests see the server's own places decide whether a certificate is complete."""
    policy = tmp_path / "rotating.toml"
    policy.write_text(SUITE_DEFAULT_POLICY.read_text().replace(
        'rotate_epoch = "manual"', 'rotate_epoch = "after_erasure"'))
    env = Env(inspected, policy)
    try:
        yield env
    finally:
        env.ledger.close()


def _sealed(url: str, fact_id: str) -> bytes:
    """The erased fact's sealed value as the events table holds it (read before the forget)."""
    with _admin(url) as conn:
        row = conn.execute("SELECT value FROM custody.events WHERE kind = 'assert' AND "
                           "fact_id = %s", (fact_id,)).fetchone()
    assert row is not None and row[0]
    return bytes(row[0])


def _holder(url: str, name: str) -> psycopg.Connection[Any]:
    """Another session holding a REPEATABLE READ snapshot that has read the ledger."""
    conn = psycopg.connect(url, application_name=name)
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    conn.execute("SELECT count(*) FROM custody.events").fetchone()
    return conn


def _close(conn: psycopg.Connection[Any], url: str) -> None:
    """Close a session and wait until the server has ended its backend (a closed client's
    backend lingers a moment in pg_stat_activity, with its snapshot)."""
    pid = conn.info.backend_pid
    conn.close()
    with _admin(url) as admin:
        for _ in range(500):
            if admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s",
                             (pid,)).fetchone() is None:
                return
            time.sleep(0.01)
    raise AssertionError(f"the backend {pid} did not end")


def _residue(url: str, needles: list[bytes]) -> list[pages.PageHit]:
    """An independent look at every page: erased bytes in dead versions or free space."""
    with _admin(url) as conn:
        tables, _ = residue.maintainable(conn, "custody")
        hits, _read = pages.search_pages(conn, tables, needles, "public")
    return [h for h in hits if h.item is None]


def test_a_server_erasure_checks_its_own_places(env: Env) -> None:
    fact = env.put("acct:42", "diagnosis", SECRET)
    env.put("acct:4200042", "plan", "basic plan for the account")
    sealed = _sealed(str(env.path), fact)
    one = env.ledger.forget(fact, actor="user:dpo", reason="subject_request").certificate
    subject = env.ledger.forget_subject("acct:4200042", actor="user:dpo",
                                        reason="subject_request").certificate
    for cert in (one, subject):
        places = _places(cert)
        assert places[SNAPSHOTS].outcome == "clean", places[SNAPSHOTS]
        old = places[OLD]
        assert old.outcome in ("clean", "shared"), old
        assert "VACUUM ran" in old.detail and "read with pageinspect" in old.detail
        # the WAL and its copies: the epoch that wrapped the destroyed keys is destroyed
        assert places[SERVER_COPIES].outcome == "crypto-erased", places[SERVER_COPIES]
        assert places["events table: value and salt of each assert"].outcome == "clean"
        assert places["facts projection"].outcome == "clean"
        assert cert.complete is True, cert.render()
        assert cert.model_dump(mode="json")["places"][0].keys() >= {"place", "outcome", "detail"}
    assert _places(subject)["key store: the subject's data key"].outcome == "clean"
    assert not _residue(str(env.path), [sealed, SECRET.encode(), b"acct:4200042"])
    assert env.ledger.status().pending_scrubs == []


def test_an_older_snapshot_keeps_it_pending_named_until_it_ends(env: Env) -> None:
    fact = env.put("acct:42", "diagnosis", SECRET)
    env.put("acct:42", "plan", "basic")
    holder = _holder(str(env.path), "nightly-report")
    pid = holder.info.backend_pid
    try:
        cert = env.ledger.forget(fact, actor="user:dpo", reason="subject_request").certificate
        places = _places(cert)
        assert places[SNAPSHOTS].outcome == "pending"
        named = places[SNAPSHOTS].detail
        assert f"pid {pid}" in named and "nightly-report" in named and "user custody" in named
        assert places[OLD].outcome == "pending" and "VACUUM must keep" in places[OLD].detail
        assert cert.complete is False
        assert [f for f, _ in env.ledger.status().pending_scrubs] == [fact]
        listed = env.ledger.erasures()
        assert listed.erasures[-1].pending == 1 and "PENDING for 1 fact(s)" in listed.render()
        # a write while it is still open re-checks and keeps it pending
        env.put("acct:7", "plan", "gold")
        assert [f for f, _ in env.ledger.status().pending_scrubs] == [fact]
        # the old snapshot still reads the erased row: that is what pending means
        assert holder.execute("SELECT value FROM custody.events WHERE fact_id = %s AND kind = "
                              "'assert'", (fact,)).fetchone()[0] is not None
    finally:
        _close(holder, str(env.path))
    # A transaction opened after the erasure does not hold it back.
    newer = _holder(str(env.path), "after-the-erasure")
    try:
        again = env.ledger.finish_scrubs()
    finally:
        _close(newer, str(env.path))
    assert len(again) == 1
    places = _places(again[0])
    assert places[SNAPSHOTS].outcome == "clean", places[SNAPSHOTS]
    assert places[OLD].outcome in ("clean", "shared"), places[OLD]
    assert again[0].complete is True
    assert env.ledger.status().pending_scrubs == []
    assert env.ledger.erasures().erasures[-1].pending == 0


def test_the_next_write_finishes_a_pending_erasure(env: Env) -> None:
    fact = env.put("acct:42", "diagnosis", SECRET)
    sealed = _sealed(str(env.path), fact)
    holder = _holder(str(env.path), "holder")
    try:
        env.ledger.forget(fact, actor="user:dpo", reason="subject_request")
    finally:
        _close(holder, str(env.path))
    assert env.ledger.status().pending_scrubs != []
    assert _residue(str(env.path), [sealed])  # the old row version, not removed yet
    env.put("acct:7", "plan", "gold")
    assert env.ledger.status().pending_scrubs == []
    assert not _residue(str(env.path), [sealed])  # removed by the write's re-check


def test_a_pending_erasure_left_by_a_closed_process_is_finished_at_the_next_open(
        env: Env) -> None:
    fact = env.put("acct:42", "diagnosis", SECRET)
    sealed = _sealed(str(env.path), fact)
    holder = _holder(str(env.path), "holder")
    try:
        env.ledger.forget(fact, actor="user:dpo", reason="subject_request")
        env.ledger.close()
    finally:
        _close(holder, str(env.path))
    env.reopen()
    certs = env.ledger.finished_at_open
    assert len(certs) == 1 and certs[0].complete is True, [c.render() for c in certs]
    places = _places(certs[0])
    assert places["file rewrite (VACUUM, then a TRUNCATE checkpoint)"].outcome == "clean"
    assert "VACUUM FULL" in places["file rewrite (VACUUM, then a TRUNCATE checkpoint)"].detail
    assert places[OLD].outcome == "unverifiable"  # its strings went with the other process
    assert env.ledger.status().pending_scrubs == []
    assert not _residue(str(env.path), [sealed])


def test_without_pageinspect_old_versions_are_unverifiable_with_the_reason(pg_url: str) -> None:
    env = Env(pg_url)
    try:
        fact = env.put("acct:42", "diagnosis", SECRET)
        cert = env.ledger.forget(fact, actor="user:dpo", reason="subject_request").certificate
    finally:
        env.ledger.close()
    old = _places(cert)[OLD]
    assert old.outcome == "unverifiable"
    assert "VACUUM ran" in old.detail
    assert "pageinspect extension is not installed" in old.detail


def _role_url(url: str, role: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{role}@{rest.split('@', 1)[1]}"


def test_a_role_that_may_not_read_raw_pages_gets_unverifiable(inspected: str) -> None:
    Env(inspected).ledger.close()  # made by the owner
    with _admin(inspected) as conn:
        conn.execute("CREATE ROLE clerk LOGIN")
        for schema in ("custody", "custody_keys"):
            conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO clerk")
            conn.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA {schema} TO clerk")
            conn.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA {schema} TO clerk")
    env = Env(_role_url(inspected, "clerk"))
    try:
        fact = env.put("acct:42", "diagnosis", SECRET)
        cert = env.ledger.forget(fact, actor="user:dpo", reason="subject_request").certificate
    finally:
        env.ledger.close()
    old = _places(cert)[OLD]
    assert old.outcome == "unverifiable", old
    assert "the role clerk may not read raw pages" in old.detail
    assert "superuser" in old.detail


def test_page_inspection_finds_the_erased_bytes_when_vacuum_is_skipped(env: Env) -> None:
    """The check can fail: with the old row versions left in place (VACUUM held back by an old
    snapshot, then skipped), the raw pages still hold the sealed value, and it is found with
    its table, page and offset."""
    fact = env.put("acct:42", "diagnosis", SECRET)
    sealed = _sealed(str(env.path), fact)
    holder = _holder(str(env.path), "holder")
    try:
        env.ledger.forget(fact, actor="user:dpo", reason="subject_request")
    finally:
        _close(holder, str(env.path))
    with _admin(str(env.path)) as conn:
        skipped = residue.old_versions_place(conn, "custody", [sealed], run_vacuum=False)
        assert skipped.outcome == "found", skipped
        assert "no VACUUM was run" in skipped.detail
        assert "events page 0 offset" in skipped.detail
        done = residue.old_versions_place(conn, "custody", [sealed])
    assert done.outcome == "clean", done
    assert not _residue(str(env.path), [sealed])


def _last_row_of_a_page(env: Env) -> str:
    """A ledger whose first events page is full, and the fact whose assert is its last row (the
    newest, at the page's lowest offset): its erasure's new row version cannot fit in that page,
    so the old one is left alone there. (The values' length sets where the page ends: with
    each event's subject stored as its 64-hex ref, issue 34, a padding of 16 to 56 bytes
    gives such a page, measured; unpadded values no longer do.)"""
    for i in range(60):
        env.put(f"acct:{i:08d}", "diagnosis", f"{SECRET} number {i} " + "-" * 32)
    with _admin(str(env.path)) as conn:
        kind, victim = conn.execute(
            "SELECT kind, fact_id FROM custody.events WHERE (ctid::text::point)[0] = 0 "
            "ORDER BY (ctid::text::point)[1] DESC LIMIT 1").fetchone()
        pages = conn.execute("SELECT pg_relation_size('custody.events') / 8192").fetchone()[0]
    assert kind == "assert" and pages > 1
    return str(victim)


def _forget_held(env: Env, fact: str) -> None:
    """Forget while an older snapshot holds the old row versions (so nothing removes them)."""
    holder = _holder(str(env.path), "holder")
    try:
        env.ledger.forget(fact, actor="user:dpo", reason="subject_request")
    finally:
        _close(holder, str(env.path))


def test_bytes_plain_vacuum_leaves_are_found_and_rewritten_never_called_clean(env: Env) -> None:
    """Plain VACUUM leaves a removed row's bytes in its page's free space (measured: the last
    row of a page): the certificate finds them and rewrites the table (VACUUM FULL) before it
    says clean, and an independent look at every page agrees."""
    victim = _last_row_of_a_page(env)
    needles = [_sealed(str(env.path), victim)]
    _forget_held(env, victim)
    with _admin(str(env.path)) as conn:
        tables, _ = residue.maintainable(conn, "custody")
        residue.vacuum(conn, "custody", [name for _oid, name in tables])
    left = _residue(str(env.path), needles)
    assert left, "plain VACUUM removed every copy here: the case this test is about is gone"
    assert "events" in {h.table for h in left}
    [cert] = env.ledger.finish_scrubs()
    old = _places(cert)[OLD]
    assert old.outcome in ("clean", "shared"), old
    assert "VACUUM FULL rewrote" in old.detail
    for table in {h.table for h in left}:
        assert table in old.detail
    assert not _residue(str(env.path), needles)


def test_a_rewrite_another_session_blocks_stays_pending(env: Env) -> None:
    """VACUUM FULL waits for every session using the table: a newer reader holding a lock on
    events makes it give up after the busy timeout, and the place stays pending (never clean)
    until the next try succeeds."""
    victim = _last_row_of_a_page(env)
    sealed = _sealed(str(env.path), victim)
    _forget_held(env, victim)
    locker = psycopg.connect(str(env.path), application_name="newer-reader")
    try:
        locker.execute("LOCK TABLE custody.events IN ACCESS SHARE MODE")
        env.ledger.db.busy_timeout_ms = 300
        [cert] = env.ledger.finish_scrubs()
        assert _places(cert)[SNAPSHOTS].outcome == "clean"  # newer than the erasure
        old = _places(cert)[OLD]
        assert old.outcome == "pending" and "VACUUM FULL could not take its lock" in old.detail
        assert cert.complete is False
        assert env.ledger.status().pending_scrubs != []
    finally:
        _close(locker, str(env.path))
    [cert] = env.ledger.finish_scrubs()
    assert _places(cert)[OLD].outcome in ("clean", "shared") and cert.complete is True
    assert not _residue(str(env.path), [sealed])


def test_a_file_ledgers_certificate_has_no_server_place(tmp_path: Path) -> None:
    env = Env(tmp_path / "l.db")
    try:
        fact = env.put("acct:42", "diagnosis", SECRET)
        env.put("acct:42", "plan", "basic")
        one = env.ledger.forget(fact, actor="user:dpo", reason="subject_request").certificate
        subject = env.ledger.forget_subject("acct:42", actor="user:dpo",
                                            reason="subject_request").certificate
        for cert in (one, subject):
            assert not [p for p in cert.places if p.place.startswith("server")]
            assert not [p for p in cert.places if "the server's WAL" in p.place]
            assert cert.complete is True
    finally:
        env.ledger.close()


def test_doctor_names_a_pending_erasure_and_the_transaction_holding_it(env: Env) -> None:
    from custody_app.doctor.server import server_checks
    from store.postgres.health import inspect_server

    fact = env.put("acct:42", "diagnosis", SECRET)
    holder = _holder(str(env.path), "nightly-report")
    try:
        env.ledger.forget(fact, actor="user:dpo", reason="subject_request")
        checks, _ = server_checks(inspect_server(str(env.path)))
        line = next(c for c in checks if c.name == "pending-erasures")
        assert line.outcome == "warn" and fact in line.detail
        assert f"pid {holder.info.backend_pid}" in line.detail and "nightly-report" in line.detail
        assert next(c for c in checks if c.name == "page-inspection").outcome == "ok"
    finally:
        _close(holder, str(env.path))
    env.ledger.finish_scrubs()
    checks, _ = server_checks(inspect_server(str(env.path)))
    assert next(c for c in checks if c.name == "pending-erasures").outcome == "ok"


def test_doctor_says_why_pages_cannot_be_read(pg_url: str) -> None:
    from custody_app.doctor.server import server_checks
    from store.postgres.health import inspect_server

    Env(pg_url).ledger.close()
    checks, _ = server_checks(inspect_server(pg_url))
    line = next(c for c in checks if c.name == "page-inspection")
    assert line.outcome == "warn" and "pageinspect extension is not installed" in line.detail


def test_an_erasure_inside_a_larger_transaction_is_finished_after_its_commit(env: Env) -> None:
    """No VACUUM can run inside a transaction, and nothing is erased before the commit: the
    certificate made inside says pending, and the commit's re-check finishes it."""
    fact = env.put("acct:42", "diagnosis", SECRET)
    sealed = _sealed(str(env.path), fact)
    with env.ledger.transaction():
        cert = env.ledger.forget(fact, actor="user:dpo", reason="subject_request").certificate
        assert _places(cert)[OLD].outcome == "pending"
        assert "inside a transaction not committed yet" in _places(cert)[OLD].detail
        assert cert.complete is False
    assert env.ledger.status().pending_scrubs == []
    assert not _residue(str(env.path), [sealed])


def test_a_subject_key_left_wrapped_is_found_not_clean(env: Env,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The key place reads the key store back: a destruction that did not happen (the key
    store's destroy made to do nothing) is `found`, naming the generation."""
    env.put("acct:4200042", "diagnosis", SECRET)
    monkeypatch.setattr(env.ledger.keys.store, "destroy", lambda ref, at: 1)
    cert = env.ledger.forget_subject("acct:4200042", actor="user:dpo",
                                     reason="subject_request").certificate
    keys = _places(cert)["key store: the subject's data key"]
    assert keys.outcome == "found" and "still holds generation(s)" in keys.detail
    assert cert.complete is False


def test_words_a_live_fact_still_has_are_not_searched_for(env: Env) -> None:
    """The keyed words of the erased fact that another live fact still has (its subject's) are
    in the word index by design: they are not erased strings, so the pages holding them in
    live rows make nothing `shared`, and the erased fact's own words are searched and gone."""
    fact = env.put("acct:42", "diagnosis", SECRET)
    env.put("acct:42", "plan", "basic")
    cert = env.ledger.forget(fact, actor="user:dpo", reason="subject_request").certificate
    old = _places(cert)[OLD]
    assert old.outcome == "clean", old
    assert "none found" in old.detail


def test_a_deleted_key_kept_as_an_index_separator_is_residue(inspected: str) -> None:
    """A B-tree keeps a deleted row's key as a separator (an inner page's or a high key) in an
    item as live as any: after plain VACUUM it is still in the index's pages, so it is residue
    (the index is rebuilt, and the certificate says clean only once it is gone), never a live
    row's copy."""
    with _admin(inspected) as conn:
        conn.execute("CREATE SCHEMA lab")
        conn.execute("CREATE TABLE lab.words(term text COLLATE \"C\" PRIMARY KEY)")
        conn.execute("INSERT INTO lab.words SELECT 'h' || md5(g::text) FROM "
                     "generate_series(1, 20000) g")
        # The first leaf's high key: the first key of the second leaf, kept as a separator.
        data = conn.execute("SELECT data FROM bt_page_items('lab.words_pkey', 1) "
                            "WHERE itemoffset = 1").fetchone()[0]
        key = bytes.fromhex(data.replace(" ", ""))[1:].rstrip(b"\x00")
        assert conn.execute("DELETE FROM lab.words WHERE term = %s",
                            (key.decode(),)).rowcount == 1
        tables, _ = residue.maintainable(conn, "lab")
        residue.vacuum(conn, "lab", ["words"])
        hits, _read = pages.search_pages(conn, tables, [key], "public")
        assert [h.relation for h in hits if h.item is None] == ["words_pkey"] * len(hits)
        assert hits
        place = residue.old_versions_place(conn, "lab", [key])
        assert place.outcome == "clean", place
        assert "VACUUM FULL rewrote words" in place.detail
        assert not pages.search_pages(conn, tables, [key], "public")[0]
