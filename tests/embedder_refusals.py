"""What every optional embedder must do once its package is gone (shared by the tests of
`wordllama` and `minilm-l6`): a writable open under a policy naming it is refused with the
ledger and key store byte for byte as they were, and a ledger it indexed, opened read-only,
refuses vector and hybrid recall naming the recorded embedder while lexical recall and verify
work and nothing is written. `uninstall` makes the package look absent. And what loading one
may not do: `imported_by_embedding` lists the forbidden modules a fresh process imported."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from custody_app.domain.errors import LedgerError
from custody_app.ledger.facade import Ledger
from tests.conftest import CAUSE, WRITER, ledger_bytes

ROOT = Path(__file__).resolve().parent.parent


def imported_by_embedding(embedder: str, forbidden: tuple[str, ...]) -> str:
    """In a fresh process, make `embedder` and embed one text; the top-level packages of
    `forbidden` it imported, as a printed sorted list ("[]" when none)."""
    code = ("import sys\n"
            "from custody_app.recall.embedders import make_embedder\n"
            f"make_embedder({embedder!r}).embed(['a beagle named Biscuit'])\n"
            f"bad = {forbidden!r}\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in bad))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120, check=True)
    return out.stdout.strip()


def _policy(tmp_path: Path, embedder: str) -> Path:
    path = tmp_path / f"{embedder}.toml"
    path.write_text(f'[recall]\nembedder = "{embedder}"\n')
    return path


def open_is_refused_unchanged(tmp_path: Path, embedder: str,
                              uninstall: Callable[[], None]) -> None:
    path = tmp_path / "l.db"
    with Ledger.open(path, policy=_policy(tmp_path, "hashed-ngram")) as ledger:
        ledger.assert_fact("acct:1", "pet", "a beagle named Biscuit", actor=WRITER, cause=CAUSE)
    before, keys_before = ledger_bytes(path), Path(f"{path}.keys").read_bytes()
    uninstall()
    with pytest.raises(LedgerError) as info:
        Ledger.open(path, policy=_policy(tmp_path, embedder))
    assert info.value.code == "embedder_unavailable"
    assert embedder in info.value.message and "pip install" in info.value.message
    assert ledger_bytes(path) == before and Path(f"{path}.keys").read_bytes() == keys_before


def read_only_refuses_its_vectors(tmp_path: Path, embedder: str, recorded: str, value: str,
                                  query: str, uninstall: Callable[[], None]) -> None:
    path = tmp_path / "l.db"
    with Ledger.open(path, policy=_policy(tmp_path, embedder)) as ledger:
        fact = ledger.assert_fact("acct:1", "pet", value, actor=WRITER, cause=CAUSE,
                                  provenance="attested").fact_id
    uninstall()
    before = ledger_bytes(path)
    with Ledger.open(path, policy=_policy(tmp_path, "hashed-ngram"), readonly=True) as ro:
        for strategy in ("vector", "hybrid"):
            with pytest.raises(LedgerError) as info:
                ro.recall(query, strategy=strategy)
            assert info.value.code == "embedder_unavailable"
            assert recorded in info.value.message
        assert [h.fact.fact_id for h in ro.recall("beagle", strategy="lexical").results] == [fact]
        assert ro.verify().valid
    assert ledger_bytes(path) == before
