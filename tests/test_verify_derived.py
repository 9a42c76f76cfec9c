"""Issue 31, "checks that miss what readers rely on": every derived table a reader relies on
(sessions, served reads, session events, actions, salience presentations, pending retractions)
is compared by `verify` with the fold of the events, named by table and row when it differs,
failed by `doctor`, and repaired by `rebuild --repair`; `rebuild` reports an unknown kind;
`verify --deep` compares the recall indexes' content with the believed facts indexed afresh.
A contract module (tests/conftest.py): each edit is plain SQL run on a copy of a SQLite file or
of a server database (tests/rawsql.py); only the edits of SQLite's own schema table run once."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from custody_app.doctor.checks import diagnose
from custody_app.domain.chain import canonical, event_hash
from custody_app.domain.errors import LedgerError
from custody_app.ledger.facade import Ledger
from tests import rawsql
from tests.conftest import WRITER, Env, day

Edit = Callable[[dict[str, str]], list[rawsql.Statement]]
Base = tuple[Any, dict[str, str]]


def build(path: Path | str) -> dict[str, str]:
    env = Env(path)
    ids: dict[str, str] = {}
    ids["plan"] = env.put("acct:1", "plan", "gold plan value")
    ids["other"] = env.put("acct:2", "plan", "silver plan value", actor="agent:other")
    env.at(day(2))
    env.ledger.recall("gold plan", session="sess-read")
    env.ledger.affirm(ids["plan"], actor="agent:support")
    env.put("acct:1", "note", "wrote after reading", session="sess-read")
    env.ledger.act("sess-read", "refund", "tx-77", "ok", actor="agent:support")
    # A claimed retraction of another writer's fact waits for review (DESIGN 13).
    env.ledger.retract(ids["other"], actor="agent:support", reason="looks wrong",
                       provenance="claimed")
    env.ledger.close()
    return ids


def no_served_rows(ids: dict[str, str]) -> list[rawsql.Statement]:
    return ["DELETE FROM served_facts"]


def forged_served_row(ids: dict[str, str]) -> list[rawsql.Statement]:
    """Frames an innocent session: blast would list it as having read the fact."""
    return [("INSERT INTO served_facts(fact_id, session, seq) VALUES (?, 'sess-innocent', 3)",
             (ids["plan"],))]


def no_session_events(ids: dict[str, str]) -> list[rawsql.Statement]:
    return ["DELETE FROM session_events"]


def no_session_row(ids: dict[str, str]) -> list[rawsql.Statement]:
    return ["DELETE FROM sessions"]


def no_action_rows(ids: dict[str, str]) -> list[rawsql.Statement]:
    return ["DELETE FROM actions"]


def forged_action_row(ids: dict[str, str]) -> list[rawsql.Statement]:
    return ["UPDATE actions SET tool = 'weather'"]


CASES: dict[str, tuple[Edit, str]] = {
    "served reads deleted": (no_served_rows, "served_facts"),
    "served read forged": (forged_served_row, "served_facts"),
    "session events deleted": (no_session_events, "session_events"),
    "session summary deleted": (no_session_row, "sessions"),
    "action index rows deleted": (no_action_rows, "actions"),
    "action index row edited": (forged_action_row, "actions"),
}
REPAIRABLE = tuple(CASES)


def _empty_index(con: sqlite3.Connection, name: str, table_sql: str) -> None:
    """Point index `name` at the b-tree of a fresh empty index: the schema is unchanged, but
    every read through that index finds nothing (what a hand-edited file can do)."""
    con.execute(table_sql)
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'blank'").fetchone()
    con.execute("PRAGMA writable_schema = ON")
    con.execute("UPDATE sqlite_master SET rootpage = ? WHERE name = ?", (root, name))
    con.execute("DELETE FROM sqlite_master WHERE name = 'blank'")
    con.commit()
    con.execute("PRAGMA writable_schema = OFF")


def hidden_retractions(con: sqlite3.Connection) -> None:
    _empty_index(con, "events_retractions",
                 "CREATE INDEX blank ON events(seq) WHERE kind = 'retract' AND seq < 0")


def hidden_presentations(con: sqlite3.Connection) -> None:
    _empty_index(con, "events_by_fact",
                 "CREATE INDEX blank ON events(fact_id, seq) WHERE fact_id IS NOT NULL AND seq < 0")


# SQLite's own schema table edited (`writable_schema`): no server has such a table.
INDEX_CASES: dict[str, tuple[Callable[[sqlite3.Connection], None], str]] = {
    "pending retractions hidden": (hidden_retractions, "pending retraction"),
    "salience presentations hidden": (hidden_presentations, "salience"),
}


@pytest.fixture(scope="module")
def base(module_ledger_at: Callable[[str], Any]) -> Base:
    path = module_ledger_at("base.db")
    return path, build(path)


@pytest.fixture
def tampered(base: Base, ledger_copy: Callable[[Any], Any]) -> Callable[[Edit], Any]:
    """A copy of the base with the edit applied through a plain connection: the triggers
    stay, as a reader's file or a role that may write the derived tables would."""

    def make(edit: Edit) -> Any:
        copy = ledger_copy(base[0])
        rawsql.edit(copy, *edit(base[1]))
        return copy

    return make


