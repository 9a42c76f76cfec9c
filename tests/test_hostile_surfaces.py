"""Hostile strings and streams (DESIGN sections 10 and 13): identifiers with control or
bidirectional characters are refused at every door; stored strings never reach a terminal raw;
JSON output escapes U+2028/U+2029; batch fields are strict, keys unique, nesting limited once;
policy defects are policy_invalid; MCP answers oversized and over-deep messages; a closed or full
stdout ends quietly."""

from __future__ import annotations

import hashlib
import json
import os
import select
import subprocess
import sys
import time
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from custody_app import Ledger
from custody_app.domain.commands import MAX_NESTING
from custody_app.domain.errors import LedgerError, suggest
from custody_app.domain.escaping import escape_text, escaped, json_text, unsafe_character
from custody_app.interfaces.mcp.tools import MemoryTools
from custody_app.ledger.ops import result_line

CLI = str(Path(sys.executable).parent / "custody-app")
BATCH_DOC = Path(__file__).resolve().parent.parent / "docs" / "batch.md"
CAUSE = {"kind": "tool", "ref": "r"}
ESC = "\x1b]0;pwned\x07\x1b[2J"
HOSTILE = ["\x1b[31m", "\x00", "\x7f", "\x9b", "\u202e", "\u2066", "a\nb", "\u2028"]


