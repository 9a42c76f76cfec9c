"""A ledger's address: a file path or a server URL, answered in the store so the layers above
never ask which (store/address.py). The hostile cases: a password that must never be printed, a
URL whose parts try to climb out of the per-user folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from custody_app.files.output import ledger_files
from custody_app.keys.keyring import keystore_path_for, master_path_for, public_key_path_for
from store.address import address_of, is_server_text


@pytest.mark.parametrize(("text", "server"), [
    ("postgresql://u@h/db", True), ("POSTGRES://u@h/db", True), ("postgres://h", True),
    ("postgresql:relative.db", False), ("postgresql", False), ("./postgresql://x", False),
    ("ledger.db", False), ("/tmp/a/b.db", False),
])
def test_only_a_postgresql_url_is_a_server(text: str, server: bool) -> None:
    assert is_server_text(text) is server
    assert address_of(text).server is server


def test_a_password_is_never_printed() -> None:
    shown = address_of("postgresql://alice:s3cret@db.example:6543/team?schema=mem"
                       "&password=other&sslmode=require").display
    assert "s3cret" not in shown and "other" not in shown
    assert shown == "postgresql://alice@db.example:6543/team?schema=mem&sslmode=require"


def test_a_file_ledgers_files_sit_beside_it(tmp_path: Path) -> None:
    path = str(tmp_path / "l.db")
    a = address_of(path)
    assert a.own_file() == path and a.default_keystore() == f"{path}.keys"
    assert a.sibling(".pub") == Path(f"{path}.pub") and a.folder() == tmp_path
    assert keystore_path_for(path) == f"{path}.keys"
    assert master_path_for(f"{path}.keys") == Path(f"{path}.keys.master")
    assert public_key_path_for(path) == Path(f"{path}.pub")
    assert a.watched_files() == [path, f"{path}-wal"]


def test_a_server_ledger_keeps_its_key_store_on_the_server_and_its_local_files_per_user(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.delenv("CUSTODY_KEYSTORE", raising=False)
    url = "postgresql://bob:pw@db.internal:5433/team?schema=agents"
    a = address_of(url)
    assert a.own_file() is None and a.watched_files() == []
    assert keystore_path_for(url) == url  # the key store lives in the ledger's database
    folder = tmp_path / "custody-app" / "servers" / "db.internal-5433-team-agents"
    assert public_key_path_for(url) == folder / "ledger.pub"
    assert master_path_for(url) == folder / "ledger.master"
    files = ledger_files(url, url)
    assert all(str(f).startswith(str(folder)) for f in files), files


@pytest.mark.parametrize("url", [
    "postgresql://u@h/..%2F..%2F..%2Fetc?schema=../../x",
    "postgresql://u@/db?host=/var/run/../../etc&schema=a/b",
    "postgresql://u@h/%00evil?schema=..",
])
def test_a_hostile_url_cannot_name_a_local_file_outside_the_per_user_folder(
        url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    base = (tmp_path / "custody-app" / "servers").resolve()
    for suffix in (".pub", ".master", ".keys.master"):
        target = address_of(url).sibling(suffix).resolve()
        assert target.parent.parent == base, target
