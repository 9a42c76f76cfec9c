"""Writer keys are Ed25519 key pairs (DESIGN 14, issue 31): a keyed writer signs every event it
writes, `verify` checks each signature offline against the policy in force then, and every way
of borrowing, swapping, re-signing or stripping a signature is caught, naming the seq. Real
ledger files; the tampering is done with a raw SQLite session, as an attacker would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from custody_app.domain.chain import canonical, event_hash
from custody_app.domain.errors import LedgerError
from custody_app.domain.policy import load_policy, policy_from_text
from custody_app.keys import crypto
from custody_app.keys.writer_keys import WriterKey
from custody_app.ledger.facade import Ledger
from tests import rawsql
from tests.conftest import CAUSE, REVIEWER, Env
from tests.writer_keys import KEY, OTHER_KEY, key_pem, registration, signer

X, Y = "agent:x", "agent:y"
KEYED = "[provenance]\n" + registration((X, KEY), (Y, OTHER_KEY))


def _writer(pem: bytes) -> WriterKey:
    return WriterKey.from_raw(crypto.private_from_pem(pem.decode()))


def _keyed_ledger(make_env: Any) -> tuple[Env, int]:
    """agent:x and agent:y each write under their key; the last event (an affirm by agent:x)
    changes no key, so tampering with it moves no key store mark. Returns (env, its seq)."""
    env = make_env(KEYED)
    assert env.ledger.present_writer_key(X, KEY) and env.ledger.present_writer_key(Y, OTHER_KEY)
    plan = env.put("acct:1", "plan", "pro", actor=X)
    env.put("acct:1", "tier", "gold", actor=Y)
    env.put("acct:1", "note", "unsigned", actor="user:ops")
    done = env.ledger.affirm(plan, actor=X)
    assert env.ledger.verify().valid
    env.ledger.close()
    return env, done.seq


def _raw(address: Any) -> Any:
    """A plain connection with the tables' guards bypassed (tests/rawsql.py): the triggers
    dropped on a file, `session_replication_role = replica` on a server."""
    return rawsql.session(address, unguarded=True)


def _rewrite(con: rawsql.Session, seq: int, edit: Any) -> str:
    """Edit the event's body and give it the hash the edited body has (a re-chaining forger:
    it is the last event, nothing links to it). Returns the new hash."""
    body, prev = con.execute("SELECT body, prev_hash FROM events WHERE seq = ?", (seq,)).fetchone()
    data = json.loads(body)
    edit(data)
    new_body = canonical(data)
    new_hash = event_hash(prev, new_body)
    con.execute("UPDATE events SET body = ?, hash = ? WHERE seq = ?", (new_body, new_hash, seq))
    return new_hash


def _verify_fails_at(env: Env, seq: int, words: str) -> None:
    rawsql.as_another_host(env.path)  # this host refuses an edit at the head it saw
    with Ledger.open(env.path, policy=env.policy, readonly=True) as ledger:
        report = ledger.verify()
    assert not report.valid
    assert report.first_bad_seq == seq, report.problem
    assert words in (report.problem or ""), report.problem


def test_a_keyed_writers_events_carry_its_signer_and_a_good_signature(make_env: Any) -> None:
    env = make_env(KEYED)
    assert env.ledger.present_writer_key(X, KEY)
    keyed = env.put("acct:1", "plan", "pro", actor=X)
    plain = env.put("acct:2", "plan", "pro", actor="user:ops")
    rows = {r.fact_id: r for r in env.ledger.events() if r.kind == "assert"}
    signed, unsigned = rows[keyed], rows[plain]
    assert json.loads(signed.body)["signer"] == signer(KEY)
    assert signed.signature is not None and _writer(KEY).signer == signer(KEY)
    assert "signer" not in json.loads(unsigned.body) and unsigned.signature is None
    assert env.ledger.why(keyed).fact.provenance == "attested"
    assert env.ledger.verify().valid


def test_a_borrowed_signature_from_another_event_fails_verify(make_env: Any) -> None:
    env, last = _keyed_ledger(make_env)
    with _raw(env.path) as con:
        first = con.execute("SELECT min(seq) FROM event_signatures").fetchone()[0]
        stolen = con.execute("SELECT signature FROM event_signatures WHERE seq = ?",
                             (first,)).fetchone()[0]
        con.execute("UPDATE event_signatures SET signature = ? WHERE seq = ?", (stolen, last))
    _verify_fails_at(env, last, "does not verify")


def test_a_signer_edited_to_another_registered_key_fails_verify(make_env: Any) -> None:
    env, last = _keyed_ledger(make_env)
    with _raw(env.path) as con:
        _rewrite(con, last, lambda body: body.update(signer=signer(OTHER_KEY)))
    _verify_fails_at(env, last, f"did not register for {X}")


def test_a_keyed_event_re_signed_by_another_registered_key_fails_verify(make_env: Any) -> None:
    """agent:y, holding its own registered key, rewrites agent:x's event and signs it itself."""
    env, last = _keyed_ledger(make_env)
    with _raw(env.path) as con:
        new_hash = _rewrite(con, last, lambda body: body.update(signer=signer(OTHER_KEY)))
        con.execute("UPDATE event_signatures SET signature = ? WHERE seq = ?",
                    (_writer(OTHER_KEY).sign(new_hash), last))
    _verify_fails_at(env, last, f"did not register for {X}")


