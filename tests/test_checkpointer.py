"""WAL checkpoints off the write path: a ledger opened for writing never checkpoints inside its
own COMMIT (SQLite's automatic checkpoint there cost a group's commit 40-60 ms); a thread on its
own connection does, and the WAL still starts over under back-to-back writes. What the WAL
index says is read from the -shm file itself (its header's mxFrame and the checkpoint's
nBackfill), so no checkpoint is run to find out."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

import store.sqlite.checkpointer as ckpt
from custody_app import Ledger

BLOB = "x" * 60_000  # ~15 pages a row


def _wal_index(path: Path) -> tuple[int, int]:
    """(mxFrame, nBackfill) from the -shm file (WalIndexHdr at 0, WalCkptInfo at 96)."""
    head = Path(f"{path}-shm").read_bytes()[:100]
    fmt = "<I" if struct.unpack("<I", head[:4])[0] < 1 << 24 else ">I"
    return struct.unpack(fmt, head[16:20])[0], struct.unpack(fmt, head[96:100])[0]


def _write(led: Ledger, rows: int, tag: str) -> None:
    with led.db.write():
        led.db.conn.executemany("INSERT INTO ledger_meta(key, value) VALUES (?, ?)",
                                [(f"bench:{tag}:{i}", BLOB) for i in range(rows)])


def test_a_writers_commit_runs_no_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ckpt, "PAGES", 10**9)  # no background pass either
    path = tmp_path / "l.db"
    with Ledger.open(path) as led:
        for n in range(10):
            _write(led, 10, str(n))  # ~1,500 pages: past SQLite's 1,000-page autocheckpoint
        frames, backfilled = _wal_index(path)
        assert frames > 1000
        assert backfilled == 0, "a commit ran a checkpoint"
        assert led.db.checkpointer is not None and led.db.checkpointer.passes == 0


def test_the_checkpoint_runs_in_a_thread_after_the_commit_that_passes_the_threshold(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ckpt, "PAGES", 50)
    path = tmp_path / "l.db"
    with Ledger.open(path) as led:
        _write(led, 10, "a")
        checkpointer = led.db.checkpointer
        assert checkpointer is not None and checkpointer.wait()
        assert checkpointer.passes >= 1 and checkpointer.error is None
        frames, backfilled = _wal_index(path)
        assert frames > 50 and backfilled == frames
        # The ledger is whole, and forget's truncating checkpoint still completes.
        fact = led.assert_fact("acct:1", "note", "granite", actor="agent:bot",
                               cause={"kind": "message", "ref": "m"}, provenance="attested")
        assert led.forget(fact.fact_id, actor="user:dpo", reason="subject_request"
                          ).certificate.complete
        assert led.verify().valid


def test_back_to_back_writes_still_start_the_wal_over(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass copies only what was committed before it began; past CAP the next write waits
    for one before it begins, so it starts the WAL from its beginning instead of growing it
    forever."""
    monkeypatch.setattr(ckpt, "PAGES", 20)
    monkeypatch.setattr(ckpt, "CAP", 200)
    path = tmp_path / "l.db"
    with Ledger.open(path) as led:
        for n in range(60):
            _write(led, 2, str(n))  # ~30 pages a commit, ~1,800 in all
        wal = os.path.getsize(f"{path}-wal")
        assert wal < 400 * 4096, f"the WAL grew to {wal} bytes"


def test_no_commit_waits_for_the_pass_the_next_write_does_and_an_erasure_leaves_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit past CAP returns without waiting for the background pass it started; the next
    write waits for it before it begins (so it starts the WAL over). A sweep's commit does not
    wait either: its proof's truncating checkpoint, which waits for that pass itself, comes
    next (the wait of a 20k-fact sweep overlaps the proof's row checks and the scan's set-up),
    ends with the WAL empty and leaves the next write nothing to wait for."""
    monkeypatch.setattr(ckpt, "PAGES", 20)
    monkeypatch.setattr(ckpt, "CAP", 40)
    path = tmp_path / "l.db"
    with Ledger.open(path) as led:
        checkpointer = led.db.checkpointer
        assert checkpointer is not None
        facts = [led.assert_fact(f"acct:{n}", "note", f"granite {n} " + "y" * 3000,
                                 actor="agent:bot", cause={"kind": "message", "ref": "m"},
                                 provenance="attested", valid_from="2026-01-01T00:00:00Z").fact_id
                 for n in range(40)]
        waits: list[int] = []
        original = checkpointer.wait
        # Settle first: with the pass of the asserts above finished, the next write starts the
        # WAL over, so `last` leaves few pages (on a busy machine that pass could still be
        # copying when `last` began, and `last`'s commit left CAP pages: a wait of its own).
        assert original()

        def counted(timeout: float = ckpt.WAIT_S) -> bool:
            waits.append(checkpointer.frames)
            return original(timeout)

        last = led.assert_fact("acct:last", "note", "kept", actor="agent:bot",
                               cause={"kind": "message", "ref": "m"}, provenance="attested")
        monkeypatch.setattr(checkpointer, "wait", counted)
        _write(led, 5, "plain")  # ~75 pages, past CAP: its commit returns without waiting
        assert waits == [] and checkpointer.frames >= 40
        result = led.sweep(before=last.tx_at, actor="user:dpo")
        # One wait: the sweep's, before it began, for the pass of the plain write's commit.
        assert len(waits) == 1 and waits[0] >= 40
        assert sorted(result.expired) == sorted(facts)
        assert result.certificate is not None and result.certificate.complete
        wal = [p for p in result.certificate.places if p.place.startswith("WAL checkpoint")]
        assert [p.outcome for p in wal] == ["clean"]
        assert os.path.getsize(f"{path}-wal") == 0
        assert original(0.0), "a pass is still due or running after the proof's checkpoint"
        led.assert_fact("acct:after", "note", "next", actor="agent:bot",
                        cause={"kind": "message", "ref": "m"}, provenance="attested")
        assert len(waits) == 1  # the WAL was empty: nothing to wait for
        assert led.verify().valid