def run(*args: str, stdin: str | None = None, stdout: Any = subprocess.PIPE,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
    return subprocess.run([CLI, *args], input=stdin, stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=timeout, env=env)


def line(**fields: Any) -> str:
    return json.dumps({"op": "assert", "subject": "acct:1", "predicate": "plan", "value": "v",
                       "actor": "agent:x", "cause": CAUSE, **fields})


@pytest.mark.parametrize("bad", HOSTILE)
@pytest.mark.parametrize("field", ["subject", "predicate", "space", "session", "actor", "cause.ref"])
def test_identifiers_refuse_control_and_bidi_characters_in_batch_api_and_mcp(
        tmp_path: Path, field: str, bad: str) -> None:
    value = f"agent:x{bad}" if field == "actor" else f"x{bad}y"
    fields: dict[str, Any] = ({"cause": {**CAUSE, "ref": value}} if field == "cause.ref"
                              else {field: value})
    done = run("--create", "--batch", "-", "--ledger", str(tmp_path / "l.db"), stdin=line(**fields) + "\n")
    result = json.loads(done.stdout)
    assert done.returncode == 1 and result["error"]["code"] in ("bad_request", "invalid_actor")
    assert result["error"]["field"] == field
    with Ledger.open(tmp_path / "l.db") as ledger:
        args = {"subject": "acct:1", "predicate": "plan", "actor": "agent:x", "cause": CAUSE,
                **fields}
        with pytest.raises(LedgerError) as caught:
            ledger.assert_fact(args.pop("subject"), args.pop("predicate"), "v", **args)
        assert caught.value.code in ("bad_request", "invalid_actor")
        if field not in ("actor", "session"):  # the server fixes those two itself
            mcp = {"subject": "acct:1", "predicate": "plan", "value": "v", "cause": CAUSE, **fields}
            with pytest.raises(LedgerError) as caught:
                MemoryTools(ledger, "agent:bot").call("memory_write", mcp, "mcp-s")
            assert caught.value.code == "bad_request"
        assert ledger.db.events.count() == 0


@pytest.mark.parametrize("bad", HOSTILE)
@pytest.mark.parametrize("field", ["subject", "tool", "ref", "session"])
def test_an_action_refuses_control_and_bidi_characters_in_its_identifiers(
        tmp_path: Path, field: str, bad: str) -> None:
    """The action's subject (the customer it concerned) is an identifier like a fact's."""
    fields = {"session": "s1", "tool": "billing.refund", "ref": "RF-1", "subject": "acct:1",
              field: f"x{bad}y"}
    with Ledger.open(tmp_path / "l.db") as ledger:
        with pytest.raises(LedgerError) as caught:
            ledger.act(fields.pop("session"), fields.pop("tool"), fields.pop("ref"), "issued",
                       actor="agent:x", **fields)
        assert caught.value.code == "bad_request"
        assert ledger.db.events.count() == 0


def test_the_escape_function_leaves_clean_text_alone_and_neutralises_the_rest() -> None:
    assert escape_text("acct:42 plan ünïcode ✓") == "acct:42 plan ünïcode ✓"
    shown = escape_text(ESC + "\u202eevil\u2029")
    assert not any(ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 or c in "\u202e\u2029" for c in shown)
    assert shown == "\\x1b]0;pwned\\x07\\x1b[2J\\u202eevil\\u2029"
    assert escape_text("a\nb", keep_newlines=True) == "a\nb"


def _terminal_safe(text: str) -> bool:
    return not any((ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) < 0xa0
                   or c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069" for c in text)


def test_recall_blast_explain_and_certificates_print_stored_strings_escaped(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    with Ledger.open(db) as ledger:
        fact = ledger.assert_fact("acct:1", "plan", f"pro {ESC} \u202etier", actor="user:a",
                                  cause=CAUSE, session="s1", provenance="attested")
        ledger.recall("pro", session="s1")
        ledger.act(session="s1", tool="crm", ref="t1", outcome="done", actor="agent:x")
        ledger.retract(fact.fact_id, actor="user:a", reason=f"why {ESC}\u202e")
        other = ledger.assert_fact("acct:2", "plan", f"basic {ESC}", actor="user:a", cause=CAUSE,
                                  provenance="attested")
    outputs = [run("recall", "basic", "--ledger", str(db)),
               run("blast", fact.fact_id, "--ledger", str(db)),
               run("explain", "t1", "--ledger", str(db)),
               run("history", fact.fact_id, "--ledger", str(db)),
               run("forget", other.fact_id, "--ledger", str(db), "--actor", "user:a", "--reason",
                   "error")]
    for done in outputs:
        assert done.returncode == 0, done.stderr
        assert _terminal_safe(done.stdout) and _terminal_safe(done.stderr), done.stdout
    assert "\\u001b]0;pwned" in outputs[0].stdout and "why \\x1b]0;pwned" in outputs[1].stdout


def test_the_terminal_app_is_handed_escaped_read_models(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "l.db") as ledger:
        fact = ledger.assert_fact("acct:1", "plan", f"v {ESC}", actor="user:a", cause=CAUSE)
        ledger.retract(fact.fact_id, actor="user:a", reason=f"r {ESC}")
        shown = escaped(ledger.history(fact.fact_id))
    assert shown.fact_id == fact.fact_id  # clean ids are unchanged, so screens can act on them
    assert _terminal_safe(json.dumps(shown.model_dump(mode="json"), ensure_ascii=False))


def test_json_output_escapes_the_unicode_line_separators(tmp_path: Path) -> None:
    done = run("--create", "--batch", "-", "--ledger", str(tmp_path / "l.db"),
               stdin=line(value="a\u2028b\u2029c", actor="user:a", provenance="attested")
               + '\n{"op":"as_of"}\n')
    assert done.returncode == 0, done.stdout
    assert "\u2028" not in done.stdout and "\u2029" not in done.stdout
    facts = json.loads(done.stdout.splitlines()[1])["result"]["facts"]
    assert facts[0]["value"] == "a\u2028b\u2029c"


def test_batch_booleans_are_never_numbers_and_numbers_never_booleans(tmp_path: Path) -> None:
    lines = ['{"op":"recall","query":"x","k":true}', '{"op":"recall","query":"x","k":"3"}',
             '{"op":"sweep","before":"2026-01-01T00:00:00Z","dry_run":1}',
             '{"op":"recall","query":"x","include_claimed":0}']
    done = run("--create", "--batch", "-", "--ledger", str(tmp_path / "l.db"), stdin="\n".join(lines) + "\n")
    results = [json.loads(r) for r in done.stdout.splitlines()]
    assert [r["error"]["field"] for r in results] == ["k", "k", "dry_run", "include_claimed"]


@pytest.mark.parametrize("text, key", [('{"op":"recall","query":"x","query":"y"}', "query"),
                                       ('{"op":"recall","op":"verify","query":"x"}', "op"),
                                       ('{"op":"recall","query":"x","k":{"a":1,"a":2}}', "a")])
def test_a_duplicate_key_is_bad_json_naming_the_key(tmp_path: Path, text: str, key: str) -> None:
    done = run("--create", "--batch", "-", "--ledger", str(tmp_path / "l.db"), stdin=text + "\n")
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "bad_json" and error["key"] == key and repr(key) in error["message"]


def _nested(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


def test_one_nesting_limit_stated_in_the_batch_docs_and_the_error(tmp_path: Path) -> None:
    lines = [line(value=_nested(MAX_NESTING), actor="user:a", subject="acct:ok"),
             line(value=_nested(MAX_NESTING + 1), actor="user:a"),
             json.dumps({"op": "recall", "query": "x", "space": _nested(MAX_NESTING + 1)})]
    done = run("--create", "--batch", "-", "--ledger", str(tmp_path / "l.db"), stdin="\n".join(lines) + "\n")
    ok, deep, other = [json.loads(r) for r in done.stdout.splitlines()]
    assert ok["ok"], ok
    message = "nests deeper than 64 levels of lists and objects"
    assert MAX_NESTING == 64 and message in deep["error"]["message"] and deep["error"]["field"] == "value"
    assert message in other["error"]["message"] and other["error"]["field"] == "space"
    assert f"field 'value' {message}" in " ".join(BATCH_DOC.read_text().split())
    with Ledger.open(tmp_path / "l.db") as ledger, pytest.raises(LedgerError) as caught:
        ledger.assert_fact("acct:1", "p", _nested(MAX_NESTING + 1), actor="user:a", cause=CAUSE)
    assert message in caught.value.message


@pytest.mark.parametrize("text, key", [
    ('[retention]\nwindows = {"org" = "P99999999999D"}\n', "retention.windows.org"),
    ('[retention]\nwindows = {"org" = "P999999D"}\n', "retention.windows.org"),
    ('[retention]\nwindows = {"org" = "P0D"}\n', "retention.windows.org"),
    ('[retention]\nwindows = {"org" = "PT99999999999999999999H"}\n', "retention.windows.org"),
    ('[recall]\nann_min_facts = "500"\n', "recall.ann_min_facts"),
    ('[recall]\nann_min_facts = 0\n', "recall.ann_min_facts"),
    ('[recall]\ndecay = -1.0\n', "recall.decay"),
    ('[recall]\nhot = nan\n', "recall.hot"),
    # Past what the policy's canonical JSON holds (found by bench/bench_fuzz.py: it raised
    # rfc8785's own error, a traceback, instead of this refusal).
    ('[recall]\nann_min_facts = 9007199254740993\n', "recall.ann_min_facts"),
    ('[quarantine]\ncorroborate = -9223372036854775808\n', "quarantine.corroborate"),
    ('[recall]\ndecay_by_space = {"org" = 9007199254740992}\n', "recall.decay_by_space.org"),
    ('[recall]\nann_probe = inf\n', "recall.ann_probe"),
    ('[recall]\ndecay_by_space = {"org" = -inf}\n', "recall.decay_by_space.org"),
    ('[provenance]\nallow_declared = 1\n', "provenance.allow_declared"),
    ('default_space = 1979-05-27\n', "default_space"),
    ('default_space = true\n', "default_space"),
])
def test_every_policy_defect_is_policy_invalid_naming_file_and_key(tmp_path: Path, text: str,
                                                                   key: str) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text(text)
    assert run("init", "--ledger", str(tmp_path / "l.db")).returncode == 0
    files = sorted(tmp_path.glob("l.db*"))
    before = {f.name: f.read_bytes() for f in files}
    done = run("verify", "--ledger", str(tmp_path / "l.db"), "--policy", str(policy))
    assert done.returncode == 3 and "policy_invalid" in done.stderr and key in done.stderr
    assert str(policy) in done.stderr and "Traceback" not in done.stderr
    assert {f.name: f.read_bytes() for f in sorted(tmp_path.glob("l.db*"))} == before


def test_a_policy_that_is_not_utf8_is_policy_invalid(tmp_path: Path) -> None:
    policy = tmp_path / "p.toml"
    policy.write_bytes(b'default_space = "\xff\xfe"\n')
    assert run("init", "--ledger", str(tmp_path / "l.db")).returncode == 0
    done = run("verify", "--ledger", str(tmp_path / "l.db"), "--policy", str(policy))
    assert done.returncode == 3 and "policy_invalid" in done.stderr and "UTF-8" in done.stderr


def test_the_longest_retention_window_sweeps_without_internal_error(tmp_path: Path) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text('[retention]\nwindows = {"org" = "P36600D"}\n')
    assert run("init", "--ledger", str(tmp_path / "l.db")).returncode == 0
    done = run("sweep", "--ledger", str(tmp_path / "l.db"), "--policy", str(policy), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["expired"] == []


def _mcp_exchange(tmp_path: Path, messages: list[str]) -> list[dict[str, Any] | None]:
    """Each message to a real stdio server, and its reply (None if none came in 20 s)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
    proc = subprocess.Popen([CLI, "serve", "--create", "--agent", "agent:bot", "--ledger",
                             str(tmp_path / "m.db")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env)
    assert proc.stdin is not None and proc.stdout is not None
    replies: list[dict[str, Any] | None] = []
    try:
        for message in messages:
            proc.stdin.write(message.encode() + b"\n")
            proc.stdin.flush()
            if '"notifications/' in message[:80]:
                continue
            ready, _, _ = select.select([proc.stdout], [], [], 20)
            replies.append(json.loads(proc.stdout.readline()) if ready else None)
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    return replies


def test_mcp_answers_over_deep_and_oversized_requests_and_keeps_serving(tmp_path: Path) -> None:
    hello = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
    call = '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"memory_read","arguments":%s}}'
    started = time.monotonic()
    replies = _mcp_exchange(tmp_path, [
        hello, '{"jsonrpc":"2.0","method":"notifications/initialized"}',
        call % (2, '{"subject":' + "[" * 200 + "]" * 200 + "}"),
        call % (3, '{"subject":"' + "x" * (5 << 20) + '"}'),
        '{"jsonrpc":"2.0","id":4,"method":"tools/list"}'])
    assert all(r is not None for r in replies), replies  # no request went unanswered
    _, deep, big, listing = replies
    assert deep is not None and deep["id"] == 2 and deep["error"]["code"] == -32600
    assert "nests deeper" in deep["error"]["message"]
    assert big is not None and big["id"] == 3 and "larger than" in big["error"]["message"]
    assert listing is not None and listing["id"] == 4 and listing["result"]["tools"]
    assert time.monotonic() - started < 120  # a hang guard, not a timing claim


@pytest.mark.parametrize("token", ["", " " * 40, "\t\n " * 10, "short-token-15c",
                                   "a b c d e f g h i j k l m n o", " padded-token-of-16-chars "])
def test_http_refuses_a_token_without_16_non_whitespace_characters(tmp_path: Path, token: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
    env["CUSTODY_MCP_TOKEN"] = token
    done = subprocess.run([CLI, "serve", "--http", "--agent", "agent:bot", "--ledger",
                           str(tmp_path / "h.db")], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2 and "bearer token" in done.stderr
    assert not (tmp_path / "h.db").exists()


@pytest.mark.parametrize("args", [["verify"], ["history", "FACT"], ["recall", "pro"],
                                  ["blast", "FACT"], ["--batch", "BATCH"], ["eval", "--json"],
                                  ["doctor"], ["export", "--help"]])
def test_a_full_stdout_ends_quietly_with_a_stable_code(tmp_path: Path, args: list[str]) -> None:
    db = tmp_path / "l.db"
    with Ledger.open(db) as ledger:
        fact = ledger.assert_fact("acct:1", "plan", "pro", actor="user:a", cause=CAUSE)
    batch = tmp_path / "b.jsonl"
    batch.write_text('{"op":"verify"}\n' * 50)
    argv = [{"FACT": fact.fact_id, "BATCH": str(batch)}.get(a, a) for a in args]
    if args[0] not in ("eval",) and "--help" not in args:
        argv += ["--ledger", str(db)]
    with open("/dev/full", "w") as full:
        done = run(*argv, stdout=full)
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    assert done.returncode == 4, done.stderr


def test_a_closed_pipe_ends_quietly_with_exit_4(tmp_path: Path) -> None:
    batch = tmp_path / "b.jsonl"
    batch.write_text('{"op":"verify"}\n' * 3000)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
    proc = subprocess.Popen([CLI, "--create", "--batch", str(batch), "--ledger", str(tmp_path / "l.db")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    proc.stdout.read(1)  # `| head -c1`
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 4 and b"Traceback" not in err and b"Exception ignored" not in err


def _ledger_bytes(db: Path) -> dict[str, str]:
    """sha256 of the ledger and its key store files (what a refusal must leave as it was)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in (db, Path(f"{db}.keys"), Path(f"{db}.keys.master"), Path(f"{db}.pub"))}


def _initialised(tmp_path: Path) -> Path:
    db = tmp_path / "l.db"
    assert run("init", "--ledger", str(db)).returncode == 0
    # A first batch opens the fresh ledger once (what any first open may settle, it settles).
    assert run("--batch", "-", "--ledger", str(db), stdin='{"op":"verify"}\n').returncode == 0
    return db


def test_an_actor_with_a_control_or_bidi_character_is_told_the_character_not_the_kind(
        tmp_path: Path) -> None:
    db = _initialised(tmp_path)
    before = _ledger_bytes(db)
    lines = [line(actor="user:dana\u202e"), line(actor=f"agent:x{ESC}"), line(actor="robot:x")]
    done = run("--batch", "-", "--ledger", str(db), stdin="\n".join(lines) + "\n")
    bidi, esc, kind = [json.loads(r)["error"] for r in done.stdout.splitlines()]
    assert bidi["code"] == esc["code"] == kind["code"] == "invalid_actor"
    assert "\\u202e" in bidi["message"] and "bidirectional character" in bidi["message"]
    assert "must be kind:id" not in bidi["message"] + esc["message"]
    assert "\\x1b" in esc["message"]
    assert "must be kind:id with kind one of user" in kind["message"]
    assert _ledger_bytes(db) == before


# Shown as nothing: format characters (Cf) and other default-ignorable code points. Each makes
# an identifier that looks exactly like another: `acct:1042\u200b` would survive the erasure of
# `acct:1042`, `agent:support-bot\u2060` pass for the real agent in the review queue.
INVISIBLE = ["\u200b", "\u2060", "\u00ad", "\ufeff", "\u200c", "\u200d", "\u2064", "\u034f",
             "\u115f", "\u17b4", "\u180b", "\u3164", "\ufe0f", "\uffa0", "\U000e0001",
             "\U000e0101"]
# The default-ignorable code points outside general category Cf (DerivedCoreProperties.txt).
IGNORABLE_OUTSIDE_CF = [0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, *range(0x180B, 0x1810), 0x2065,
                        0x3164, *range(0xFE00, 0xFE10), 0xFFA0, *range(0xFFF0, 0xFFF9),
                        *range(0xE0000, 0xE1000)]


def _shown(char: str) -> str:
    point = ord(char)
    return (f"\\x{point:02x}" if point < 0x100 else f"\\u{point:04x}" if point < 0x10000
            else f"\\U{point:08x}")


def test_every_format_and_default_ignorable_character_is_unsafe_in_an_identifier() -> None:
    refused = {p for p in range(0x110000) if unicodedata.category(chr(p)) == "Cf"}
    refused.update(IGNORABLE_OUTSIDE_CF)
    for point in sorted(refused):
        assert unsafe_character(f"acct:1042{chr(point)}x") == _shown(chr(point)), hex(point)
    for clean in ("acct:1042", "acct:ünïcode-✓", "acct:東京", "acct:😀", "p\u00e9"):
        assert unsafe_character(clean) is None, clean
    # Values keep them and are shown as they are (an emoji's ZWJ sequence, a soft hyphen).
    assert escape_text("👨\u200d👩\u200d👧 co\u00adop") == "👨\u200d👩\u200d👧 co\u00adop"


def test_identifiers_refuse_invisible_characters_at_the_door_leaving_the_files_as_they_were(
        tmp_path: Path) -> None:
    db = _initialised(tmp_path)
    before = _ledger_bytes(db)
    fields = ["subject", "predicate", "space", "session", "actor", "cause.ref", "ref"]
    cases = [(field, char) for field in fields for char in INVISIBLE]
    lines = []
    for field, char in cases:
        value = f"agent:support-bot{char}" if field == "actor" else f"acct:1042{char}"
        lines.append(line(**({"cause": {**CAUSE, "ref": value}} if field == "cause.ref"
                             else {field: value})))
    done = run("--batch", "-", "--ledger", str(db), stdin="\n".join(lines) + "\n")
    results = [json.loads(r) for r in done.stdout.splitlines()]
    assert done.returncode == 1 and len(results) == len(cases)
    for (field, char), result in zip(cases, results, strict=True):
        error = result["error"]
        assert error["code"] == ("invalid_actor" if field == "actor" else "bad_request"), error
        assert error["field"] == field and _shown(char) in error["message"], error
        assert "invisible character" in error["message"] and "must be kind:id" not in error["message"]
    assert _ledger_bytes(db) == before
    with Ledger.open(db) as ledger:
        events = ledger.db.events.count()
        for field in ("subject", "predicate", "space", "session", "actor"):
            value = "agent:support-bot\u2060" if field == "actor" else "acct:1042\u200b"
            args: dict[str, Any] = {"subject": "acct:1", "predicate": "plan", "actor": "agent:x",
                                    "cause": CAUSE, field: value}
            with pytest.raises(LedgerError) as caught:
                ledger.assert_fact(args.pop("subject"), args.pop("predicate"), "v", **args)
            assert caught.value.code in ("bad_request", "invalid_actor")
        with pytest.raises(LedgerError) as caught:
            MemoryTools(ledger, "agent:bot").call(
                "memory_write", {"subject": "acct:1042\u200b", "predicate": "plan", "value": "v",
                                 "cause": CAUSE}, "mcp-s")
        assert caught.value.code == "bad_request" and "\\u200b" in caught.value.message
        assert ledger.db.events.count() == events


def _strict(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(f"not strict JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def test_a_non_finite_id_is_refused_and_every_result_line_is_strict_json(tmp_path: Path) -> None:
    db = _initialised(tmp_path)
    before = _ledger_bytes(db)
    ids = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "[1, NaN]", '{"a": {"b": 1e999}}']
    lines = [f'{{"op": "as_of", "id": {i}}}' for i in ids] + ['{"op": "as_of", "id": 2.5}']
    done = run("--batch", "-", "--ledger", str(db), stdin="\n".join(lines) + "\n")
    results = [_strict(r) for r in done.stdout.splitlines()]  # raises on NaN or Infinity
    assert len(results) == len(lines)
    for result in results[:-1]:
        assert result["id"] is None and result["error"]["code"] == "bad_request"
        assert result["error"]["field"] == "id" and "not finite" in result["error"]["message"]
    assert results[-1]["ok"] and results[-1]["id"] == 2.5
    assert _ledger_bytes(db) == before


def test_a_result_holding_a_non_finite_number_is_still_written_as_strict_json() -> None:
    written = result_line({"line": 1, "id": float("nan"), "result": {"x": [float("inf"), 1.5]}})
    assert _strict(written) == {"line": 1, "id": None, "result": {"x": [None, 1.5]}}
    clean = {"line": 1, "id": "a\u2028", "ok": True, "result": {"v": "ü\x1b", "n": 1.25}}
    assert result_line(clean) == json_text(clean) + "\n"  # byte-identical when finite


def test_fail_fast_never_writes_an_input_field_name_raw_to_the_terminal(tmp_path: Path) -> None:
    db = _initialised(tmp_path)
    before = _ledger_bytes(db)
    deep = "[" * (MAX_NESTING + 2) + "]" * (MAX_NESTING + 2)
    for text in (json.dumps({"op": "as_of", ESC: 1}), line(cause={**CAUSE, ESC: 1}),
                 f'{{"op": "recall", "query": "x", {json.dumps(ESC + "2")}: {deep}}}'):
        done = run("--batch", "-", "--fail-fast", "--ledger", str(db), stdin=text + "\n")
        assert done.returncode == 1 and "stopped at line 1 (bad_request)" in done.stderr
        assert _terminal_safe(done.stderr) and "\\x1b]0;pwned\\x07\\x1b[2J" in done.stderr, done.stderr
        error = json.loads(done.stdout)["error"]
        assert "\\x1b]0;pwned" in error["message"] and _terminal_safe(error["message"])
        assert ESC in error["field"]  # the field as given, JSON-escaped on the way out
    assert _ledger_bytes(db) == before


def test_ref_on_an_op_without_one_is_explained_never_suggested_as_itself(tmp_path: Path) -> None:
    db = _initialised(tmp_path)
    lines = ['{"op": "explain", "ref": "r1"}', '{"op": "history", "fact_id": "f_1", "ref": "r1"}',
             '{"op": "retract", "fact_id": "f_1", "actor": "user:a", "reson": "x"}']
    done = run("--batch", "-", "--ledger", str(db), stdin="\n".join(lines) + "\n")
    explain, history, typo = [json.loads(r)["error"] for r in done.stdout.splitlines()]
    for error in (explain, history):
        assert error["code"] == "bad_request" and error["field"] == "ref"
        assert "did you mean 'ref'" not in error["message"]
        assert "an alias" in error["message"] and "only an assert takes it" in error["message"]
    assert "the field 'action_ref'" in explain["message"]
    assert "action_ref" not in history["message"]
    assert typo["message"] == "unknown field 'reson'; did you mean 'reason'?"
    assert suggest("ref", ["ref", "op"]) == "" and suggest("rf", ["ref"]) == "; did you mean 'ref'?"
