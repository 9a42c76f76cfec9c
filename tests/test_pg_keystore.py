"""store.postgres.keystore on a real server: the same calls as the SQLite key store give the
same answers; its triggers refuse what the SQLite triggers refuse (a destroyed key brought back,
a mark rewritten, an entry replaced); data_version sees other connections' commits; opening
refuses a schema that is not a key store."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import psycopg
import pytest

import store
from store.errors import LedgerTooNew, NotALedger, StoreBusy, StoreError, StoreIntegrityError
from store.postgres import keystore as pg_keystore
from store.sqlite import keystore as sqlite_keystore


def _sign(row: Any) -> str:
    return f"mac:{row[0]}:{row[1]}:{row[2]}"


def _script(ks: Any) -> list[Any]:
    """A key store's life: entries, keys, destructions (with the fence), marks; every answer."""
    out: list[Any] = []

    def call(name: str, *args: Any, **kw: Any) -> None:
        before = ks.total_changes()
        try:
            answer = getattr(ks, name)(*args, **kw)
            if name in ("marks",):
                answer = list(answer)
        except Exception as exc:  # noqa: BLE001 - the kind of refusal is compared below
            answer = ("refused", isinstance(exc, StoreIntegrityError)
                      or type(exc).__name__ == "ConstraintError")
        out.append((name, args, answer, ks.total_changes() - before > 0))

    call("meta", "check")
    call("put_meta", "check", b"wrapped-check")
    call("put_meta", "check", b"other")  # written once: the first value stays
    call("meta", "check")
    call("put_meta", "index", b"i1")
    call("replace_meta", "index", b"i2")
    call("put_meta", "ledger", b"g1")
    call("replace_meta", "ledger", b"nope")  # the ledger binding is written once
    call("put_meta", "index_next", b"n1")
    call("drop_meta", "index_next")
    call("drop_meta", "index_next")
    call("meta", "index_next")
    call("meta", "index")
    call("legacy_marks_upto")
    for ref, gen, at in [("r1", 1, "2026-01-01"), ("r1", 2, "2026-01-03"), ("r2", 1, "2026-01-02"),
                         ("r3", 1, "2026-02-01")]:
        call("add", ref, gen, f"key-{ref}-{gen}".encode(), at)
    call("add", "r1", 2, b"again", "2026-01-04")
    call("latest", "r1")
    call("generation", "r1", 1)
    call("generation", "r1", 9)
    call("destroy", "r1", "2026-01-02")  # generation 2 was made after: it stays
    call("latest", "r1")
    call("generation", "r1", 1)
    call("last_destroyed", "r1")
    call("destroy", "r1", "2026-01-05")
    call("destroy", "r1", "2026-01-06")  # nothing live: a keyless destroyed row fences
    call("latest", "r1")
    call("destroy", "never", "2026-01-07")
    call("latest", "never")
    call("last_destroyed", "never")
    call("last_destroyed", "r2")
    call("high_water")
    call("add_mark", 10, "h10", "2026-01-01", _sign)
    call("add_mark", 10, "h10", "2026-01-02", _sign, last=(1, 10, "h10", "x", False, None))
    call("add_mark", 11, "h11", "2026-01-03", _sign, last=(1, 10, "h10", "x", False, None))
    call("add_mark", 11, "h11", "2026-01-04", _sign, accepted=True,
         last=(2, 11, "h11", "x", False, None))
    for i in range(70):  # past a page of marks
        call("add_mark", 12 + i, f"h{12 + i}", "2026-01-05", _sign)
    call("marks")
    call("high_water")
    return out


def test_same_answers_as_sqlite(pg_url: str, tmp_path: Path) -> None:
    sq = sqlite_keystore.open_keystore(tmp_path / "k.keys")
    pg = store.open_keystore(pg_url)
    assert isinstance(pg, pg_keystore.KeyStoreFile)
    try:
        want, got = _script(sq), _script(pg)
        for w, g in zip(want, got, strict=True):
            assert g == w
        assert ("replace_meta", ("ledger", b"nope"), ("refused", True), False) in got
        assert len([g for g in got if g[2] == ("refused", True)]) == 2
    finally:
        sq.close()
        pg.close()


