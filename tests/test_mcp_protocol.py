"""Every JSON-RPC 2.0 message to a real `custody-app serve` over stdio is answered or refused per
the spec (issue 32): an invalid id is refused -32600 with `id: null`, params that are not an
object or hold text that is not Unicode -32602, what is not JSON -32700; a notification or a
response never gets a reply; numbers no tool accepts are invalid params, not internal errors;
and the end of input waits for the replies still owed."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from custody_app import Ledger
from custody_app.receipts import public_hex, sign
from tests.mcp_wire import CLI, HELLO, StdioWire, clean_env, file_state

CAUSE = {"kind": "tool", "ref": "crm.lookup#1"}
PING = '{"jsonrpc":"2.0","id":%s,"method":"ping"%s}'
ISSUER_KEY = bytes(range(32))  # test material: a fixed issuer key


@pytest.fixture(scope="module")
def wire(tmp_path_factory: pytest.TempPathFactory) -> Any:
    db = tmp_path_factory.mktemp("wire") / "w.db"
    Ledger.open(db).close()
    server = StdioWire(db)
    server.db = db  # type: ignore[attr-defined]
    yield server
    assert server.close() == 0


# (raw line, expected error code, expected id): each is a request and gets exactly one reply.
REQUESTS = [
    (PING % ("true", ""), -32600, None),
    (PING % ("6.5", ""), -32600, None),
    (PING % ("1e2", ""), -32600, None),
    (PING % ("null", ""), -32600, None),
    (PING % ('{"a":1}', ""), -32600, None),
    (PING % ('["x"]', ""), -32600, None),
    (PING % ("7", ',"params":5'), -32602, 7),
    (PING % ('"p"', ',"params":[1]'), -32602, "p"),
    (PING % ("8", ',"params":"x"'), -32602, 8),
    ('{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"memory_read",'
     '"arguments":{"subject":"\\ud800"}}}', -32602, 9),
    ('{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"memory_read",'
     '"arguments":{"subject\\udfff":"x"}}}', -32602, 10),
    ('{"jsonrpc":"2.0","id":11,"method":"ping\\udc00"}', -32600, 11),
    ('{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}', -32600, None),
    ('{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"memory_write",'
     '"arguments":{"subject":"acct:1","predicate":"p","value":NaN,"cause":{"kind":"tool",'
     '"ref":"r"}}}}', -32700, None),
    ('{"jsonrpc":"2.0","id":13,"method":5}', -32600, 13),
    ('{"jsonrpc":"1.0","id":14,"method":"ping"}', -32600, 14),
    ('{"jsonrpc":"2.0","id":15}', -32600, 15),
    ("[]", -32600, None),
    ('[{"jsonrpc":"2.0","id":16,"method":"ping"}]', -32600, None),
    ("not json", -32700, None),
    ('{"jsonrpc":"2.0","id":17,"method":"ping"', -32700, None),
]


@pytest.mark.parametrize(("raw", "code", "msg_id"), REQUESTS,
                         ids=[f"case{i}" for i in range(len(REQUESTS))])
def test_every_malformed_request_is_answered_per_the_spec(wire: StdioWire, raw: str, code: int,
                                                          msg_id: Any) -> None:
    before = file_state(wire.db)  # type: ignore[attr-defined]
    got = wire.exchange(raw.encode())
    assert len(got) == 1, got
    [reply] = got
    assert reply["jsonrpc"] == "2.0" and reply["id"] == msg_id, reply
    assert reply["error"]["code"] == code and "nothing was run" in reply["error"]["message"]
    assert file_state(wire.db) == before  # type: ignore[attr-defined]


def test_a_line_that_is_not_utf8_is_a_parse_error(wire: StdioWire) -> None:
    for raw in (b'\xff\xfe{"jsonrpc":"2.0","id":1,"method":"ping"}',
                b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"x":"\xc3"}}}'):
        [reply] = wire.exchange(raw)
        assert reply["id"] is None and reply["error"]["code"] == -32700


NO_REPLY = [
    '{"jsonrpc":"2.0","method":"notifications/initialized","params":5}',
    '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"\\ud800"}}',
    '{"jsonrpc":"2.0","method":"nope"}',
    '{"jsonrpc":"2.0","id":"x","result":{}}',
    '{"jsonrpc":"2.0","id":99,"error":{"code":1,"message":"x"}}',
    '{"jsonrpc":"2.0","id":100,"error":5}',
]


@pytest.mark.parametrize("raw", NO_REPLY, ids=[f"case{i}" for i in range(len(NO_REPLY))])
def test_notifications_and_responses_never_get_a_reply(wire: StdioWire, raw: str) -> None:
    assert wire.exchange(raw.encode()) == []


def test_numbers_no_tool_accepts_are_invalid_params(wire: StdioWire) -> None:
    before = file_state(wire.db)  # type: ignore[attr-defined]
    for value, shown in ((2**53, "9007199254740992"), (-(2**70), str(-(2**70))),
                         (1e400, "inf")):
        text = json.dumps({"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {
            "name": "memory_write", "arguments": {"subject": "acct:1", "predicate": "p",
                                                  "value": {"n": [value]}, "cause": CAUSE}}})
        [reply] = wire.exchange(text.replace("Infinity", "1e400").encode())
        assert reply["id"] == 21 and reply["error"]["code"] == -32602, reply
        assert f"arguments.value.n[0] is {shown}" in reply["error"]["message"]
    assert file_state(wire.db) == before  # type: ignore[attr-defined]
    # the largest safe integer is a value like any other
    ok = wire.call("memory_write", subject="acct:1", predicate="p", value=2**53 - 1, cause=CAUSE)
    assert ok["result"]["isError"] is False, ok


def test_a_tool_output_beyond_2_53_is_invalid_params_not_internal_error(tmp_path: Path) -> None:
    """A write citing a receipt whose tool output holds a huge integer: before, the receipt check
    hashed the output and the server answered internal_error."""
    policy = tmp_path / "p.toml"
    policy.write_text(f'[provenance]\nreceipt_issuers = {{"gateway:crm" = '
                      f'"{public_hex(ISSUER_KEY)}"}}\n', encoding="utf-8")
    db = tmp_path / "r.db"
    Ledger.open(db, policy=policy).close()
    server = StdioWire(db, "--policy", str(policy))
    try:
        first = server.call("memory_write", subject="acct:1", predicate="p", value=1, cause=CAUSE)
        fact_id = first["result"]["structuredContent"]["fact_id"]
        session = server.call("memory_why", 2, fact_id=fact_id)["result"]["structuredContent"][
            "session"]
        output = {"plan": 1, "big": 2**60}
        receipt = sign(ISSUER_KEY, issuer="gateway:crm", receipt_id="rc-1", tool="crm.lookup",
                       session=session, arguments={"a": 1}, output={"plan": 1},
                       issued_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        before = file_state(db)
        reply = server.call("memory_write", 3, subject="acct:1", predicate="p", value=1,
                            cause={**CAUSE, "receipt": receipt, "pointer": "/plan"},
                            tool_output=output)
        assert reply["error"]["code"] == -32602, reply
        assert "arguments.tool_output.big is 1152921504606846976" in reply["error"]["message"]
        assert file_state(db) == before
    finally:
        assert server.close() == 0


def test_the_end_of_input_waits_for_the_replies_owed(tmp_path: Path) -> None:
    """A client that writes its requests and closes stdin gets every reply (before, the server
    stopped at the end of input and dropped the requests still in hand)."""
    db = tmp_path / "e.db"
    Ledger.open(db).close()
    lines = [json.dumps(HELLO), '{"jsonrpc":"2.0","method":"notifications/initialized"}',
             *(PING % (n, "") for n in range(1, 6)),
             json.dumps({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {
                 "name": "memory_write", "arguments": {"subject": "acct:1", "predicate": "p",
                                                       "value": 1, "cause": CAUSE}}}),
             PING % ("true", "")]
    done = subprocess.run([CLI, "serve", "--agent", "agent:eof", "--ledger", str(db)],
                          input="\n".join(lines).encode() + b"\n", capture_output=True,
                          env=clean_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert sorted(str(r["id"]) for r in replies) == ["0", "1", "2", "3", "4", "5", "6", "None"]
    [write] = [r for r in replies if r["id"] == 6]
    assert write["result"]["structuredContent"]["status"] == "quarantined"