def test_verify_on_an_event_stripped_of_its_signature_fails(make_env: Any) -> None:
    env, last = _keyed_ledger(make_env)
    with _raw(env.path) as con:
        con.execute("DELETE FROM event_signatures WHERE seq = ?", (last,))
    _verify_fails_at(env, last, "signature is missing")


def test_an_event_stripped_of_signer_and_signature_and_rehashed_fails_verify(
        make_env: Any) -> None:
    """The hash no longer names a signer, but the policy in force registered agent:x's key:
    an unsigned event by agent:x cannot be one agent:x wrote."""
    env, last = _keyed_ledger(make_env)
    with _raw(env.path) as con:
        _rewrite(con, last, lambda body: body.pop("signer"))
        con.execute("DELETE FROM event_signatures WHERE seq = ?", (last,))
    _verify_fails_at(env, last, "not signed")


def test_a_signature_added_to_an_unsigned_event_fails_verify(make_env: Any) -> None:
    env, _ = _keyed_ledger(make_env)
    with _raw(env.path) as con:
        seq = con.execute("SELECT min(seq) FROM events WHERE seq NOT IN "
                          "(SELECT seq FROM event_signatures)").fetchone()[0]
        con.execute("INSERT INTO event_signatures(seq, signature) VALUES (?, ?)",
                    (seq, b"\0" * 64))
    _verify_fails_at(env, seq, "names no signer")


def test_a_raw_session_cannot_change_or_remove_a_signature(make_env: Any) -> None:
    env, last = _keyed_ledger(make_env)
    before = rawsql.stored(env.path)
    with rawsql.session(env.path) as con:
        for sql, args in (("UPDATE event_signatures SET signature = ? WHERE seq = ?", (b"\0", last)),
                          ("DELETE FROM event_signatures WHERE seq = ?", (last,)),
                          ("INSERT INTO event_signatures(seq, signature) VALUES (?, ?)",
                           (last, b"\0"))):
            with pytest.raises(rawsql.Refused):
                con.execute(sql, args)
    assert rawsql.stored(env.path) == before


def test_a_stolen_public_key_presented_as_the_writer_key_proves_nothing(make_env: Any) -> None:
    env = make_env(KEYED)
    before = rawsql.stored(env.path)
    public = signer(KEY)
    pem_public = crypto.public_pem(crypto.private_from_pem(KEY.decode())).encode()
    for stolen in (public.encode(), public[len("ed25519:"):].encode(), pem_public):
        assert not env.ledger.present_writer_key(X, stolen)
    with pytest.raises(LedgerError) as refused:
        env.put(actor=X)
    assert refused.value.code == "writer_key_required"
    assert rawsql.stored(env.path) == before