def test_the_untampered_base_verifies_and_readers_see_it(base: Base) -> None:
    with Ledger.open(base[0], readonly=True) as led:
        assert led.verify().valid, led.verify().problem
        assert led.verify(deep=True).valid
        assert [s.session for s in led.blast(base[1]["plan"]).sessions] == ["sess-read"]
        assert [a.ref for a in led.actions().actions] == ["tx-77"]


def test_deleted_session_rows_hide_the_blast_radius_from_readers(
        base: Base, tampered: Callable[[Edit], Any]) -> None:
    """What the attack buys: blast reports nothing and actions lists nothing."""
    path = tampered(lambda i: [*no_served_rows(i), *no_action_rows(i)])
    with Ledger.open(path, readonly=True) as led:
        assert led.blast(base[1]["plan"]).sessions == []
        assert led.actions().actions == []
        report = led.verify()
    assert not report.valid


@pytest.mark.parametrize("case", sorted(CASES))
def test_verify_and_doctor_name_the_derived_table(tampered: Callable[[Edit], Any],
                                                  case: str) -> None:
    edit, table = CASES[case]
    path = tampered(edit)
    _verify_and_doctor_name(path, table)


@pytest.mark.sqlite_only  # edits SQLite's own schema table: a server has none
@pytest.mark.parametrize("case", sorted(INDEX_CASES))
def test_verify_and_doctor_name_a_hidden_index_and_rebuild_repairs_it(
        base: Base, ledger_copy: Callable[[Any], Any], case: str) -> None:
    edit, table = INDEX_CASES[case]
    path = ledger_copy(base[0])
    con = sqlite3.connect(path)
    edit(con)
    con.commit()
    con.close()
    _verify_and_doctor_name(path, table)
    _rebuild_repairs(path, base)


def _verify_and_doctor_name(path: Any, table: str) -> None:
    with Ledger.open(path, readonly=True) as led:
        report = led.verify()
    assert not report.valid
    assert report.problem is not None and table in report.problem, report.problem
    integrity = [c for c in diagnose(path).checks if c.name == "integrity"]
    assert [c.outcome for c in integrity] == ["FAIL"] and table in integrity[0].detail


@pytest.mark.parametrize("case", REPAIRABLE)
def test_rebuild_repair_restores_what_verify_reports(
        base: Base, tampered: Callable[[Edit], Any], case: str) -> None:
    _rebuild_repairs(tampered(CASES[case][0]), base)


def _rebuild_repairs(path: Any, base: Base) -> None:
    with Ledger.open(path) as led:
        assert not led.verify().valid
        fixed = led.rebuild(repair=True)
        assert fixed.repaired and fixed.differences
        assert led.verify().valid, led.verify().problem
        assert [s.session for s in led.blast(base[1]["plan"]).sessions] == ["sess-read"]
        assert [a.ref for a in led.actions().actions] == ["tx-77"]


def test_rebuild_reports_an_event_of_unknown_kind(
        base: Base, ledger_copy: Callable[[Any], Any]) -> None:
    """An event of a kind no code knows, appended with its chain hash right but with the
    triggers (and a server's chain check) bypassed."""
    path = ledger_copy(base[0])
    [(seq, prev, tx_at, policy)] = rawsql.query(
        path, "SELECT seq, hash, tx_at, policy_hash FROM events ORDER BY seq DESC LIMIT 1")
    body = canonical({"seq": seq + 1, "kind": "grant_admin", "tx_at": tx_at,
                      "actor": "agent:evil", "policy_hash": policy})
    rawsql.edit(path, ("INSERT INTO events(seq, kind, tx_at, actor, policy_hash, body, prev_hash, "
                       "hash) VALUES (?, 'grant_admin', ?, 'agent:evil', ?, ?, ?, ?)",
                       (seq + 1, tx_at, policy, body, prev, event_hash(prev, body))),
                unguarded=True)
    with Ledger.open(path, readonly=True) as led:
        result = led.rebuild()
    assert any("unknown kind 'grant_admin'" in d for d in result.differences), result.differences


