"""Evidence packs and exports checked offline (issue 5): an untouched pack or export verifies;
a changed value, a removed event, a swapped key, a forged certificate, an edited line do not.
A contract module (tests/conftest.py): every test runs on a SQLite file and on a server."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from custody_app.domain.chain import canonical
from custody_app.evidence.export import line_hash
from custody_app.evidence.offline import verify_export
from custody_app.evidence.packcheck import verify_pack
from custody_app.evidence.packs import pack_text, signed_bytes
from custody_app.keys import crypto
from store.address import address_of
from tests.test_batch_cli import cli
from tests.test_blast import INCIDENT, SAMPLE, Incident, replay


@pytest.fixture(scope="module")
def sample(module_ledger_at: Callable[[str], Any]) -> Iterator[Incident]:
    done = replay(module_ledger_at("support.db"), SAMPLE, INCIDENT)
    yield done
    done.ledger.close()


@pytest.fixture(scope="module")
def exported(sample: Incident, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("export") / "events.jsonl"
    sample.ledger.export(path)
    return path


def _pem(sample: Incident) -> str:
    assert sample.ledger.keys is not None
    return sample.ledger.keys.public_pem()


def _resign(document: dict[str, Any], private: bytes) -> str:
    """The pack re-signed (an insider with the key, or a forger with their own key)."""
    pem = crypto.public_pem(private)
    document["signature"] = {"alg": "ed25519", "key_fingerprint": crypto.public_fingerprint(pem),
                             "value": crypto.sign(private, signed_bytes(document))}
    return canonical(document) + "\n"


# ---- export -----------------------------------------------------------------------------------

def _pub(sample: Incident) -> Path:
    """The ledger's published public key file (beside a file ledger; in a server ledger's
    local folder)."""
    return address_of(sample.ledger.db.path).sibling(".pub")


def test_export_of_the_sample_verifies_offline_without_the_ledger(
        sample: Incident, tmp_path: Path) -> None:
    done = cli("export", "--json", "--ledger", sample.ledger.db.path,
               "--out", tmp_path / "events.jsonl")
    assert done.returncode == 0, done.stderr
    written = json.loads(done.stdout)
    assert written["signed"] is True and written["events"] == sample.ledger.db.events.count()
    # In a folder of their own: the export and the published key, nothing of the ledger.
    (tmp_path / "ledger.pub").write_bytes(_pub(sample).read_bytes())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["events.jsonl", "ledger.pub"]
    done = cli("verify", "--json", "--export", tmp_path / "events.jsonl", "--key", tmp_path / "ledger.pub",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["valid"] is True and report["signature_checked"] is True
    assert report["events"] == written["events"] and report["checkpoints"] >= 1
    lines = (tmp_path / "events.jsonl").read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    assert {"seq", "kind", "tx_at", "actor", "policy_hash", "event", "prev_hash", "hash",
            "line_hash"} <= set(first)
    kinds = {json.loads(line).get("kind") for line in lines}
    assert {"assert", "retract", "served", "acted", "checkpoint", "policy"} <= kinds
    # edited: exit 1 and the reason on stderr, naming the line
    lines[10] = lines[10].replace('"seq":11', '"seq":12')
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = cli("verify", "--export", tmp_path / "events.jsonl", cwd=tmp_path)
    assert done.returncode == 1 and "line 11" in done.stderr


def _edit(line: str) -> str:
    """The same line with one character in its middle changed to another of its kind."""
    for i in range(len(line) // 2, len(line)):
        c = line[i]
        if c.isdigit():
            return line[:i] + str((int(c) + 1) % 10) + line[i + 1:]
        if c.isalpha():
            return line[:i] + ("b" if c == "a" else "a") + line[i + 1:]
    raise AssertionError("no character to change")


def test_editing_any_line_of_the_export_fails_naming_it(
        sample: Incident, exported: Path, tmp_path: Path) -> None:
    pem = _pem(sample)
    assert verify_export(exported, pem).valid and verify_export(exported).valid
    lines = exported.read_text(encoding="utf-8").splitlines(keepends=True)
    target = tmp_path / "edited.jsonl"
    for number in range(1, len(lines) + 1):
        edited = list(lines)
        edited[number - 1] = _edit(lines[number - 1])
        target.write_text("".join(edited), encoding="utf-8")
        report = verify_export(target, pem)
        assert not report.valid, number
        assert report.first_bad_line == number, (number, report.problems)
        assert f"line {number}" in report.problems[0] or number == len(lines), report.problems
        if number < len(lines):
            assert not verify_export(target).valid, number  # also without the key


def test_export_removed_added_or_rewritten_lines_fail(
        sample: Incident, exported: Path, tmp_path: Path) -> None:
    pem = _pem(sample)
    lines = exported.read_text(encoding="utf-8").splitlines(keepends=True)
    target = tmp_path / "edited.jsonl"
    target.write_text("".join(lines[:5] + lines[6:]), encoding="utf-8")
    report = verify_export(target)
    assert not report.valid and report.first_bad_line == 6 and "event 6 is missing" in \
        report.problems[0]
    target.write_text("".join(lines[:-1]), encoding="utf-8")  # the trailer cut off
    assert "no trailer" in verify_export(target).problems[0]
    target.write_text("".join(lines[:-3] + lines[-1:]), encoding="utf-8")  # the tail cut off
    assert "trailer" in verify_export(target).problems[0]
    # a forger who rewrites a subject and recomputes every line hash and the trailer's hash
    # passes the keyless check, but not the signature
    records = [json.loads(line) for line in lines]
    [n] = [i for i, r in enumerate(records) if r.get("subject") == "acct:4520"][:1]
    records[n]["subject"] = "acct:9999"
    prev = records[n - 1]["line_hash"] if n else "0" * 64
    for r in records[n:-1]:
        r["line_hash"] = prev = line_hash(prev, r)
    records[-1]["export"]["last_line_hash"] = prev
    records[-1]["line_hash"] = line_hash(prev, {"export": records[-1]["export"]})
    target.write_text("".join(canonical(r) + "\n" for r in records), encoding="utf-8")
    assert verify_export(target).valid
    report = verify_export(target, pem)
    assert not report.valid and "signature does not verify" in report.problems[0]
    other = crypto.public_pem(crypto.new_signing_key())
    report = verify_export(exported, other)
    assert not report.valid and "is not signed by the given public key" in report.problems[0]


# ---- evidence packs ---------------------------------------------------------------------------

def test_pack_holds_the_whole_story_and_verifies(sample: Incident, tmp_path: Path) -> None:
    root = sample.fact("wrong-plan")
    pack = sample.ledger.pack(root)
    assert pack.fact_id == root and pack.fact["status"] == "retracted"
    assert [e["kind"] for e in pack.events] == ["assert", "retract"]
    assert pack.events[0]["value"]["tier"] == "enterprise" and pack.events[0]["salt"]
    assert pack.blast["root"]["fact_id"] == root and len(pack.blast["facts"]) == 4
    assert pack.policies and pack.policies[0]["hash"] == pack.events[0]["policy_hash"]
    assert pack.checkpoint is not None and pack.forget_certificate is None
    assert sorted(e["kind"] for e in pack.related_events) == ["acted", "served", "served"]
    assert verify_pack(pack_text(pack), _pem(sample)).valid
    # the blast radius rests on hashed events: a doctored action fails even when re-signed
    assert sample.ledger.keys is not None
    doctored = pack.model_dump(mode="json")
    doctored["blast"]["actions"][0]["outcome"] = "declined"
    report = verify_pack(_resign(doctored, sample.ledger.keys.signing_key), _pem(sample))
    assert report.problems == ["the blast radius names action RF-2026-0412 (seq "
                               f"{pack.blast['actions'][0]['seq']}), which no acted event in the "
                               "pack matches"]
    doctored = pack.model_dump(mode="json")
    doctored["blast"]["sessions"][1]["session"] = "sess_someone_else"
    report = verify_pack(_resign(doctored, sample.ledger.keys.signing_key), _pem(sample))
    assert len(report.problems) == 1 and "sess_someone_else" in report.problems[0]
    out = tmp_path / "pack.json"
    done = cli("pack", root, "--ledger", sample.ledger.db.path, "--out", out)
    assert done.returncode == 0, done.stderr
    done = cli("pack", "--json", "--verify", out, "--key", _pub(sample))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["valid"] is True
    text = out.read_text(encoding="utf-8")
    out.write_text(text.replace('"enterprise"', '"enterprisf"', 1), encoding="utf-8")
    done = cli("pack", "--verify", out, "--key", _pub(sample))
    assert done.returncode == 1 and "signature does not verify" in done.stderr
    assert "commitment" in done.stderr


def test_pack_fails_for_a_changed_value_removed_event_or_swapped_key(sample: Incident) -> None:
    pem = _pem(sample)
    assert sample.ledger.keys is not None
    key = sample.ledger.keys.signing_key
    pack = sample.ledger.pack(sample.fact("belief-eligible"))
    good = pack.model_dump(mode="json")

    changed = json.loads(json.dumps(good))
    changed["events"][0]["value"]["amount_eur"] = 18400
    report = verify_pack(canonical(changed) + "\n", pem)
    assert not report.valid and any("signature does not verify" in p for p in report.problems)
    assert any("does not match its commitment" in p for p in report.problems)
    # even re-signed with the ledger's own key, the value no longer matches its commitment
    report = verify_pack(_resign(changed, key), pem)
    seq = changed["events"][0]["seq"]
    assert report.problems == [f"event {seq} value does not match its commitment"]

    removed = json.loads(json.dumps(good))
    gone = removed["events"].pop(0)
    report = verify_pack(canonical(removed) + "\n", pem)
    assert not report.valid and any(f"missing event(s) {gone['seq']}" in p
                                    for p in report.problems)
    assert any("holds no assert" in p for p in verify_pack(_resign(removed, key), pem).problems)

    other = crypto.new_signing_key()
    report = verify_pack(_resign(json.loads(json.dumps(good)), other), pem)
    assert not report.valid and "not by the given key" in report.problems[0]
    report = verify_pack(pack_text(pack), crypto.public_pem(other))
    assert not report.valid and "not by the given key" in report.problems[0]


def test_pack_with_forget_certificate_and_a_forged_one(
        sample: Incident, ledger_at: Callable[[str], Any]) -> None:
    made = replay(ledger_at("forget.db"), INCIDENT)
    with made.ledger as ledger:
        assert ledger.keys is not None
        pem, key = ledger.keys.public_pem(), ledger.keys.signing_key
        plan, hooli = made.fact("wrong-plan"), made.fact("hooli-plan")
        ledger.hold(hooli, actor="user:maria", reason="dispute")
        ledger.release(hooli, actor="user:maria", reason="dispute settled")
        ledger.forget(plan, actor="user:maria", reason="error")
        ledger.forget(hooli, actor="user:maria", reason="subject_request")
        pack = ledger.pack(plan)
        other = ledger.pack(hooli).model_dump(mode="json")
    cert = pack.forget_certificate
    assert cert is not None and cert["root"] == plan and cert["operation"] == "forget"
    erased = {e["fact_id"] for e in cert["erased"]}
    assert erased == {plan, made.fact("sla-deadline")}  # the derived fact went in the cascade
    assert [e["kind"] for e in pack.events] == ["assert", "retract", "forget"]
    assert pack.events[0]["value"] is None and pack.fact["erased"] is True
    assert verify_pack(pack_text(pack), pem).valid
    assert [h["kind"] for h in other["holds"]] == ["hold", "release"]
    assert other["held_now"] is False

    forged = pack.model_dump(mode="json")
    forged["forget_certificate"] = other["forget_certificate"]
    report = verify_pack(canonical(forged) + "\n", pem)
    assert not report.valid and any(f"names {hooli}, not fact {plan}" in p
                                    for p in report.problems)
    assert [p for p in verify_pack(_resign(forged, key), pem).problems
            if "certificate" in p] != []
    forged = pack.model_dump(mode="json")
    entry = next(e for e in forged["forget_certificate"]["erased"] if e["fact_id"] == plan)
    entry["digest"] = "0" * 64
    report = verify_pack(_resign(forged, key), pem)
    assert len(report.problems) == 1 and "certificate is forged" in report.problems[0]
    forged = pack.model_dump(mode="json")
    forged["forget_certificate"] = None
    report = verify_pack(_resign(forged, key), pem)
    assert report.problems == [f"fact {plan} was erased but the pack has no forget certificate"]


@pytest.mark.slow
def test_changing_any_byte_of_a_pack_fails(sample: Incident) -> None:
    pem = _pem(sample)
    text = pack_text(sample.ledger.pack(sample.fact("belief-credit")))
    assert verify_pack(text, pem).valid
    for i in range(len(text)):
        c = text[i]
        replacement = "0" if c != "0" else "1"
        report = verify_pack(text[:i] + replacement + text[i + 1:], pem)
        assert not report.valid, (i, text[max(0, i - 30):i + 30])


def test_malformed_packs_and_exports_are_reported_not_raised(sample: Incident,
                                                            tmp_path: Path) -> None:
    pem = _pem(sample)
    good = sample.ledger.pack(sample.fact("belief-tier")).model_dump(mode="json")
    for broken in ({"format": "custody-evidence-pack/1", "events": [1, "x"]},
                   {**good, "checkpoint": {"event": {}}}, {**good, "blast": {"actions": [3]}},
                   {**good, "forget_certificate": {"erased": "x"}}, [], "not json"):
        report = verify_pack(broken if isinstance(broken, str) else canonical(broken) + "\n", pem)
        assert not report.valid and report.problems
    target = tmp_path / "broken.jsonl"
    target.write_text('{"seq":1,"kind":"checkpoint","event":{}}\n', encoding="utf-8")
    report = verify_export(target, pem)
    assert not report.valid and report.problems