def test_nested_writes_and_rollback(pg_url: str) -> None:
    ks = pg_keystore.open_keystore(pg_url)
    try:
        with ks.write():
            ks.add("r", 1, b"k1", "2026-01-01")
            # Inside a transaction a key row goes with the next statement: refused at the end
            # of the savepoint it was written in, that savepoint alone is rolled back.
            with pytest.raises(StoreIntegrityError), ks.write():
                ks.add("r", 1, b"dup", "2026-01-01")
            ks.add("r", 2, b"k2", "2026-01-02")
        with pytest.raises(RuntimeError):
            with ks.write():
                ks.add("r", 3, b"k3", "2026-01-03")
                raise RuntimeError("the ledger's part failed")
        assert ks.latest("r") == (2, b"k2", "2026-01-02", None)
        assert ks.generation("r", 1) == (1, b"k1", "2026-01-01", None)
    finally:
        ks.close()


def test_data_version_sees_other_connections(pg_url: str) -> None:
    a, b = pg_keystore.open_keystore(pg_url), pg_keystore.open_keystore(pg_url)
    try:
        seen = a.data_version()
        a.meta("check")
        with b.write():
            b.meta("check")  # a write block that changed nothing commits nothing
        assert a.data_version() == seen
        b.add("r", 1, b"k", "2026-01-01")
        assert a.data_version() != seen
        seen = a.data_version()
        b.destroy("r", "2026-01-02")
        assert a.data_version() != seen
        assert a.latest("r") == (1, None, "2026-01-01", "2026-01-02")
    finally:
        a.close()
        b.close()


def _raw(pg_url: str) -> Any:
    conn = psycopg.connect(pg_url, autocommit=True)
    conn.execute("SET search_path = custody_keys")
    return conn


ATTACKS = [
    # A destroyed key brought back, or its tombstone moved or removed.
    "UPDATE subject_keys SET wrapped = 'xx', destroyed_at = NULL WHERE subject_ref = 'r'",
    "UPDATE subject_keys SET wrapped = 'xx' WHERE subject_ref = 'r'",
    "UPDATE subject_keys SET destroyed_at = '2030-01-01' WHERE subject_ref = 'r'",
    "UPDATE subject_keys SET created_at = '2020-01-01' WHERE subject_ref = 'r'",
    "DELETE FROM subject_keys",
    "TRUNCATE subject_keys",
    "INSERT INTO subject_keys VALUES ('r', 1, 'xx', '2026-01-01', NULL) "
    "ON CONFLICT (subject_ref, generation) DO UPDATE SET wrapped = 'xx', destroyed_at = NULL",
    # Marks rewritten or removed.
    "UPDATE ledger_marks SET seq = 1",
    "UPDATE ledger_marks SET mac = 'forged'",
    "DELETE FROM ledger_marks",
    "TRUNCATE ledger_marks",
    "INSERT INTO ledger_marks VALUES (1, 1, 'h', 'at', 0, NULL) "
    "ON CONFLICT (n) DO UPDATE SET mac = 'forged'",
    # Entries other than the wrapped keys an epoch rotation re-wraps replaced, or removed.
    "UPDATE keystore_meta SET value = 'x' WHERE name = 'ledger'",
    "UPDATE keystore_meta SET value = '9' WHERE name = 'marks_legacy_upto'",
    "DELETE FROM keystore_meta WHERE name = 'check'",
    "TRUNCATE keystore_meta",
    "INSERT INTO keystore_meta VALUES ('ledger', 'x') ON CONFLICT (name) DO UPDATE SET value = 'x'",
]


