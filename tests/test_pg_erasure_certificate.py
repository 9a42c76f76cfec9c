"""An erasure on a server ledger is certified for what was checked and no more: the rows are
nulled and the subject's key destroyed as on SQLite, but the server's own files (old row
versions until VACUUM, its WAL, archives, backups, replicas) are beyond any scan of this process,
so the certificate lists them as pending and is not complete. (Making those copies unreadable is
the next issue's epoch keys.) A SQLite ledger's certificate has no such place."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Env

SERVER_PLACE = "the server's files"


def _forget_both(env: Env) -> tuple[object, object]:
    fact = env.put("acct:42", "diagnosis", "a rare condition named xyzzy")
    env.put("acct:42", "plan", "basic")
    one = env.ledger.forget(fact, actor="user:dpo", reason="subject_request")
    subject = env.ledger.forget_subject("acct:42", actor="user:dpo", reason="subject_request")
    return one.certificate, subject.certificate


def test_a_server_erasure_is_pending_for_the_servers_own_files(pg_url: str) -> None:
    env = Env(pg_url)
    try:
        for cert in _forget_both(env):
            pending = [p for p in cert.places if p.place.startswith(SERVER_PLACE)]  # type: ignore[attr-defined]
            assert [p.outcome for p in pending] == ["pending"], cert
            assert "VACUUM" in pending[0].detail and "backup" in pending[0].detail
            assert cert.complete is False  # type: ignore[attr-defined]
            # what was checkable was checked: the rows hold nothing
            rows = {p.place: p.outcome for p in cert.places}  # type: ignore[attr-defined]
            assert rows["events table: value and salt of each assert"] == "clean"
            assert rows["facts projection"] == "clean"
    finally:
        env.ledger.close()


def test_a_file_ledgers_certificate_has_no_server_place(tmp_path: Path) -> None:
    env = Env(tmp_path / "l.db")
    try:
        for cert in _forget_both(env):
            assert not [p for p in cert.places if p.place.startswith(SERVER_PLACE)]  # type: ignore[attr-defined]
            assert cert.complete is True  # type: ignore[attr-defined]
    finally:
        env.ledger.close()