def test_the_operator_naming_a_keyed_writer_without_its_key_is_refused(make_env: Any) -> None:
    env = make_env(KEYED)
    fact = env.put(actor="user:ops")
    before = rawsql.stored(env.path)
    for attempt in (lambda: env.put(actor=X, provenance="claimed"),
                    lambda: env.ledger.retract(fact, actor=X, reason="mine now"),
                    lambda: env.ledger.hold(fact, actor=Y, reason="held")):
        with pytest.raises(LedgerError) as refused:
            attempt()
        assert refused.value.code == "writer_key_required"
    assert env.ledger.present_writer_key(X, OTHER_KEY) is False  # y's key is not x's
    with pytest.raises(LedgerError):
        env.put(actor=X)
    assert rawsql.stored(env.path) == before


@pytest.mark.parametrize(("entry", "words"), [
    (f'"{X}" = "{"ab" * 32}"', "writer-key --agent agent:x"),  # an old bearer registration
    (f'"system:custody" = "{signer(KEY)}"', "ledger's own actor"),
    (f'"{X}" = "{signer(KEY)}", "{Y}" = "{signer(KEY)}"', "same key"),
])
def test_a_policy_put_to_use_refuses_bearer_keys_system_keys_and_shared_keys(
        tmp_path: Path, entry: str, words: str) -> None:
    path = tmp_path / "p.toml"
    path.write_text(f"[provenance]\nwriter_keys = {{{entry}}}\n")
    with pytest.raises(LedgerError) as refused:
        load_policy(path)
    assert refused.value.code == "policy_invalid"
    assert str(path) in refused.value.message and "provenance.writer_keys" in refused.value.message
    assert words in refused.value.message


def test_a_ledger_written_under_an_old_bearer_key_policy_still_verifies_and_explains(
        tmp_path: Path, ledger_at: Any) -> None:
    """The stored text of an old policy (a sha256 registration) keeps reading: verify passes,
    `why` shows it, and its events (never signed) are not held to a key it never had."""
    old = policy_from_text(f'[provenance]\nwriter_keys = {{"{X}" = "{"ab" * 32}"}}\n',
                           "old.toml", stored=True)
    path = ledger_at("old.db")
    with Ledger.open(path, policy=old) as ledger:
        fact = ledger.assert_fact("acct:1", "plan", "pro", actor=X, cause=CAUSE,
                                  provenance="claimed").fact_id
    with Ledger.open(path) as ledger:  # the policy it recorded stays in force
        assert ledger.verify().valid
        assert ledger.why(fact).policy.hash == old.hash
        # ...for reading: a write under it is refused, saying how to move over (a key pair)
        before = rawsql.stored(path)
        with pytest.raises(LedgerError) as refused:
            ledger.confirm(fact, actor=REVIEWER)
        assert refused.value.code == "policy_invalid"
        assert "writer-key" in refused.value.message and "--policy" in refused.value.message
        assert rawsql.stored(path) == before
    new = tmp_path / "new.toml"
    new.write_text("")  # the old registration dropped (or replaced by a key pair's line)
    with Ledger.open(path, policy=new) as ledger:
        ledger.confirm(fact, actor=REVIEWER)
        assert ledger.verify().valid
        assert ledger.why(fact).policy.hash == old.hash  # written under the old one


def test_the_writer_key_command_refuses_an_existing_file_and_a_bad_agent(tmp_path: Path) -> None:
    from custody_app.interfaces.cli.serve import writer_key_main
    key = tmp_path / "k.pem"
    key.write_bytes(key_pem(9))
    assert writer_key_main(["--agent", X, "--out", str(key)]) == 1
    assert key.read_bytes() == key_pem(9)
    assert writer_key_main(["--agent", "nobody", "--out", str(tmp_path / "n.pem")]) == 2
    assert not (tmp_path / "n.pem").exists()


