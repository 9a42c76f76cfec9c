"""Case generators for bench/bench_fuzz.py: hypothesis strategies for policy files, output paths
and MCP messages (batch lines come from tests/hostile.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from custody_app.interfaces.mcp.guard import MAX_MESSAGE_BYTES, MAX_MESSAGE_DEPTH, depth
from tests.hostile import field_values, json_values

HANG_S = 2.0


def file_state(db: Path) -> tuple[str | None, ...]:
    return tuple(hashlib.sha256(f.read_bytes()).hexdigest() if f.exists() else None
                 for f in (db, Path(f"{db}-wal"), Path(f"{db}.keys")))


class Tally:
    def __init__(self) -> None:
        self.cases = self.crashes = self.hangs = self.changed = self.refused = self.unanswered = 0
        self.examples: list[str] = []
        self.extra = ""

    def note(self, what: str, case: object) -> None:
        if len(self.examples) < 3:
            self.examples.append(f"{what}: {str(case)[:120]!r}")

    def refusal(self, db: Path, before: tuple[str | None, ...], case: object) -> None:
        """Count a refused request, and a change of the ledger's files across it."""
        self.refused += 1
        if file_state(db) != before:
            self.changed += 1
            self.note("changed", case)

    def row(self, name: str, seconds: float) -> str:
        return (f"| {name} | {self.cases:,} | {self.refused:,} | {self.crashes} | {self.hangs} | "
                f"{self.changed} | {'; '.join([self.extra] * bool(self.extra) + self.examples) or 'none'}"
                f" | {seconds:.0f} s |")


# Policy files: the real sections and keys with values of every TOML type, durations from a
# grammar with absurd sizes, and raw bytes that are not TOML or not UTF-8 at all.
KEYS = {"": ["version", "default_space"], "provenance": ["allow_declared", "writer_keys"],
        "review": ["reviewer_kinds", "reviewers"], "erasure": ["digest", "previously_forgotten"],
        "redaction": ["detectors"], "retention": ["windows"],
        "recall": ["embedder", "decay", "decay_by_space", "hot", "cold", "ann_min_facts",
                   "ann_probe"], "bogus": ["x"]}
durations = st.builds(
    lambda unit, n, t: f"P{'T' if t else ''}{n}{unit}",
    st.sampled_from("YMWDHS"), st.one_of(st.integers(0, 10**6), st.integers(0, 10**40)),
    st.booleans()) | st.sampled_from(["P", "PT", "P1DT", "-P1D", "P1.5D", "P٣D", "", "P1D\n"])
toml_scalars = st.one_of(
    st.integers(-(2**63), 2**63 - 1).map(str), st.floats(allow_nan=True).map(
        lambda f: "nan" if f != f else ("inf" if f == float("inf") else "-inf" if f == float("-inf")
                                        else repr(f))),
    st.booleans().map(lambda b: "true" if b else "false"), durations.map(json.dumps),
    st.text(max_size=20).map(json.dumps), st.sampled_from(["1979-05-27", "07:32:00",
                                                           "1979-05-27T07:32:00Z"]))
toml_values = st.one_of(
    toml_scalars, st.lists(toml_scalars, max_size=4).map(lambda v: "[" + ", ".join(v) + "]"),
    st.dictionaries(st.sampled_from(["org", "team:*", "*", "", "a b"]), toml_scalars, max_size=3)
    .map(lambda d: "{" + ", ".join(f"{json.dumps(k)} = {v}" for k, v in d.items()) + "}"))


@st.composite
def policy_texts(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.binary(max_size=200))
    if kind == 1:
        return draw(st.text(max_size=200)).encode("utf-8", errors="surrogatepass")
    lines: list[str] = []
    for section in draw(st.lists(st.sampled_from(sorted(KEYS)), max_size=4, unique=True)):
        if section:
            lines.append(f"[{section}]")
        for key in draw(st.lists(st.sampled_from(KEYS[section]), max_size=3, unique=True)):
            lines.append(f"{key} = {draw(toml_values)}")
    return ("\n".join(lines) + "\n").encode("utf-8", errors="surrogatepass")


