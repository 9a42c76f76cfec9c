"""Several processes embedding one server ledger (issue 35): every process that opens a team
ledger for writing runs an embedding worker, on any host. Two real processes started on the
same backlog at the same instant: each claims the batches it embeds (a session advisory lock
per fact, taken only if free), so no fact is embedded twice and none gets two vectors; every
believed fact ends with exactly one vector, and verify --deep passes. A worker that dies holding
claims (a process killed on another host) holds up nothing for good: the claims end with its
connection, and the facts it held are embedded by a worker still running."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from custody_app.ledger.facade import Ledger
from custody_app.recall.embedding import EmbeddingWorker
from custody_app.recall.index import INDEXED
from store import open_ledger
from tests.conftest import CAUSE, WRITER

ROOT = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).with_name("embed_workers_child.py")
FACTS = 48
BATCH = 8
WORKERS = 2


def test_two_processes_embed_a_backlog_once_between_them(
        pg_url: str, shipped_default: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(EmbeddingWorker, "start", lambda self: None)
    with Ledger.open(pg_url) as ledger:  # the backlog: facts written, no vector yet
        for n in range(FACTS):
            ledger.assert_fact(f"user:{n}", "note", f"a note about topic {n}", actor=WRITER,
                               cause=CAUSE, provenance="attested")
        assert ledger.recall("topic").unembedded == FACTS
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
           "XDG_DATA_HOME": os.environ["XDG_DATA_HOME"]}  # the server ledger's local key files
    children = [subprocess.Popen([sys.executable, str(CHILD), pg_url, str(BATCH)], cwd=ROOT,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                 env=env) for _ in range(WORKERS)]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        for child in children:  # both workers begin on the same backlog together
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        done = []
        for child in children:
            out, _ = child.communicate(timeout=900)
            assert child.returncode == 0, out
            done.append([int(v) for v in out.split()[1:]])
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    print("workers (embedded, written, settled):", done)
    computed, written = sum(d[0] for d in done), sum(d[1] for d in done)
    assert all(d[2] == 1 for d in done), done  # each saw the backlog empty in the end
    assert written == FACTS, done  # no fact got two vectors
    assert computed == FACTS, done  # and none was embedded twice: the claims split the work
    with Ledger.open(pg_url) as ledger:
        with ledger.db.read():
            believed = {f.assert_seq for s in INDEXED for f in ledger.db.facts.with_status(s)}
            vectors = [seq for seq, _ in ledger.db.recall.indexed()[1]]
        assert sorted(vectors) == sorted(believed) and len(vectors) == FACTS
        assert ledger.recall("topic").unembedded == 0
        report = ledger.verify(deep=True)
        assert report.valid, report.problem


def test_facts_claimed_by_a_worker_that_dies_are_embedded_by_one_still_running(
        pg_url: str, shipped_default: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    start = EmbeddingWorker.start
    monkeypatch.setattr(EmbeddingWorker, "start", lambda self: None)
    with Ledger.open(pg_url) as ledger:
        for n in range(12):
            ledger.assert_fact(f"user:{n}", "note", f"a note about topic {n}", actor=WRITER,
                               cause=CAUSE, provenance="attested")
        with ledger.db.read():
            seqs = ledger.db.recall.backlog(0, 2**62, list(INDEXED), 100)
        other = open_ledger(pg_url)  # another worker's connection, holding a third of them
        try:
            held = other.recall.claim(seqs[::3])
            assert held == seqs[::3]
            assert ledger.index.embedding is not None
            start(ledger.index.embedding)
            deadline = time.monotonic() + 300  # the others are embedded, those passed over
            while ledger.index.unembedded() > len(held) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert ledger.index.unembedded() == len(held)
        finally:
            other.close()  # it dies: the server ends its claims with its connection
        assert ledger.index.settle_embedding(300)
        with ledger.db.read():
            vectors = {seq for seq, _ in ledger.db.recall.indexed()[1]}
        assert vectors == set(seqs) and ledger.recall("topic").unembedded == 0
