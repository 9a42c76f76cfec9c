"""The precise erasure proof (issue 15, DESIGN section 13): every erased string still in the file
is located and classified `leak` or `shared`; the certificate, the CLI's exit code and doctor
follow the classification; the byte scan itself against a plain `in` over the raw bytes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from unittest.mock import patch

import apsw
from hypothesis import given, settings
from hypothesis import strategies as st

from custody_app.doctor.checks import diagnose
from custody_app.erasure.certificate import ErasureCertificate, ScanHit
from custody_app.erasure.proof import scan_places
from custody_app.erasure.work import ErasureWork
from store.sqlite import blocks, scrub
from store.sqlite.scrub import find_in_file, scan_files
from tests.conftest import Env

SECRET = "ZQX-PLANTED-7731-PRIYA"
DPO = "user:dpo"


def carrying(text: str) -> dict[str, object]:
    """A write whose event body holds `text` in plaintext: an llm block's model name (cause
    details and reasons are sealed under the subject's key, and erased with the fact)."""
    return {"actor": "llm:summariser", "llm": {"model": text}}


def hits(cert: ErasureCertificate) -> list[ScanHit]:
    return [h for p in cert.places if p.place.startswith("byte scan of ") for h in p.hits]


def digest_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def test_string_in_an_unrelated_live_record_is_shared_and_the_forget_completes(make_env) -> None:
    env: Env = make_env()
    erased = env.put("acct:42", "contact", {"name": SECRET})
    other = env.ledger.assert_fact("acct:99", "note", "unrelated",
                                   cause={"kind": "message", "ref": "m-2"},
                                   **carrying(f"mentions {SECRET} in passing"))
    cert = env.ledger.forget(erased, actor=DPO, reason="subject_request").certificate
    listed = hits(cert)
    assert [h.classification for h in listed] == ["shared"]
    assert digest_of(SECRET) in listed[0].string and SECRET not in listed[0].string
    assert any(f"table events row {other.seq}, column body" in w and other.fact_id in w
               for w in listed[0].where)
    assert cert.complete
    scan = [p for p in cert.places if p.place == f"byte scan of {env.path}"][0]
    assert scan.outcome == "shared"
    assert SECRET not in cert.render() and "shared:" in cert.render()


def test_string_in_a_derived_fact_is_a_leak_and_the_forget_is_not_complete(make_env) -> None:
    env: Env = make_env()
    root = env.put("acct:42", "contact", {"name": SECRET})
    derived = env.ledger.assert_fact("acct:42", "summary", "a summary",
                                     cause={"kind": "tool", "ref": "t-1"}, sources=[root],
                                     **carrying(f"summarised {SECRET}"))
    cert = env.ledger.forget(root, actor=DPO, reason="subject_request").certificate
    assert derived.fact_id in [e.fact_id for e in cert.erased]
    listed = hits(cert)
    assert [h.classification for h in listed] == ["leak"]
    assert any(f"row {derived.seq}" in w and derived.fact_id in w for w in listed[0].where)
    assert not cert.complete
    # not pending: the checkpoint completed; doctor names it as a leak, not as a pending scrub
    assert env.ledger.db.erasure.pending() == []
    env.ledger.close()
    report = {c.name: c for c in diagnose(env.path).checks}
    assert report["pending-scrubs"].outcome == "ok"
    assert report["erasure-leaks"].outcome == "warn" and root in report["erasure-leaks"].detail


def test_same_subject_record_is_a_leak_after_forget_subject(make_env) -> None:
    env: Env = make_env()
    env.put("person:asha-k", "contact", {"email": SECRET})
    env.ledger.assert_fact("acct:7", "owner", "someone", actor="agent:support",
                           cause={"kind": "message", "ref": "m-9", "detail": "nothing personal"})
    mentions = env.ledger.assert_fact("person:asha-k", "note", "called",
                                      cause={"kind": "message", "ref": "m-3"},
                                      **carrying(f"said her address is {SECRET}"))
    result = env.ledger.forget_subject("person:asha-k", actor=DPO, reason="subject_request")
    listed = hits(result.certificate)
    assert listed and {h.classification for h in listed} == {"leak"}
    assert any(f"row {mentions.seq}" in w for h in listed for w in h.where)
    assert not result.certificate.complete