# Output paths: the ledger's own files and ways of naming them, other precious files, things
# that are not regular files, and names a filesystem refuses.
PATH_NAMES = ["l.db", "l.db-wal", "l.db-shm", "l.db.keys", "l.db.keys.master", "l.db.pub",
              "./l.db", "sub/../l.db", "link-to-ledger", "link-to-keys", "hard-keys", "dangling",
              "other.db", "other.db.keys", "other.db.keys.master", "writer.key", "eval.pem",
              "eval.pem.pub", "fifo", "dir", "dir/", "/dev/null", "/dev/zero", "notes.txt",
              "missing-dir/x.json", "x" * 300, "new\nline.json", "new‮.json", "."]
paths = st.one_of(st.sampled_from(PATH_NAMES),
                  st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00/"),
                          min_size=1, max_size=30)
                  .map(lambda s: f"new-{s}"))
writers = st.sampled_from(["export", "pack", "report", "public_key"])


# MCP messages: tool calls with hostile arguments, deep and large messages, broken JSON-RPC.
TOOLS = ["memory_write", "memory_read", "memory_recall", "memory_retract", "memory_history",
         "memory_why", "memory_act", "nope", ""]
ARG_FIELDS = ["subject", "predicate", "value", "cause", "space", "fact_id", "reason", "query",
              "k", "valid_at", "supersedes", "sources", "tool", "ref", "outcome", "actor"]


@st.composite
def tool_arguments(draw: st.DrawFn) -> dict[str, Any]:
    args: dict[str, Any] = {}
    if draw(st.booleans()):
        args.update(subject="acct:1", predicate="plan", value="pro",
                    cause={"kind": "tool", "ref": "r"})
    for name in draw(st.lists(st.sampled_from(ARG_FIELDS), max_size=4, unique=True)):
        args[name] = draw(field_values)
    return args


BAD_IDS = [True, False, 6.5, None, {}, [], [1], {"a": 1}, "\ud800", 1e2, -0.0, 2.0**70]
BAD_PARAMS = [5, "x", [1], [], True, None, 1.5, -(2**64)]
HUGE_NUMBERS = [2**53, -(2**53), 2**64, -(2**80), 10**40, 1e308, float("inf"), float("-inf")]
METHODS = ["ping", "tools/list", "tools/call", "initialize", "notifications/initialized",
           "notifications/cancelled", "resources/list", "nope", "", "ping\udc00"]
SURROGATE_TEXT = st.sampled_from(["\ud800", "a\udfffb", "\udc00\ud800", "x\ud83d"])


def _huge(value: float) -> str:
    return json.dumps(value).replace("-Infinity", "-1e999").replace("Infinity", "1e999")


