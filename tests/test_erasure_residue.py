"""Residue SQLite leaves behind secure_delete (DESIGN 13): when a b-tree balance rebuilds a page it
does not zero the gap between the cell pointers and the cells, so copies of cells it moved away
stay there and outlive their later deletion. A real ledger, churned by ingest and a sweep, keeps
an erased subject id in such a gap; the erasure's byte scan finds it where no live row explains
it, the file is rewritten (VACUUM) and scanned again. A rewrite keeps every row, rowid, recall
answer and the chain as they were."""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from custody_app.erasure.certificate import ErasureCertificate
from store.sqlite.connection import LedgerFile
from store.sqlite.rewrite import rewrite_file
from tests.conftest import Env, day, ledger_bytes
from tests.test_erasure import _half_read_reader
from tests.test_sweep_group import _tables

DPO = "user:dpo"
WINDOWS = '[retention.windows]\n"old:*" = "P30D"\n'
# A small corpus that leaves residue for forget_subject at this seed (3,000 facts of 100
# subjects, values of 20 to 900 bytes, two thirds swept): subjects 3 and 28 of the first 30 keep
# a copy of their id in a rebuilt page. With random keys the layout (and so which subject, if
# any) changed from run to run; at 2,000 facts seeds 1 to 6 left none in the first 30.
FACTS, SUBJECTS, SEED, FORGOTTEN = 3000, 100, 5, 30


def _files(path: Path) -> list[Path]:
    return [path, Path(f"{path}.keys"), Path(f"{path}.keys.master")]


@pytest.fixture(scope="module")
def churned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A ledger on disk after ingest in random subject order and a sweep of two thirds of it;
    seeded ids and clock, so every run lays out the same pages."""
    where = tmp_path_factory.mktemp("residue")
    policy = where / "policy.toml"
    policy.write_text(WINDOWS, encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:
        return _build(where, policy, patch)


def _build(where: Path, policy: Path, patch: pytest.MonkeyPatch) -> tuple[Path, list[str]]:
    # Keys, nonces and salts from a seeded generator too: the word index hashes words under a
    # random key, and other hashes are other FTS5 terms, laid out in other pages.
    tokens = random.Random(SEED)
    patch.setattr(os, "urandom", tokens.randbytes)
    env = Env(where / "ledger.db", policy)
    rng = random.Random(SEED)
    subjects = [f"person:{i:05d}-{rng.randrange(10**6):06d}" for i in range(SUBJECTS)]
    with env.ledger.transaction():
        for n in range(FACTS):
            subject = rng.choice(subjects)
            env.ledger.assert_fact(
                subject, f"note{n % 5}", {"text": "w" * rng.randint(20, 900), "n": n},
                actor="agent:a", cause={"kind": "message", "ref": f"m{n}", "detail": f"said {n}"},
                space="old:x" if rng.random() < 0.66 else "keep")
    # The re-clustering the ingest made due runs in the background on its own connection:
    # waited for, so its writes come between the same two steps in every run (same pages).
    env.ledger.index.settle()
    env.at(day(60))
    assert env.ledger.sweep(actor=DPO, reason="retention").certificate.complete  # type: ignore[union-attr]
    env.ledger.index.settle()
    env.ledger.close()
    return where, subjects


@pytest.fixture
def copy(churned: tuple[Path, list[str]], tmp_path: Path,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Env, list[str]]]:
    where, subjects = churned
    monkeypatch.setattr(os, "urandom", random.Random(SEED + 1).randbytes)
    for f in _files(where / "ledger.db"):
        shutil.copy(f, tmp_path / f.name)
    shutil.copy(where / "policy.toml", tmp_path / "policy.toml")
    env = Env(tmp_path / "ledger.db", tmp_path / "policy.toml")
    env.ledger.index.settle()  # an open can start index maintenance: let it end, not be cut
    env.opens = 2
    env.reopen()
    env.ledger.index.settle()
    env.at(day(61))
    yield env, subjects
    env.ledger.close()


def _forget(env: Env, subject: str) -> ErasureCertificate:
    cert = env.ledger.forget_subject(subject, actor=DPO, reason="subject_request").certificate
    env.ledger.index.settle()
    return cert


def test_forget_subject_residue_is_found_and_the_file_rewritten(copy: tuple[Env, list[str]]) -> None:
    """Without the rewrite the certificates of subjects 3 and 28 are incomplete (a leak: the id
    in a page's unallocated space) and the raw file holds the id (until later writes reuse the
    page)."""
    env, subjects = copy
    certs, kept = [], []
    for subject in subjects[:FORGOTTEN]:
        certs.append(_forget(env, subject))
        if subject.encode() in ledger_bytes(env.path):
            kept.append(subject)
    assert kept == []
    assert all(c.complete for c in certs), [c.render() for c in certs if not c.complete][:1]
    rewritten = [c for c in certs if c.rewritten]
    assert len(rewritten) == 2, "the corpus no longer leaves residue: the test proves nothing"
    for cert in rewritten:
        text = cert.render()
        assert "file rewritten: yes" in text and "[clean] file rewrite (VACUUM" in text


def test_residue_found_while_a_reader_blocks_is_rewritten_when_the_erasure_completes(
        copy: tuple[Env, list[str]]) -> None:
    env, subjects = copy
    for s in subjects[:3]:
        _forget(env, s)  # subjects 0 to 2 leave no residue; subject 3 does
    reader, _cursor = _half_read_reader(env.path)
    try:
        cert = _forget(env, subjects[3])
        assert not cert.complete and not cert.rewritten
        assert {p.outcome for p in cert.places if p.place.startswith("byte scan of")} == {"pending"}
        assert env.ledger.finish_scrubs(wait=False) == []
    finally:
        reader.close()
    [again] = env.ledger.finish_scrubs()
    assert again.complete and again.rewritten
    assert subjects[3].encode() not in ledger_bytes(env.path)
    assert env.ledger.db.erasure.pending() == []


def test_shared_bytes_never_cause_a_rewrite(make_env, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A string a live unrelated record holds is `shared`: a rewrite keeps it, so none is done
    (not one per erasure, not a loop), and the certificate is complete as before."""
    calls: list[str] = []
    monkeypatch.setattr(LedgerFile, "rewrite", lambda self, **_: calls.append(self.path))
    env: Env = make_env()
    secret = "ZQX-PLANTED-7731-PRIYA"
    erased = env.put("acct:42", "contact", {"name": secret})
    env.ledger.assert_fact("acct:99", "note", "unrelated", cause={"kind": "message", "ref": "m"},
                           actor="llm:summariser", llm={"model": f"mentions {secret}"})
    cert = env.ledger.forget(erased, actor=DPO, reason="subject_request").certificate
    hits = [h for p in cert.places for h in p.hits]
    assert [h.classification for h in hits] == ["shared"] and hits[0].residue == 0
    assert cert.complete and not cert.rewritten and calls == []


