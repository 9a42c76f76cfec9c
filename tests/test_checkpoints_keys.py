"""Signed checkpoints, the key store and its master key, and sealed values, on real files.

The attacker model for the checkpoint tests is someone who holds the ledger file only (not the
key store, not the signing key): with the stdlib `sqlite3` they can drop the append-only
triggers, edit an event and recompute every later hash so that a plain chain walk passes. A
signed checkpoint is what lets a holder of the public key catch that; its limits are stated in
the tests named `test_limit_...`.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from custody_app.domain.chain import GENESIS, canonical, event_hash, verify_chain
from custody_app.domain.errors import LedgerError
from custody_app.evidence.checkpoints import statement
from custody_app.interfaces.cli.main import main
from custody_app.keys import crypto
from custody_app.keys.keyring import KEYSTORE_ENV, MASTER_ENV
from custody_app.ledger.facade import Ledger
from tests.conftest import CAUSE, Env
from tests.reliability import forget_recorded_mark, restore_keystore_triggers

OTHER_MASTER = "ab" * 32
CANARY = "zebra-quokka-canary-value-Qx7"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test picks its ledger, key store and master key explicitly."""
    for name in (MASTER_ENV, KEYSTORE_ENV, "CUSTODY_LEDGER", "CUSTODY_POLICY"):
        monkeypatch.delenv(name, raising=False)


# ---- helpers: what an attacker with the ledger file alone can do ------------------------------
def _drop_event_triggers(con: sqlite3.Connection) -> None:
    con.execute("DROP TRIGGER IF EXISTS events_append_only_update")
    con.execute("DROP TRIGGER IF EXISTS events_append_only_delete")


def rewrite_chain(path: Path, seq: int, edit: Callable[[dict[str, Any]], None]) -> None:
    """Edit the body of event `seq` and recompute every hash and prev_hash link from there on,
    exactly as the ledger builds them (canonical body text, sha256(prev_hash || body))."""
    con = sqlite3.connect(path)
    try:
        _drop_event_triggers(con)
        rows = con.execute("SELECT seq, body, prev_hash, hash FROM events ORDER BY seq").fetchall()
        prev = GENESIS
        for s, body, _prev_hash, old_hash in rows:
            if s < seq:
                prev = old_hash
                continue
            if s == seq:
                parsed = json.loads(body)
                edit(parsed)
                body = canonical(parsed)
            new_hash = event_hash(prev, body)
            con.execute("UPDATE events SET body = ?, prev_hash = ?, hash = ? WHERE seq = ?",
                        (body, prev, new_hash, s))
            prev = new_hash
        con.commit()
    finally:
        con.close()


def reopen_past_marks(env: Env) -> Ledger:
    """After a rewrite: the ledger's own key store refuses it first (its authenticated mark
    names a hash the rewritten chain no longer has: `ledger_forked`). What the checkpoints
    catch on their own is then seen through a copy of the key store without its marks (an
    older key store, or a verifier with the keys and no marks); env.ledger is that open."""
    with pytest.raises(LedgerError) as refused:
        Ledger.open(env.path, policy=env.policy, clock=env.clock)
    assert refused.value.code == "ledger_forked", refused.value
    env.ledger = Ledger.open(env.path, policy=env.policy, clock=env.clock,
                             keystore=markless(env.path), id_seed=99)
    return env.ledger


def markless(path: Path) -> Path:
    """A copy of the ledger's key store (and master key) with its high-water marks removed."""
    copy = path.parent / "markless.keys"
    if not copy.exists():
        shutil.copyfile(f"{path}.keys", copy)
        shutil.copyfile(f"{path}.keys.master", f"{copy}.master")
        con = sqlite3.connect(copy)
        con.execute("DROP TRIGGER ledger_marks_no_delete")
        con.execute("DELETE FROM ledger_marks")
        restore_keystore_triggers(con)
        con.commit()
        con.close()
    forget_recorded_mark(path)
    return copy