def test_triggers_refuse_what_sqlite_refuses(pg_url: str, tmp_path: Path) -> None:
    ks = pg_keystore.open_keystore(pg_url)
    sq = sqlite_keystore.open_keystore(tmp_path / "k.keys")
    for keys in (ks, sq):
        keys.put_meta("check", b"c")
        keys.put_meta("ledger", b"g")
        keys.add("r", 1, b"k1", "2026-01-01")
        keys.destroy("r", "2026-01-02")
        keys.add_mark(5, "h5", "2026-01-03", _sign)
    raw = _raw(pg_url)
    try:
        for attack in ATTACKS:
            with pytest.raises(psycopg.errors.IntegrityError, match="custody: "):
                raw.execute(attack)
            if "TRUNCATE" not in attack:  # SQLite has no TRUNCATE
                lite = (attack.replace("'xx'", "x'00'").replace(" SET wrapped = 'xx',",
                                                                " SET wrapped = x'00',"))
                with pytest.raises(Exception, match="custody: |constraint"):
                    sq.conn.execute(lite)
        assert ks.latest("r") == (1, None, "2026-01-01", "2026-01-02") == sq.latest("r")
        assert list(ks.marks()) == list(sq.marks()) == [(1, 5, "h5", "2026-01-03", False,
                                                         "mac:1:5:h5")]
        assert ks.meta("check") == b"c"
        # A live key may be re-wrapped (rotate-epoch), as may the wrapped entries; a destroyed
        # key never (the attacks above).
        for keys in (ks, sq):
            keys.add("live", 1, b"k1", "2026-01-01")
            assert keys.rewrap_keys([("live", 1, b"k2"), ("r", 1, b"back")]) == 1
            assert keys.generation("live", 1) == (1, b"k2", "2026-01-01", None)
            assert keys.latest("r") == (1, None, "2026-01-01", "2026-01-02")
            keys.replace_meta("check", b"c2")
            assert keys.meta("check") == b"c2"
        # The index key alone may be replaced, and only its rotation's intent deleted.
        raw.execute("INSERT INTO keystore_meta VALUES ('index_next', 'n')")
        raw.execute("UPDATE keystore_meta SET value = 'm' WHERE name = 'index_next'")
        raw.execute("DELETE FROM keystore_meta WHERE name = 'index_next'")
        with pytest.raises(psycopg.errors.IntegrityError):
            raw.execute("UPDATE keystore_meta SET name = 'check2' WHERE name = 'check'")
        # A session on another search_path (a ledger's) writing the key store is counted too.
        seen = ks.data_version()
        with psycopg.connect(pg_url, autocommit=True) as elsewhere:
            elsewhere.execute("INSERT INTO custody_keys.keystore_meta VALUES ('hand', 'x')")
        assert ks.data_version() != seen and ks.meta("hand") == b"x"
    finally:
        raw.close()
        ks.close()
        sq.close()


def test_busy_when_another_writer_holds_it(pg_url: str) -> None:
    ks = pg_keystore.open_keystore(pg_url)
    other = psycopg.connect(pg_url, autocommit=True)
    try:
        other.execute("SELECT pg_advisory_lock(hashtextextended('custody-keys:custody_keys', 0))")
        ks.conn.execute("SET lock_timeout = '50ms'")
        with pytest.raises(StoreBusy):
            ks.add("r", 1, b"k", "2026-01-01")
        other.execute("SELECT pg_advisory_unlock_all()")
        ks.add("r", 1, b"k", "2026-01-01")
        assert ks.latest("r") == (1, b"k", "2026-01-01", None)
    finally:
        other.close()
        ks.close()


def test_opening_schemas(pg_url: str) -> None:
    first = pg_keystore.open_keystore(pg_url)
    first.put_meta("check", b"c")
    first.close()
    again = pg_keystore.open_keystore(pg_url)
    assert again.meta("check") == b"c" and again.legacy_marks_upto() == 0
    again.close()
    # Another ledger schema has its own key store.
    team = pg_keystore.open_keystore(pg_url + "&schema=team")
    assert team.schema == "team_keys" and team.meta("check") is None
    team.close()
    assert pg_keystore.split_address("postgresql://u:pw@h/db?schema=a&sslmode=require"
                                     "&schema=ops") == ("postgresql://u:pw@h/db?sslmode=require",
                                                        "ops")
    assert pg_keystore.shown("postgresql://u:pw@h/db") == "postgresql://u:***@h/db"
    with psycopg.connect(pg_url, autocommit=True) as raw:
        raw.execute("CREATE SCHEMA other_keys")
        raw.execute("CREATE TABLE other_keys.stuff(x int)")
        raw.execute("UPDATE custody_keys.schema_version SET version = 99")
    with pytest.raises(NotALedger):
        pg_keystore.open_keystore(pg_url + "&schema=other")
    with pytest.raises(StoreError, match="63"):
        pg_keystore.open_keystore(pg_url + "&schema=" + "a" * 59)
    with pytest.raises(LedgerTooNew):
        pg_keystore.open_keystore(pg_url)


def test_every_public_method_of_the_sqlite_store_with_its_signature() -> None:
    skip = {"conn", "path"}
    names = [n for n in dir(sqlite_keystore.KeyStoreFile) if not n.startswith("_")]
    for name in set(names) - skip:
        want = inspect.signature(getattr(sqlite_keystore.KeyStoreFile, name))
        assert inspect.signature(getattr(pg_keystore.KeyStoreFile, name)) == want, name
    assert inspect.signature(pg_keystore.open_keystore).parameters.keys() >= {"url"}