def _recall(env: Env) -> list[Any]:
    out = []
    for query in ("said 17", "w" * 40, "note3 text"):
        for strategy in ("lexical", "vector", "hybrid"):
            result = env.ledger.recall(query, k=15, strategy=strategy, include_claimed=True)
            out.append((query, strategy, [(h.fact.fact_id, h.score) for h in result.results]))
    return out


def test_a_rewrite_keeps_every_row_rowid_recall_answer_and_the_chain(
        copy: tuple[Env, list[str]]) -> None:
    """VACUUM may renumber the implicit rowid of a table with no INTEGER PRIMARY KEY: every
    table (ours, FTS5's and sqlite-vec's shadow tables) read with its rowid before and after."""
    env, subjects = copy
    _forget(env, subjects[0])  # gaps in the recall tables' rowids, as erasures leave them
    before = (env.ledger.verify(), _recall(env))
    env.ledger.close()
    rows = _tables(env.path)
    env.reopen()
    assert env.ledger.db.rewrite().complete
    env.ledger.close()
    assert _tables(env.path) == rows
    env.reopen()
    after = (env.ledger.verify(), _recall(env))
    assert after[0].valid and after[0].head == before[0].head and after[0].events == before[0].events
    assert after[1] == before[1] and any(hits for _q, _s, hits in after[1])


def test_every_rowid_table_has_its_rowid_kept_by_vacuum(copy: tuple[Env, list[str]]) -> None:
    """Which tables could VACUUM renumber: a rowid table without an INTEGER PRIMARY KEY and
    without an index. Only SQLite's own sqlite_sequence, whose rows are looked up by name."""
    env, _ = copy
    conn: apsw.Connection = env.ledger.db.conn
    exposed: list[str] = []
    for row in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table' "
                                "AND sql NOT LIKE 'CREATE VIRTUAL%'").fetchall():
        name = str(row[0])
        quoted = '"' + name.replace('"', '""') + '"'
        try:
            conn.execute(f"SELECT _rowid_ FROM {quoted} LIMIT 1").fetchall()
        except apsw.SQLError:
            continue  # WITHOUT ROWID
        columns = conn.execute(f"PRAGMA table_info({quoted})").fetchall()
        aliased = any(pk == 1 and str(kind).upper() == "INTEGER" and
                      sum(1 for c in columns if c[5]) == 1 for _cid, _n, kind, _nn, _d, pk in columns)
        indexed = conn.execute(f"PRAGMA index_list({quoted})").fetchall()
        if not aliased and not indexed:
            exposed.append(name)
    assert exposed == ["sqlite_sequence"]


def test_a_rewrite_that_cannot_run_says_so_and_changes_nothing(env: Env) -> None:
    """VACUUM refused (here: a transaction open on the connection) is reported as not done, not
    raised after the erasure committed; the memory map is set back as it was."""
    env.put("acct:42", "contact", {"name": "someone to keep"})
    before = ledger_bytes(env.path)
    conn: apsw.Connection = env.ledger.db.conn
    conn.pragma("mmap_size", 1 << 20)  # a ledger maps nothing by default: a map to set back
    mapped = conn.pragma("mmap_size")
    conn.execute("BEGIN")
    try:
        outcome = rewrite_file(conn, str(env.path))
    finally:
        conn.execute("ROLLBACK")
    assert not outcome.complete and "transaction" in outcome.detail
    assert conn.pragma("mmap_size") == mapped and ledger_bytes(env.path) == before
