"""The key store behind the port: `store.open_keystore` chooses the backend by address, and
`total_changes()` / `Inspection.keystore()` are what the layers above use instead of reaching
into a key store's connection."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import store
from store.errors import StoreBusy
from store.sqlite import health
from store.sqlite import keystore as sqlite_keystore

ROOT = Path(__file__).resolve().parents[1]


def test_a_path_opens_a_sqlite_key_store(tmp_path: Path) -> None:
    ks = store.open_keystore(tmp_path / "k.keys")
    try:
        assert isinstance(ks, sqlite_keystore.KeyStoreFile)
        assert (tmp_path / "k.keys").exists()
    finally:
        ks.close()


def test_total_changes_counts_rows_even_rolled_back(tmp_path: Path) -> None:
    ks = sqlite_keystore.open_keystore(tmp_path / "k.keys")
    try:
        start = ks.total_changes()
        ks.put_meta("check", b"c")
        assert ks.total_changes() == start + 1
        ks.put_meta("check", b"c")  # already there: nothing written
        assert ks.total_changes() == start + 1
        try:
            with ks.write():
                ks.add("r", 1, b"k", "2026-01-01")
                raise RuntimeError
        except RuntimeError:
            pass
        assert ks.total_changes() == start + 2 and ks.latest("r") is None
    finally:
        ks.close()


def test_a_key_store_held_past_the_busy_timeout_is_a_clear_busy(tmp_path: Path) -> None:
    """Another writer holding the key store file's write lock: its write() is StoreBusy
    (`ledger_busy`) after the busy timeout, never an apsw exception."""
    ks = sqlite_keystore.open_keystore(tmp_path / "k.keys")
    other = sqlite_keystore.open_keystore(tmp_path / "k.keys")
    try:
        ks.conn.setbusytimeout(50)
        other.conn.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreBusy) as busy, ks.write():
            pass
        assert busy.value.code == StoreBusy.code == "ledger_busy"
        other.conn.execute("ROLLBACK")
        with ks.write():
            ks.put_meta("after", b"a")
        assert ks.meta("after") == b"a"
    finally:
        other.close()
        ks.close()


def test_the_change_counter_is_read_once_a_write_and_still_sees_every_other_commit(
        tmp_path: Path) -> None:
    """data_version is read once per write transaction (no other connection can commit while
    it holds the lock), yet a commit by another connection between two transactions, or
    outside any, is seen: the key ring's live keys are dropped on it."""
    ks = sqlite_keystore.open_keystore(tmp_path / "k.keys")
    other = sqlite_keystore.open_keystore(tmp_path / "k.keys")
    asked: list[str] = []

    def trace(cursor: object, sql: str, bindings: object) -> bool:
        if "data_version" in sql:
            asked.append(sql)
        return True

    try:
        ks.conn.exec_trace = trace
        before = ks.data_version()
        with ks.write():
            inside = [ks.data_version() for _ in range(3)]
            ks.add("r", 1, b"k", "2026-01-01")
            assert ks.data_version() == inside[0]
        assert len(asked) == 2  # one outside, one for the whole transaction
        assert inside[0] == before
        other.put_meta("other", b"x")  # another connection commits
        seen = ks.data_version()
        assert seen != before
        with ks.write():
            assert ks.data_version() == seen
        other.put_meta("other2", b"y")
        with ks.write():  # the counter read in the last transaction is not kept
            assert ks.data_version() != seen
        try:
            with ks.write():
                held = ks.data_version()
                raise RuntimeError
        except RuntimeError:
            pass
        other.put_meta("other3", b"z")
        assert ks.data_version() != held
    finally:
        ks.close()
        other.close()


def test_inspection_reads_the_marks_without_the_connection(tmp_path: Path) -> None:
    ks = sqlite_keystore.open_keystore(tmp_path / "k.keys")
    ks.add_mark(3, "h3", "2026-01-01", lambda row: "mac")
    ks.close()
    seen = health.inspect_keystore(tmp_path / "k.keys")
    try:
        assert list(seen.keystore().marks()) == [(1, 3, "h3", "2026-01-01", False, "mac")]
    finally:
        seen.close()


def test_no_layer_above_reaches_into_a_key_store_connection() -> None:
    for path in (ROOT / "custody_app").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "conn":
                inner = node.value
                name = inner.attr if isinstance(inner, ast.Attribute) else getattr(inner, "id", "")
                assert name not in ("store", "keys"), f"{path}: {ast.unparse(node)}"
