"""Tampering with the ledger file, each case on its own copy: a changed byte (body, hash,
prev_hash, tx_at, sealed value) of every event, every deleted event, every adjacent pair
reordered, and a chain recomputed after an edit (caught by the signed checkpoints). Each must be
detected by `verify` and located: the first bad seq is the tampered event, or for a recomputed
chain the first signed event at or after the edit, with the edit bounded from below."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.reliability import build_tamper_base, plain_walk_passes_after_recompute, tamper_cases

KINDS = {"changed byte: body", "changed byte: hash", "changed byte: prev_hash",
         "changed byte: tx_at", "changed byte: value", "deleted event", "reordered events",
         "chain recomputed after an edit"}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tamper") / "base.db"
    build_tamper_base(path)
    return path


@pytest.mark.slow
def test_every_tampering_case_is_detected_and_located(base: Path, tmp_path: Path) -> None:
    cases = tamper_cases(base, tmp_path)
    assert {c.kind for c in cases} == KINDS
    assert len(cases) >= 200
    missed = [c for c in cases if not (c.detected and c.located)]
    assert missed == []
    counts = Counter(c.kind for c in cases)
    assert counts["chain recomputed after an edit"] >= 10 and counts["deleted event"] >= 30


def test_the_recompute_attack_fools_a_plain_chain_walk(base: Path, tmp_path: Path) -> None:
    """Why the checkpoints matter: re-hashing after an edit passes a walk of the hashes alone."""
    assert plain_walk_passes_after_recompute(base, tmp_path, 3)