def test_an_edited_projection_is_named_by_verify(base: Base,
                                                 tampered: Callable[[Edit], Any]) -> None:
    path = tampered(lambda ids: [("UPDATE facts SET predicate = 'tier' WHERE fact_id = ?",
                                  (ids["plan"],))])
    with Ledger.open(path, readonly=True) as led:
        report = led.verify()
    assert not report.valid


def test_an_event_body_edited_with_the_triggers_bypassed_is_named_by_seq(
        base: Base, ledger_copy: Callable[[Any], Any]) -> None:
    """The database itself refuses the edit (its triggers); whoever may bypass them (a file's
    owner dropping them, a server's superuser or the tables' owner) gets past, and verify
    names the event."""
    path = ledger_copy(base[0])
    edit = "UPDATE events SET body = replace(body, 'agent:support', 'agent:rogue') WHERE seq = 2"
    with pytest.raises(rawsql.Refused):
        rawsql.edit(path, edit)
    rawsql.edit(path, edit, unguarded=True)
    with Ledger.open(path, readonly=True) as led:
        report = led.verify()
    assert not report.valid and report.problem is not None
    assert report.first_bad_seq == 2, report


def test_a_ledger_cut_back_below_its_key_stores_mark_is_refused(
        base: Base, ledger_copy: Callable[[Any], Any]) -> None:
    """Events deleted from the end with the triggers bypassed, down past the last one that
    changed the key store (a restore of an older copy does the same): the key store's
    authenticated mark is higher than the head, so the open refuses."""
    path = ledger_copy(base[0])
    with pytest.raises(rawsql.Refused):
        rawsql.edit(path, "DELETE FROM events WHERE seq >= 3")
    rawsql.edit(path, "DELETE FROM event_signatures WHERE seq >= 3",
                "DELETE FROM event_texts WHERE seq >= 3", "DELETE FROM events WHERE seq >= 3",
                unguarded=True)
    with pytest.raises(LedgerError) as refused:
        Ledger.open(path)
    assert refused.value.code in ("ledger_rolled_back", "ledger_forked"), refused.value


def _assert_seq(path: Any, fact_id: str) -> int:
    with Ledger.open(path, readonly=True) as led:
        fact = led.db.facts.get(fact_id)
        assert fact is not None
        return fact.assert_seq


def _index_edit(path: Any, backend: str, on_file: list[rawsql.Statement],
                on_server: list[rawsql.Statement]) -> None:
    """One edit of a recall index, in each backend's own layout: on a file through the
    ledger's own connection (its word index is an FTS5 table, its vectors sqlite-vec's, which
    a plain sqlite3 cannot open), on a server through a plain connection."""
    if backend == "postgres":
        rawsql.edit(path, *on_server)
        return
    with Ledger.open(path) as led, led.transaction():
        for statement in on_file:
            led.db.conn.execute(*rawsql.split(statement))


def test_verify_deep_compares_the_word_index_content(
        base: Base, ledger_copy: Callable[[Any], Any], backend: str) -> None:
    """A word index row kept for the right fact but holding other words passes the cheap
    check (every believed fact has a row) and is caught only by --deep; --repair fixes it."""
    path = ledger_copy(base[0])
    seq = _assert_seq(path, base[1]["plan"])
    _index_edit(path, backend,
                [("UPDATE recall_fts SET terms = 'decoy words' WHERE rowid = ?", (seq,))],
                [("UPDATE recall_docs SET terms = 'decoy words' WHERE fact_seq = ?", (seq,))])
    with Ledger.open(path) as led:
        assert led.verify().valid
        deep = led.verify(deep=True)
        assert not deep.valid and "recall_fts" in (deep.problem or "")
        assert f"assert seq {seq}" in (deep.problem or "")
        assert led.rebuild(repair=True, deep=True).repaired
        assert led.verify(deep=True).valid


