"""rotate-index-key (issue 15): after it, a copy of the ledger taken before forget_subject,
with the current key store, yields no word of the subject's facts; before it, it does (the
attack this closes). Real file copies, the real CLI, the real FTS5 index of the copy."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import apsw
import sqlite_vec

from custody_app.keys.keyring import KeyRing
from custody_app.ledger.facade import Ledger
from custody_app.recall import text
from tests.conftest import Env

ROOT = Path(__file__).resolve().parent.parent
DPO = "user:dpo"
WORDS = ["zanzibarqux", "quillowmere", "person:zed-k"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "custody_app", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


def copy_ledger(src: Path, dst: Path) -> Path:
    """The ledger file (and WAL, if any) as a backup would take it."""
    dst.mkdir()
    for p in src.parent.glob(src.name + "*"):
        if not p.name.endswith((".keys", ".master")):
            shutil.copyfile(p, dst / p.name)
    return dst / src.name


def words_found(copy: Path, ledger: Path) -> list[str]:
    """The attack: hash candidate words with the current key store's index key (the one
    beside `ledger`) and look them up in the copy's word index."""
    keys = KeyRing.open(ledger)
    try:
        key = keys.index_key
    finally:
        keys.close()
    conn = apsw.Connection(str(copy), flags=apsw.SQLITE_OPEN_READONLY)
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    try:
        found = []
        for word in WORDS:
            for w in text.words(word):
                if conn.execute("SELECT count(*) FROM recall_fts WHERE recall_fts MATCH ?",
                                (f'"{text.term(key, w)}"',)).fetchone()[0]:
                    found.append(w)
        return found
    finally:
        conn.close()


def make_subject(env: Env) -> None:
    env.put("person:zed-k", "note", "zanzibarqux quillowmere")
    env.put("acct:1", "note", "ordinary words only")
    env.ledger.close()


def test_rotation_makes_a_pre_erasure_copy_untestable(make_env, tmp_path: Path) -> None:
    env: Env = make_env()
    make_subject(env)
    before = copy_ledger(env.path, tmp_path / "backup")
    out = cli("forget-subject", "person:zed-k", "--ledger", str(env.path), "--actor", DPO,
              "--reason", "subject_request")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "not rotated" in out.stdout
    # the attack works against the current key store while the key is unchanged
    assert "zanzibarqux" in words_found(before, env.path)
    old_keys = Path(f"{env.path}.keys").read_bytes()

    rot = cli("rotate-index-key", "--ledger", str(env.path))
    assert rot.returncode == 0, rot.stdout + rot.stderr
    assert words_found(before, env.path) == []
    # the old wrapped key is gone from the key store file, and recall still works
    assert Path(f"{env.path}.keys").read_bytes() != old_keys
    found = cli("recall", "ordinary", "--ledger", str(env.path))
    assert found.returncode == 0 and "acct:1" in found.stdout
    assert cli("verify", "--ledger", str(env.path)).returncode == 0


def test_policy_rotates_after_each_forget_subject(make_env, tmp_path: Path) -> None:
    env: Env = make_env('[erasure]\nrotate_index_key = "after_forget_subject"\n')
    make_subject(env)
    before = copy_ledger(env.path, tmp_path / "backup")
    with Ledger.open(env.path, policy=env.policy) as ledger:
        result = ledger.forget_subject("person:zed-k", actor=DPO, reason="subject_request")
        assert [h.fact.subject for h in ledger.recall("ordinary").results] == ["acct:1"]
    [place] = [p for p in result.certificate.places if p.place.startswith("word index key")]
    assert place.outcome == "clean" and "rotated" in place.detail
    assert words_found(before, env.path) == []


def test_a_roll_forward_holding_a_finished_rotations_key_leaves_the_next_one_alone(
        tmp_path: Path) -> None:
    """A read-write open that read a rotation's intent (K2) just before the rotating process
    finished it and began the next (K3, its index already re-written under K3) must not re-index
    under K2 nor finish anything: the racing-rotations run once ended with the index under a key
    the key store no longer named (verify: "built under another word index key")."""
    from custody_app.erasure import rotate

    path = tmp_path / "race.db"
    with Ledger.open(path) as rotating, Ledger.open(path) as opening:
        rotating.assert_fact("acct:1", "note", "harbour lantern", actor="agent:a",
                             cause={"kind": "tool", "ref": "r"}, provenance="attested")
        assert rotating.keys is not None and opening.keys is not None
        k2 = rotating.keys.begin_index_rotation()
        stale = opening.keys.pending_index_key()  # the opening process reads the intent: K2
        assert stale == k2
        rotate._reindex_under(rotating, k2)
        rotating.keys.finish_index_rotation(k2)
        k3 = rotating.keys.begin_index_rotation()
        rotate._reindex_under(rotating, k3)  # the next rotation, not finished yet
        # The opening process rolls forward with what it read (its first read of the intent
        # returns the stale K2; every later read, the key store as it is now).
        real, first = opening.keys.pending_index_key, [stale]
        opening.keys.pending_index_key = (  # type: ignore[method-assign]
            lambda: first.pop() if first else real())
        rotate.roll_forward_index_key(opening)
        del opening.keys.pending_index_key
        rotating.keys.finish_index_rotation(k3)
        assert rotate.index_key_problem(rotating) is None
        assert rotating.verify().valid
        assert rotating.recall("harbour lantern").results
