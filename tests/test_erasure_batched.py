"""Batched erasure (issue 15's sweep target): a sweep removes its facts from the recall indexes
in one pass (plain FTS5 deletes and one 'optimize' when many go), and still no token, row or
byte of a swept fact stays in the file; the scan's fragment choice never hides a needle."""

from __future__ import annotations

import shutil
from pathlib import Path
from unittest.mock import patch

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custody_app.domain.errors import LedgerError
from custody_app.recall import text
from store.sqlite import recall as store_recall
from store.sqlite import scrub
from store.sqlite.scrub import find_in_file, fragment_of
from tests.conftest import Env, ledger_bytes

DPO = "user:dpo"
SWEPT = 40
KEPT = 8


def _word(n: int, tag: str) -> str:
    return f"zq{tag}{n:03d}wordx"


def _populate(env: Env) -> tuple[list[str], list[str]]:
    swept = []
    for n in range(SWEPT):
        env.at(f"2026-09-01T00:00:{n:02d}Z")
        swept.append(env.put(f"acct:{n}", "note", {"text": f"{_word(n, 'old')} renewal"}))
    env.at("2026-09-05T00:00:00Z")
    kept = [env.put(f"acct:{n}", "note2", {"text": f"{_word(n, 'new')} renewal"})
            for n in range(KEPT)]
    env.at("2026-09-06T00:00:00Z")
    return swept, kept


def _term_tails(env: Env, words: list[str]) -> list[bytes]:
    """The stored form of each word's index token, less the prefix an FTS5 leaf may share with
    the term before it (prefix compression): what a byte search of the file can find."""
    key = env.ledger.index.key()
    return [text.term(key, w)[-9:].encode() for w in words]


def test_a_big_sweep_takes_the_bulk_path_and_leaves_no_token_of_its_facts(make_env) -> None:
    env: Env = make_env()
    swept, kept = _populate(env)
    old_tails = _term_tails(env, [_word(n, "old") for n in range(SWEPT)])
    new_tails = _term_tails(env, [_word(n, "new") for n in range(KEPT)])
    blob = ledger_bytes(env.path)
    assert all(t in blob for t in old_tails)  # the probe does find tokens that are there
    calls: list[int] = []
    original = store_recall.RecallStore.remove_many

    def spy(self: store_recall.RecallStore, seqs: list[int]) -> tuple[str, str]:
        calls.append(len(seqs))
        return original(self, seqs)

    with patch.object(store_recall.RecallStore, "remove_many", spy):
        res = env.ledger.sweep(before="2026-09-02T00:00:00Z", actor=DPO)
    assert sorted(res.expired) == sorted(swept) and calls == [SWEPT]  # one batch, not 40
    assert res.certificate is not None and res.certificate.complete
    blob = ledger_bytes(env.path)
    assert [t for t in old_tails if t in blob] == []
    assert all(t in blob for t in new_tails)
    conn = env.ledger.db.conn
    assert conn.execute("SELECT v FROM recall_fts_config WHERE k = 'secure-delete'"
                        ).fetchone()[0] == 1
    report = env.ledger.verify()
    assert report.valid, report
    lexical = {r.fact.fact_id for r in env.ledger.recall(_word(3, "new"), k=5).results
               if r.lexical_rank is not None}
    assert lexical == {kept[3]}
    assert {r.fact.fact_id for r in env.ledger.recall(_word(3, "old"), k=50).results
            } <= set(kept)


def test_plain_deletes_without_the_merge_would_leave_the_tokens(make_env, tmp_path: Path) -> None:
    """The attack the 'optimize' answers: FTS5 deletes with secure-delete off only add delete
    markers, so the swept facts' tokens stay in the segments (the test above would fail)."""
    env: Env = make_env()
    _populate(env)
    old_tails = _term_tails(env, [_word(n, "old") for n in range(SWEPT)])
    seqs = [r[0] for r in env.ledger.db.conn.execute(
        "SELECT assert_seq FROM facts WHERE predicate = 'note'")]
    env.ledger.close()
    copy = tmp_path / "copy.db"
    shutil.copyfile(env.path, copy)
    conn = apsw.Connection(str(copy))
    conn.execute("PRAGMA secure_delete=ON")
    with conn:
        conn.execute(store_recall.FTS_SECURE, (0,))
        conn.executemany(store_recall.FTS_DELETE, [(s,) for s in seqs])
        conn.execute(store_recall.FTS_SECURE, (1,))
    conn.close()
    blob = copy.read_bytes()
    assert [t for t in old_tails if t in blob] != []
    env.reopen()


