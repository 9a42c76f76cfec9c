"""Keyed residue (DESIGN 14): the byte scan also searches for the keyed forms of the erased
strings (the word index's hashed words, the subject's scope token), so a copy of them left in a
rebuilt page's unallocated space is found and the file rewritten. The attacker: whoever holds the
ledger and its key store hashes the erased subject's id with the index key and looks for it in
the raw file. The churned ledger of tests/test_erasure_residue.py (real files, seeded)."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

import tests.test_erasure_residue as residue
from custody_app.recall import text
from tests.conftest import Env, day, ledger_bytes

# The churned corpus of tests/test_erasure_residue.py at seed 2: subjects 30 and 88 keep their
# id's keyed words (and no plaintext) in rebuilt pages' unallocated space; before this check
# their certificates said complete with no rewrite.
SEED, KEYED_RESIDUE = 2, (30, 88)


@pytest.fixture(scope="module")
def churned2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    where = tmp_path_factory.mktemp("keyed-residue")
    policy = where / "policy.toml"
    policy.write_text(residue.WINDOWS, encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(residue, "SEED", SEED)
        return residue._build(where, policy, patch)


def keyed_forms(env: Env, subject: str) -> list[bytes]:
    """The index's keyed forms of the subject id that no live row of the index holds."""
    assert env.ledger.keys is not None
    key = env.ledger.keys.index_key
    terms = [text.term(key, "subject:" + subject)] + [text.term(key, w)
                                                     for w in text.words(subject)]
    return [t.encode() for t in dict.fromkeys(terms)
            if not env.ledger.db.recall.lexical(f'"{t}"', 1)]


def test_no_keyed_word_of_an_erased_subject_is_left_in_the_file(
        churned2: tuple[Path, list[str]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    where, subjects = churned2
    monkeypatch.setattr(os, "urandom", random.Random(SEED + 1).randbytes)
    for name in ("ledger.db", "ledger.db.keys", "ledger.db.keys.master", "policy.toml"):
        shutil.copy(where / name, tmp_path / name)
    env = Env(tmp_path / "ledger.db", tmp_path / "policy.toml")
    try:
        env.ledger.index.settle()
        env.at(day(61))
        left, certs = {}, []
        for n in KEYED_RESIDUE:
            certs.append(env.ledger.forget_subject(subjects[n], actor="user:dpo",
                                                   reason="subject_request").certificate)
            env.ledger.index.settle()
            forms = keyed_forms(env, subjects[n])
            assert forms, "the scope token at least is the subject's own"
            if found := [f for f in forms if f in ledger_bytes(env.path)]:
                left[n] = len(found)
        assert all(c.complete for c in certs), [c.render() for c in certs if not c.complete][:1]
        assert left == {}, f"keyed forms of erased subject ids left in the file: {left}"
        assert any(c.rewritten for c in certs), "no residue: the corpus proves nothing"
    finally:
        env.ledger.close()


def free_pages(path: Path) -> tuple[int, list[int]]:
    """(page size, the leaf pages of the first freelist trunk: bytes SQLite never reads)."""
    data = path.read_bytes()
    page_size = int.from_bytes(data[16:18], "big") or 65536
    trunk = int.from_bytes(data[32:36], "big")
    assert trunk, "no free page"
    at = (trunk - 1) * page_size
    leaves = int.from_bytes(data[at + 4:at + 8], "big")
    assert leaves, "no free leaf page"
    return page_size, [int.from_bytes(data[at + 8 + 4 * i:at + 12 + 4 * i], "big")
                       for i in range(leaves)]


def test_a_keyed_subject_token_in_free_space_is_found_and_rewritten(env: Env) -> None:
    """What a page rebuild leaves, planted where SQLite leaves it (a page's unused bytes): the
    subject's scope token and a keyed word of its id, which only the index key makes sense of."""
    subject = "person:zq-KEYED-77123"
    for n in range(400):  # freed below: pages on the freelist
        env.put("acct:FILLER-0001", "note", {"text": "f" * 300, "n": n})
    env.put(subject, "plan", "the subject's own plan value")
    env.ledger.forget_subject("acct:FILLER-0001", actor="user:dpo", reason="error")
    assert env.ledger.keys is not None
    key = env.ledger.keys.index_key
    planted = [text.term(key, "subject:" + subject).encode(),
               text.term(key, "keyed").encode()]  # a word of the id only this subject has
    env.ledger.close()
    page_size, pages = free_pages(env.path)
    with open(env.path, "r+b") as handle:
        for page in pages:  # the next writes reuse some of them: the others keep the bytes
            handle.seek((page - 1) * page_size + page_size // 2)
            handle.write(b" ".join(planted))
    env.reopen()
    cert = env.ledger.forget_subject(subject, actor="user:dpo", reason="subject_request")
    assert cert.certificate.complete and cert.certificate.rewritten, cert.certificate.render()
    data = ledger_bytes(env.path)
    assert [p for p in planted if p in data] == []
