"""verify made fast (issue 35) keeps every check: the body read by orjson only where it reads
as json.loads does, the six mirrored columns still named one by one, the value commitment
opened through the walk's cipher cache still failing on a flipped byte or a changed salt, and
the fold left out only for kinds it does not change."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from custody_app.core.projector import MemoryProjection, apply_event
from custody_app.domain.chain import parse_body
from custody_app.domain.models import EVENT_MODELS
from custody_app.evidence.integrity import FOLDED, INERT
from custody_app.ledger.facade import Ledger
from store.rows import EventRow
from tests.test_tamper_integrity import build, tampered

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=20)


@seed(35)
@settings(max_examples=400, deadline=None, derandomize=True)
@given(JSON)
def test_a_body_reads_as_json_loads_reads_it(value: object) -> None:
    text = json.dumps({"v": value})
    assert parse_body(text) == json.loads(text)
    assert repr(parse_body(text)) == repr(json.loads(text))  # ints stay ints, floats floats


@pytest.mark.parametrize("text", [
    '{"seq": 123456789012345678901}', '{"seq": -9223372036854775809}', '{"a": NaN}',
    '{"a": "\\ud800"}', '{"a": 1, "a": 2}', '{"a": 1e400}', '{"a": [1.5, -0.0, 1e-7]}',
    '{"k": "18446744073709551616"}'])
def test_what_orjson_reads_otherwise_is_read_by_json(text: str) -> None:
    assert repr(parse_body(text)) == repr(json.loads(text))


@pytest.mark.parametrize("text", ['{"a": ', "[1,]", "{'a': 1}", ""])
def test_a_body_that_is_not_json_is_refused_as_json_refuses_it(text: str) -> None:
    with pytest.raises(ValueError):
        parse_body(text)


def test_every_kind_the_walk_does_not_fold_changes_nothing() -> None:
    """verify's walk calls apply_event only for FOLDED kinds: for each other kind it must be
    a no-op on a projection holding the fact the event names."""
    memory = MemoryProjection()
    apply_event(memory, "assert", 1, "2026-01-01T00:00:00.000000Z", "f1",
                {"subject_ref": "r", "predicate": "p", "space": "org",
                 "valid_from": "2026-01-01T00:00:00.000000Z", "provenance": "attested",
                 "actor": "agent:a"}, "acct:1")
    before = memory.dump()
    others = sorted(set(EVENT_MODELS) - FOLDED)
    assert "affirm" in others and "assert" not in others
    # The walk leaves EventAudit.check out for INERT kinds: a forget_subject is remembered
    # there (its tombstone is compared), so it is never inert.
    assert INERT == set(others) - {"forget_subject"}
    for kind in others:
        body = {"fact_id": "f1", "reason": "x", "pending": True, "retraction": 1,
                "subject_hash": "h"}
        assert apply_event(memory, kind, 2, "2026-01-02T00:00:00.000000Z", "f1", body) == []
        assert memory.dump() == before, kind


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    path = tmp_path_factory.mktemp("verifyfast") / "base.db"
    return path, build(path)


def _verify(path: Path) -> tuple[bool, int | None, str]:
    with Ledger.open(path, readonly=True) as led:
        report = led.verify()
    return report.valid, report.first_bad_seq, report.problem or ""


@pytest.mark.parametrize("column,value", [
    ("kind", "affirm"), ("tx_at", "2020-01-01T00:00:00.000000Z"), ("actor", "agent:evil"),
    ("policy_hash", "0" * 64), ("fact_id", "f_forged")])
def test_each_mirrored_column_edited_is_named(base: tuple[Path, dict[str, str]],
                                              tmp_path: Path, column: str, value: str) -> None:
    def edit(con: sqlite3.Connection, ids: dict[str, str]) -> None:
        con.execute(f"UPDATE events SET {column} = ? WHERE fact_id = ? AND kind = 'assert'",
                    (value, ids["kept"]))
    path = tampered(base, tmp_path, edit)
    valid, bad, problem = _verify(path)
    assert not valid and bad is not None
    assert f"column {column} disagrees with the hashed event" in problem


def _flip_value_byte(con: sqlite3.Connection, ids: dict[str, str]) -> None:
    (value,) = con.execute("SELECT value FROM events WHERE fact_id = ? AND kind = 'assert'",
                           (ids["kept"],)).fetchone()
    forged = bytes(value[:-1]) + bytes([value[-1] ^ 1])
    con.execute("UPDATE events SET value = ? WHERE fact_id = ? AND kind = 'assert'",
                (forged, ids["kept"]))


def _other_salt(con: sqlite3.Connection, ids: dict[str, str]) -> None:
    con.execute("UPDATE events SET salt = ? WHERE fact_id = ? AND kind = 'assert'",
                ("ab" * 16, ids["kept"]))


def _value_of_another_fact(con: sqlite3.Connection, ids: dict[str, str]) -> None:
    con.execute("UPDATE events SET value = (SELECT value FROM events WHERE fact_id = ? AND "
                "kind = 'assert'), salt = (SELECT salt FROM events WHERE fact_id = ? AND "
                "kind = 'assert') WHERE fact_id = ? AND kind = 'assert'",
                (ids["retracted"], ids["retracted"], ids["kept"]))


@pytest.mark.parametrize("edit,named", [
    (_flip_value_byte, "stored value that does not decrypt"),
    (_other_salt, "value does not match its commitment"),
    (_value_of_another_fact, "stored value that does not decrypt")])
def test_the_value_commitment_is_checked_through_the_cipher_cache(
        base: tuple[Path, dict[str, str]], tmp_path: Path, edit: object, named: str) -> None:
    path = tampered(base, tmp_path, edit)  # type: ignore[arg-type]
    valid, bad, problem = _verify(path)
    assert not valid and bad is not None
    assert named in problem


# ---- the plain affirm: its body compared as text, never trusted beyond what it proves ----------
def _affirm_row(body: dict[str, object], **columns: object) -> object:
    from custody_app.domain.chain import GENESIS, canonical, event_hash
    text = canonical(body)
    fields: dict[str, object] = {
        "seq": body.get("seq"), "kind": "affirm", "tx_at": body.get("tx_at"),
        "actor": body.get("actor"), "policy_hash": body.get("policy_hash"),
        "fact_id": body.get("fact_id"), "subject": None, "body": text, "value": None,
        "salt": None, "prev_hash": GENESIS, "hash": event_hash(GENESIS, text)}
    fields.update(columns)
    return EventRow(**fields)  # type: ignore[arg-type]


NAMES = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=10)


@seed(3535)
@settings(max_examples=300, deadline=None, derandomize=True)
@given(actor=NAMES, fact_id=NAMES, tx_at=NAMES, extra=st.sampled_from([{}, {"session": "s"},
                                                                       {"signer": "k"}]))
def test_an_affirm_checks_as_its_parsed_body_would(actor: str, fact_id: str, tx_at: str,
                                                   extra: dict[str, str]) -> None:
    """Whatever the strings (quotes, backslashes, control characters, any script), the walk
    hands on the body json.loads reads, with no problem for a row whose columns match it."""
    from custody_app.domain.chain import _check
    body = {"actor": actor, "fact_id": fact_id, "kind": "affirm", "policy_hash": "p" * 64,
            "seq": 1, "tx_at": tx_at, **extra}
    row = _affirm_row(body)
    problem, seen = _check(row, row.prev_hash, 1, None)  # type: ignore[type-var,attr-defined]
    assert problem is None
    assert seen == json.loads(row.body) == body  # type: ignore[attr-defined]


@pytest.mark.parametrize("column,value", [
    ("actor", "agent:other"), ("fact_id", "f_other"), ("tx_at", "2027-01-01T00:00:00.000000Z"),
    ("policy_hash", "q" * 64), ("actor", 'agent:a","x":"y'), ("subject", "acct:1"),
    ("salt", "00" * 16), ("actor", b"agent:a")])
def test_an_affirm_whose_columns_differ_from_its_body_is_named(column: str, value: object
                                                                ) -> None:
    from custody_app.domain.chain import _check
    body = {"actor": "agent:a", "fact_id": "f_1", "kind": "affirm", "policy_hash": "p" * 64,
            "seq": 1, "tx_at": "2026-01-01T00:00:00.000000Z"}
    row = _affirm_row(body, **{column: value})
    problem, _ = _check(row, row.prev_hash, 1, None)  # type: ignore[type-var,attr-defined]
    assert problem is not None
    assert (f"column {column} disagrees" in problem if column not in ("subject", "salt")
            else "carries a value or a subject" in problem)


def test_an_affirm_body_with_a_field_the_columns_do_not_hold_is_parsed() -> None:
    """A text that is not the plain affirm's (here a quote smuggled into the actor) is parsed
    like any other body, so its actor is what JSON says, and the column differs."""
    from custody_app.domain.chain import GENESIS, _check, event_hash
    text = ('{"actor":"agent:a","x":"y","fact_id":"f_1","kind":"affirm","policy_hash":"'
            + "p" * 64 + '","seq":1,"tx_at":"t"}')
    row = EventRow(1, "affirm", "t", 'agent:a","x":"y', "p" * 64, "f_1", None, text, None,
                   None, GENESIS, event_hash(GENESIS, text))
    problem, _ = _check(row, GENESIS, 1, None)
    assert problem is not None and "column actor disagrees" in problem


# ---- the events' fact index, read alone ----------------------------------------------------------
def _index_without_retractions(con: sqlite3.Connection, ids: dict[str, str]) -> None:
    """events_by_fact pointed at a b-tree holding every entry but the retractions': a fact's
    history read through it loses its retraction. (The check before issue 35 compared only the
    asserts and affirms read through it, and missed this.)"""
    con.execute("CREATE INDEX blank ON events(fact_id, seq) WHERE fact_id IS NOT NULL "
                "AND kind != 'retract'")
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'blank'").fetchone()
    con.execute("PRAGMA writable_schema = ON")
    con.execute("UPDATE sqlite_master SET rootpage = ? WHERE name = 'events_by_fact'", (root,))
    con.execute("DELETE FROM sqlite_master WHERE name = 'blank'")
    con.commit()
    con.execute("PRAGMA writable_schema = OFF")


def test_a_fact_index_that_hides_a_retraction_is_named(base: tuple[Path, dict[str, str]],
                                                       tmp_path: Path) -> None:
    path = tampered(base, tmp_path, _index_without_retractions)
    with Ledger.open(path, readonly=True) as led:
        history = led.history(base[1]["retracted"])
        report = led.verify()
    assert "retract" not in [e.kind for e in history.events]  # what a reader now sees
    assert not report.valid
    problem = report.problem or ""
    assert "the events' fact index" in problem and base[1]["retracted"] in problem
    assert "differs from the fold of the events" in problem


# ---- the walk's inlined plain affirm: accepts only what the general way accepts ------------------
def _chain(bodies: list[dict[str, object]], edits: dict[int, dict[str, object]],
           rehash: bool, body: str = "kept") -> list[EventRow]:
    """Affirm rows for `bodies` (stored as the append writes them), then `edits` applied to
    row i's columns; `body` "kept" leaves its text, "canonical" rewrites it from the edited
    columns as the append would, "template" pastes them into the plain affirm's text unescaped
    (a text crafted to match it); `rehash` recomputes every link and hash after the edits (an
    attacker who rewrites the chain from there), else the stored hashes stay."""
    from custody_app.domain.chain import _AFFIRM, GENESIS, canonical, event_hash
    rows: list[EventRow] = []
    prev = GENESIS
    for i, start in enumerate(bodies):
        text = canonical(start)
        fields: dict[str, object] = {
            "seq": start["seq"], "kind": start["kind"], "tx_at": start["tx_at"],
            "actor": start["actor"], "policy_hash": start["policy_hash"],
            "fact_id": start["fact_id"], "subject": None, "body": text, "value": None,
            "salt": None, "prev_hash": prev, "hash": event_hash(prev, text)}
        fields.update(edits.get(i, {}))
        columns = {k: fields[k] for k in ("actor", "fact_id", "kind", "policy_hash", "seq",
                                          "tx_at")}
        if i in edits and "body" not in edits[i] and body == "canonical":
            try:
                fields["body"] = canonical(columns)
            except (TypeError, ValueError):
                pass
        elif (i in edits and "body" not in edits[i] and body == "template"
              and type(columns["seq"]) is int):
            fields["body"] = _AFFIRM % (columns["actor"], columns["fact_id"],
                                        columns["policy_hash"], columns["seq"], columns["tx_at"])
        if rehash:
            fields["prev_hash"] = prev
            try:
                fields["hash"] = event_hash(prev, str(fields["body"]))
            except UnicodeEncodeError:
                pass
        rows.append(EventRow(**fields))  # type: ignore[arg-type]
        prev = str(fields["hash"])
    return rows


EDITABLE = st.sampled_from(["actor", "fact_id", "tx_at", "policy_hash", "body", "seq",
                            "prev_hash", "hash", "subject", "value", "salt", "signature",
                            "kind"])
ODD = st.sampled_from(['agent:a"', "agent:\\a", "agent:\x01", "agent:\u2028", "agent:\ud800",
                       "2025-01-01T00:00:00.000000Z", "2027-01-01T00:00:00.000000Z", "",
                       "p" * 64, "agent:bad", 7, None, b"agent:a", "affirm", "assert"])


def _walks(rows: list[EventRow]) -> tuple[tuple[object, list[int]], tuple[object, list[int]]]:
    """(report or exception type, rows handed to the plain check) of the walk with its inlined
    plain affirm and of the same walk without it (plain affirms handed to the same check by
    `body_check`)."""
    from custody_app.domain.chain import PlainAffirm, verify_chain

    def walk(inline: bool) -> tuple[object, list[int]]:
        seen: list[int] = []

        def plain(row: EventRow) -> str | None:
            seen.append(row.seq)
            return "refused by the check" if row.actor == "agent:bad" else None

        def general(row: EventRow, body: dict[str, object]) -> str | None:
            return plain(row) if type(body) is PlainAffirm else None

        try:
            report = (verify_chain(iter(rows), plain_check=plain) if inline
                      else verify_chain(iter(rows), body_check=general))
        except Exception as exc:  # the same exception either way (a lone surrogate, say)
            return type(exc), seen
        return report, seen

    return walk(True), walk(False)


def _affirms(count: int, names: list[str]) -> list[dict[str, object]]:
    return [{"actor": names[i] if i % 2 else "agent:a", "fact_id": f"f_{i % 3}",
             "kind": "affirm", "policy_hash": "p" * 64, "seq": i + 1,
             "tx_at": f"2026-01-0{i + 1}T00:00:00.000000Z"} for i in range(count)]


@pytest.mark.parametrize("body", ["canonical", "template"])
@pytest.mark.parametrize("column", ["actor", "fact_id", "tx_at", "policy_hash"])
@pytest.mark.parametrize("text", ['agent:a"', 'a","x":"y', "agent:\\a", "a\\u0041",
                                  "agent:\x01", "agent:\u2028", "2025-01-01T00:00:00.000000Z"])
def test_a_rewritten_affirm_with_a_hostile_string_reports_as_the_general_walk(
        body: str, column: str, text: str) -> None:
    """The attacker's best case: the second of three affirms rewritten with a hostile string
    in one column, its text crafted to match (escaped as the append would, or pasted into the
    plain affirm's text unescaped) and the chain rehashed from there."""
    fast, general = _walks(_chain(_affirms(3, ["x"] * 6), {1: {column: text}}, True, body))
    assert fast == general


@seed(3536)
@settings(max_examples=1500, deadline=None, derandomize=True)
@given(count=st.integers(min_value=1, max_value=6),
       edits=st.dictionaries(st.integers(min_value=0, max_value=5),
                             st.dictionaries(EDITABLE, ODD, min_size=1, max_size=2), max_size=2),
       rehash=st.booleans(), names=st.lists(NAMES, min_size=6, max_size=6),
       body=st.sampled_from(["kept", "canonical", "template"]))
def test_the_inlined_affirm_reports_as_the_general_walk(
        count: int, edits: dict[int, dict[str, object]], rehash: bool, names: list[str],
        body: str) -> None:
    """verify_chain with `plain_check` (the loop's own plain-affirm path) against the same
    walk without it, `body_check` handing plain affirms to the same check: the same report
    (valid, count, head, first bad seq, problem) and the same rows handed to the check, for
    chains edited column by column, rehashed or not, with hostile strings."""
    bodies = _affirms(count, names)
    fast, general = _walks(_chain(bodies, edits, rehash, body))
    assert fast == general


def test_checkpoints_and_subject_erasures_are_read_through_their_index(
        base: tuple[Path, dict[str, str]]) -> None:
    """A bound `kind = ?` alone scans every event (0.24 s at a million, in every verify,
    explain and pack): the two kinds events_special holds are read through it, and every kind
    reads the same rows either way."""
    from store.sqlite.erasure import INDEXED_KINDS, SPECIAL_EVENTS, SPECIAL_INDEXED
    con = sqlite3.connect(f"file:{base[0]}?mode=ro", uri=True)
    try:
        for kind in INDEXED_KINDS:
            plan = " ".join(str(r[-1]) for r in con.execute(
                "EXPLAIN QUERY PLAN " + SPECIAL_INDEXED, (kind,)))
            assert "USING INDEX events_special" in plan, plan
        kinds = [k for (k,) in con.execute("SELECT DISTINCT kind FROM events")]
        for kind in {*kinds, *INDEXED_KINDS}:
            scanned = con.execute(SPECIAL_EVENTS, (kind,)).fetchall()
            if kind in INDEXED_KINDS:
                assert con.execute(SPECIAL_INDEXED, (kind,)).fetchall() == scanned
        with Ledger.open(base[0], readonly=True) as led:
            for kind in kinds:
                assert led.db.erasure.events_of_kind(kind) == [
                    (s, b) for s, b in con.execute(SPECIAL_EVENTS, (kind,))]
    finally:
        con.close()
