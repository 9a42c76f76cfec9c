"""The eval harness: scenario files, scoring, the ledger against the naive baseline, the CLI,
and signed reports bound to the scenarios' digest (real subprocesses for the CLI)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from custody_app.domain.errors import LedgerError
from custody_app.evaluation import (
    LedgerMemory,
    OverwriteMemory,
    builtin_scenarios_path,
    evaluate,
    load_scenarios,
)
from custody_app.evaluation.runner import run_scenario, score_read
from custody_app.evaluation.scenarios import Scenario, ScenarioFile, parse_document

BOT = {"actor": "agent:bot", "cause": {"kind": "tool", "ref": "t#1"}, "provenance": "attested"}


def cli(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "custody_app", "eval", *map(str, args)],
                          capture_output=True, text=True, timeout=300, cwd=cwd)


def write_doc(path: Path, scenarios: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"version": 1, "scenarios": scenarios}))
    return path


def put(ref: str, value: Any, **extra: Any) -> dict[str, Any]:
    return {"op": "assert", "ref": ref, "subject": "acct:1", "predicate": "plan", "value": value,
            **BOT, **extra}


def read(expect: Any, **extra: Any) -> dict[str, Any]:
    return {"op": "as_of", "subject": "acct:1", "predicate": "plan", **extra, "expect": expect}


@pytest.fixture(scope="module")
def builtin_result() -> Any:
    return evaluate(load_scenarios(), [LedgerMemory(), OverwriteMemory()])


# ---- built-in scenarios -----------------------------------------------------------------------
def test_builtin_scenarios_cover_the_incident_shapes() -> None:
    names = {s.name for s in load_scenarios().scenarios}
    assert len(names) >= 10
    assert {"correction", "poisoned-overwrite-retracted", "retraction-with-nothing-underneath",
            "valid-time-backfill", "quarantined-claim-confirmed", "forgotten-value-rewritten",
            "retention-sweep", "supersession-chain-middle-retracted",
            "derived-summary-of-retracted-fact", "reads-as-of-past-moments"} <= names


def test_builtin_scenarios_ship_inside_the_package() -> None:
    path = builtin_scenarios_path()
    assert path.parent.name == "evaluation" and path.parent.parent.name == "custody_app"


def test_ledger_is_perfect_and_the_baseline_is_not(builtin_result: Any) -> None:
    ledger, baseline = builtin_result.systems
    assert ledger.perfect, [r for r in ledger.read_scores if not r.correct] + ledger.problems
    assert ledger.reads == ledger.correct >= 20 and ledger.blast_radius == 0
    assert not baseline.perfect and baseline.reads == ledger.reads
    assert baseline.stale > 0 and baseline.blast_radius > 0


@pytest.mark.parametrize(("scenario", "stale", "blast"), [
    ("correction", 0, 0),                        # last write wins is right for a plain correction
    ("poisoned-overwrite-retracted", 2, 1),      # believes the poison, then loses the good value
    ("supersession-chain-middle-retracted", 2, 0),
    ("reads-as-of-past-moments", 3, 0),          # no transaction time: every past read is wrong
    ("derived-summary-of-retracted-fact", 1, 1),  # the summary of the poison survives
    ("rejected-claim", 2, 1),
])
def test_baseline_fails_where_an_overwrite_store_must(builtin_result: Any, scenario: str,
                                                      stale: int, blast: int) -> None:
    baseline = builtin_result.systems[1]
    [row] = [s for s in baseline.scenarios if s.name == scenario]
    assert (row.stale, row.blast_radius) == (stale, blast)


# ---- scoring --------------------------------------------------------------------------------
def _scenario(*ops: dict[str, Any]) -> Scenario:
    return parse_document({"version": 1, "scenarios": [{"name": "s", "ops": list(ops)}]})[0]


@pytest.mark.parametrize(("expect", "got", "flags"), [
    ("pro", ["pro"], (True, False, False, False)),
    ("pro", [], (False, True, False, False)),
    ("pro", ["basic"], (False, True, False, False)),
    ("pro", ["pro", "basic"], (False, True, True, False)),
    ("pro", ["pro", "evil"], (False, True, True, True)),
    (None, [], (True, False, False, False)),
    (None, ["evil"], (False, True, False, True)),
    ({"a": 1, "b": [1, 2]}, [{"b": [1, 2], "a": 1}], (True, False, False, False)),
])
def test_score_read(expect: Any, got: list[Any], flags: tuple[bool, ...]) -> None:
    scenario = _scenario(put("x", "evil", bad=True), read(expect))
    s = score_read(scenario, 1, expect, got)
    assert (s.correct, s.stale, s.contradiction, s.blast_radius) == flags


def test_a_bad_value_counts_even_before_it_is_retracted() -> None:
    """The ledger believes an attested bad write until it is retracted: blast radius counts it."""
    scenario = _scenario(
        {"op": "clock", "set": "2026-03-01T00:00:00Z"}, put("ok", "basic"),
        put("evil", "evil-plan", supersedes="@ok", bad=True), read("basic"),
        {"op": "retract", "fact_id": "@evil", "actor": "user:m", "reason": "poison"}, read("basic"))
    reads, problems = run_scenario(LedgerMemory(), scenario)
    assert problems == []
    assert [(r.got, r.blast_radius, r.correct) for r in reads] == [
        (["evil-plan"], True, False), (["basic"], False, True)]


class TwoValues:
    """Any memory can sit behind the interface; this one always answers with two values."""

    name = "doubler"

    def reset(self) -> None:
        self.last: dict[tuple[str, str], Any] = {}

    def write(self, op: dict[str, Any]) -> str | None:
        if op["op"] == "assert":
            self.last[(op["subject"], op["predicate"])] = op["value"]
        return None

    def read(self, op: dict[str, Any]) -> list[Any]:
        value = self.last.get((op["subject"], op["predicate"]))
        return [] if value is None else [value, "other"]

    def close(self) -> None:
        pass


def test_any_memory_under_test_is_scored_the_same_way() -> None:
    doc = ScenarioFile("test", "sha256:x", [_scenario(put("a", "pro"), read("pro"))])
    [score] = evaluate(doc, [TwoValues()]).systems
    assert (score.reads, score.correct, score.stale, score.contradictions) == (1, 0, 1, 1)


def test_scenarios_run_through_the_batch_machinery() -> None:
    """clock ops set transaction time (--manual-clock semantics), aliases resolve, and a
    refusal the scenario did not expect is an op error."""
    scenario = _scenario(
        {"op": "clock", "set": "2026-03-01T00:00:00Z"}, put("a", "basic"),
        {"op": "clock", "set": "2026-03-02T00:00:00Z"}, put("b", "pro", supersedes="@a"),
        read("basic", tx_at="2026-03-01T12:00:00Z"), read("pro"),
        {"op": "clock", "set": "2026-02-01T00:00:00Z"},
        {"op": "retract", "fact_id": "@a", "actor": "user:m", "reason": "x",
         "expect_error": "already_retracted"})
    reads, problems = run_scenario(LedgerMemory(), scenario)
    assert [r.correct for r in reads] == [True, True]
    assert [(p.op_index, p.expected_error, p.got_error) for p in problems] == [
        (6, None, "clock_backwards"), (7, "already_retracted", None)]


# ---- bad scenario files -----------------------------------------------------------------------
GOOD: list[dict[str, Any]] = [{"name": "one", "ops": [put("a", "pro"), read("pro")]}]


def _broken(edit: str) -> list[dict[str, Any]]:
    doc = copy.deepcopy(GOOD)
    ops = doc[0]["ops"]
    if edit == "unknown_op":
        ops.insert(1, {"op": "teleport"})
    elif edit == "read_without_expect":
        del ops[1]["expect"]
    elif edit == "read_without_predicate":
        del ops[1]["predicate"]
    elif edit == "expect_on_write":
        ops[0]["expect"] = "pro"
    elif edit == "bad_on_read":
        ops[1]["bad"] = True
    elif edit == "bad_not_bool":
        ops[0]["bad"] = "yes"
    elif edit == "alias_to_nowhere":
        ops.insert(1, {"op": "retract", "fact_id": "@ghost", "actor": "user:m", "reason": "x"})
    elif edit == "bad_field":
        ops[0]["colour"] = "red"
    elif edit == "bad_time":
        ops.insert(1, {"op": "clock", "set": "yesterday"})
    elif edit == "expect_is_bad":
        ops[0]["bad"] = True
    elif edit == "nan_value":
        ops[0]["value"] = float("nan")
    return doc


@pytest.mark.parametrize(("edit", "index", "words"), [
    ("unknown_op", 1, "unknown op 'teleport'"),
    ("read_without_expect", 1, "needs 'expect'"),
    ("read_without_predicate", 1, "needs 'predicate'"),
    ("expect_on_write", 0, "'expect' belongs on a read"),
    ("bad_on_read", 1, "'bad'"),
    ("bad_not_bool", 0, "'bad'"),
    ("alias_to_nowhere", 1, "alias @ghost"),
    ("bad_field", 0, "unknown field 'colour'"),
    ("bad_time", 1, "yesterday"),
    ("expect_is_bad", 1, "equals a value marked bad"),
    ("nan_value", 0, "not canonical JSON"),
])
def test_bad_scenario_is_rejected_naming_scenario_op_and_problem(
        tmp_path: Path, edit: str, index: int, words: str) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"version": 1, "scenarios": _broken(edit)}))
    with pytest.raises(LedgerError) as caught:
        load_scenarios(path)
    err = caught.value
    assert err.code == "scenario_invalid"
    assert (err.details["scenario"], err.details["op_index"]) == ("one", index)
    assert f"scenario 'one', op index {index}: " in err.message and words in err.message


@pytest.mark.parametrize(("doc", "words"), [
    ({"version": 2, "scenarios": GOOD}, "version must be 1"),
    ({"version": 1, "scenarios": []}, "non-empty list"),
    ({"version": 1, "scenarios": GOOD + GOOD}, "already exists"),
    ({"version": 1, "scenarios": [{"name": "x", "ops": []}]}, "'ops' must be"),
    ({"version": 1, "scenarios": [{"ops": GOOD[0]["ops"]}]}, "has no 'name'"),
])
def test_bad_file_shapes_are_rejected(doc: dict[str, Any], words: str) -> None:
    with pytest.raises(LedgerError, match=words):
        parse_document(doc)


def test_cli_rejects_a_bad_file_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"version": 1, "scenarios": _broken("unknown_op")}))
    done = cli("--scenarios", path)
    assert done.returncode == 2 and done.stdout == ""
    assert "scenario 'one', op index 1: unknown op 'teleport' (scenario_invalid)" in done.stderr


# ---- the command ------------------------------------------------------------------------------
def test_cli_prints_both_systems_and_exits_0_when_the_ledger_is_perfect() -> None:
    done = cli("--baseline")
    assert done.returncode == 0, done.stderr
    assert "| ledger correct |" in done.stdout and "| baseline correct |" in done.stdout
    assert "ledger: " in done.stdout and ": perfect" in done.stdout
    assert "baseline: " in done.stdout and "BELOW PERFECT" in done.stdout


def test_cli_exits_1_when_the_ledger_scores_below_perfect(tmp_path: Path) -> None:
    """A regression (here: a scenario expecting an overwrite store's answer) fails loudly."""
    path = write_doc(tmp_path / "s.json", [{"name": "wants-overwrite", "ops": [
        {"op": "clock", "set": "2026-03-01T00:00:00Z"}, put("a", "basic"),
        {"op": "clock", "set": "2026-03-02T00:00:00Z"}, put("b", "pro", valid_from="2025-01-01T00:00:00Z",
                                                           valid_to="2025-02-01T00:00:00Z"),
        read("pro")]}])
    done = cli("--scenarios", path, "--baseline")
    assert done.returncode == 1
    assert "BELOW PERFECT" in done.stdout
    assert "scenario 'wants-overwrite' op index 4: expected \"pro\", got [\"basic\"]" in done.stderr


# ---- signed reports ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def signed_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("signed")
    key = tmp / "eval.key"
    done = cli("--keygen", key)
    assert done.returncode == 0, done.stderr
    assert (key.stat().st_mode & 0o777) == 0o600 and Path(f"{key}.pub").exists()
    report = tmp / "report.json"
    done = cli("--baseline", "--out", report, "--sign", key)
    assert done.returncode == 0, done.stderr
    return {"dir": tmp, "key": key, "pub": Path(f"{key}.pub"), "report": report}


def test_signed_report_is_bound_to_the_scenarios_and_verifies(signed_report: dict[str, Path]) -> None:
    report = json.loads(signed_report["report"].read_text())
    assert report["scenarios_digest"] == load_scenarios().digest
    assert report["ledger_perfect"] is True and report["signature"]["alg"] == "ed25519"
    assert [s["system"] for s in report["systems"]] == ["ledger", "baseline"]
    done = cli("--verify", signed_report["report"], "--key", signed_report["pub"])
    assert done.returncode == 0, done.stdout + done.stderr
    check = json.loads(done.stdout)
    assert check["valid"] and check["signature_ok"] and check["digest_ok"]


@pytest.mark.parametrize("tamper", ["score", "digest", "perfect_flag"])
def test_changed_report_fails_verification(signed_report: dict[str, Path], tmp_path: Path,
                                           tamper: str) -> None:
    report = json.loads(signed_report["report"].read_text())
    if tamper == "score":
        report["systems"][1]["stale"] = 0
    elif tamper == "digest":
        report["scenarios_digest"] = "sha256:" + "0" * 64
    else:
        report["ledger_perfect"] = False
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(report))
    done = cli("--verify", bad)
    assert done.returncode == 1
    assert json.loads(done.stdout)["signature_ok"] is False


