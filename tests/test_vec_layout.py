"""Schema 7: the vector table has no auxiliary column. sqlite-vec 0.1.9 leaks the SQL text of its
auxiliary-row INSERT on every insert into a vec0 table that has one (about 120 bytes a vector,
still allocated after the connection closes), so a long ingest's memory grew with the ledger.
The embedder's name, the same for every row, is in ledger_meta. A ledger whose table had the
column (layout "ivf-l2-1") is upgraded by copying its vectors into a table made anew: nothing
re-embedded, the same rows in the same cells, and no second copy of a vector left in the file."""

from __future__ import annotations

from pathlib import Path

import apsw
import numpy as np
import pytest
import sqlite_vec

from custody_app import Ledger
from custody_app.domain.errors import LedgerError
from store import open_ledger, recall_upgrade
from store.recall import VEC_TABLE, RecallStore
from store.schema import SCHEMA_VERSION
from tests.conftest import Env, fixture_copy

OLD_TABLE = VEC_TABLE.replace("subject_ref text, ", "subject_ref text, +embedder text, ")
ROWS = "SELECT fact_seq, cell, embedding, status, space, subject_ref FROM recall_vec ORDER BY 1"


def _inserts_leave(path: Path, table: str, count: int) -> int:
    """Bytes SQLite still holds after `count` vector inserts into a vec0 table made by `table`
    and the connection closed (process-wide: SQLite's own allocation counter)."""
    before = apsw.memory_used()
    db = open_ledger(path)
    rng = np.random.default_rng(7)
    with db.write():
        db.conn.execute("CREATE VIRTUAL TABLE leak_probe USING " + table.format(dimensions=64))
        columns = "fact_seq, cell, embedding, status, space, subject_ref"
        values = "?, ?, ?, ?, ?, ?"
        if "+embedder" in table:
            columns, values = columns + ", embedder", values + ", ?"
        rows = [(i, 0, rng.standard_normal(64).astype(np.float32).tobytes(), "live", "org",
                 f"s{i}") + (("hashed-ngram-v1-256",) if "+embedder" in table else ())
                for i in range(1, count + 1)]
        db.conn.executemany(f"INSERT INTO leak_probe({columns}) VALUES ({values})", rows)
    db.close()
    return apsw.memory_used() - before


def test_vector_inserts_leave_no_memory_behind(tmp_path: Path) -> None:
    # The table the store makes: nothing left once closed. The same table with the auxiliary
    # column leaves ~120 bytes a row (the control: it shows the probe can see the leak).
    assert _inserts_leave(tmp_path / "a.db", VEC_TABLE, 4000) < 64 * 1024
    assert _inserts_leave(tmp_path / "b.db", OLD_TABLE, 4000) > 4000 * 60


def test_the_store_makes_no_auxiliary_column(env: Env) -> None:
    env.put("acct:1", "note", "violet umbrella stand")
    names = {str(n) for (n,) in env.ledger.db.conn.execute(
        "SELECT name FROM sqlite_schema WHERE name LIKE 'recall_vec%'")}
    assert "recall_vec_auxiliary" not in names and "recall_vec" in names
    assert env.ledger.db.recall.embedder() == (env.ledger.embedder.name,
                                               env.ledger.embedder.dimensions)


def _to_layout_1(path: Path) -> None:
    """Turn a schema-7 ledger into what schema 6 wrote: the vector table with the auxiliary
    column (its rows and cells as they were) and user_version 6."""
    conn = apsw.Connection(str(path))
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    conn.execute("PRAGMA secure_delete=ON")
    dims = int(conn.execute("SELECT value FROM ledger_meta WHERE key = 'embedder_dims'").get)
    name = str(conn.execute("SELECT value FROM ledger_meta WHERE key = 'embedder'").get)
    with conn:
        rows = conn.execute(ROWS).fetchall()
        conn.execute("DROP TABLE recall_vec")
        conn.execute("CREATE VIRTUAL TABLE recall_vec USING " + OLD_TABLE.format(dimensions=dims))
        conn.executemany("INSERT INTO recall_vec(fact_seq, cell, embedding, status, space, "
                         "subject_ref, embedder) VALUES (?, ?, ?, ?, ?, ?, ?)",
                         [(*r, name) for r in rows])
        conn.execute("UPDATE ledger_meta SET value = 'ivf-l2-1' WHERE key = 'recall_layout'")
        conn.pragma("user_version", 6)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def test_a_schema_6_vector_table_is_copied_without_re_embedding(env: Env) -> None:
    ids = [env.put(f"acct:{n}", "note", f"violet umbrella {n} stand near the {n}th door")
           for n in range(30)]
    led = env.ledger
    before = led.db.conn.execute(ROWS).fetchall()
    cells = led.db.conn.execute("SELECT * FROM recall_cells ORDER BY 1").fetchall()
    found = [h.fact.fact_id for h in led.recall("umbrella door 7", k=10).results]
    led.close()
    _to_layout_1(env.path)
    calls: list[int] = []
    reopened = Ledger.open(env.path, clock=env.clock,
                           reindex_progress=lambda done, total: calls.append(done))
    env.ledger = reopened
    conn = reopened.db.conn
    assert conn.pragma("user_version") == SCHEMA_VERSION == 7
    assert calls == []  # nothing re-embedded: the index was current after the upgrade
    assert conn.execute("SELECT 1 FROM sqlite_schema WHERE name IN "
                        "('recall_vec_auxiliary', 'recall_vec_v7')").fetchone() is None
    assert conn.execute(ROWS).fetchall() == before
    assert conn.execute("SELECT * FROM recall_cells ORDER BY 1").fetchall() == cells
    assert [h.fact.fact_id for h in reopened.recall("umbrella door 7", k=10).results] == found
    assert reopened.verify().valid
    # The copy left nothing: a forgotten fact's vector is nowhere in the file afterwards.
    seq = reopened.db.facts.get(ids[3]).assert_seq  # type: ignore[union-attr]
    vector = bytes(conn.execute("SELECT embedding FROM recall_vec WHERE fact_seq = ?",
                                (seq,)).get)
    assert reopened.forget(ids[3], actor="user:dpo", reason="subject_request").certificate.complete
    for suffix in ("", "-wal"):
        file = Path(f"{env.path}{suffix}")
        assert not file.exists() or vector not in file.read_bytes()


