"""Four gaps the merged command-line work left (DESIGN 11, 13, 14; issue 32), in real
subprocesses on real ledger files: `erasures` pages like every list; a sweep that skips held
facts is no failure; `serve` says which policy it will adopt; a `tool_output` with no canonical
form is refused by name, writing nothing, through `--batch` and the Python API."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from custody_app import Ledger
from custody_app.domain.errors import LedgerError
from custody_app.domain.policy import load_policy
from custody_app.receipts import sign
from tests.test_cli_grammar import _env, cli, file_digest, ops, policy_events, policy_file, trusted
from tests.test_receipt_binding import AT, CRM_ARGS, CRM_OUT, ISSUER, KEY, SESSION, policy

CUTOFF = "2999-01-01T00:00:00Z"


@pytest.fixture
def erased(tmp_path: Path) -> tuple[Path, list[str]]:
    """A ledger with three single-fact forgets (three erasures) and one fact left."""
    ledger = tmp_path / "l.db"
    assert cli("init", "--ledger", ledger).returncode == 0
    done = cli("--batch", "-", "--ledger", ledger,
               stdin=ops(*(trusted(f"acct:{n}", "plan", f"value-{n}-0123456789") for n in range(4))))
    assert done.returncode == 0, done.stderr
    facts = [json.loads(line)["result"]["fact_id"] for line in done.stdout.splitlines()]
    for fact in facts[:3]:
        done = cli("forget", fact, "--reason", "subject_request", "--ledger", ledger)
        assert done.returncode == 0, done.stdout + done.stderr
    return ledger, facts


# ---- 1. erasures pages with --after / --limit ------------------------------------------------

def test_erasures_pages_with_after_and_limit(erased: tuple[Path, list[str]]) -> None:
    ledger, facts = erased
    everything = json.loads(cli("erasures", "--json", "--ledger", ledger).stdout)
    assert [r["roots"] for r in everything["erasures"]] == [[f] for f in facts[:3]]
    assert everything["next_after"] is None
    seen: list[list[str]] = []
    after: int | None = None
    for _ in range(3):
        extra = ["--after", str(after)] if after is not None else []
        page = json.loads(cli("erasures", "--limit", "1", *extra, "--json", "--ledger",
                              ledger).stdout)
        assert len(page["erasures"]) == 1
        seen.append(page["erasures"][0]["roots"])
        after = page["next_after"]
    assert seen == [[f] for f in facts[:3]] and after is None
    text = cli("erasures", "--limit", "2", "--ledger", ledger)
    assert text.returncode == 0, text.stderr
    first = json.loads(cli("erasures", "--limit", "2", "--json", "--ledger", ledger).stdout)
    assert f"next page: {first['next_after']}" in text.stdout
    assert "2 erasure(s)" in text.stdout


@pytest.mark.parametrize("bad", ["abc", "-5", "1; DROP TABLE events", "", "1e3", "\u0661\u0662",
                                 "99999999", "9" * 40, "\x1b[31m7"])
def test_erasures_refuses_a_hostile_or_unknown_cursor(erased: tuple[Path, list[str]],
                                                      bad: str) -> None:
    ledger, _ = erased
    before = file_digest(ledger)
    done = cli("erasures", "--after", bad, "--ledger", ledger)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "(bad_request)" in done.stderr and "--after" in done.stderr
    assert "\x1b" not in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == "" and file_digest(ledger) == before
    assert cli("erasures", "--limit", "0", "--ledger", ledger).returncode == 1


# ---- 2. a sweep that skips held facts is no failure ------------------------------------------

def test_a_real_sweep_that_skips_a_held_fact_exits_0_listing_it(tmp_path: Path) -> None:
    ledger = tmp_path / "l.db"
    assert cli("init", "--ledger", ledger).returncode == 0
    done = cli("--batch", "-", "--ledger", ledger,
               stdin=ops(trusted("acct:1", "plan", "ZQX-SWEEP-0001"),
                         trusted("acct:2", "tier", "ZQX-SWEEP-0002")))
    facts = [json.loads(line)["result"]["fact_id"] for line in done.stdout.splitlines()]
    assert cli("hold", facts[1], "--reason", "litigation", "--ledger", ledger).returncode == 0
    done = cli("sweep", "--before", CUTOFF, "--ledger", ledger)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "expired 1 fact(s)" in done.stdout
    assert "skipped, on legal hold: 1 fact(s)" in done.stdout
    assert f"{facts[1]}  acct:2 tier = " in done.stdout  # subject and predicate, not a bare id
    assert "Retention sweep certificate" in done.stdout
    # --json agrees: exit 0, the held fact listed, the certificate complete.
    again = cli("sweep", "--before", CUTOFF, "--json", "--ledger", ledger)
    assert again.returncode == 0, again.stdout + again.stderr
    out = json.loads(again.stdout)
    assert out["held"] == [facts[1]] and out["expired"] == []
    with Ledger.open(ledger, readonly=True) as led:
        assert led.why(facts[1]).fact.status != "expired"
        assert led.why(facts[0]).fact.status == "expired"


def test_a_batch_sweep_that_skips_a_held_fact_is_ok(tmp_path: Path) -> None:
    ledger = tmp_path / "l.db"
    assert cli("init", "--ledger", ledger).returncode == 0
    done = cli("--batch", "-", "--ledger", ledger, stdin=ops(
        {**trusted("acct:1", "plan", "ZQX-SWEEP-0001"), "id": "a", "ref": "a"},
        {**trusted("acct:2", "tier", "ZQX-SWEEP-0002"), "id": "b", "ref": "b"},
        {"op": "hold", "id": "h", "fact_id": "@b", "reason": "litigation", "actor": "user:a"},
        {"op": "sweep", "id": "sw", "before": CUTOFF, "actor": "user:a"}))
    assert done.returncode == 0, done.stdout + done.stderr
    by_id = {r["id"]: r for r in map(json.loads, done.stdout.splitlines())}
    sweep = by_id["sw"]
    assert sweep["ok"] is True, sweep
    assert sweep["result"]["held"] == [by_id["b"]["result"]["fact_id"]]
    assert sweep["result"]["expired"] == [by_id["a"]["result"]["fact_id"]]
    assert sweep["result"]["certificate"]["complete"] is True


# ---- 3. serve names the policy it will adopt -------------------------------------------------

def _serve(ledger: Path, *extra: str | Path) -> subprocess.CompletedProcess[str]:
    """`serve` over stdio with stdin at its end: it starts, says what it says, and stops."""
    return subprocess.run([sys.executable, "-m", "custody_app", "serve", "--agent", "agent:bot",
                           "--ledger", str(ledger), *map(str, extra)], capture_output=True,
                          text=True, timeout=120, env=_env(), stdin=subprocess.DEVNULL)


def test_serve_given_another_policy_says_so_naming_both_hashes(tmp_path: Path) -> None:
    mine, other = policy_file(tmp_path, "team:a"), policy_file(tmp_path, "team:b", "other.toml")
    ledger = tmp_path / "l.db"
    assert cli("init", "--ledger", ledger, "--policy", mine).returncode == 0
    recorded, given = load_policy(mine).hash, load_policy(other).hash
    done = _serve(ledger, "--policy", other)
    assert done.returncode == 0, done.stderr
    assert given[:12] in done.stderr and recorded[:12] in done.stderr
    assert "adopts" in done.stderr and str(other) in done.stderr
    assert policy_events(ledger) == [recorded]  # nothing written: nothing adopted yet
    # Under the recorded policy, or without --policy, serve says nothing about adoption.
    for extra in (("--policy", mine), ()):
        quiet = _serve(ledger, *extra)
        assert quiet.returncode == 0, quiet.stderr
        assert "adopt" not in quiet.stderr and given[:12] not in quiet.stderr


def test_serve_names_a_hostile_policy_path_escaped(tmp_path: Path) -> None:
    mine = policy_file(tmp_path, "team:a")
    other = policy_file(tmp_path, "team:b", "x\x1b[31mred.toml")
    ledger = tmp_path / "l.db"
    assert cli("init", "--ledger", ledger, "--policy", mine).returncode == 0
    done = _serve(ledger, "--policy", other)
    assert done.returncode == 0, done.stderr
    assert load_policy(other).hash[:12] in done.stderr and "\x1b" not in done.stderr


# ---- 4. a tool_output with no canonical form is refused by name ------------------------------

def _receipt(now: str | None = None, audience: str | None = None) -> dict[str, Any]:
    """A live receipt for the ledger `audience`: issued now (a batch runs on the wall clock),
    or at the manual clock's start for the API's test ledger."""
    now = now or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return sign(KEY, issuer=ISSUER, receipt_id="rc-crm", tool="crm.lookup", session=SESSION,
                arguments=CRM_ARGS, output=CRM_OUT, issued_at=now, subject="acct:42",
                audience=audience)


def _ledger_id(ledger: Path) -> str:
    """The id a receipt for `ledger` names as its audience, as `verify` reports it."""
    return str(json.loads(cli("verify", "--ledger", ledger, "--json").stdout)["ledger_id"])


def _cited(output: Any, audience: str) -> dict[str, Any]:
    return {"op": "assert", "subject": "acct:42", "predicate": "billed_seats", "value": 120,
            "actor": "agent:bot", "session": SESSION, "tool_output": output,
            "cause": {"kind": "tool", "ref": "call-1", "receipt": _receipt(audience=audience),
                      "pointer": "/billed_seats"}}


def _deep(levels: int) -> Any:
    deep: Any = 120
    for _ in range(levels):
        deep = [deep]
    return deep


# Each output's "x" holds a JSON token written as is (Infinity and NaN are not JSON values
# json.dumps would write for a test, but a batch line may hold them).
HOSTILE_TOKENS = {
    "int": str(2**60), "negative_int": str(-(2**53)), "infinity": "Infinity",
    "minus_infinity": "-Infinity", "nan": "NaN", "long_int": str(10**4000),
    "deep": json.dumps(_deep(60)), "huge": json.dumps("x" * (1 << 20)),
}


def _hostile_line(kind: str, audience: str) -> str:
    line = json.dumps(_cited({**CRM_OUT, "x": "@@TOKEN@@"}, audience))
    return line.replace('"@@TOKEN@@"', HOSTILE_TOKENS[kind])


@pytest.mark.parametrize("kind", sorted(HOSTILE_TOKENS))
def test_a_batch_tool_output_with_no_canonical_form_is_refused_writing_nothing(
        tmp_path: Path, kind: str) -> None:
    pol = tmp_path / "p.toml"
    pol.write_text(policy(), encoding="utf-8")
    ledger = tmp_path / "l.db"
    assert cli("init", "--ledger", ledger, "--policy", pol).returncode == 0
    # The same op with a good output is verified: the receipt is live, the path reaches covers.
    assert cli("init", "--ledger", tmp_path / "g.db", "--policy", pol).returncode == 0
    good = cli("--batch", "-", "--ledger", tmp_path / "g.db", "--policy", pol,
               stdin=json.dumps(_cited(CRM_OUT, _ledger_id(tmp_path / "g.db"))) + "\n")
    assert json.loads(good.stdout.splitlines()[0])["result"]["provenance"] == "verified"
    line = _hostile_line(kind, _ledger_id(ledger))
    before = file_digest(ledger)
    done = cli("--batch", "-", "--ledger", ledger, "--policy", pol, stdin=line + "\n")
    assert "Traceback" not in done.stderr and "internal_error" not in done.stdout
    result = json.loads(done.stdout.splitlines()[0])
    assert result["ok"] is False, result
    if kind != "deep":  # a line nested too deep is refused whole, before it is parsed
        assert result["error"]["code"] == "bad_request", result
        assert "tool_output" in result["error"]["message"]
        assert len(result["error"]["message"]) < 400  # never quotes 4,000 digits
    assert done.returncode == 1
    assert file_digest(ledger) == before


@pytest.mark.parametrize("output", [
    {**CRM_OUT, "big": 2**60}, {**CRM_OUT, "big": -(2**53)}, {**CRM_OUT, "f": float("inf")},
    {**CRM_OUT, "f": float("nan")}, {**CRM_OUT, "s": "\ud800"}, {**CRM_OUT, 1: "int key"},
    {**CRM_OUT, "d": _deep(3000)}, {**CRM_OUT, "h": "x" * (1 << 21)}])
def test_an_api_tool_output_with_no_canonical_form_is_refused_writing_nothing(
        make_env: Any, output: Any) -> None:
    env = make_env(policy())
    cause = {"kind": "tool", "ref": "call-1", "receipt": _receipt(AT, env.ledger.ledger_id),
             "pointer": "/billed_seats"}
    ok = env.ledger.assert_fact("acct:42", "billed_seats", 120, actor="agent:bot", cause=cause,
                                session=SESSION, tool_output=CRM_OUT)
    assert ok.provenance == "verified"
    before = env.snapshot()
    with pytest.raises(LedgerError) as refused:
        env.ledger.assert_fact("acct:42", "billed_seats", 120, actor="agent:bot", cause=cause,
                               session=SESSION, tool_output=output)
    assert refused.value.code == "bad_request" and "tool_output" in refused.value.message
    assert refused.value.details.get("field") == "tool_output"
    assert env.snapshot() == before


@pytest.mark.parametrize("arguments", [{**CRM_ARGS, "n": 2**53}, {**CRM_ARGS, "f": float("nan")},
                                       {**CRM_ARGS, "s": "\udfff"}])
def test_api_tool_arguments_with_no_canonical_form_are_refused_by_name(make_env: Any,
                                                                       arguments: Any) -> None:
    env = make_env(policy())
    cause = {"kind": "tool", "ref": "call-1", "receipt": sign(
        KEY, issuer=ISSUER, receipt_id="rc-crm", tool="crm.lookup", session=SESSION,
        arguments=CRM_ARGS, output=CRM_OUT, issued_at=AT, audience=env.ledger.ledger_id),
        "pointer": "/billed_seats", "subject_pointer": "/account"}
    before = env.snapshot()
    with pytest.raises(LedgerError) as refused:
        env.ledger.assert_fact("acct:42", "billed_seats", 120, actor="agent:bot", cause=cause,
                               session=SESSION, tool_output=CRM_OUT, tool_arguments=arguments)
    assert refused.value.code == "bad_request" and "tool_arguments" in refused.value.message
    assert env.snapshot() == before