def test_a_sweep_of_one_fact_stays_on_the_secure_delete_path(make_env) -> None:
    env: Env = make_env()
    swept, kept = _populate(env)
    env.ledger.close()
    env.reopen()
    conn = env.ledger.db.conn
    before = conn.execute("SELECT count(*) FROM recall_fts_data").fetchone()[0]
    res = env.ledger.sweep(before="2026-09-01T00:00:00.5Z", actor=DPO)
    assert res.expired == swept[:1]
    # No 'optimize': the segments are edited in place, not merged into one.
    assert conn.execute("SELECT count(*) FROM recall_fts_data").fetchone()[0] >= before - 1
    assert _term_tails(env, [_word(0, "old")])[0] not in ledger_bytes(env.path)
    assert env.ledger.verify().valid


def test_a_failing_sweep_writes_nothing_of_its_batch(make_env) -> None:
    env: Env = make_env()
    _populate(env)
    before = env.snapshot()
    fts = env.ledger.db.conn.execute("SELECT count(*) FROM recall_fts").fetchone()[0]

    def boom(self: store_recall.RecallStore, seqs: list[int]) -> None:
        raise RuntimeError("disk went away")

    with patch.object(store_recall.RecallStore, "remove_many", boom):
        try:
            env.ledger.sweep(before="2026-09-02T00:00:00Z", actor=DPO)
        except RuntimeError:
            pass
        else:
            raise AssertionError("the sweep did not fail")
    assert env.snapshot() == before
    assert env.ledger.db.conn.execute("SELECT count(*) FROM recall_fts").fetchone()[0] == fts
    assert env.ledger.sweep(before="2026-09-02T00:00:00Z", actor=DPO).certificate.complete


_mixed = st.lists(st.sampled_from([b"{", b'"', b" ", b"a", b"Q", b"7", b"\x00", b"\xf3", b"-"]),
                  min_size=1, max_size=400).map(b"".join)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(_mixed)
def test_fragment_is_a_piece_of_its_needle(needle: bytes) -> None:
    at, fragment = fragment_of(needle)
    assert len(fragment) == min(len(needle), scrub.FRAGMENT_BYTES)
    assert needle[at:at + len(fragment)] == fragment and at <= 256


@settings(derandomize=True, max_examples=120, deadline=None)
@given(st.binary(max_size=2000), st.lists(_mixed, min_size=1, max_size=6),
       st.sampled_from([50, scrub.BLOCK_BYTES]))
def test_long_needles_are_found_wherever_a_plain_search_finds_them(
        tmp_path_factory, data: bytes, needles: list[bytes], block: int) -> None:
    """Needles up to 400 bytes of mixed byte classes (JSON punctuation, zero, high bytes), so
    the fragment starts anywhere in the first 256 bytes: the scan agrees with `in`."""
    path = tmp_path_factory.mktemp("scanlong") / "blob.bin"
    planted = data + b"".join(needles[::2]) + data[:30]
    path.write_bytes(planted)
    with patch.object(scrub, "BLOCK_BYTES", block):
        found = find_in_file(str(path), needles)
    for i, needle in enumerate(needles):
        every = [o for o in range(len(planted)) if planted.startswith(needle, o)]
        assert found.get(i, []) == every[:64]



def _big_groups(monkeypatch) -> None:
    """Every group counts as big: its index rows go on a thread of their own, ahead."""
    from custody_app.erasure import group

    monkeypatch.setattr(group, "NAMES_READ_AT", 1)