@st.composite
def protocol_messages(draw: st.DrawFn, msg_id: int) -> str:
    """JSON-RPC messages the spec has an answer for: bad ids, params, text, numbers,
    notifications and responses (issue 32)."""
    kind = draw(st.integers(0, 8))
    method = draw(st.sampled_from(METHODS))
    call: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": "tools/call",
                            "params": {"name": draw(st.sampled_from(TOOLS)),
                                       "arguments": draw(tool_arguments())}}
    if kind == 0:
        return json.dumps({"jsonrpc": "2.0", "id": draw(st.sampled_from(BAD_IDS)),
                           "method": method})
    if kind == 1:
        return json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method,
                           "params": draw(st.sampled_from(BAD_PARAMS))})
    if kind == 2:
        where = draw(st.sampled_from(["subject", "value", "key", "name"]))
        text = draw(SURROGATE_TEXT)
        if where == "key":
            call["params"]["arguments"][text] = 1
        elif where == "name":
            call["params"]["name"] = text
        else:
            call["params"]["arguments"][where] = text
        # escaped (\ud800) or raw (surrogate bytes, not UTF-8)
        return json.dumps(call, ensure_ascii=draw(st.booleans()))
    if kind == 3:
        field = draw(st.sampled_from(["value", "tool_output", "k", "valid_at", "deep"]))
        number = draw(st.sampled_from(HUGE_NUMBERS))
        call["params"]["arguments"][field] = {"n": [1, "MARK"]} if field == "deep" else "MARK"
        return json.dumps(call).replace('"MARK"', _huge(number))
    if kind == 4:  # a notification: never answered
        message = {"jsonrpc": "2.0", "method": method}
        if draw(st.booleans()):
            message["params"] = draw(st.sampled_from([*BAD_PARAMS, {}, {"requestId": msg_id}]))
        return json.dumps(message)
    if kind == 5:  # a response from the client: never answered
        return json.dumps({"jsonrpc": "2.0", "id": draw(st.sampled_from([msg_id, "x", *BAD_IDS])),
                           **({"result": draw(json_values)} if draw(st.booleans()) else
                              {"error": draw(st.sampled_from([{"code": 1, "message": "x"}, 5,
                                                              None]))})})
    if kind == 6:
        literal = draw(st.sampled_from(["NaN", "Infinity", "-Infinity", '"\xff"']))
        return json.dumps(call)[:-2] + f', "x": {literal}}}}}'
    if kind == 7:  # a valid message cut or spliced at a random place
        text = json.dumps(call)
        at = draw(st.integers(0, len(text)))
        return text[:at] + draw(st.text(max_size=5)).replace("\n", " ") + text[at + 1:]
    return json.dumps({**call, "params": {**call["params"], "_meta": draw(json_values)}})


def expects_reply(message: str) -> bool:
    """Whether JSON-RPC 2.0 requires a reply to `message`: everything but a notification (a
    method, no id) and a response (no method; a result or an error). What is not JSON, not an
    object, too large or too deep is answered, with `id: null`."""
    raw = message.encode("utf-8", errors="surrogatepass")
    try:
        parsed = json.loads(raw, parse_constant=_not_json)
    except (ValueError, RecursionError):
        return True
    if not isinstance(parsed, dict) or len(raw) > MAX_MESSAGE_BYTES or \
            depth(raw) > MAX_MESSAGE_DEPTH:
        return True
    if "method" in parsed:
        return "id" in parsed
    return not ("result" in parsed or "error" in parsed)


def _not_json(name: str) -> Any:
    raise ValueError(name)


@st.composite
def mcp_messages(draw: st.DrawFn, msg_id: int) -> str:
    kind = draw(st.integers(0, 14))
    if kind >= 12:
        return draw(protocol_messages(msg_id))
    call: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": "tools/call",
                            "params": {"name": draw(st.sampled_from(TOOLS)),
                                       "arguments": draw(tool_arguments())}}
    if kind <= 5:
        return json.dumps(call)
    if kind == 6:
        n = draw(st.integers(1, 20_000))
        return json.dumps(call)[:-2] + ', "deep": ' + "[" * n + "]" * n + "}}"
    if kind == 7:
        return json.dumps({**call, "params": {**call["params"], "arguments": {
            "subject": "x" * draw(st.integers(1, 6 << 20))}}})
    if kind == 8:
        return draw(st.text(max_size=100)).replace("\n", " ").replace("\r", " ")
    if kind == 9:
        return json.dumps({"jsonrpc": draw(st.sampled_from(["2.0", "1.0", 2])), "id": msg_id,
                           "method": draw(st.sampled_from(["tools/list", "ping", "nope",
                                                           "resources/list", ""]))})
    if kind == 10:
        return json.dumps(draw(json_values))
    return json.dumps(call).replace('"jsonrpc"', '"jsonrpc": "2.0", "jsonrpc"', 1)