def test_report_for_other_scenarios_fails_the_digest_check(signed_report: dict[str, Path],
                                                           tmp_path: Path) -> None:
    doc = json.loads(builtin_scenarios_path().read_text())
    doc["scenarios"] = doc["scenarios"][:3]
    other = tmp_path / "fewer.json"
    other.write_text(json.dumps(doc))
    done = cli("--verify", signed_report["report"], "--scenarios", other)
    check = json.loads(done.stdout)
    assert done.returncode == 1 and check["signature_ok"] and not check["digest_ok"]
    assert "was made on scenarios" in check["problem"]


def test_report_signed_by_another_key_fails_under_the_expected_key(
        signed_report: dict[str, Path], tmp_path: Path) -> None:
    assert cli("--keygen", tmp_path / "other.key").returncode == 0
    report = tmp_path / "r.json"
    assert cli("--out", report, "--sign", tmp_path / "other.key").returncode == 0
    assert cli("--verify", report).returncode == 0          # self-consistent
    done = cli("--verify", report, "--key", signed_report["pub"])
    assert done.returncode == 1 and "given public key" in json.loads(done.stdout)["problem"]


def test_unsigned_report_and_bad_key_are_refused(signed_report: dict[str, Path],
                                                 tmp_path: Path) -> None:
    plain = tmp_path / "plain.json"
    assert cli("--out", plain).returncode == 0
    done = cli("--verify", plain)
    assert done.returncode == 1 and "not signed" in json.loads(done.stdout)["problem"]
    done = cli("--out", tmp_path / "x.json", "--sign", signed_report["pub"])
    assert done.returncode == 2 and "(key_invalid)" in done.stderr
    assert not (tmp_path / "x.json").exists()
    done = cli("--sign", signed_report["key"])
    assert done.returncode == 2 and "--sign needs --out" in done.stderr
