"""Background embedding survives a kill: a real process writing through the API while the
worker embeds beside it, SIGKILLed at random moments (fixed seed): after the next writable
open no acknowledged fact is lost, every believed fact is found lexically at once, the worker
embeds every remaining believed fact, and verify (and the deep index check) passes."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from custody_app.ledger.facade import Ledger
from custody_app.recall.index import INDEXED
from tests.embed_kill_child import TOPICS

ROOT = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).with_name("embed_kill_child.py")
TRIALS = 3
FACTS = 60  # per trial: the next open's backlog stays a few seconds of embedding


def _run_and_kill(path: Path, start: int, delay: float) -> list[tuple[int, str]]:
    """Start a writer, SIGKILL it `delay` s after it is ready; the facts it acknowledged."""
    proc = subprocess.Popen([sys.executable, str(CHILD), str(path), str(start), str(FACTS)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.stdout is not None
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.strip())
            if line.startswith("ready"):
                ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert ready.wait(120), proc.stderr.read() if proc.stderr else ""
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    reader.join(10)
    acked = [line.split() for line in lines if line[:1].isdigit()]
    return [(int(n), fact_id) for n, fact_id in acked if len(fact_id) > 4]


def test_a_writer_killed_while_the_worker_embeds_loses_nothing(
        tmp_path: Path, shipped_default: Path) -> None:
    rng = random.Random(20261206)
    path = tmp_path / "l.db"
    acked: list[tuple[int, str]] = []
    for trial in range(TRIALS):
        # From just after the open to after the writes: mid-write, mid-batch, mid-embed.
        acked += _run_and_kill(path, trial * FACTS, rng.uniform(0.05, 2.5))
        with Ledger.open(path) as ledger:
            # Every acknowledged fact is there and found by its words before any embedding.
            for n, fact_id in acked:
                fact = ledger.db.facts.get(fact_id)
                assert fact is not None and fact.status == "active", (trial, n)
                hits = ledger.recall(TOPICS[n % len(TOPICS)], k=5, subject=f"user:{n}",
                                     strategy="lexical")
                assert fact_id in [h.fact.fact_id for h in hits.results], (trial, n)
            assert ledger.index.settle_embedding(600)
            with ledger.db.read():
                believed = {f.assert_seq for s in INDEXED for f in ledger.db.facts.with_status(s)}
                vectors = {seq for seq, _ in ledger.db.recall.indexed()[1]}
            assert vectors == believed and ledger.recall("beagle").unembedded == 0
            assert ledger.index.differences() == []
            assert ledger.verify().valid
    assert acked  # the kills did not all land before the first write