def test_verify_deep_compares_the_vectors(
        base: Base, ledger_copy: Callable[[Any], Any], backend: str) -> None:
    path = ledger_copy(base[0])
    seq = _assert_seq(path, base[1]["plan"])
    zeros = "UPDATE recall_vec SET embedding = {} WHERE fact_seq = ?"
    _index_edit(path, backend, [(zeros.format("zeroblob(length(embedding))"), (seq,))],
                [(zeros.format("decode(repeat('00', length(embedding)), 'hex')"), (seq,))])
    with Ledger.open(path) as led:
        assert led.verify().valid
        deep = led.verify(deep=True)
        assert not deep.valid and "vector" in (deep.problem or ""), deep.problem
        assert led.rebuild(repair=True, deep=True).repaired
        assert led.verify(deep=True).valid


def test_the_cli_verify_deep_and_rebuild_name_what_they_find(
        base: Base, tampered: Callable[[Edit], Any]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "custody_app", *args], capture_output=True,
                              text=True, timeout=120, env=env)

    done = cli("verify", "--json", "--deep", "--ledger", str(base[0]))
    assert done.returncode == 0 and json.loads(done.stdout)["valid"], done.stderr
    path = tampered(no_action_rows)
    done = cli("verify", "--json", "--ledger", str(path))
    assert done.returncode == 1 and "actions (the actions index)" in json.loads(done.stdout)["problem"]
    done = cli("rebuild", "--json", "--repair", "--deep", "--ledger", str(path))
    assert done.returncode == 0 and json.loads(done.stdout)["repaired"], done.stderr
    assert cli("verify", "--deep", "--ledger", str(path)).returncode == 0


# ---- issue 35's shortcuts in verify's walk, still catching what the slow path caught ----------
def _affirm_seq(path: Any) -> int:
    with Ledger.open(path, readonly=True) as led, led.db.read():
        seqs = [e.seq for e in led.db.events.iter_all() if e.kind == "affirm"]
    assert len(seqs) == 1
    return seqs[0]


def _plain_affirm_walked(path: Any) -> tuple[set[int], Any]:
    """(the seqs TextAudit.check and ReceiptAudit.check were handed, the report)."""
    from custody_app.evidence import verify as walk
    seen: set[int] = set()
    with pytest.MonkeyPatch.context() as patch:
        for audit in (walk.TextAudit, walk.ReceiptAudit):
            def spy(self: Any, row: Any, *args: Any, _was: Any = audit.check) -> Any:
                seen.add(row.seq)
                return _was(self, row, *args)
            patch.setattr(audit, "check", spy)
        with Ledger.open(path, readonly=True) as led:
            report = led.verify()
    return seen, report


def test_a_plain_affirm_skips_the_audits_that_look_for_what_it_cannot_hold(base: Base) -> None:
    """The shortcut is taken: the affirm (its body its columns) never reaches the sealed-text
    or the receipt audit, which every other event of the walk does."""
    seen, report = _plain_affirm_walked(base[0])
    assert report.valid, report.problem
    affirm = _affirm_seq(base[0])
    assert affirm not in seen and seen == set(range(1, report.events + 1)) - {affirm}


def test_a_stray_sealed_text_row_at_a_plain_affirm_is_named(
        base: Base, tampered: Callable[[Edit], Any]) -> None:
    seq = _affirm_seq(base[0])
    path = tampered(lambda ids: [(
        "INSERT INTO event_texts(seq, fact_id, subject_ref, sealed, salt) SELECT ?, fact_id, "
        "subject_ref, sealed, salt FROM event_texts WHERE fact_id = ? ORDER BY seq LIMIT 1",
        (seq, ids["plan"]))])
    with Ledger.open(path, readonly=True) as led:
        report = led.verify()
    assert not report.valid and report.first_bad_seq == seq
    assert f"sealed free text row {seq} belongs to no event" in (report.problem or "")


def test_a_signature_beside_a_plain_affirm_is_named(
        base: Base, tampered: Callable[[Edit], Any]) -> None:
    seq = _affirm_seq(base[0])
    path = tampered(lambda ids: [("INSERT INTO event_signatures(seq, signature) VALUES (?, ?)",
                                  (seq, b"\x01" * 64))])
    with Ledger.open(path, readonly=True) as led:
        report = led.verify()
    assert not report.valid and report.first_bad_seq == seq
    assert "carries a signature but names no signer" in (report.problem or "")