def test_the_removal_ahead_runs_beside_a_loop_that_never_uses_the_ledgers_connection(
        make_env, monkeypatch) -> None:
    """The removal holds the connection on its thread for as long as it runs (made long
    here); every statement run meanwhile is its own, none from the erasure's loop, and the
    loop went on meanwhile (its value opens)."""
    import threading
    import time

    from custody_app.keys.values import ValueCodec

    env: Env = make_env()
    swept, kept = _populate(env)
    _big_groups(monkeypatch)
    removing = threading.Event()
    opened_meanwhile: list[str] = []
    foreign: list[str] = []
    original = store_recall.RecallStore.remove_many

    def slow(self: store_recall.RecallStore, seqs: list[int]) -> tuple[str, str]:
        removing.set()
        try:
            time.sleep(0.5)  # the loop runs its course meanwhile
            return original(self, seqs)
        finally:
            removing.clear()

    def trace(cursor: apsw.Cursor, sql: str, bindings: object) -> bool:
        if removing.is_set() and threading.current_thread().name != "custody-index-removal":
            foreign.append(sql)
        return True

    open_value = ValueCodec.open

    def noted(self: ValueCodec, fact_id: str, *args: object, **kw: object) -> str | None:
        if removing.is_set():
            opened_meanwhile.append(fact_id)
        return open_value(self, fact_id, *args, **kw)  # type: ignore[arg-type]

    env.ledger.db.conn.exec_trace = trace
    with (patch.object(store_recall.RecallStore, "remove_many", slow),
          patch.object(ValueCodec, "open", noted)):
        res = env.ledger.sweep(before="2026-09-02T00:00:00Z", actor=DPO)
    env.ledger.db.conn.exec_trace = None
    assert sorted(res.expired) == sorted(swept) and res.certificate.complete
    assert foreign == []
    assert sorted(opened_meanwhile) == sorted(swept)
    assert env.ledger.db.recall.which_indexed(
        [env.ledger.db.facts.get(f).assert_seq for f in swept]) == set()
    assert env.ledger.verify().valid


def test_a_removal_ahead_that_fails_leaves_the_ledger_as_it_was(make_env, monkeypatch) -> None:
    env: Env = make_env()
    _populate(env)
    _big_groups(monkeypatch)
    before = env.snapshot()

    def boom(self: store_recall.RecallStore, seqs: list[int]) -> None:
        raise apsw.FullError("database or disk is full")

    with (patch.object(store_recall.RecallStore, "remove_many", boom),
          pytest.raises(LedgerError) as refused):
        env.ledger.sweep(before="2026-09-02T00:00:00Z", actor=DPO)
    assert refused.value.code == "disk_full", refused.value
    assert env.snapshot() == before
    res = env.ledger.sweep(before="2026-09-02T00:00:00Z", actor=DPO)
    assert res.certificate is not None and res.certificate.complete
    assert env.ledger.verify().valid


def test_a_value_that_will_not_open_mid_loop_stops_the_sweep_after_the_removal_is_joined(
        make_env, monkeypatch) -> None:
    """The loop fails (a sealed value that does not decrypt: tampered) while the removal runs
    on its thread: the sweep is refused with nothing of it stored, the thread is done before
    the refusal returns, and the connection is usable at once."""
    import threading

    from custody_app.keys import crypto
    from custody_app.keys.values import ValueCodec
    from tests.test_sweep_group import _tables

    env: Env = make_env()
    swept, _ = _populate(env)
    _big_groups(monkeypatch)
    env.ledger.db.wal_checkpoint()
    before = _tables(env.path)
    open_value = ValueCodec.open

    def tampered(self: ValueCodec, fact_id: str, *args: object, **kw: object) -> str | None:
        if fact_id == swept[len(swept) // 2]:
            raise crypto.DecryptError("the sealed value does not decrypt")
        return open_value(self, fact_id, *args, **kw)  # type: ignore[arg-type]

    with patch.object(ValueCodec, "open", tampered), pytest.raises(Exception) as refused:
        env.ledger.sweep(before="2026-09-02T00:00:00Z", actor=DPO)
    assert "does not decrypt" in str(refused.value), refused.value
    assert [t for t in threading.enumerate() if t.name == "custody-index-removal"] == []
    env.ledger.db.wal_checkpoint()
    assert _tables(env.path) == before
    assert env.ledger.recall(_word(3, "old"), k=5).results  # still indexed, still searchable
    res = env.ledger.sweep(before="2026-09-02T00:00:00Z", actor=DPO)
    assert sorted(res.expired) == sorted(swept) and res.certificate.complete