def strip_checkpoints(path: Path) -> None:
    """Delete every checkpoint event, renumber the rest and recompute the whole chain."""
    con = sqlite3.connect(path)
    try:
        _drop_event_triggers(con)
        con.execute("DELETE FROM events WHERE kind = 'checkpoint'")
        rows = con.execute("SELECT seq, body FROM events ORDER BY seq").fetchall()
        prev = GENESIS
        for new_seq, (old_seq, body) in enumerate(rows, start=1):
            parsed = json.loads(body)
            parsed["seq"] = new_seq
            body = canonical(parsed)
            new_hash = event_hash(prev, body)
            con.execute("UPDATE events SET seq = ?, body = ?, prev_hash = ?, hash = ? WHERE seq = ?",
                        (new_seq, body, prev, new_hash, old_seq))
            # A thorough attacker moves the events' sealed free text along with them.
            con.execute("DROP TRIGGER IF EXISTS event_texts_erase_only")
            con.execute("UPDATE event_texts SET seq = ? WHERE seq = ?", (new_seq, old_seq))
            prev = new_hash
        con.commit()
    finally:
        con.close()


def set_value(path: Path, seq: int, value: bytes | None) -> None:
    con = sqlite3.connect(path)
    try:
        _drop_event_triggers(con)
        con.execute("UPDATE events SET value = ? WHERE seq = ?", (value, seq))
        con.commit()
    finally:
        con.close()


def raw_value(path: Path, seq: int) -> bytes:
    con = sqlite3.connect(path)
    try:
        return bytes(con.execute("SELECT value FROM events WHERE seq = ?", (seq,)).fetchone()[0])
    finally:
        con.close()


def assert_seq(ledger: Ledger, fact_id: str) -> int:
    [row] = [e for e in ledger.events() if e.kind == "assert" and e.fact_id == fact_id]
    return row.seq


def file_bytes(*paths: str | Path) -> bytes:
    return b"".join(Path(p).read_bytes() for p in paths if Path(p).exists())


def run_cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def signed(env: Env) -> Iterator[tuple[Env, dict[str, Any]]]:
    """Three asserts, a checkpoint of seq 4, then one more assert (not covered by it)."""
    ids = [env.put("acct:1", "plan", "gold"), env.put("acct:2", "plan", "basic"),
           env.put("acct:1", "region", "eu")]
    cp = env.ledger.checkpoint()
    late = env.put("acct:3", "plan", "pro")
    pem = env.ledger.keys.public_pem() if env.ledger.keys else ""
    yield env, {"ids": ids, "cp": cp, "late": late, "pem": pem}


# ---- signed checkpoints -----------------------------------------------------------------------
def test_checkpoint_signs_the_head_before_it(signed: tuple[Env, dict[str, Any]]) -> None:
    env, s = signed
    cp, pem = s["cp"], s["pem"]
    events = env.ledger.events()
    by_seq = {e.seq: e for e in events}
    head = by_seq[cp.seq - 1]
    assert [e.kind for e in events] == ["policy", "assert", "assert", "assert", "checkpoint",
                                        "assert"]
    assert (cp.checkpoint_seq, cp.head_hash) == (head.seq, head.hash)
    event = by_seq[cp.seq]
    assert event.kind == "checkpoint" and event.hash == cp.event_id
    body = json.loads(event.body)
    assert (body["checkpoint_seq"], body["head_hash"], body["head_tx_at"]) == (
        head.seq, head.hash, head.tx_at)
    assert body["key_fingerprint"] == crypto.public_fingerprint(pem) == cp.key_fingerprint
    assert crypto.verify_signature(pem, statement(head.seq, head.hash, head.tx_at), body["signature"])
    # The signature is over exactly that statement: another seq does not verify.
    assert not crypto.verify_signature(pem, statement(head.seq + 1, head.hash, head.tx_at),
                                       body["signature"])
    # The public half is written beside the ledger.
    assert Path(f"{env.path}.pub").read_text() == pem
    for report in (env.ledger.verify(), env.ledger.verify(public_key=pem)):
        assert report.valid, report.problem
        assert (report.events, report.checkpoints, report.last_checkpoint_seq) == (6, 1, cp.seq)


def test_checkpoint_of_an_empty_ledger_is_refused(env: Env) -> None:
    with pytest.raises(LedgerError) as caught:
        env.ledger.checkpoint()
    assert caught.value.code == "empty_ledger"
    assert env.ledger.verify().events == 0