def test_a_store_without_the_upgrade_reads_the_layout_as_stale(tmp_path: Path) -> None:
    """Read through the store alone, a table of layout 1 is not current (a rebuild would follow),
    so no reader ever takes the old table for the new one."""
    with Ledger.open(tmp_path / "l.db") as led:
        led.assert_fact("acct:1", "note", "violet", actor="agent:bot",
                        cause={"kind": "message", "ref": "m"}, provenance="attested")
    conn = apsw.Connection(str(tmp_path / "l.db"))
    with conn:
        conn.execute("UPDATE ledger_meta SET value = 'ivf-l2-1' WHERE key = 'recall_layout'")
    assert RecallStore(conn).embedder() is None
    conn.close()


def test_a_real_schema_5_ledger_keeps_its_vectors_through_the_upgrade(tmp_path: Path) -> None:
    """tests/fixtures/v5 was written by main at 3c4500f, with the auxiliary column: every row
    (but the dropped name) and every cell comes through, and nothing is re-embedded."""
    old = fixture_copy(Path(__file__).parent / "fixtures" / "v5", tmp_path)
    raw = apsw.Connection(str(old), flags=apsw.SQLITE_OPEN_READONLY)
    raw.enable_load_extension(True)
    raw.load_extension(sqlite_vec.loadable_path())
    before = raw.execute(ROWS).fetchall()
    names = {str(n) for (n,) in raw.execute(
        "SELECT embedder FROM recall_vec")}
    raw.close()
    assert before and names == {"hashed-ngram-v1-256"}
    calls: list[int] = []
    with Ledger.open(old, reindex_progress=lambda done, total: calls.append(done)) as led:
        assert calls == []
        assert led.db.conn.execute(ROWS).fetchall() == before
        assert led.db.recall.embedder() == ("hashed-ngram-v1-256", 256)
        assert led.verify().valid


def _file_bytes(path: Path) -> dict[str, bytes]:
    return {s: Path(f"{path}{s}").read_bytes() for s in ("", "-wal")
            if Path(f"{path}{s}").exists()}


def test_an_upgrade_that_fails_half_way_leaves_the_file_as_it_was(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy runs in the open's one transaction: when making the new table fails after the
    old one was dropped (here a broken definition), nothing of it is kept, the refusal is the
    store's own error, and the next open upgrades the file whole."""
    env.put("acct:1", "note", "violet umbrella stand")
    before_rows = env.ledger.db.conn.execute(ROWS).fetchall()
    env.ledger.close()
    _to_layout_1(env.path)
    before = _file_bytes(env.path)
    monkeypatch.setattr(recall_upgrade, "VEC_TABLE", "vec0(broken")
    with pytest.raises(LedgerError):
        Ledger.open(env.path, clock=env.clock)
    assert _file_bytes(env.path) == before
    monkeypatch.undo()
    env.ledger = Ledger.open(env.path, clock=env.clock)
    assert env.ledger.db.conn.execute(ROWS).fetchall() == before_rows
    assert env.ledger.verify().valid


def test_a_hand_made_table_of_another_shape_is_refused_with_a_code(env: Env) -> None:
    """A file whose meta says layout 1 but whose vector table is something else (a hand edit)
    is refused by the upgrade with a coded error, and the file is left as it was."""
    env.put("acct:1", "note", "violet umbrella stand")
    env.ledger.close()
    _to_layout_1(env.path)
    conn = apsw.Connection(str(env.path))
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    with conn:
        conn.execute("DROP TABLE recall_vec")
        conn.execute("CREATE TABLE recall_vec(x)")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    before = _file_bytes(env.path)
    with pytest.raises(LedgerError) as refused:
        Ledger.open(env.path, clock=env.clock)
    assert refused.value.code
    assert _file_bytes(env.path) == before
