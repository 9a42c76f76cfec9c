"""The file rewrite after residue is made durable before it starts (DESIGN 13): a process
killed before, during or after the VACUUM, or between the erasure's commit and the rewrite,
leaves "rewrite due" (and the erasure's pending rows), so the next read-write open rewrites the
file, re-issues the certificate, and `doctor` calls it pending until then. An erasure another
process left pending (it exited while a reader blocked its checkpoint) is finished with a
rewrite too, not a checkpoint alone. Real subprocesses, SIGKILLed at named points, on the
churned ledger of tests/test_erasure_residue.py, whose subject 3 keeps a copy of its id in a
rebuilt page's unallocated space."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from custody_app.doctor.checks import diagnose
from custody_app.erasure.certificate import ErasureCertificate
from custody_app.ledger.facade import Ledger
from tests.conftest import Env, ledger_bytes
from tests.test_erasure import _half_read_reader
from tests.test_erasure_residue import _forget, churned, copy  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).parent / "rewrite_due_child.py"


@pytest.fixture
def ready(copy: tuple[Env, list[str]]) -> Iterator[tuple[Path, Path, str]]:  # noqa: F811
    """The churned copy with subjects 0 to 2 forgotten (no residue) and closed: subject 3's
    erasure leaves residue."""
    env, subjects = copy
    for s in subjects[:3]:
        assert not _forget(env, s).rewritten
    env.ledger.close()
    yield env.path, env.path.parent / "policy.toml", subjects[3]
    env.ledger = Ledger.open(env.path, policy=env.path.parent / "policy.toml")  # for teardown


def _run(*args: str, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "CUSTODY_FAULT"}
    environ["PYTHONPATH"] = str(ROOT)
    if fault:
        environ["CUSTODY_FAULT"] = fault
    return subprocess.run([sys.executable, str(CHILD), *args], capture_output=True, text=True,
                          env=environ, timeout=300, check=False)


def _doctor(path: Path) -> dict[str, tuple[str, str]]:
    return {c.name: (c.outcome, c.detail) for c in diagnose(path).checks}


def _finish_by_open(path: Path, policy: Path, subject: str) -> ErasureCertificate:
    opened = _run("open", str(path), str(policy))
    assert opened.returncode == 0, opened.stderr
    [line] = opened.stdout.splitlines()
    cert = ErasureCertificate.model_validate(json.loads(line))
    assert subject.encode() not in ledger_bytes(path)
    with Ledger.open(path, policy=policy) as led:
        assert led.verify().valid
        assert led.db.erasure.pending() == [] and led.db.erasure.rewrite_due() is None
        assert led.finished_at_open == []  # nothing left for a second open
    checks = _doctor(path)
    assert checks["pending-scrubs"][0] == "ok" and checks["erasure-leaks"][0] == "ok"
    return cert


@pytest.mark.parametrize("fault", ["erasure.rewrite_due", "erasure.vacuuming#3",
                                   "erasure.vacuumed", "erasure.ledger_committed",
                                   "erasure.keys_committed", "erasure.checkpointed"])
def test_a_kill_around_the_rewrite_is_finished_by_the_next_open(
        ready: tuple[Path, Path, str], fault: str) -> None:
    path, policy, subject = ready
    killed = _run("forget", str(path), str(policy), subject, fault=fault)
    assert killed.returncode == -9 and "done" not in killed.stdout, (killed.stdout, killed.stderr)
    # The kill left the erased id in the raw files (after the VACUUM, SQLite's automatic
    # checkpoint at its commit has already copied most new pages over the old ones), and the
    # erasure pending (not leaking).
    if fault != "erasure.vacuumed":
        assert subject.encode() in ledger_bytes(path)
    checks = _doctor(path)
    assert checks["pending-scrubs"][0] == "warn" and checks["erasure-leaks"][0] == "ok"
    if fault.startswith(("erasure.rewrite_due", "erasure.vacuum")):
        assert "needs the file rewritten" in checks["pending-scrubs"][1]
        assert "not complete" in checks["pending-scrubs"][1]
    cert = _finish_by_open(path, policy, subject)
    assert cert.complete and cert.rewritten and cert.operation == "forget_subject"
    places = {p.place: p.outcome for p in cert.places}
    assert places["key store: the subject's data key"] == "clean"
    assert places["file rewrite (VACUUM, then a TRUNCATE checkpoint)"] == "clean"
    assert places["facts projection"] == "clean"


def test_an_erasure_left_pending_by_an_exited_process_is_rewritten_by_the_next(
        ready: tuple[Path, Path, str]) -> None:
    """Process A erases while a reader blocks its checkpoint, and exits; process B's open
    finishes it. Before, B only checkpointed and the id stayed in the rebuilt page."""
    path, policy, subject = ready
    reader, _cursor = _half_read_reader(path, checkpoint_on_close=False)
    try:
        erased = _run("forget", str(path), str(policy), subject)
        assert erased.returncode == 0, erased.stderr
        assert erased.stdout.split() == ["done", "False", "False"]  # pending, not rewritten
        blocked = _run("open", str(path), str(policy))  # the reader still blocks it
        assert blocked.returncode == 0 and blocked.stdout == ""
    finally:
        reader.close()
    assert subject.encode() in ledger_bytes(path)
    assert _doctor(path)["pending-scrubs"][0] == "warn"
    cert = _finish_by_open(path, policy, subject)
    assert cert.complete and cert.rewritten and cert.operation == "forget_subject"
    assert cert.subject_hash and len(cert.erased) >= 1
    [scan] = [p for p in cert.places if p.place.startswith("byte scan")]
    assert scan.outcome == "unverifiable" and "rewritten from its live rows" in scan.detail


def test_a_rewrite_that_cannot_be_recorded_as_due_is_pending_not_raised(
        copy: tuple[Env, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """Another writer holding the ledger when the rewrite is to be recorded: the erasure has
    committed, so the proof reports the rewrite pending (not an exception), and the retry
    rewrites the file once the ledger is free."""
    from store.errors import StoreBusy
    from store.sqlite.erasure import ErasureStore

    env, subjects = copy
    for s in subjects[:3]:
        _forget(env, s)
    real = ErasureStore.set_rewrite_due

    def busy(self: ErasureStore, since: str, why: str) -> None:
        raise StoreBusy("the ledger is locked by another writer; gave up after 8 retries")

    monkeypatch.setattr(ErasureStore, "set_rewrite_due", busy)
    cert = _forget(env, subjects[3])
    [place] = [p for p in cert.places if p.place.startswith("file rewrite")]
    assert place.outcome == "pending" and "locked by another writer" in place.detail
    assert not cert.complete and not cert.rewritten
    monkeypatch.setattr(ErasureStore, "set_rewrite_due", real)
    [again] = env.ledger.finish_scrubs()
    assert again.complete and again.rewritten
    rewrites = [p for p in again.places if p.place.startswith("file rewrite")]
    assert [p.outcome for p in rewrites] == ["clean"]  # the one that ran, not the refused one
    assert subjects[3].encode() not in ledger_bytes(env.path)