def test_checkpoint_subcommand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = tmp_path / "l.db"
    assert run_cli(capsys, "init", "--ledger", ledger)[0] == 0
    with Ledger.open(ledger) as led:
        led.assert_fact("acct:1", "plan", "gold", actor="agent:a", cause=CAUSE)
    code, out, _ = run_cli(capsys, "checkpoint", "--json", "--ledger", ledger)
    assert code == 0
    result = json.loads(out)
    assert result["checkpoint_seq"] == result["seq"] - 1
    code, out, _ = run_cli(capsys, "verify", "--json", "--ledger", ledger, "--key", f"{ledger}.pub")
    assert code == 0 and json.loads(out)["checkpoints"] == 1


def test_recomputed_chain_passes_a_plain_walk_but_not_the_signed_checkpoint(
        signed: tuple[Env, dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    env, s = signed
    cp, pem = s["cp"], s["pem"]
    env.ledger.close()

    def predicate(body: dict[str, Any]) -> None:
        assert body["kind"] == "assert" and body["predicate"] == "plan"
        body["predicate"] = "tier"

    rewrite_chain(env.path, 2, predicate)
    ledger = reopen_past_marks(env)
    rows = ledger.events()
    assert json.loads(rows[1].body)["predicate"] == "tier"
    # A plain walk (hashes, links, mirrored columns, even the sealed values) finds nothing.
    plain = verify_chain(rows, open_value=ledger.values.opener)
    assert plain.valid and plain.events == 6, plain.problem
    # The checkpoint signed the old hash of seq 4: the rewrite shows.
    for report in (ledger.verify(public_key=pem), ledger.verify()):
        assert not report.valid
        assert report.first_bad_seq == cp.checkpoint_seq
        assert f"checkpoint at seq {cp.seq}" in (report.problem or "")
        assert "rewritten" in (report.problem or "")
    ledger.close()
    code, out, _ = run_cli(capsys, "verify", "--json", "--ledger", env.path, "--key", f"{env.path}.pub",
                             "--keystore", markless(env.path))
    assert code == 1
    printed = json.loads(out)
    assert printed["valid"] is False and printed["first_bad_seq"] == cp.checkpoint_seq
    # The same as a real process, the way an auditor holding only the .pub would run it.
    done = subprocess.run([sys.executable, "-m", "custody_app", "verify", "--json", "--ledger", str(env.path),
                           "--key", f"{env.path}.pub", "--keystore",
                           str(markless(env.path))], capture_output=True, text=True,
                          timeout=60, env={k: v for k, v in os.environ.items()
                                           if not k.startswith("CUSTODY_")})
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["first_bad_seq"] == cp.checkpoint_seq
    env.ledger = Ledger.open(env.path, readonly=True,  # for the fixture's close
                             keystore=markless(env.path))


def test_same_rewrite_without_a_checkpoint_goes_unnoticed(env: Env) -> None:
    """Why checkpoints exist: with no signed statement, a recomputed chain verifies."""
    env.put("acct:1", "plan", "gold")
    env.put("acct:2", "plan", "basic")
    env.ledger.close()
    rewrite_chain(env.path, 2, lambda body: body.update(predicate="tier"))
    ledger = reopen_past_marks(env)
    # The projection no longer matches the events (issue 13); an attacker rebuilds it too.
    assert not ledger.verify().valid
    ledger.rebuild(repair=True)
    report = ledger.verify()
    assert report.valid and report.checkpoints == 0, report.problem
    assert json.loads(ledger.events()[1].body)["predicate"] == "tier"
    # Under a public key, a ledger with nothing signed is not vouched for.
    assert ledger.keys is not None
    keyed = ledger.verify(public_key=ledger.keys.public_pem())
    assert not keyed.valid and "no signed checkpoint" in (keyed.problem or "")


def test_rewriting_the_signed_head_hash_too_breaks_the_signature(
        signed: tuple[Env, dict[str, Any]]) -> None:
    """A thorough attacker also puts the new head hash into the checkpoint: the signature fails."""
    env, s = signed
    cp, pem = s["cp"], s["pem"]
    env.ledger.close()
    rewrite_chain(env.path, 2, lambda body: body.update(predicate="tier"))
    with sqlite3.connect(env.path) as con:
        new_head = con.execute("SELECT hash FROM events WHERE seq = ?",
                               (cp.checkpoint_seq,)).fetchone()[0]
    con.close()
    rewrite_chain(env.path, cp.seq, lambda body: body.update(head_hash=new_head))
    ledger = reopen_past_marks(env)
    assert verify_chain(ledger.events(), open_value=ledger.values.opener).valid
    report = ledger.verify(public_key=pem)
    assert not report.valid and report.first_bad_seq == cp.seq
    assert "not signed by the given public key" in (report.problem or "")


def test_altered_signature_fails_under_the_real_key(signed: tuple[Env, dict[str, Any]]) -> None:
    env, s = signed
    cp, pem = s["cp"], s["pem"]
    env.ledger.close()

    def flip(body: dict[str, Any]) -> None:
        sig = body["signature"]
        body["signature"] = ("1" if sig[0] == "0" else "0") + sig[1:]

    rewrite_chain(env.path, cp.seq, flip)
    ledger = reopen_past_marks(env)
    assert verify_chain(ledger.events()).valid
    for report in (ledger.verify(public_key=pem), ledger.verify()):
        assert not report.valid and report.first_bad_seq == cp.seq
        assert "not signed" in (report.problem or "")


def test_another_key_pair_does_not_verify_the_checkpoint(
        signed: tuple[Env, dict[str, Any]], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    env, s = signed
    other_pem = crypto.public_pem(crypto.new_signing_key())
    assert other_pem != s["pem"]
    report = env.ledger.verify(public_key=other_pem)
    assert not report.valid and report.first_bad_seq == s["cp"].seq
    assert "not signed by the given public key" in (report.problem or "")
    env.ledger.close()
    other = tmp_path / "other.pub"
    other.write_text(other_pem)
    code, out, _ = run_cli(capsys, "verify", "--json", "--ledger", env.path, "--key", other)
    assert code == 1 and json.loads(out)["first_bad_seq"] == s["cp"].seq
    code, _, err = run_cli(capsys, "verify", "--ledger", env.path, "--key", tmp_path / "none.pub")
    assert code == 1 and "key_unreadable" in err
    env.ledger = Ledger.open(env.path, readonly=True)


def test_limit_rewrite_after_the_last_checkpoint_is_not_detected(
        signed: tuple[Env, dict[str, Any]]) -> None:
    """LIMIT: a checkpoint covers the chain up to the head it signed, nothing after it. Events
    appended after the last checkpoint can be rewritten (and the chain recomputed from there)
    without `verify --key` noticing; sign again (`custody-app checkpoint`, or end a batch run)
    to cover them."""
    env, s = signed
    late_seq = assert_seq(env.ledger, s["late"])
    assert late_seq > s["cp"].seq
    env.ledger.close()
    rewrite_chain(env.path, late_seq, lambda body: body.update(predicate="tier"))
    ledger = reopen_past_marks(env)
    ledger.rebuild(repair=True)  # the attacker makes the projection match the rewrite too
    report = ledger.verify(public_key=s["pem"])
    assert report.valid and report.checkpoints == 1, report.problem
    assert json.loads(ledger.events()[late_seq - 1].body)["predicate"] == "tier"


def test_deleting_every_checkpoint_fails_under_the_key(
        signed: tuple[Env, dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    """An attacker who deletes every checkpoint event and recomputes the chain is caught: under
    a public key, a ledger with no signed checkpoint is refused. (Deleting only the newest
    checkpoints is the limit covered by the events-after-the-last-checkpoint test.)"""
    env, s = signed
    env.ledger.close()
    strip_checkpoints(env.path)
    rewrite_chain(env.path, 2, lambda body: body.update(predicate="tier"))
    # The key store saw the ledger reach the last checkpoint: the shorter file is refused.
    with pytest.raises(LedgerError) as info:
        env.reopen()
    assert info.value.code == "ledger_rolled_back"
    monkeypatch.setenv("CUSTODY_ACCEPT_ROLLBACK", str(info.value.details["mark_seq"]))
    ledger = env.reopen()
    ledger.rebuild(repair=True)  # and the projection made to match the rewrite
    report = ledger.verify(public_key=s["pem"])
    assert not report.valid and "no signed checkpoint" in (report.problem or "")
    assert (report.checkpoints, report.last_checkpoint_seq) == (0, None)
    assert report.events == 5


# ---- batch runs end with a checkpoint -----------------------------------------------------------
def _assert_line(value: str, subject: str = "acct:1") -> str:
    return json.dumps({"op": "assert", "subject": subject, "predicate": "plan", "value": value,
                       "actor": "agent:a", "cause": {"kind": "message", "ref": "m1"},
                       "provenance": "attested"})


def _batch(capsys: pytest.CaptureFixture[str], ledger: Path, *lines: str) -> int:
    file = ledger.with_name(f"batch{abs(hash(lines))}.jsonl")
    file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return run_cli(capsys, "--create", "--batch", file, "--ledger", ledger)[0]


def _events(ledger: Path) -> list[Any]:
    with Ledger.open(ledger, readonly=True) as led:
        return led.events()


def test_batch_that_wrote_ends_with_a_signed_checkpoint(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = tmp_path / "b.db"
    assert _batch(capsys, ledger, _assert_line("gold"), _assert_line("silver", "acct:2"),
                  json.dumps({"op": "verify"})) == 0
    events = _events(ledger)
    assert [e.kind for e in events] == ["policy", "assert", "assert", "checkpoint"]
    body = json.loads(events[-1].body)
    assert (body["checkpoint_seq"], body["head_hash"]) == (events[-2].seq, events[-2].hash)
    pub = Path(f"{ledger}.pub")
    assert pub.exists()
    with Ledger.open(ledger, readonly=True) as led:
        report = led.verify(public_key=pub.read_text())
    assert report.valid and report.last_checkpoint_seq == events[-1].seq


def test_batch_where_every_op_failed_or_only_read_writes_no_checkpoint(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fresh = tmp_path / "fresh.db"
    bad = json.dumps({"op": "retract", "fact_id": "f_000000000000nope", "actor": "user:x",
                      "reason": "wrong"})
    assert _batch(capsys, fresh, bad, "{not json") == 1
    assert _events(fresh) == []

    ledger = tmp_path / "b.db"
    assert _batch(capsys, ledger, _assert_line("gold")) == 0
    before = _events(ledger)
    assert before[-1].kind == "checkpoint"
    unknown_field = json.dumps({**json.loads(_assert_line("platinum")), "bogus": 1})
    assert _batch(capsys, ledger, bad, unknown_field) == 1
    assert _batch(capsys, ledger, json.dumps({"op": "as_of"}), json.dumps({"op": "verify"})) == 0
    assert _events(ledger) == before


# ---- init, the key store and the master key -----------------------------------------------------
def _mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_init_creates_ledger_keys_master_and_public_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = tmp_path / "l.db"
    code, out, _ = run_cli(capsys, "init", "--json", "--ledger", ledger)
    assert code == 0
    printed = json.loads(out)
    files = {"ledger": ledger, "keystore": Path(f"{ledger}.keys"),
             "master_key": Path(f"{ledger}.keys.master"), "public_key": Path(f"{ledger}.pub")}
    for name, path in files.items():
        assert path.exists(), name
        assert Path(printed[name]) == path
    for name in ("ledger", "keystore", "master_key"):
        assert _mode(files[name]) == 0o600, name
    assert "backup" in printed["advice"] and "key" in printed["advice"]
    assert len(bytes.fromhex(files["master_key"].read_text().strip())) == 32
    pem = files["public_key"].read_text()
    assert printed["key_fingerprint"] == crypto.public_fingerprint(pem)
    # The signing key init made is the one checkpoints use.
    with Ledger.open(ledger) as led:
        assert led.keys is not None and led.keys.public_pem() == pem
        assert led.keys.store.meta("forget") is not None


def test_files_a_plain_open_creates_are_owner_only(tmp_path: Path) -> None:
    ledger = tmp_path / "l.db"
    with Ledger.open(ledger) as led:
        led.assert_fact("acct:1", "plan", "gold", actor="agent:a", cause=CAUSE)
    for path in (ledger, Path(f"{ledger}.keys"), Path(f"{ledger}.keys.master")):
        assert _mode(path) == 0o600, path


def test_wrong_or_malformed_master_key_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    ledger = tmp_path / "l.db"
    assert run_cli(capsys, "init", "--ledger", ledger)[0] == 0
    keys_before = Path(f"{ledger}.keys").read_bytes()
    monkeypatch.setenv(MASTER_ENV, OTHER_MASTER)
    for readonly in (False, True):
        with pytest.raises(LedgerError) as caught:
            Ledger.open(ledger, readonly=readonly)
        assert caught.value.code == "master_key_wrong"
    code, _, err = run_cli(capsys, "verify", "--ledger", ledger)
    assert code == 3 and "master_key_wrong" in err
    for bad in ("ab" * 31, "zz" * 32, "ab" * 33, "not hex"):
        monkeypatch.setenv(MASTER_ENV, bad)
        with pytest.raises(LedgerError) as caught:
            Ledger.open(ledger)
        assert caught.value.code == "master_key_invalid"
        assert bad not in caught.value.message
    assert Path(f"{ledger}.keys").read_bytes() == keys_before
    # The right key from the environment opens it (spaces around it tolerated).
    monkeypatch.setenv(MASTER_ENV, " " + Path(f"{ledger}.keys.master").read_text().strip() + "\n")
    with Ledger.open(ledger) as led:
        assert led.verify().valid


def test_master_key_from_the_environment_writes_no_key_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    ledger = tmp_path / "l.db"
    monkeypatch.setenv(MASTER_ENV, OTHER_MASTER)
    code, out, _ = run_cli(capsys, "init", "--json", "--ledger", ledger)
    assert code == 0 and json.loads(out)["master_key"] == f"${MASTER_ENV}"
    assert not Path(f"{ledger}.keys.master").exists()
    monkeypatch.delenv(MASTER_ENV)
    with pytest.raises(LedgerError) as caught:  # the store now needs that key: no new file
        Ledger.open(ledger)
    assert caught.value.code == "master_key_missing" and MASTER_ENV in caught.value.message
    assert not Path(f"{ledger}.keys.master").exists()


def test_keystore_option_and_environment_move_the_key_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    ledger = tmp_path / "l.db"
    store = vault / "l.keys"
    code, out, _ = run_cli(capsys, "init", "--json", "--ledger", ledger, "--keystore", store)
    assert code == 0 and Path(json.loads(out)["keystore"]) == store
    assert store.exists() and Path(f"{store}.master").exists()
    assert not Path(f"{ledger}.keys").exists() and not Path(f"{ledger}.keys.master").exists()
    assert _mode(store) == _mode(f"{store}.master") == 0o600
    with Ledger.open(ledger, keystore=store) as led:
        fact = led.assert_fact("acct:1", "plan", CANARY, actor="agent:a", cause=CAUSE,
                               provenance="attested").fact_id
    assert not Path(f"{ledger}.keys").exists()

    ledger2 = tmp_path / "l2.db"
    store2 = vault / "second.keys"
    monkeypatch.setenv(KEYSTORE_ENV, str(store2))
    code, out, _ = run_cli(capsys, "init", "--json", "--ledger", ledger2)
    assert code == 0 and Path(json.loads(out)["keystore"]) == store2 and store2.exists()
    assert not Path(f"{ledger2}.keys").exists()
    monkeypatch.setenv(KEYSTORE_ENV, str(store))
    with Ledger.open(ledger, readonly=True) as led:
        [view] = led.as_of().facts
        assert (view.fact_id, view.value, view.erased) == (fact, CANARY, False)
    monkeypatch.delenv(KEYSTORE_ENV)
    # Read-only without the moved store: no key store is created and values read as sealed
    # (held, not opened), never as erased.
    with Ledger.open(ledger, readonly=True) as led:
        assert led.keys is None and led.keystore_missing == f"{ledger}.keys"
        [view] = led.as_of().facts
        assert (view.value, view.erased, view.sealed) == (None, False, True)
    assert not Path(f"{ledger}.keys").exists()


def test_readonly_copy_without_key_store_verifies_and_reads_values_as_sealed(
        signed: tuple[Env, dict[str, Any]], tmp_path: Path) -> None:
    env, s = signed
    env.ledger.close()
    copy_dir = tmp_path / "copy"
    copy_dir.mkdir()
    copy = copy_dir / "ledger.db"
    for suffix in ("", "-wal"):
        if Path(f"{env.path}{suffix}").exists():
            shutil.copyfile(f"{env.path}{suffix}", f"{copy}{suffix}")
    with Ledger.open(copy, readonly=True) as led:
        assert led.keys is None
        for report in (led.verify(), led.verify(public_key=s["pem"])):
            assert report.valid and report.events == 6 and report.checkpoints == 1, report.problem
            assert report.keystore_missing == f"{copy}.keys" and report.values_unchecked == 4
        facts = led.as_of().facts
        assert len(facts) == 4
        assert all(f.value is None and f.sealed and not f.erased for f in facts)
        assert led.history(s["ids"][0]).fact_id == s["ids"][0]
        assert led.why(s["ids"][0]) is not None
        with pytest.raises(LedgerError) as caught:
            led.assert_fact("acct:1", "plan", "x", actor="agent:a", cause=CAUSE)
        assert caught.value.code == "read_only"
    # A read-only open creates nothing beside the copy.
    for suffix in (".keys", ".keys.master", ".pub"):
        assert not Path(f"{copy}{suffix}").exists()
    # Structure is still checked without keys: an edit without recomputation shows.
    with sqlite3.connect(copy) as con:
        _drop_event_triggers(con)
        con.execute("UPDATE events SET actor = 'agent:evil' WHERE seq = 3")
    con.close()
    with Ledger.open(copy, readonly=True) as led:
        report = led.verify()
        assert not report.valid and report.first_bad_seq == 3
    env.ledger = Ledger.open(env.path, readonly=True)


def test_key_store_holds_no_master_key_and_no_unwrapped_key(env: Env) -> None:
    env.put("acct:1", "plan", CANARY)
    env.put("acct:2", "plan", "basic")
    env.ledger.checkpoint()
    keys = env.ledger.keys
    assert keys is not None
    _ = keys.forget_key, keys.signing_key
    secrets = [*keys._cache.values(), *keys._slots.values()]
    assert len(keys._cache) == 2 and {"forget", "pepper", "signing"} <= set(keys._slots)
    master = bytes.fromhex(Path(f"{env.path}.keys.master").read_text().strip())
    secrets.append(master)
    store_path = Path(keys.path)
    env.ledger.db.wal_checkpoint()
    env.ledger.close()
    store = file_bytes(store_path, f"{store_path}-journal", f"{store_path}-wal")
    ledger = file_bytes(env.path, f"{env.path}-wal")
    assert store and ledger
    for secret in secrets:
        assert len(secret) == 32
        for form in (secret, secret.hex().encode(), secret.hex().upper().encode()):
            assert form not in store
            assert form not in ledger
    assert CANARY.encode() not in store
    env.ledger = Ledger.open(env.path, readonly=True)


def test_ledger_file_holds_no_plaintext_value(env: Env) -> None:
    fact = env.put("acct:1", "plan", {"note": CANARY, "n": 1})
    assert env.ledger.db.wal_checkpoint().complete
    raw = file_bytes(env.path, f"{env.path}-wal")
    assert CANARY.encode() not in raw
    master = bytes.fromhex(Path(f"{env.path}.keys.master").read_text().strip())
    assert master not in raw and master.hex().encode() not in raw
    # ...while the ledger itself still reads it back.
    [view] = env.ledger.as_of().facts
    assert view.fact_id == fact and view.value == {"note": CANARY, "n": 1}


# ---- sealed values ------------------------------------------------------------------------------
def test_swapped_value_blobs_are_caught_by_the_fact_id_binding(env: Env) -> None:
    """Same subject (same data key), same value text: the commitments still match after a swap,
    so only the fact id bound as associated data can catch it."""
    a = env.put("acct:1", "plan", "gold")
    b = env.put("acct:1", "region", "gold")
    seq_a, seq_b = assert_seq(env.ledger, a), assert_seq(env.ledger, b)
    env.ledger.close()
    blob_a, blob_b = raw_value(env.path, seq_a), raw_value(env.path, seq_b)
    assert crypto.sealed_generation(blob_a) == crypto.sealed_generation(blob_b) == 1
    set_value(env.path, seq_a, blob_b)
    set_value(env.path, seq_b, blob_a)
    ledger = env.reopen()
    assert verify_chain(ledger.events()).valid  # hashes never cover the sealed bytes
    report = ledger.verify()
    assert not report.valid and report.first_bad_seq == seq_a
    assert "does not decrypt" in (report.problem or "")
    with pytest.raises(LedgerError) as caught:
        ledger.as_of()
    assert caught.value.code == "value_unreadable"


@pytest.mark.parametrize("cut", [1, 16, 30], ids=["tag-byte", "whole-tag", "into-header"])
def test_truncated_value_blob_is_caught(env: Env, cut: int) -> None:
    fact = env.put("acct:1", "plan", "gold")
    seq = assert_seq(env.ledger, fact)
    env.ledger.close()
    blob = raw_value(env.path, seq)
    assert len(blob) > cut
    set_value(env.path, seq, blob[:-cut])
    ledger = env.reopen()
    report = ledger.verify()
    assert not report.valid and report.first_bad_seq == seq
    assert "does not decrypt" in (report.problem or "")
    with pytest.raises(LedgerError) as caught:
        ledger.as_of()
    assert caught.value.code == "value_unreadable"


# ---- the key store's triggers, seen from the stdlib sqlite3 -------------------------------------
def test_key_store_rows_only_allow_destroying_a_live_key_once(env: Env) -> None:
    fact = env.put("acct:1", "plan", "gold")
    keys = env.ledger.keys
    assert keys is not None
    ref = keys.subject_ref("acct:1")
    store_path = keys.path
    env.ledger.close()
    con = sqlite3.connect(store_path)

    def refused(sql: str, *params: Any) -> None:
        with pytest.raises(sqlite3.DatabaseError, match="custody"):
            con.execute(sql, params)
        con.rollback()

    try:
        [(wrapped, created)] = con.execute(
            "SELECT wrapped, created_at FROM subject_keys WHERE subject_ref = ?", (ref,)).fetchall()
        assert wrapped is not None
        names = [r[0] for r in con.execute("SELECT name FROM keystore_meta")]
        assert {"check", "pepper"} <= set(names)
        refused("DELETE FROM keystore_meta WHERE name = 'pepper'")
        refused("UPDATE keystore_meta SET value = x'00' WHERE name = 'marks_legacy_upto'")
        refused("UPDATE keystore_meta SET name = 'moved' WHERE name = 'pepper'")
        refused("DELETE FROM subject_keys")
        # (a live key may be re-wrapped, as rotate-epoch does; nothing else of it changes)
        refused("UPDATE subject_keys SET wrapped = x'00', created_at = 'y'")
        refused("UPDATE subject_keys SET wrapped = x'00', generation = 7")
        refused("UPDATE subject_keys SET destroyed_at = '2026-09-02T00:00:00.000000Z'")
        refused("UPDATE subject_keys SET wrapped = NULL")
        refused("UPDATE subject_keys SET wrapped = NULL, destroyed_at = 'x', created_at = 'y'")
        refused("UPDATE subject_keys SET wrapped = NULL, destroyed_at = 'x', generation = 7")
        refused("UPDATE subject_keys SET wrapped = NULL, destroyed_at = 'x', subject_ref = 'z'")
        # The one legal change: destroy a live key.
        con.execute("UPDATE subject_keys SET wrapped = NULL, "
                    "destroyed_at = '2026-09-02T00:00:00.000000Z' WHERE subject_ref = ?", (ref,))
        con.commit()
        refused("UPDATE subject_keys SET destroyed_at = '2026-09-03T00:00:00.000000Z'")
        refused("UPDATE subject_keys SET wrapped = ?, destroyed_at = NULL", wrapped)
        refused("UPDATE subject_keys SET wrapped = ?", wrapped)
        refused("DELETE FROM subject_keys")
        assert con.execute("SELECT wrapped, created_at, destroyed_at FROM subject_keys").fetchall() \
            == [(None, created, "2026-09-02T00:00:00.000000Z")]
        assert sorted(r[0] for r in con.execute("SELECT name FROM keystore_meta")) == sorted(names)
    finally:
        con.close()
    # The destroyed key really is gone: the value no longer opens. With no erasure of the
    # subject on record, verify names the shredding rather than reading it as an erasure.
    ledger = env.reopen()
    report = ledger.verify()
    assert not report.valid and "keystore_tampered" in (report.problem or ""), report
    [view] = ledger.as_of().facts
    assert (view.fact_id, view.value, view.erased) == (fact, None, True)
