"""The index key fence (DESIGN 14, issue 31): a process that loaded the word index key before
another process ran `rotate-index-key` used to go on writing index rows under the old key,
which the rotation destroyed: its facts were lost to lexical recall and nothing noticed. Every
write transaction now checks, inside the transaction, that the key it holds is the one the
ledger's index is under, and reads it again when not. Two ledgers open on the same files, and
two real processes (a streaming `--batch -` and the `rotate-index-key` command)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from custody_app.domain.timeutil import ManualClock
from custody_app.ledger.facade import Ledger
from tests.conftest import SUITE_DEFAULT_POLICY

CAUSE = {"kind": "manual", "ref": "fence"}
WORDS = ["aardvark", "bittern", "caracal", "dugong", "echidna", "fossa"]


def _write(led: Ledger, n: int) -> str:
    return led.assert_fact(f"acct:{n}", "note", f"the {WORDS[n]} account", actor="user:ana",
                           cause=CAUSE, provenance="attested").fact_id


def _found_by_lexical_recall(path: Path, facts: dict[int, str]) -> None:
    """Every believed fact is found by its word, and verify --deep passes (a fresh open)."""
    with Ledger.open(path) as led:
        for n, fact_id in facts.items():
            assert led.history(fact_id).status == "active"
            hits = led.recall(WORDS[n], k=10, strategy="lexical").results
            assert fact_id in [h.fact.fact_id for h in hits], (WORDS[n], hits)
        report = led.verify(deep=True)
        assert report.valid, report.problem


def test_a_writer_holding_the_old_index_key_writes_under_the_new_one(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    first = Ledger.open(path, clock=ManualClock(), id_seed=1)
    second = Ledger.open(path, clock=ManualClock(), id_seed=2)
    try:
        facts = {0: _write(first, 0), 1: _write(second, 1)}  # both now hold the index key
        old = second.keys.index_key  # type: ignore[union-attr]
        first.rotate_index_key()
        assert first.keys.index_key != old  # type: ignore[union-attr]
        # A read in the other process follows the rotation too.
        assert [h.fact.fact_id for h in second.recall(WORDS[1], strategy="lexical").results] \
            == [facts[1]]
        # Before the fence: these rows went in under the destroyed key, lost to recall.
        facts[2] = _write(second, 2)
        facts[3] = _write(second, 3)
        assert second.keys.index_key == first.keys.index_key  # type: ignore[union-attr]
        assert [h.fact.fact_id for h in second.recall(WORDS[3], strategy="lexical").results] \
            == [facts[3]]
    finally:
        second.close()
        first.close()
    _found_by_lexical_recall(path, facts)


def _op(n: int) -> str:
    return json.dumps({"op": "assert", "subject": f"acct:{n}", "predicate": "note",
                       "value": f"the {WORDS[n]} account", "actor": "user:ana",
                       "provenance": "attested", "cause": CAUSE}) + "\n"


def test_a_streaming_batch_process_writes_under_the_key_another_process_rotated(
        tmp_path: Path) -> None:
    _stream_across_a_rotation(tmp_path / "l.db")


def test_on_a_server_the_fence_covers_the_sealed_vectors(pg_url: str) -> None:
    """On a server the recall vectors are sealed under a key derived from the word index key
    (issue 34): the streaming process seals the facts it writes after the rotation under the
    new key, so `verify --deep` (which names a vector that does not open) passes and vector
    recall finds each of them."""
    _stream_across_a_rotation(pg_url)
    with Ledger.open(pg_url) as led:
        for n in range(4):
            hits = led.recall(f"the {WORDS[n]} account", k=1, strategy="vector").results
            assert hits and WORDS[n] in str(hits[0].fact.value)


def _stream_across_a_rotation(path: Path | str) -> None:
    # Under the suite's hashed-ngram the streaming process makes (and on a server seals) each
    # fact's vector inside its write, across the rotation: what the fence must cover. (A model
    # embedder's worker is fenced too: test_embedding_worker's rotation case.)
    exe = [sys.executable, "-m", "custody_app"]
    policy = ["--policy", str(SUITE_DEFAULT_POLICY)]
    assert subprocess.run([*exe, "init", "--ledger", str(path), *policy], capture_output=True,
                          timeout=120, check=False).returncode == 0
    writer = subprocess.Popen([*exe, "--batch", "-", "--ledger", str(path), *policy],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert writer.stdin is not None and writer.stdout is not None
    facts: dict[int, str] = {}
    try:
        for n in (0, 1):
            writer.stdin.write(_op(n))
            writer.stdin.flush()
            line: Any = json.loads(writer.stdout.readline())
            assert line["ok"], line
            facts[n] = line["result"]["fact_id"]
        rotated = subprocess.run([*exe, "rotate-index-key", "--ledger", str(path), *policy],
                                 capture_output=True, text=True, timeout=120, check=False)
        assert rotated.returncode == 0, rotated.stderr
        for n in (2, 3):
            writer.stdin.write(_op(n))
            writer.stdin.flush()
            line = json.loads(writer.stdout.readline())
            assert line["ok"], line
            facts[n] = line["result"]["fact_id"]
        writer.stdin.close()
        assert writer.wait(timeout=120) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    _found_by_lexical_recall(path, facts)
