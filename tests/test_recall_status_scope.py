"""Schema 6: a fact's status is not in its lexical recall row. A confirm (or any move between
live and quarantined) leaves the FTS5 index byte for byte as it was; the live-only filter reads
the facts table inside the query; and a schema-5 ledger built by main at 3c4500f
(tests/fixtures/v5, made with tests/fixtures/build_v5_ledger.py) is upgraded by rewriting its
lexical rows without the status token, answering lexical recall as it did before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apsw
import pytest

from custody_app import Ledger
from store import open_ledger
from store.sqlite.schema import SCHEMA_VERSION
from tests.conftest import fixture_copy

FIXTURE = Path(__file__).parent / "fixtures" / "v5"
MANIFEST: dict[str, Any] = json.loads((FIXTURE / "manifest.json").read_text())
FTS_SHADOWS = ("recall_fts_data", "recall_fts_idx", "recall_fts_content", "recall_fts_docsize",
               "recall_fts_config")


@pytest.fixture
def old(tmp_path: Path) -> Path:
    """A copy of the schema-5 ledger and its key files."""
    return fixture_copy(FIXTURE, tmp_path)


def _raw(path: Path) -> apsw.Connection:
    return apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)


def _scopes(path: Path) -> dict[int, tuple[str, str]]:
    con = _raw(path)
    try:
        return {int(r): (str(t), str(s))
                for r, t, s in con.execute("SELECT rowid, terms, scope FROM recall_fts")}
    finally:
        con.close()


def _shadow_bytes(led: Ledger) -> dict[str, list[tuple[Any, ...]]]:
    conn = led.db.conn
    return {name: conn.execute(f"SELECT * FROM {name} ORDER BY 1").fetchall()
            for name in FTS_SHADOWS}


def _lexical(led: Ledger, query: str, **options: Any) -> list[str]:
    found = led.recall(query, k=50, strategy="lexical", **options)
    return [h.fact.fact_id for h in found.results]


def test_the_fixture_is_a_schema_5_ledger_whose_scopes_begin_with_a_status_token(old: Path) -> None:
    con = _raw(old)
    try:
        assert con.pragma("user_version") == 5
    finally:
        con.close()
    scopes = _scopes(old)
    assert scopes and all(s.split()[0] in ("zslive", "zsquarantined") for _, s in scopes.values())
    assert any(s.startswith("zsquarantined ") for _, s in scopes.values())


def test_the_upgrade_rewrites_every_lexical_row_without_its_status_and_keeps_the_rest(
        old: Path) -> None:
    before = _scopes(old)
    with Ledger.open(old) as led:
        assert led.db.conn.pragma("user_version") == SCHEMA_VERSION >= 6
        after = _scopes(old)
        # The same rows, the same terms; the scope lost its first (status) token only.
        assert after.keys() == before.keys()
        for seq, (terms, scope) in before.items():
            assert after[seq] == (terms, scope.split(" ", 1)[1])
        # The new table keeps secure-delete (forget must still wipe a row's tokens).
        conn = led.db.conn
        assert conn.execute("SELECT v FROM recall_fts_config WHERE k = 'secure-delete'"
                            ).fetchone() == (1,)
        assert conn.execute("SELECT 1 FROM sqlite_schema WHERE name = 'recall_fts_v6'"
                            ).fetchone() is None
        assert led.db.recall.lexical_rows_count() == len(before)
        report = led.verify()
        assert report.valid, report.problem
        assert led.rebuild().differences == []
        # Lexical recall answers exactly as the schema-5 release did.
        for answer in MANIFEST["lexical"]:
            assert _lexical(led, answer["query"], **answer["options"]) == answer["fact_ids"], answer
    # A second open leaves the file as it is.
    snapshot = old.read_bytes()
    with Ledger.open(old) as led:
        assert led.verify().valid
    assert old.read_bytes() == snapshot


def test_a_read_only_open_of_a_schema_5_ledger_is_refused_and_changes_nothing(old: Path) -> None:
    before = old.read_bytes()
    with pytest.raises(Exception) as caught:
        Ledger.open(old, readonly=True)
    assert "schema upgrade" in str(caught.value)
    assert old.read_bytes() == before


def test_after_the_upgrade_a_confirm_moves_the_fact_into_live_recall_and_forget_removes_it(
        old: Path) -> None:
    claimed = MANIFEST["facts"]["claimed"]
    with Ledger.open(old) as led:
        assert claimed not in _lexical(led, "plan renewal")
        assert claimed in _lexical(led, "plan renewal", include_claimed=True)
        led.confirm(claimed, actor="reviewer:dana", reason="checked")
        assert claimed in _lexical(led, "plan renewal")
        seq = led.db.facts.get(claimed).assert_seq
        result = led.forget(claimed, actor="user:dpo", reason="subject_request")
        assert result.certificate.complete
        assert led.db.recall.which_indexed([seq]) == set()
        assert claimed not in _lexical(led, "plan renewal", include_claimed=True)
        assert led.verify().valid and led.rebuild().differences == []


def test_a_confirm_leaves_the_lexical_index_byte_for_byte_as_it_was(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "l.db") as led:
        live = led.assert_fact("acct:1", "plan", "team plan renewal", actor="agent:bot",
                               cause={"kind": "message", "ref": "m1"}, provenance="attested")
        claim = led.assert_fact("acct:2", "plan", "team plan renewal soon", actor="agent:mcp",
                                cause={"kind": "message", "ref": "m2"}, provenance="claimed")
        assert claim.status == "quarantined"
        assert _lexical(led, "team renewal") == [live.fact_id]
        assert set(_lexical(led, "team renewal", include_claimed=True)) == {live.fact_id,
                                                                           claim.fact_id}
        before = _shadow_bytes(led)
        led.confirm(claim.fact_id, actor="reviewer:dana", reason="checked")
        # No FTS5 delete and re-insert (a secure delete of every term): not one shadow row moved.
        assert _shadow_bytes(led) == before
        assert set(_lexical(led, "team renewal")) == {live.fact_id, claim.fact_id}
        seq = led.db.facts.get(claim.fact_id).assert_seq
        assert dict(led.db.recall.indexed()[1])[seq] == "live"
        assert led.verify().valid and led.rebuild().differences == []


def test_a_live_only_search_gives_quarantined_facts_no_place_in_its_limit(tmp_path: Path) -> None:
    """The live filter is inside the lexical query: 30 quarantined facts that match better do
    not fill a pool of 10 and hide the one live fact."""
    with Ledger.open(tmp_path / "l.db") as led:
        with led.transaction():
            for i in range(30):
                led.assert_fact(f"acct:{i}", "note", "zebra zebra zebra marmalade",
                                actor="agent:mcp", cause={"kind": "message", "ref": f"q{i}"},
                                provenance="claimed")
            live = led.assert_fact("acct:99", "note", "zebra and a long tail of other words "
                                   "that dilute its score", actor="agent:bot",
                                   cause={"kind": "message", "ref": "l"}, provenance="attested")
        conn_rows = led.db.recall.lexical(f"terms: {led.index.term('zebra')}", 10,
                                          live_only=True)
        assert [led.db.facts.get_by_seq(s).fact_id for s, _ in conn_rows] == [live.fact_id]
        assert len(led.db.recall.lexical(f"terms: {led.index.term('zebra')}", 10)) == 10
        assert _lexical(led, "zebra") == [live.fact_id]


def test_the_upgrade_of_a_ledger_without_recall_indexes_only_moves_the_version(
        tmp_path: Path) -> None:
    path = tmp_path / "bare.db"
    db = open_ledger(path)
    db.conn.pragma("user_version", 5)
    db.close()
    db = open_ledger(path)
    try:
        assert db.conn.pragma("user_version") == SCHEMA_VERSION
        assert db.conn.execute("SELECT 1 FROM sqlite_schema WHERE name LIKE 'recall_fts%'"
                               ).fetchone() is None
    finally:
        db.close()


def test_the_first_write_after_an_open_counts_no_index_rows(tmp_path: Path) -> None:
    """The re-clustering's due check starts from FTS5's own row count (one record), not from a
    count(*) over both indexes (255 ms at 100k facts, inside the first write of every open)."""
    path = tmp_path / "l.db"
    with Ledger.open(path) as led, led.transaction():
        for i in range(40):
            led.assert_fact(f"acct:{i}", "note", f"granite {i}", actor="agent:bot",
                            cause={"kind": "message", "ref": f"m{i}"}, provenance="attested")
    with Ledger.open(path) as led:
        seen: list[str] = []
        led.db.conn.set_profile(lambda sql, ns: seen.append(sql))
        with led.transaction():
            led.assert_fact("acct:new", "note", "granite new", actor="agent:bot",
                            cause={"kind": "message", "ref": "n"}, provenance="attested")
        led.db.conn.set_profile(None)
        assert not [s for s in seen if "count(*)" in s.lower()], seen
        assert led.index.cells._count == 41
        assert led.verify().valid


def test_the_lexical_row_count_reads_fts5s_varint_right_past_one_and_two_bytes(
        tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "l.db") as led:
        for n in (0, 127, 128, 16_383, 16_384, 20_000):
            with led.transaction():
                conn = led.db.conn
                conn.execute("DELETE FROM recall_fts")
                conn.executemany("INSERT INTO recall_fts(rowid, terms, scope) VALUES (?, 'ha', 'hb')",
                                 [(i,) for i in range(1, n + 1)])
            assert led.db.recall.lexical_rows_count() == n