@pytest.mark.sqlite_only  # a server refuses the re-hashed chain at open (this host's mark)
def test_a_plain_affirm_under_a_policy_not_in_force_is_named(
        base: Base, ledger_copy: Callable[[Any], Any]) -> None:
    """Its policy hash rewritten in the body and the column alike, the chain re-hashed from
    there on: the body is still its columns (the shortcut), and the policy check still runs."""
    seq = _affirm_seq(base[0])
    path = ledger_copy(base[0])
    with Ledger.open(path, readonly=True) as led, led.db.read():
        events = list(led.db.events.iter_all())
    statements: list[rawsql.Statement] = []
    prev = events[seq - 2].hash
    for event in events[seq - 1:]:
        body = json.loads(event.body)
        if event.seq == seq:
            body["policy_hash"] = "0" * 64
        text = canonical(body)
        digest = event_hash(prev, text)
        statements.append(("UPDATE events SET body = ?, hash = ?, prev_hash = ?, policy_hash = ? "
                           "WHERE seq = ?", (text, digest, prev, body["policy_hash"],
                                             event.seq)))
        prev = digest
    rawsql.edit(path, *statements, unguarded=True)
    with Ledger.open(path, readonly=True) as led:
        report = led.verify()
    assert not report.valid and report.first_bad_seq == seq
    assert "not the one in force" in (report.problem or "")


def test_the_key_store_is_read_once_for_the_walk(base: Base) -> None:
    """Every value and sealed text the walk opens takes its key from one read of the key
    store (KeyStore.key_rows), none from the point query a read of one value makes. (A
    server's store opens the events' sealed plaintext subjects itself, store-side, through
    the point query: those calls are left aside here.)"""
    import inspect
    with Ledger.open(base[0], readonly=True) as led:
        assert led.keys is not None
        store, asked = led.keys.store, []
        point, rows = store.generation, store.key_rows

        def one(ref: str, generation: int) -> Any:
            if not any(f.filename.endswith("subject_ids.py") for f in inspect.stack()):
                asked.append(("generation", ref))
            return point(ref, generation)

        def every() -> Any:
            asked.append(("key_rows", ""))
            return rows()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(store, "generation", one)
            patch.setattr(store, "key_rows", every)
            report = led.verify()
    assert report.valid, report.problem
    assert asked == [("key_rows", "")]


@pytest.mark.parametrize("generation,named", [(99, "does not decrypt"), (0, "does not decrypt")])
def test_a_value_sealed_under_a_generation_never_held_is_named(
        base: Base, ledger_copy: Callable[[Any], Any], generation: int, named: str) -> None:
    """The key store read once still knows which generations it never held (a value moved
    under another generation by hand), as the point query did."""
    path = ledger_copy(base[0])
    with Ledger.open(path, readonly=True) as led, led.db.read():
        event = next(e for e in led.db.events.iter_all()
                     if e.kind == "assert" and e.fact_id == base[1]["plan"])
    assert event.value is not None
    forged = bytes(event.value[:3]) + generation.to_bytes(4, "big") + bytes(event.value[7:])
    rawsql.edit(path, ("UPDATE events SET value = ? WHERE seq = ?", (forged, event.seq)),
                unguarded=True)
    with Ledger.open(path, readonly=True) as led:
        report = led.verify()
    assert not report.valid and report.first_bad_seq == event.seq
    assert named in (report.problem or "")


def test_key_rows_gives_every_key_row_as_the_point_query_does(
        base: Base, ledger_copy: Callable[[Any], Any]) -> None:
    """The port's one read of the key store: every row, a destroyed key's (wrapped None)
    included, each as `generation` gives it; and what verify then opens still opens."""
    path = ledger_copy(base[0])
    with Ledger.open(path) as led:
        led.forget_subject("acct:2", actor="user:dpo", reason="subject_request")
        assert led.keys is not None
        store = led.keys.store
        rows = list(store.key_rows())
        assert len(rows) >= 2 and any(w is None for _, _, w in rows)
        assert any(w is not None for _, _, w in rows)
        for ref, generation, wrapped in rows:
            found = store.generation(ref, generation)
            assert found is not None and found[1] == wrapped
        assert len({(r, g) for r, g, _ in rows}) == len(rows)
        report = led.verify()
    assert report.valid, report.problem
    assert report.values_unchecked == 0  # the erased value is gone, not merely unopened


def test_a_key_made_after_the_one_read_is_still_found(
        base: Base, ledger_copy: Callable[[Any], Any]) -> None:
    """verify's one read of the key store may predate a re-key another process committed
    (the ledger's snapshot, taken later, may name the new generation): a generation the read
    did not hold is asked of the key store before it is called never held."""
    from custody_app.keys import crypto
    path = ledger_copy(base[0])
    with Ledger.open(path) as led:
        assert led.keys is not None
        key_for = led.keys.snapshot_keys()
        led.assert_fact("acct:after-the-read", "plan", "a value", actor="agent:support",
                        cause={"kind": "tool", "ref": "t"})
        ref = led.keys.subject_ref("acct:after-the-read")
        key = key_for(ref, 1)
        assert key is not None and key == led.keys.key_for_read(ref, 1)
        with pytest.raises(crypto.DecryptError, match="never held"):
            key_for(ref, 7)


