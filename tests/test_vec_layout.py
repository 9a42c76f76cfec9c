"""Schemas 7 and 8: the vector table keeps off sqlite-vec 0.1.9's two memory leaks. It leaks the
SQL text of its auxiliary-row INSERT on every insert into a vec0 table that has an auxiliary
column (about 120 bytes a vector), and the SQL of every text metadata value over 12 bytes it
writes (a subject reference is 64 characters): both still allocated after the connection
closes, so a long ingest's memory grew with the ledger. Today's table has no auxiliary column
(the embedder's name is in ledger_meta) and holds the space and the subject as 64-bit filter
codes. A ledger whose table had the column (layout "ivf-l2-1") or the text filters ("ivf-l2-2")
is upgraded by copying its vectors into a table made anew: nothing re-embedded, the same rows in
the same cells, and no second copy of a vector left in the file. The codes are hashes: a recall
filtered by space or subject checks each hit's fact, so two values sharing a code never let
the other's facts through."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import apsw
import numpy as np
import pytest
import sqlite_vec

import store.rows as store_rows
from custody_app import Ledger
from custody_app.domain.errors import LedgerError
from custody_app.recall import copyrows
from store.rows import filter_code
from store.sqlite import open_ledger, recall_search, recall_upgrade
from store.sqlite.recall import VEC_COLUMNS, VEC_TABLE, RecallStore
from store.sqlite.schema import SCHEMA_VERSION
from tests.conftest import Env, fixture_copy

# What schemas 6 and 7 made.
LAYOUT_2_TABLE = ("vec0(fact_seq integer primary key, cell integer partition key, "
                  "embedding float[{dimensions}] distance_metric=L2, status text, space text, "
                  "subject_ref text, chunk_size=256)")
LAYOUT_1_TABLE = LAYOUT_2_TABLE.replace("subject_ref text, ", "subject_ref text, +embedder text, ")
OLD_LAYOUTS = {1: (LAYOUT_1_TABLE, "ivf-l2-1", 6), 2: (LAYOUT_2_TABLE, "ivf-l2-2", 7)}
ROWS = f"SELECT {VEC_COLUMNS} FROM recall_vec ORDER BY 1"
OLD_ROWS = "SELECT fact_seq, cell, embedding, status, space, subject_ref FROM recall_vec ORDER BY 1"
Row = Callable[[int], tuple[object, ...]]


def _inserts_leave(path: Path, table: str, row: Row, count: int = 4000) -> int:
    """Bytes SQLite still holds after `count` vector inserts (fact_seq, cell, embedding, then
    what `row` gives) into a vec0 table made by `table` and the connection closed (process-wide:
    SQLite's own allocation counter)."""
    before = apsw.memory_used()
    db = open_ledger(path)
    rng = np.random.default_rng(7)
    with db.write():
        db.conn.execute("CREATE VIRTUAL TABLE leak_probe USING " + table.format(dimensions=64))
        rows = [(i, 0, rng.standard_normal(64).astype(np.float32).tobytes(), *row(i))
                for i in range(1, count + 1)]
        values = ", ".join("?" * len(rows[0]))
        db.conn.executemany(f"INSERT INTO leak_probe VALUES ({values})", rows)
    db.close()
    return apsw.memory_used() - before


def test_vector_inserts_leave_no_memory_behind(tmp_path: Path) -> None:
    # The table the store makes, with a quarantined status (the longest): nothing left once
    # closed.
    assert _inserts_leave(tmp_path / "a.db", VEC_TABLE, lambda i: (
        "quarantined", filter_code("space", "team:engineering"), filter_code("subject", "f" * 64))
    ) < 64 * 1024
    # The controls, showing the probe sees each leak: the auxiliary column leaves ~120 bytes a
    # row; a 64-character text filter ~40 bytes a row, and the same text of 6 characters none.
    assert _inserts_leave(tmp_path / "b.db", LAYOUT_1_TABLE,
                          lambda i: ("live", "org", f"s{i}", "hashed-ngram-v1-256")) > 4000 * 60
    assert _inserts_leave(tmp_path / "c.db", LAYOUT_2_TABLE,
                          lambda i: ("live", "org", f"{i:064x}")) > 4000 * 25
    assert _inserts_leave(tmp_path / "d.db", LAYOUT_2_TABLE,
                          lambda i: ("live", "org", f"{i:06x}")) < 64 * 1024


def test_the_store_keeps_no_text_filter_nor_auxiliary_column(env: Env) -> None:
    env.put("acct:1", "note", "violet umbrella stand", space="team:a")
    conn = env.ledger.db.conn
    names = {str(n) for (n,) in conn.execute(
        "SELECT name FROM sqlite_schema WHERE name LIKE 'recall_vec%'")}
    assert "recall_vec_auxiliary" not in names and "recall_vec" in names
    ref = env.ledger.index.subject_ref("acct:1")
    assert conn.execute("SELECT status, space_code, subject_code FROM recall_vec").fetchall() == [
        ("live", filter_code("space", "team:a"), filter_code("subject", ref))]
    assert env.ledger.db.recall.embedder() == (env.ledger.embedder.name,
                                               env.ledger.embedder.dimensions)


def _texts(led: Ledger) -> dict[int, tuple[str, str]]:
    """The space and subject reference of each indexed fact, as the older layouts held them."""
    return {int(seq): (str(space), led.index.subject_ref(str(subject)))
            for seq, space, subject in led.db.conn.execute(
                "SELECT assert_seq, space, subject FROM facts")}


def _to_layout(path: Path, layout: int, texts: dict[int, tuple[str, str]]) -> None:
    """Turn a current ledger into what schema 6 (layout 1) or schema 7 (layout 2) wrote: the
    vector table of that layout (its rows and cells as they were, the space and subject as
    text) and that user_version."""
    table, name_of_layout, version = OLD_LAYOUTS[layout]
    conn = apsw.Connection(str(path))
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    conn.execute("PRAGMA secure_delete=ON")
    dims = int(conn.execute("SELECT value FROM ledger_meta WHERE key = 'embedder_dims'").get)
    name = str(conn.execute("SELECT value FROM ledger_meta WHERE key = 'embedder'").get)
    with conn:
        rows = [(seq, cell, vec, status, *texts[int(seq)]) + ((name,) if layout == 1 else ())
                for seq, cell, vec, status, _, _ in conn.execute(ROWS).fetchall()]
        conn.execute("DROP TABLE recall_vec")
        conn.execute("CREATE VIRTUAL TABLE recall_vec USING " + table.format(dimensions=dims))
        conn.executemany(f"INSERT INTO recall_vec VALUES ({', '.join('?' * len(rows[0]))})",
                         rows)
        conn.execute("UPDATE ledger_meta SET value = ? WHERE key = 'recall_layout'",
                     (name_of_layout,))
        conn.pragma("user_version", version)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


@pytest.mark.parametrize("layout", [1, 2])
def test_an_older_vector_table_is_copied_without_re_embedding(env: Env, layout: int) -> None:
    ids = [env.put(f"acct:{n % 7}", "note", f"violet umbrella {n} stand near the {n}th door",
                   space="org" if n % 3 else "team:a") for n in range(30)]
    led = env.ledger
    before = led.db.conn.execute(ROWS).fetchall()
    cells = led.db.conn.execute("SELECT * FROM recall_cells ORDER BY 1").fetchall()
    found = [h.fact.fact_id for h in led.recall("umbrella door 7", k=10).results]
    narrowed = [h.fact.fact_id for h in led.recall("umbrella door 7", k=10, space="team:a",
                                                   subject="acct:3").results]
    assert narrowed
    texts = _texts(led)
    led.close()
    _to_layout(env.path, layout, texts)
    calls: list[int] = []
    reopened = Ledger.open(env.path, clock=env.clock,
                           reindex_progress=lambda done, total: calls.append(done))
    env.ledger = reopened
    conn = reopened.db.conn
    assert conn.pragma("user_version") == SCHEMA_VERSION == 11  # 11: the spent receipts index
    assert calls == []  # nothing re-embedded: the index was current after the upgrade
    assert conn.execute("SELECT 1 FROM sqlite_schema WHERE name IN "
                        "('recall_vec_auxiliary', 'recall_vec_copy')").fetchone() is None
    assert conn.execute(ROWS).fetchall() == before
    assert conn.execute("SELECT * FROM recall_cells ORDER BY 1").fetchall() == cells
    assert [h.fact.fact_id for h in reopened.recall("umbrella door 7", k=10).results] == found
    assert [h.fact.fact_id for h in reopened.recall(
        "umbrella door 7", k=10, space="team:a", subject="acct:3").results] == narrowed
    assert reopened.verify().valid
    # The copy left nothing: a forgotten fact's vector is nowhere in the file afterwards.
    seq = reopened.db.facts.get(ids[3]).assert_seq  # type: ignore[union-attr]
    vector = bytes(conn.execute("SELECT embedding FROM recall_vec WHERE fact_seq = ?",
                                (seq,)).get)
    assert reopened.forget(ids[3], actor="user:dpo", reason="subject_request").certificate.complete
    for suffix in ("", "-wal"):
        file = Path(f"{env.path}{suffix}")
        assert not file.exists() or vector not in file.read_bytes()


@pytest.mark.parametrize("layout", ["ivf-l2-1", "ivf-l2-2"])
def test_a_store_without_the_upgrade_reads_the_layout_as_stale(tmp_path: Path,
                                                               layout: str) -> None:
    """Read through the store alone, a table of an older layout is not current (a rebuild would follow),
    so no reader ever takes the old table for the new one."""
    with Ledger.open(tmp_path / "l.db") as led:
        led.assert_fact("acct:1", "note", "violet", actor="agent:bot",
                        cause={"kind": "message", "ref": "m"}, provenance="attested")
    conn = apsw.Connection(str(tmp_path / "l.db"))
    with conn:
        conn.execute("UPDATE ledger_meta SET value = ? WHERE key = 'recall_layout'", (layout,))
    assert RecallStore(conn).embedder() is None
    conn.close()


def test_a_real_schema_5_ledger_keeps_its_vectors_through_the_upgrade(tmp_path: Path) -> None:
    """tests/fixtures/v5 was written by main at 3c4500f, with the auxiliary column and text
    filters: every row (but the dropped name, the space and subject turned into their codes) and
    every cell comes through, and nothing is re-embedded."""
    old = fixture_copy(Path(__file__).parent / "fixtures" / "v5", tmp_path)
    raw = apsw.Connection(str(old), flags=apsw.SQLITE_OPEN_READONLY)
    raw.enable_load_extension(True)
    raw.load_extension(sqlite_vec.loadable_path())
    before = [(seq, cell, vec, status, filter_code("space", str(space)),
               filter_code("subject", str(ref)))
              for seq, cell, vec, status, space, ref in raw.execute(OLD_ROWS).fetchall()]
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


@pytest.mark.parametrize("layout", [1, 2])
def test_an_upgrade_that_fails_half_way_leaves_the_file_as_it_was(
        env: Env, monkeypatch: pytest.MonkeyPatch, layout: int) -> None:
    """The copy runs in the open's one transaction: when making the new table fails after the
    old one was dropped (here a broken definition), nothing of it is kept, the refusal is the
    store's own error, and the next open upgrades the file whole."""
    env.put("acct:1", "note", "violet umbrella stand")
    before_rows = env.ledger.db.conn.execute(ROWS).fetchall()
    texts = _texts(env.ledger)
    env.ledger.close()
    _to_layout(env.path, layout, texts)
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
    texts = _texts(env.ledger)
    env.ledger.close()
    _to_layout(env.path, 1, texts)
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


@pytest.mark.parametrize("path", ["matrix", "sqlite-vec"])
def test_filter_codes_that_collide_never_let_another_subject_or_space_through(
        env: Env, monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """The attack: every space and subject given one code (as if two of them hashed alike),
    through the in-process copy of the vectors and through sqlite-vec's KNN. A recall filtered
    by subject or space still returns only that subject's or space's facts, checked on the
    facts themselves."""
    for module in (store_rows, recall_search, copyrows):
        monkeypatch.setattr(module, "filter_code", lambda kind, value: 7)
    for n in range(40):
        env.put(f"acct:{n % 4}", "note", f"violet umbrella stand {n}",
                space="org" if n % 2 else "team:a")
    led = env.ledger
    if path == "sqlite-vec":
        led.index.matrix.max_bytes = 0  # nothing kept in process: sqlite-vec serves
    codes = set(led.db.conn.execute("SELECT space_code, subject_code FROM recall_vec"))
    assert codes == {(7, 7)}  # the collision is real: the index cannot tell them apart
    for strategy in ("vector", "hybrid", "lexical"):
        by_subject = led.recall("violet umbrella", k=20, subject="acct:1", strategy=strategy)
        assert by_subject.results
        assert {h.fact.subject for h in by_subject.results} == {"acct:1"}
        by_space = led.recall("violet umbrella", k=20, space="team:a", strategy=strategy)
        assert by_space.results
        assert {h.fact.space for h in by_space.results} == {"team:a"}


def test_a_hand_edited_code_never_lists_a_fact_under_another_subject(env: Env) -> None:
    """The attack through the file: another process gives acct:2's vector rows acct:1's subject
    and space codes (sqlite3, no version token replaced). A recall filtered to acct:1's subject
    or space, by the in-process copy reloaded at the next open or by sqlite-vec, still returns
    only acct:1's facts: each hit is checked against its own fact."""
    for n in range(12):
        env.put(f"acct:{1 + n % 2}", "note", f"violet umbrella stand {n}",
                space="org" if n % 2 == 0 else "team:b")
    ref = env.ledger.index.subject_ref("acct:1")
    victim = [int(s) for (s,) in env.ledger.db.conn.execute(
        "SELECT assert_seq FROM facts WHERE subject = 'acct:2'")]
    env.ledger.close()
    conn = apsw.Connection(str(env.path))
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    with conn:
        conn.executemany("UPDATE recall_vec SET subject_code = ?, space_code = ? "
                         "WHERE fact_seq = ?",
                         [(filter_code("subject", ref), filter_code("space", "org"), s)
                          for s in victim])
    conn.close()
    env.ledger = Ledger.open(env.path, clock=env.clock)
    assert env.ledger.db.conn.execute(
        "SELECT count(*) FROM recall_vec WHERE subject_code = ?",
        (filter_code("subject", ref),)).get == 12  # the edit is there
    for in_process in (True, False):
        if not in_process:
            env.ledger.index.matrix.max_bytes = 0
            env.ledger.index.matrix.drop()
        for strategy in ("vector", "hybrid"):
            hits = env.ledger.recall("violet umbrella", k=20, subject="acct:1",
                                     strategy=strategy).results
            assert hits and {h.fact.subject for h in hits} == {"acct:1"}
            hits = env.ledger.recall("violet umbrella", k=20, space="org",
                                     strategy=strategy).results
            assert hits and {h.fact.space for h in hits} == {"org"}