@pytest.mark.parametrize("signed_by_forger", [False, True])
def test_a_hand_appended_policy_registering_a_forgers_key_fails_verify(
        make_env: Any, signed_by_forger: bool) -> None:
    """Someone with the ledger file (not the key store) appends a correctly chained policy
    event registering their own key for agent:x, then an event 'by agent:x' signed with it:
    a policy that registers writer keys must be signed by the ledger's own key."""
    env, last = _keyed_ledger(make_env)
    forger = _writer(key_pem(7))
    forged = policy_from_text("[provenance]\n" + registration((X, key_pem(7))), "forged.toml")
    with _raw(env.path) as con:
        fact_id, prev, tx_at = con.execute(
            "SELECT fact_id, hash, tx_at FROM events WHERE seq = ?", (last,)).fetchone()
        con.execute("INSERT INTO policies(hash, canonical, source, path) VALUES (?, ?, ?, ?)",
                    (forged.hash, forged.canonical, forged.source, None))
        for seq, kind, actor, extra in ((last + 1, "policy", "system:custody", {}),
                                        (last + 2, "affirm", X, {"fact_id": fact_id})):
            body: dict[str, Any] = {"seq": seq, "kind": kind, "tx_at": tx_at, "actor": actor,
                                    "policy_hash": forged.hash, **extra}
            if kind == "affirm" or signed_by_forger:
                body["signer"] = forger.signer
            text = canonical(body)
            digest = event_hash(prev, text)
            con.execute("INSERT INTO events(seq, kind, tx_at, actor, policy_hash, fact_id, body, "
                        "prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (seq, kind, tx_at, actor, forged.hash, extra.get("fact_id"), text, prev,
                         digest))
            if "signer" in body:
                con.execute("INSERT INTO event_signatures(seq, signature) VALUES (?, ?)",
                            (seq, forger.sign(digest)))
            prev = digest
    words = "not this ledger's" if signed_by_forger else "ledger's key did not sign it"
    _verify_fails_at(env, last + 1, words)
    with Ledger.open(env.path, policy=env.policy, readonly=True) as ledger:
        pub = ledger.keys.public_pem() if ledger.keys is not None else None
    assert pub is not None
    # The same check from the ledger's published key:
    with Ledger.open(env.path, policy=env.policy, readonly=True) as ledger:
        report = ledger.verify(public_key=pub)
    assert not report.valid and report.first_bad_seq == last + 1


def test_a_keyed_event_moved_under_an_older_policy_without_the_key_fails_verify(
        make_env: Any, tmp_path: Path) -> None:
    """A re-chaining forger strips agent:x's signature and names the policy in force before
    agent:x's key was registered: an event must name the policy in force when it was written."""
    env = make_env()
    env.put("acct:1", "plan", "basic", actor="user:ops")
    before = env.ledger.verify().head
    keyed = tmp_path / "keyed.toml"
    keyed.write_text(KEYED)
    env.reopen(keyed)
    assert env.ledger.present_writer_key(X, KEY)
    fact = env.put("acct:1", "tier", "gold", actor="user:ops")
    last = env.ledger.affirm(fact, actor=X).seq
    env.ledger.close()
    with _raw(env.path) as con:
        old = con.execute("SELECT policy_hash FROM events WHERE seq = 1").fetchone()[0]

        def move(body: dict[str, Any]) -> None:
            body.pop("signer")
            body["policy_hash"] = old

        _rewrite(con, last, move)
        con.execute("UPDATE events SET policy_hash = ? WHERE seq = ?", (old, last))
        con.execute("DELETE FROM event_signatures WHERE seq = ?", (last,))
    assert before is not None
    _verify_fails_at(env, last, "not the one in force")
