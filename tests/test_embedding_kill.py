"""Background embedding survives a kill, on a file and on a server: a real process writing
through the API while the worker embeds beside it, SIGKILLed at random moments (fixed seed), and
SIGKILLed with the worker's write transaction half done (its vector rows sent, no COMMIT):
after the next writable open no acknowledged fact is lost, every believed fact is found
lexically at once, nothing of the killed transaction stands (on a server, its claims ended
with its connection), the worker embeds every remaining believed fact, and verify (and the
deep index check) passes."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from custody_app.ledger.facade import Ledger
from custody_app.recall.embedding import EmbeddingWorker
from custody_app.recall.index import INDEXED
from tests.embed_kill_child import TOPICS

ROOT = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).with_name("embed_kill_child.py")
TRIALS = 3
FACTS = 60  # per trial: the next open's backlog stays a few seconds of embedding


def _run_and_kill(path: Path | str, start: int, delay: float,
                  hold: bool = False) -> list[tuple[int, str]]:
    """Start a writer, SIGKILL it `delay` s after it is ready (with `hold`: once its worker is
    inside its first write of vectors); the facts it acknowledged."""
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    if "XDG_DATA_HOME" in os.environ:  # a server ledger's local key files
        env["XDG_DATA_HOME"] = os.environ["XDG_DATA_HOME"]
    proc = subprocess.Popen([sys.executable, str(CHILD), str(path), str(start), str(FACTS)]
                            + (["hold"] if hold else []),
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdout is not None
    lines: list[str] = []
    ready, inside = threading.Event(), threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.strip())
            if line.startswith("ready"):
                ready.set()
            if line.startswith("in-write"):
                inside.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert ready.wait(120), proc.stderr.read() if proc.stderr else ""
    if hold:
        assert inside.wait(300), lines[-3:]
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    reader.join(10)
    acked = [line.split() for line in lines if line[:1].isdigit()]
    return [(int(n), fact_id) for n, fact_id in acked if len(fact_id) > 4]


def _found_lexically(ledger: Ledger, acked: list[tuple[int, str]]) -> None:
    """Every acknowledged fact is there and found by its words before any embedding."""
    for n, fact_id in acked:
        fact = ledger.db.facts.get(fact_id)
        assert fact is not None and fact.status == "active", n
        hits = ledger.recall(TOPICS[n % len(TOPICS)], k=5, subject=f"user:{n}",
                             strategy="lexical")
        assert fact_id in [h.fact.fact_id for h in hits.results], n


def _embedded_and_valid(ledger: Ledger) -> None:
    """The worker gives every believed fact its vector; nothing else differs."""
    assert ledger.index.settle_embedding(600)
    with ledger.db.read():
        believed = {f.assert_seq for s in INDEXED for f in ledger.db.facts.with_status(s)}
        vectors = {seq for seq, _ in ledger.db.recall.indexed()[1]}
    assert vectors == believed and ledger.recall("beagle").unembedded == 0
    assert ledger.index.differences() == []
    assert ledger.verify().valid


def test_a_writer_killed_while_the_worker_embeds_loses_nothing(
        address: str, shipped_default: Path) -> None:
    rng = random.Random(20261206)
    acked: list[tuple[int, str]] = []
    for trial in range(TRIALS):
        # From just after the open to after the writes: mid-write, mid-batch, mid-embed.
        acked += _run_and_kill(address, trial * FACTS, rng.uniform(0.05, 2.5))
        with Ledger.open(address) as ledger:
            _found_lexically(ledger, acked)
            _embedded_and_valid(ledger)
    assert acked  # the kills did not all land before the first write


def test_a_worker_killed_inside_its_write_leaves_nothing_half_written(
        address: str, shipped_default: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    acked = _run_and_kill(address, 0, 0.0, hold=True)
    assert acked  # the worker waits for a pause in the writes: after one at least
    start = EmbeddingWorker.start
    monkeypatch.setattr(EmbeddingWorker, "start", lambda self: None)
    with Ledger.open(address) as ledger:  # before any worker of this open embeds
        with ledger.db.read():
            assert ledger.db.recall.vector_count() == 0  # the killed batch did not land
            written = ledger.db.recall.lexical_rows_count()
        assert written >= len(acked) and ledger.index.unembedded() == written
        _found_lexically(ledger, acked)
        assert ledger.verify().valid
    monkeypatch.setattr(EmbeddingWorker, "start", start)
    with Ledger.open(address) as ledger:
        _embedded_and_valid(ledger)
