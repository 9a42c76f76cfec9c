"""Epoch keys (issue 34), on a SQLite file and on a real PostgreSQL server: `rotate-epoch`
re-wraps every live key under a new master key and destroys the old one. After it every sealed
value still reads; the old key file opens nothing; a backup taken before a forget-subject and a
rotation (a copy of the key store file, or every row of the server's database) yields the
destroyed subject key with no key file that remains; the certificate's place for those copies
goes from pending to crypto-erased; `$CUSTODY_MASTER_KEY` is refused; a second host holding the
retired key file is told what happened and what to copy; marks made before still verify; a key
store made by the code before epochs opens and rotates."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from custody_app.domain.errors import LedgerError
from custody_app.keys import crypto
from custody_app.keys import epoch as epochs
from custody_app.keys.keyring import KeyRing, mark_key_of
from custody_app.ledger.facade import Ledger
from custody_app.recall import text
from store import open_keystore
from tests import pgserver
from tests.conftest import SUITE_DEFAULT_POLICY
from tests.epoch_crash import master_of

ROOT = Path(__file__).resolve().parent.parent
CAUSE = {"kind": "tool", "ref": "epoch-test"}
SECRET = "alice's diagnosis zebrafinch-4471"


def _fill(led: Ledger) -> dict[str, str]:
    """Values of several subjects (with free text in their causes); {fact id: value}."""
    values = {}
    for n in range(5):
        value = f"value {n} of bob-{n} quokka{n:03d}"
        fact = led.assert_fact(f"acct:BOB-{n}", "note", value, actor="agent:a",
                               cause={"kind": "tool", "ref": f"r{n}", "detail": f"why {n}"},
                               provenance="attested")
        values[fact.fact_id] = value
    return values


def _read_all(led: Ledger, values: dict[str, str]) -> None:
    for fact_id, value in values.items():
        assert led.why(fact_id).fact.value == value


def test_rotate_then_every_sealed_value_reads_and_the_old_key_opens_nothing(address: str) -> None:
    with Ledger.open(address) as led:
        values = _fill(led)
        old_epoch = led.keys.epoch  # type: ignore[union-attr]
        result = led.rotate_epoch()
        assert result.retired == old_epoch and result.epoch != old_epoch
        assert result.keys == 5
        _read_all(led, values)  # this process, after its own rotation
        led.assert_fact("acct:BOB-9", "note", "written after", actor="agent:a", cause=CAUSE,
                        provenance="attested")
    old = crypto.new_key()
    with Ledger.open(address) as led:  # a new process: the new key file
        _read_all(led, values)
        assert led.keys is not None and led.keys.epoch == result.epoch
        assert led.verify().valid
        # every wrapped entry of the key store opens under the new key, none under a stranger
        for ref, gen, wrapped in led.keys.store.live_keys():
            crypto.unwrap(led.keys._master, wrapped, f"data:{ref}:{gen}")
            with pytest.raises(crypto.DecryptError):
                crypto.unwrap(old, wrapped, f"data:{ref}:{gen}")


def test_the_retired_key_file_no_longer_opens_the_store(address: str) -> None:
    with Ledger.open(address) as led:
        _fill(led)
    master = master_of(address)
    retired = master.read_bytes()
    with Ledger.open(address) as led:
        result = led.rotate_epoch()
    assert master.read_bytes() != retired
    assert not epochs.next_path(master).exists()
    master.write_bytes(retired)  # the old file put back (a restored copy of the host's files)
    with pytest.raises(LedgerError) as refused:
        Ledger.open(address)
    assert refused.value.code == "epoch_rotated"
    assert result.epoch in refused.value.message and result.at in refused.value.message
    assert "copy" in refused.value.message


def _wrapped_rows(address: str, backup: Any) -> tuple[list[tuple[str, int, bytes]],
                                                        dict[str, bytes]]:
    """(subject key rows, meta entries) of a backup of the key store."""
    if isinstance(backup, Path):
        store = open_keystore(str(backup))
        try:
            rows = store.live_keys()
            meta = {n: v for n in ("check", "pepper", "forget", "signing", "index", "mark_key")
                    if (v := store.meta(n)) is not None}
        finally:
            store.close()
        return rows, meta
    rows = [(str(r[0]), int(r[1]), bytes(r[2])) for r in backup["custody_keys.subject_keys"]
            if r[2] is not None]
    meta = {str(n): bytes(v) for n, v in backup["custody_keys.keystore_meta"]}
    return rows, meta


def _backup(address: str, tmp_path: Path) -> Any:
    """A copy of the key store as it is now: its file, or every row of the server database."""
    if address.startswith("postgresql"):
        return pgserver.dump(address)
    copy = tmp_path / "backup.keys"
    shutil.copy2(f"{address}.keys", copy)
    return copy


def _key_files(address: str) -> list[bytes]:
    """Every key file that remains beside the key store (the master file and any other)."""
    folder = master_of(address).parent
    keys = [epochs.read_key(p) for p in folder.iterdir() if p.is_file()]
    return [k for k in keys if k is not None]


def _opens(key: bytes, wrapped: bytes, purpose: str) -> bool:
    try:
        crypto.unwrap(key, wrapped, purpose)
    except crypto.DecryptError:
        return False
    return True


def test_a_backup_from_before_an_erasure_yields_nothing_after_rotation(address: str,
                                                                         tmp_path: Path) -> None:
    with Ledger.open(address) as led:
        _fill(led)
        fact = led.assert_fact("acct:ALICE", "diagnosis", SECRET, actor="agent:a", cause=CAUSE,
                               provenance="attested")
        assert led.keys is not None
        alice = led.keys.subject_ref("acct:ALICE")
        sealed = led.db.events.get(fact.seq).value  # type: ignore[union-attr]
        index_key = led.keys.index_key
        before = led.keys._master
    backup = _backup(address, tmp_path)
    rows, meta = _wrapped_rows(address, backup)
    alice_rows = [(r, g, w) for r, g, w in rows if r == alice]
    assert alice_rows
    # The attack works before the rotation: the backup's key of alice, unwrapped with the key
    # file of the day, opens her sealed value.
    ref, gen, wrapped = alice_rows[0]
    key = crypto.unwrap(before, wrapped, f"data:{ref}:{gen}")
    assert sealed is not None and crypto.open_sealed(key, sealed, fact.fact_id) is not None
    with Ledger.open(address) as led:
        led.forget_subject("acct:ALICE", actor="user:dpo", reason="subject_request")
    # Still works after the erasure alone: the epoch is live.
    assert any(_opens(k, wrapped, f"data:{ref}:{gen}") for k in _key_files(address))
    with Ledger.open(address) as led:
        led.rotate_epoch()
        assert led.keys is not None
        current_index = led.keys.index_key
    remaining = _key_files(address)
    assert remaining and before not in remaining
    for k in remaining:  # every key file left, against every wrapped row of the backup
        for r, g, w in rows:
            assert not _opens(k, w, f"data:{r}:{g}"), (r, g)
        for name, value in meta.items():
            assert not _opens(k, value, name), name
    # The word index key was rotated too: the backup's keyed words cannot be tested with it.
    assert current_index != index_key
    word = text.words(SECRET)[0]
    assert text.term(current_index, word) != text.term(index_key, word)


def test_the_certificate_and_erasures_show_the_epoch_pending_then_crypto_erased(
        address: str) -> None:
    server = address.startswith("postgresql")
    place = "WAL, archives, backups and replicas" if server else (
        "copies of the ledger and key store files made before")
    with Ledger.open(address) as led:
        _fill(led)
        led.assert_fact("acct:ALICE", "diagnosis", SECRET, actor="agent:a", cause=CAUSE,
                        provenance="attested")
        result = led.forget_subject("acct:ALICE", actor="user:dpo", reason="subject_request")
        epoch = led.keys.epoch  # type: ignore[union-attr]
        found = {p.place: p for p in result.certificate.places}[place]
        assert found.outcome == ("pending" if server else "unverifiable")
        assert f"the epoch {epoch}" in found.detail and "still live" in found.detail
        listed = led.erasures()
        assert listed.pending_epochs == 1
        assert [r.epoch for r in listed.erasures] == ["pending"]
        rotated = led.rotate_epoch()
        assert [c.subject_hash for c in rotated.certificates] == [result.subject_hash]
        again = {p.place: p for p in rotated.certificates[0].places}
        assert again[place].outcome == "crypto-erased" and rotated.at in again[place].detail
        assert again["word index key (copies taken before)"].outcome == "clean"
        # nothing else is pending: the server's own places (its snapshots and old row
        # versions) were finished with the erasure
        left = [p.place for p in rotated.certificates[0].places if p.outcome == "pending"]
        assert left == []
        assert rotated.certificates[0].complete is True
        listed = led.erasures()
        assert listed.pending_epochs == 0
        assert [(r.epoch, r.epoch_destroyed_at) for r in listed.erasures] == [
            ("crypto-erased", rotated.at)]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "custody_app", *args], cwd=ROOT,
                          env=env or dict(os.environ), capture_output=True, text=True,
                          timeout=120)


def test_an_erasure_waiting_only_for_its_epoch_is_not_rechecked_by_later_writes(
        address: str) -> None:
    """The place for copies taken before is settled by rotate-epoch alone: the erasure leaves
    no pending row behind for it, so later writes do not re-run its other places (on a
    server: VACUUM and the page search) while the epoch is live."""
    with Ledger.open(address) as led:
        _fill(led)
        result = led.forget_subject("acct:ALICE", actor="user:dpo", reason="subject_request")
        waiting = [p.outcome for p in result.certificate.places
                   if p.place in ("WAL, archives, backups and replicas",
                                  "copies of the ledger and key store files made before")]
        assert waiting == (["pending"] if address.startswith("postgresql") else ["unverifiable"])
        assert led.db.erasure.pending() == []
        led.assert_fact("acct:BOB", "plan", "pro", actor="agent:a", cause=CAUSE,
                        provenance="attested")
        assert led.finish_scrubs() == []
        assert led.erasures().pending_epochs == 1


def test_rotate_epoch_refuses_a_key_from_the_environment(address: str) -> None:
    with Ledger.open(address) as led:
        values = _fill(led)
    master = master_of(address)
    key = master.read_text().strip()
    snapshot = pgserver.dump(address) if address.startswith("postgresql") else (
        Path(f"{address}.keys").read_bytes())
    env = {**os.environ, "CUSTODY_MASTER_KEY": key}
    done = _cli("rotate-epoch", "--ledger", address, env=env)
    assert done.returncode != 0
    assert "(epoch_key_in_env)" in done.stderr and "unset $CUSTODY_MASTER_KEY" in done.stderr
    after = pgserver.dump(address) if address.startswith("postgresql") else (
        Path(f"{address}.keys").read_bytes())
    assert after == snapshot  # nothing changed (not even the word index key)
    assert master.read_text().strip() == key
    with Ledger.open(address) as led:
        _read_all(led, values)
    done = _cli("rotate-epoch", "--ledger", address, "--json")  # without it: rotates
    assert done.returncode == 0, done.stderr
    assert master.read_text().strip() != key


def test_a_second_host_with_the_retired_key_file_is_told_what_to_copy(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host_a, host_b = tmp_path / "host-a", tmp_path / "host-b"
    monkeypatch.setenv("XDG_DATA_HOME", str(host_a))
    with Ledger.open(pg_url) as led:
        values = _fill(led)
    a_key = master_of(pg_url)
    monkeypatch.setenv("XDG_DATA_HOME", str(host_b))
    b_key = master_of(pg_url)
    b_key.parent.mkdir(parents=True, mode=0o700)
    shutil.copy2(a_key, b_key)  # host B was given the key file when it joined
    with Ledger.open(pg_url) as led:
        _read_all(led, values)
    monkeypatch.setenv("XDG_DATA_HOME", str(host_a))
    with Ledger.open(pg_url) as led:
        result = led.rotate_epoch()
    monkeypatch.setenv("XDG_DATA_HOME", str(host_b))
    with pytest.raises(LedgerError) as refused:
        Ledger.open(pg_url)
    message = refused.value.message
    assert refused.value.code == "epoch_rotated"
    assert result.epoch in message and result.at in message and str(a_key) in message
    done = _cli("show", "--ledger", pg_url, list(values)[0])
    assert done.returncode != 0 and "(epoch_rotated)" in done.stderr
    shutil.copy2(a_key, b_key)  # what the message says to do
    with Ledger.open(pg_url) as led:
        _read_all(led, values)


def test_a_process_open_across_a_rotation_follows_it(address: str) -> None:
    """A long-lived process (an MCP server, the TUI) opened before another rotated the epoch:
    it reads and writes after, and what it writes is wrapped under the new epoch (a key it
    wrapped under the retired one would be lost with it)."""
    with Ledger.open(address) as early:
        values = _fill(early)
        with Ledger.open(address) as other:
            other.rotate_epoch()
        fact = early.assert_fact("acct:NEW-1", "note", "written by the early process",
                                 actor="agent:a", cause=CAUSE, provenance="attested")
        values[fact.fact_id] = "written by the early process"
        _read_all(early, values)
    with Ledger.open(address) as led:
        _read_all(led, values)


def test_marks_made_before_a_rotation_still_verify(address: str) -> None:
    with Ledger.open(address) as led:
        _fill(led)
        assert led.keys is not None
        before = led.keys.newest_trusted_mark()
        assert before is not None
        led.rotate_epoch()
        led.rotate_epoch()  # the second rotation keeps the mark key the first stored
    keys = KeyRing.open(address)
    try:
        trusted, bad = keys.trusted_mark()
        assert bad == [] and trusted is not None and trusted[0] >= before[0]
        assert mark_key_of(keys.store, keys._master) == keys._mark_key
    finally:
        keys.close()


# The last commit before epoch keys: its code makes what "older key stores" means here.
BEFORE_EPOCHS = "4e53e60"


def _old_code(tmp_path: Path, *lines: str) -> None:
    """Run Python under the code as it was before epoch keys (extracted from git)."""
    tree = tmp_path / "before-epochs"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", BEFORE_EPOCHS, "custody_app",
                              "store", "policies"], capture_output=True, timeout=60)
    if archive.returncode != 0:
        pytest.skip(f"the code before epoch keys ({BEFORE_EPOCHS}) is not in this checkout")
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True, timeout=60)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", "\n".join(lines)], cwd=str(tree), env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_key_store_made_before_epochs_opens_and_rotates(address: str, tmp_path: Path) -> None:
    _old_code(tmp_path, "import sys",
              "from custody_app.ledger.facade import Ledger",
              f"led = Ledger.open({address!r})",
              "for n in range(3):",
              "    led.assert_fact(f'acct:OLD-{n}', 'note', f'old value {n}', actor='agent:a',"
              "                    cause={'kind': 'tool', 'ref': 'x'}, provenance='attested')",
              "led.forget_subject('acct:OLD-0', actor='user:dpo', reason='subject_request')",
              "led.close()")
    with Ledger.open(address) as led:
        values = {f.fact_id: f.value for f in led.as_of().facts}
        assert sorted(values.values()) == ["old value 1", "old value 2"]
        trusted, bad = led.keys.trusted_mark()  # type: ignore[union-attr]
        assert trusted is not None and bad == []
        led.rotate_epoch()
        _read_all(led, values)
    with Ledger.open(address) as led:
        _read_all(led, values)
        trusted, bad = led.keys.trusted_mark()  # type: ignore[union-attr]
        assert trusted is not None and bad == []


def test_policy_after_erasure_rotates_at_the_end_of_a_subject_erasure(
        address: str, tmp_path: Path) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text(SUITE_DEFAULT_POLICY.read_text().replace(
        'rotate_epoch = "manual"', 'rotate_epoch = "after_erasure"'))
    with Ledger.open(address, policy=policy) as led:
        values = _fill(led)
        led.assert_fact("acct:ALICE", "diagnosis", SECRET, actor="agent:a", cause=CAUSE,
                        provenance="attested")
        epoch = led.keys.epoch  # type: ignore[union-attr]
        result = led.forget_subject("acct:ALICE", actor="user:dpo", reason="subject_request")
        assert led.keys.epoch != epoch  # type: ignore[union-attr]
        outcomes = {p.place: p.outcome for p in result.certificate.places}
        assert "crypto-erased" in outcomes.values()
        assert outcomes["word index key (copies taken before)"] == "clean"
        assert led.erasures().pending_epochs == 0
        _read_all(led, values)
        # a one-fact forget rotates too: it re-keyed its subject (the generation the erased
        # value used is destroyed), so copies taken before are crypto-erased as well
        epoch = led.keys.epoch  # type: ignore[union-attr]
        gone = led.assert_fact("acct:BOB-0", "extra", "to forget", actor="agent:a",
                               cause=CAUSE, provenance="attested")
        forgot = led.forget(gone.fact_id, actor="user:dpo", reason="subject_request")
        assert led.keys.epoch != epoch  # type: ignore[union-attr]
        assert "crypto-erased" == {p.place: p.outcome for p in forgot.certificate.places}[
            "WAL, archives, backups and replicas" if address.startswith("postgresql") else
            "copies of the ledger and key store files made before"]
        _read_all(led, values)


def test_doctor_shows_erasures_pending_on_the_epoch_until_a_rotation(address: str) -> None:
    from custody_app.doctor.checks import diagnose

    with Ledger.open(address) as led:
        _fill(led)
        led.forget_subject("acct:BOB-1", actor="user:dpo", reason="subject_request")
    lines = {c.name: c for c in diagnose(address).checks}
    assert lines["epoch-pending"].outcome == "warn"
    assert "1 subject erasure(s)" in lines["epoch-pending"].detail
    assert "never rotated" in lines["epoch-key"].detail
    with Ledger.open(address) as led:
        rotated = led.rotate_epoch()
    lines = {c.name: c for c in diagnose(address).checks}
    assert lines["epoch-pending"].outcome == "ok", lines["epoch-pending"]
    assert rotated.epoch in lines["epoch-key"].detail
    assert lines["ledger-marks"].outcome == "ok" and lines["master-key"].outcome == "ok"


def test_single_fact_forgets_and_sweeps_are_pending_on_the_epoch_until_a_rotation(
        address: str) -> None:
    """A single-fact forget and a retention sweep re-key the subjects of what they erase (the
    old key generation is destroyed), so copies taken before are theirs to wait on too:
    `erasures` and `doctor` list them pending on the live epoch, rotate-epoch re-issues their
    certificates crypto-erased, and `erasures` then shows the rotation's time."""
    from custody_app.doctor.checks import diagnose

    server = address.startswith("postgresql")
    place = "WAL, archives, backups and replicas" if server else (
        "copies of the ledger and key store files made before")
    with Ledger.open(address) as led:
        values = _fill(led)
        gone = led.assert_fact("acct:BOB-0", "extra", SECRET, actor="agent:a", cause=CAUSE,
                               provenance="attested")
        led.assert_fact("acct:BOB-1", "old", "swept away zebrafinch-9", actor="agent:a",
                        cause=CAUSE, provenance="attested", space="team:old")
        later = led.assert_fact("acct:BOB-2", "plan", "pro", actor="agent:a", cause=CAUSE,
                                provenance="attested")
        forgot = led.forget(gone.fact_id, actor="user:dpo", reason="error")
        swept = led.sweep(before=later.tx_at, space="team:old", actor="user:dpo",
                          reason="retention")
        assert swept.certificate is not None and len(swept.expired) == 1
        for cert in (forgot.certificate, swept.certificate):
            assert {p.place: p.outcome for p in cert.places}[place] == (
                "pending" if server else "unverifiable")
        listed = led.erasures()
        assert [(r.operation, r.epoch) for r in listed.erasures] == [
            ("forget", "pending"), ("sweep", "pending")]
        assert listed.pending_epochs == 2
        assert "2 erasure(s) pending on a live epoch key" in listed.render()
        lines = {c.name: c for c in diagnose(address).checks}
        assert lines["epoch-pending"].outcome == "warn", lines["epoch-pending"]
        assert "1 single-fact forget(s), 1 retention sweep(s)" in lines["epoch-pending"].detail
        rotated = led.rotate_epoch()
        assert sorted(e["operation"] for e in rotated.completed) == ["forget", "sweep"]
        assert sorted(c.operation for c in rotated.certificates) == ["forget", "sweep"]
        for cert in rotated.certificates:
            again = {p.place: p for p in cert.places}[place]
            assert again.outcome == "crypto-erased" and rotated.at in again.detail
            assert cert.complete is True
        listed = led.erasures()
        assert listed.pending_epochs == 0
        assert [(r.epoch, r.epoch_destroyed_at) for r in listed.erasures] == [
            ("crypto-erased", rotated.at)] * 2
        _read_all(led, values)
    lines = {c.name: c for c in diagnose(address).checks}
    assert lines["epoch-pending"].outcome == "ok", lines["epoch-pending"]