def _shred_by_hand(path: Any, subject: str, generation: int | None = None) -> int:
    """Destroy the subject's live data keys (or only `generation`) with one UPDATE the key
    store's triggers allow (no forget_subject, no tombstone); the seq of the subject's first
    stored value."""
    with Ledger.open(path, readonly=True) as led, led.db.read():
        assert led.keys is not None
        ref, keys = led.keys.subject_ref(subject), led.keys.path
        first = min(e.seq for e in led.db.events.iter_all()
                    if e.kind == "assert" and e.value is not None and e.subject == subject)
    # On a server the key store is the database's custody_keys schema, beside the ledger.
    table = "custody_keys.subject_keys" if rawsql.is_server(path) else "subject_keys"
    which = "destroyed_at IS NULL" if generation is None else "generation = ?"
    rawsql.edit(path if rawsql.is_server(path) else keys,
                (f"UPDATE {table} SET wrapped = NULL, destroyed_at = ? "
                 f"WHERE subject_ref = ? AND {which}",
                 ("2026-04-04T00:00:00.000000Z", ref,
                  *(() if generation is None else (generation,)))))
    return first


def _named_at(path: Any, seq: int) -> None:
    """verify fails at `seq`, naming a key gone without an erasure."""
    with Ledger.open(path, readonly=True) as led:
        report = led.verify()
    assert not report.valid and report.first_bad_seq == seq, report
    _named_as_shredded(path, report.problem or "")


def test_a_subject_key_destroyed_by_hand_is_named_not_read_as_an_erasure(
        base: Base, ledger_copy: Callable[[Any], Any]) -> None:
    """Crypto-shredding outside forget_subject: the values and texts whose key is gone are
    named with the first of them, where verify used to count them unchecked and pass (and a
    reader saw "(erased)" with no erasure on record)."""
    path = ledger_copy(base[0])
    _named_at(path, _shred_by_hand(path, "acct:1"))


def test_a_key_destroyed_by_hand_after_a_lawful_erasure_is_still_named(
        base: Base, ledger_copy: Callable[[Any], Any]) -> None:
    """An erasure recorded before a write does not explain the loss of the key that write
    was sealed under: the subject written again after forget_subject, then shredded by hand."""
    path = ledger_copy(base[0])
    env = Env(path)
    env.at(day(5))
    env.ledger.forget_subject("acct:1", actor="user:dpo", reason="subject_request")
    assert env.ledger.verify().valid
    env.at(day(6))
    env.reopen()  # new work: the erasure fences the work begun before it
    env.put("acct:1", "plan", "written again after the erasure")
    env.ledger.close()
    _named_at(path, _shred_by_hand(path, "acct:1"))


def test_a_free_text_whose_key_was_destroyed_by_hand_is_named(
        base: Base, ledger_copy: Callable[[Any], Any]) -> None:
    """The sealed free text's side of the check alone: the subject gets a new key generation
    (as an erasure's re-key begins), a retraction's reason is sealed under it, then that
    generation alone is destroyed by hand. Every value still opens under the older one; the
    reason's text does not, and no erasure explains it."""
    path = ledger_copy(base[0])
    env = Env(path)
    env.at(day(5))
    keys = env.ledger.keys
    assert keys is not None
    ref = keys.subject_ref("acct:1")
    generation = keys.rekey_begin(ref, day(5))
    retracted = env.ledger.retract(base[1]["plan"], actor=WRITER,
                                   reason="the customer said it was never the gold plan")
    assert env.ledger.verify().valid
    env.ledger.close()
    _shred_by_hand(path, "acct:1", generation)
    _named_at(path, retracted.seq)


def _named_as_shredded(path: Any, problem: str) -> None:
    # A server's key store reads a generation destroyed by hand as one that no longer opens
    # (its rows are read apart from the walk's cache): named as well, in other words.
    if rawsql.is_server(path):
        assert "does not decrypt" in problem or "keystore_tampered" in problem, problem
    else:
        assert "keystore_tampered" in problem and "no erasure of its subject" in problem, problem
