"""explain in full on the sample refund (ten answers, in order) and the signed action pack,
checked offline with the ledger deleted, failing after any one changed byte. A contract module
(tests/conftest.py): every test runs on a SQLite file and on a server."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from custody_app.evidence.actionpack import verify_action_pack
from custody_app.evidence.explain import QUESTIONS
from store.address import address_of
from tests.conftest import delete_ledger
from tests.test_batch_cli import cli, results
from tests.test_blast import DEMO_POLICY, bound_incident


@pytest.fixture(scope="module")
def replayed(module_ledger_at: Callable[[str], Any], tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[Path, dict[str, dict[str, object]]]:
    path = module_ledger_at("inc.db")
    folder = tmp_path_factory.mktemp("explain")
    done = cli("--batch", bound_incident(path, folder), "--ledger", path, "--manual-clock",
               "--policy", DEMO_POLICY, cwd=folder)
    assert done.returncode == 0, done.stderr
    return path, {str(r["id"]): r for r in results(done)}


def test_the_sample_lookup_is_verified_by_its_receipt(replayed: tuple[Path, dict]) -> None:
    path, out = replayed
    assert out["crm-seats"]["result"]["provenance"] == "verified"
    checked = cli("verify", "--json", "--ledger", path, "--key", address_of(path).sibling(".pub"))
    assert checked.returncode == 0 and json.loads(checked.stdout)["valid"] is True


def test_explain_on_the_sample_refund_prints_all_ten_answers_in_order(
        replayed: tuple[Path, dict]) -> None:
    path, out = replayed
    text = cli("explain", "RF-2026-0412", "--ledger", path)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()[:10]
    assert [line.split(":", 1)[0] for line in lines] == list(QUESTIONS)
    answer = dict(line.split(": ", 1) for line in lines)
    plan = out["wrong-plan"]["result"]["fact_id"]
    assert answer["who acted"] == "agent:support-bot in session sess_0401_umbrella"
    assert answer["who authorised it"].startswith("user:ops-lead under grant grant:refunds")
    assert "rcpt-bill-RF-2026-0412" in answer["what was allowed"]
    assert f"{plan} acct:4520 plan (then active, now retracted)" in answer["what the agent saw"]
    assert answer["what it did"].startswith("billing.issue_refund RF-2026-0412 -> issued")
    assert answer["why"].startswith("message msg_01J0T6120A")
    assert "receipt rcpt-bill-RF-2026-0412" in answer["what evidence exists"]
    assert "last signed checkpoint" in answer["what evidence exists"]
    assert answer["can it be verified"].startswith("receipt: ok; chain: valid")
    assert "to review: this action" in answer["what needs reversal"] and plan in answer[
        "what needs reversal"]
    as_json = json.loads(cli("explain", "RF-2026-0412", "--ledger", path, "--json").stdout)
    assert [a["question"] for a in as_json["answers"]] == list(QUESTIONS)


def test_the_action_pack_verifies_offline_with_the_ledger_deleted_and_fails_on_any_byte(
        replayed: tuple[Path, dict], tmp_path: Path, ledger_copy: Callable[[Any], Any]) -> None:
    path, _ = replayed
    copy = ledger_copy(path)
    own = address_of(copy)
    pack = tmp_path / "pack.json"
    made = cli("explain", "RF-2026-0412", "--ledger", copy, "--out", pack)
    assert made.returncode == 0, made.stderr
    again = cli("explain", "RF-2026-0412", "--ledger", copy, "--out", pack)
    assert again.returncode == 1 and "output_exists" in again.stderr
    master = address_of(own.default_keystore()).master_key_file()
    assert master.exists()
    precious = cli("explain", "RF-2026-0412", "--ledger", copy, "--out", master, "--force")
    assert precious.returncode == 1 and "output_protected" in precious.stderr
    key = tmp_path / "ledger.pub"
    key.write_bytes(own.sibling(".pub").read_bytes())
    delete_ledger(copy)
    ok = cli("explain", "--json", "--verify", pack, "--key", key)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["valid"] is True and "who authorised it: user:ops-lead" in ok.stderr
    offline = dict(line.split(": ", 1) for line in ok.stderr.splitlines()[:10])
    assert list(offline) == list(QUESTIONS)
    for question in ("what the agent saw", "can it be verified", "what depended on it",
                     "what needs reversal"):
        assert offline[question].endswith("the ledger is absent]"), question
    assert "ledger is absent" not in offline["who acted"]
    data = pack.read_bytes()
    pem = key.read_text()
    for i in range(len(data)):  # every byte, each changed once
        changed = bytearray(data)
        changed[i] = ord("x") if changed[i] != ord("x") else ord("y")
        try:
            text = changed.decode("utf-8")
        except UnicodeDecodeError:
            continue
        report = verify_action_pack(text, pem)
        assert not report.valid and report.problems, i
    changed = bytearray(data)
    changed[len(data) // 2] ^= 0x01
    bad = tmp_path / "bad.json"
    bad.write_bytes(bytes(changed))
    failed = cli("explain", "--verify", bad, "--key", key)
    assert failed.returncode == 1 and "check failed" in failed.stderr