def test_bytes_left_in_a_free_page_are_a_leak_no_live_row_explains(make_env) -> None:
    """An attacker's (or a bug's) copy outside any live row: written into a table that is then
    dropped without secure_delete, so the bytes stay in a free page of the file."""
    env: Env = make_env()
    fact = env.put("acct:42", "contact", {"name": SECRET})
    env.ledger.forget(fact, actor=DPO, reason="subject_request")
    raw = apsw.Connection(str(env.path))
    raw.execute("PRAGMA secure_delete = OFF")
    raw.execute("CREATE TABLE planted(x BLOB)")
    raw.execute("INSERT INTO planted VALUES (?)", (SECRET.encode() * 40,))
    raw.execute("DROP TABLE planted")
    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw.close()
    work = ErasureWork()
    work.add(SECRET.encode(), "string value.name")
    checks = scan_places(env.ledger, work, checkpoint_done=True)
    [scan] = [p for p in checks if p.place == f"byte scan of {env.path}"]
    assert scan.outcome == "found"
    assert scan.hits[0].classification == "leak"
    assert any("free page" in w and "no live row" in w for w in scan.hits[0].where)


def test_cli_forget_exit_code_follows_the_classification(make_env) -> None:
    env: Env = make_env()
    shared = env.put("acct:42", "contact", {"name": SECRET})
    env.ledger.assert_fact("acct:99", "note", "x", cause={"kind": "message", "ref": "m"},
                           **carrying(SECRET))
    leaky = env.put("acct:43", "contact", {"name": SECRET + "-B"})
    env.ledger.assert_fact("acct:43", "summary", "s", sources=[leaky],
                           cause={"kind": "tool", "ref": "t"}, **carrying(SECRET + "-B"))
    env.ledger.close()
    cmd = [sys.executable, "-m", "custody_app", "forget", "--ledger", str(env.path),
           "--actor", DPO, "--reason", "subject_request"]
    environ = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    ok = subprocess.run([*cmd, shared], capture_output=True, text=True, env=environ, timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "shared:" in ok.stdout and SECRET not in ok.stdout
    bad = subprocess.run([*cmd, leaky], capture_output=True, text=True, env=environ, timeout=60)
    assert bad.returncode == 1 and "leak:" in bad.stdout


@settings(derandomize=True, max_examples=250, deadline=None)
@given(st.binary(min_size=0, max_size=3000),
       st.lists(st.binary(min_size=1, max_size=80) | st.sampled_from([b"ab", b"aba", b"a" * 70,
                                                                      b"a" * 65 + b"b"]),
                min_size=1, max_size=12),
       st.sampled_from([1, 7, 64, 100, scrub.BLOCK_BYTES]),
       st.sampled_from([1, 2, 3, 7]))
def test_scan_agrees_with_a_plain_search_of_the_bytes(tmp_path_factory, data: bytes,
                                                     needles: list[bytes], block: int,
                                                     threads: int) -> None:
    """Overlapping, nested and repeated needles, needles longer than the Aho-Corasick
    fragment, blocks smaller than a needle (so matches cross block boundaries), and the file
    searched in ranges by several threads: the leftmost prefilter must never hide one that a
    plain search finds, and the ranges' matches are one pass's, in its order."""
    path = tmp_path_factory.mktemp("scan") / "blob.bin"
    planted = data + b"".join(needles[: len(needles) // 2]) + data[:50]
    path.write_bytes(planted)
    expected = sorted(i for i, n in enumerate(needles) if n in planted)
    with (patch.object(scrub, "BLOCK_BYTES", block), patch.object(blocks, "SPLIT_MIN_BYTES", 0),
          patch.object(blocks, "THREADS", threads)):
        assert scan_files([str(path)], needles)[str(path)] == expected
        found = find_in_file(str(path), needles)
        fragments = list(scrub._pieces(list(enumerate(needles))))
        with open(path, "rb", buffering=0) as handle:
            split = scrub._leftmost(handle, fragments)
            with patch.object(blocks, "THREADS", 1):
                assert split == scrub._leftmost(handle, fragments)
    for i, needle in enumerate(needles):
        every = [o for o in range(len(planted)) if planted.startswith(needle, o)]
        assert found.get(i, []) == every[:64]


def test_a_sweep_locates_many_strings_each_in_its_own_row(make_env) -> None:
    """Enough strings that the row lookup takes its multi-pattern path: each is found in the
    one live record that holds it, and none in another's."""
    env: Env = make_env()
    seqs = {}
    secrets = [f"ZQX-MANY-{n:02d}-{'k' * n}-END" for n in range(7)]
    for n, secret in enumerate(secrets):
        env.put(f"acct:{n}", "contact", {"name": secret})
    env.at("2026-09-03T00:00:00Z")  # the records that share them are newer than the cutoff
    for n, secret in enumerate(secrets):
        seqs[secret] = env.ledger.assert_fact(
            f"acct:9{n}", "note", "x", cause={"kind": "message", "ref": f"m{n}"},
            **carrying(f"cc {secret}")).seq
    env.at("2026-09-05T00:00:00Z")
    cert = env.ledger.sweep(before="2026-09-02T00:00:00Z", actor=DPO).certificate
    assert cert is not None
    listed = hits(cert)
    assert len(listed) == 7 and {h.classification for h in listed} == {"shared"}
    for secret, seq in seqs.items():
        [hit] = [h for h in listed if digest_of(secret) in h.string]
        assert [w for w in hit.where if "table events" in w] == [
            w for w in hit.where if f"table events row {seq}," in w] != []
    assert cert.complete


def test_the_scan_searches_for_the_erased_facts_sealed_free_text(make_env) -> None:
    """The erased fact's own cause detail and the reason about it are scan strings (DESIGN 13):
    the same text left in a plaintext carrier elsewhere is found and named by its field."""
    env: Env = make_env()
    erased = env.ledger.assert_fact("acct:42", "contact", "x", actor="agent:support",
                                    cause={"kind": "message", "ref": "m-1",
                                           "detail": f"detail {SECRET}"}).fact_id
    env.ledger.retract(erased, actor="agent:support", reason=f"reason {SECRET}-R")
    env.ledger.assert_fact("acct:99", "note", "x", cause={"kind": "message", "ref": "m-2"},
                           **carrying(f"copied detail {SECRET} and reason {SECRET}-R"))
    cert = env.ledger.forget(erased, actor=DPO, reason="subject_request").certificate
    labels = sorted(h.string for h in hits(cert))
    assert len(labels) == 2 and labels[0].startswith(f"cause.detail of {erased} (seq 2) (")
    assert labels[1].startswith(f"reason of {erased} (seq 3) (")
    assert {h.classification for h in hits(cert)} == {"shared"} and cert.complete
    texts = [p for p in cert.places if p.place.startswith("event_texts")]
    assert [p.outcome for p in texts] == ["clean"]


def test_a_swept_short_string_planted_after_the_plan_is_still_a_leak(make_env) -> None:
    """A sweep's strings with no space to lead them ("owner-6572") are searched by bytes picked
    from a sample of the file, taken before the proof's checkpoint. An attacker who plants one
    of them in a free page after that sample (so the sample never saw it) is still found, as a
    leak, and every other string is still absent."""
    from store.sqlite import scan_many

    env: Env = make_env()
    strings = [f"owner-{6500 + n}" for n in range(30)]
    for n, text in enumerate(strings):
        env.put(f"acct:{n}", "owner", text)
    env.at("2026-09-05T00:00:00Z")
    result = env.ledger.sweep(before="2026-09-04T00:00:00Z", actor=DPO)
    assert len(result.expired) == 30 and result.certificate is not None
    assert result.certificate.complete
    work = ErasureWork()
    for text in strings:
        work.add(text.encode(), "string value")
    plan = env.ledger.db.locate.plan(work.needles)  # sampled now, before the plant
    assert plan is not None
    with open(env.path, "rb", buffering=0) as handle:
        kinds = [kind for _, kind in scan_many._plan(plan.distinct,
                                                     scan_many._sample_counts(handle))]
    assert scan_many.ahocorasick_rs.Implementation.DFA not in kinds  # the led path
    raw = apsw.Connection(str(env.path))
    raw.execute("PRAGMA secure_delete = OFF")
    raw.execute("CREATE TABLE planted(x BLOB)")
    raw.execute("INSERT INTO planted VALUES (?)", (b"\xe6" * 50 + strings[17].encode() * 3,))
    raw.execute("DROP TABLE planted")
    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw.close()
    checks = scan_places(env.ledger, work, checkpoint_done=True, plan=plan)
    [scan] = [p for p in checks if p.place == f"byte scan of {env.path}"]
    assert scan.outcome == "found"
    assert [h.classification for h in scan.hits] == ["leak"]
    assert digest_of(strings[17]) in scan.hits[0].string
