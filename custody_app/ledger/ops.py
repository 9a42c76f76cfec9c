"""One JSON op in, one result object out: the protocol of `--batch` (DESIGN sections 9 and
10), shared by the batch runner and the eval harness. A failed op writes nothing."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from typing import Any

from custody_app.domain.commands import (
    MAX_NESTING,
    MAX_VALUE_CHARS,
    NOT_YET,
    OPS,
    depth_of,
    nesting_message,
    parse_command,
)
from custody_app.domain.errors import LedgerError, suggest
from custody_app.domain.escaping import escape_json, unsafe_kind
from custody_app.domain.readmodels import VerifyResult
from custody_app.ledger.facade import Ledger

_ALIAS_FIELDS = ("fact_id", "supersedes")


@dataclass
class Aliases:
    """The names a batch's asserts gave their facts (`\"ref\": \"plan1\"`), used as `@plan1`."""

    names: dict[str, tuple[str, int]] = field(default_factory=dict)

    def resolve(self, ref: Any) -> Any:
        if isinstance(ref, str) and ref.startswith("@"):
            name = ref[1:]
            if name not in self.names:
                raise LedgerError("unknown_alias", f"alias {ref} is not defined by an earlier "
                                  "successful assert in this batch")
            return self.names[name][0]
        return ref

    def apply(self, data: dict[str, Any]) -> None:
        for key in _ALIAS_FIELDS:
            if key in data:
                data[key] = self.resolve(data[key])
        if isinstance(data.get("sources"), list):
            data["sources"] = [self.resolve(s) for s in data["sources"]]


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are all different; a repeated key raises (any nesting level),
    naming the first key met again."""
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen.add(key)
    return out  # unreachable: fewer keys than pairs means one came twice


# json.loads(text, object_pairs_hook=...) makes a decoder for each line; this one is made once
# (json.loads is exactly that decoder's decode, after its own refusal of a leading BOM).
_LINE = json.JSONDecoder(object_pairs_hook=_unique_keys)


def parse_line(text: str) -> Any:
    """`json.loads(text, object_pairs_hook=_unique_keys)`: the same value or the same error."""
    if text.startswith("\ufeff"):  # what json.loads refuses before it decodes
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return _LINE.decode(text)


# A batch line is read at most this far (the rest is skipped unread into memory), as an MCP
# message is: room for a value at its limit, however escaped.
MAX_LINE_CHARS = 4 << 20


def run_op(ledger: Ledger, aliases: Aliases, number: int, text: str) -> dict[str, Any]:
    """One input line to one output object; a failure writes nothing."""
    out: dict[str, Any] = {"line": number, "id": None, "op": None}
    try:
        if len(text) > MAX_LINE_CHARS:
            raise LedgerError("line_too_large", f"line {number} is longer than {MAX_LINE_CHARS:,} "
                              "characters (a value may hold at most "
                              f"{MAX_VALUE_CHARS:,}); nothing of it was read as an op")
        try:
            data = parse_line(text)
        except _DuplicateKey as exc:
            raise LedgerError("bad_json", f"line {number} has the key {exc.key!r} twice (JSON "
                              "parsers disagree on which one wins)", key=exc.key) from None
        except ValueError as exc:
            raise LedgerError("bad_json", f"line {number} is not JSON: {exc}") from None
        except RecursionError:
            raise LedgerError("bad_json", f"line {number} nests too deeply to parse") from None
        if not isinstance(data, dict):
            raise LedgerError("bad_request", f"line {number} is not a JSON object")
        check_line(data, number, text)
        given = data.pop("id", None)
        if not finite(given):
            raise LedgerError("bad_request", "field 'id' holds a number that is not finite (NaN, "
                              "Infinity, or past a double's range such as 1e400): results are "
                              "strict JSON, which has no such number", field="id")
        out["id"] = given
        op = data.pop("op", None)
        out["op"] = op if isinstance(op, str) else None
        if op is None:
            raise LedgerError("bad_request", "missing field 'op'", field="op")
        if not isinstance(op, str) or op not in OPS:
            hint = " (not available in this version)" if op in NOT_YET else suggest(op, OPS)
            raise LedgerError("unknown_op", f"unknown op {op!r}{hint}")
        ref = data.pop("ref", None) if op == "assert" else None
        if ref is not None and isinstance(ref, str) and (bad := unsafe_kind(ref)) is not None:
            raise LedgerError("bad_request", f"field 'ref' holds the {bad[1]} character {bad[0]}; "
                              "an alias must be a name such as \"plan1\"", field="ref")
        if ref is not None and (not isinstance(ref, str) or not ref or ref.startswith("@")):
            raise LedgerError("bad_request", "field 'ref' must be a name such as \"plan1\"",
                              field="ref")
        if ref is not None and ref in aliases.names:
            raise LedgerError("bad_request", f"alias {ref!r} is already defined on line "
                              f"{aliases.names[ref][1]}", field="ref")
        aliases.apply(data)
        result = ledger.execute(parse_command(OPS[op], data))
        if isinstance(result, VerifyResult) and not result.valid:
            raise LedgerError("chain_broken", result.problem or "the chain is broken",
                              first_bad_seq=result.first_bad_seq)
        if ref is not None:
            aliases.names[ref] = (str(getattr(result, "fact_id")), number)  # noqa: B009
        out.update(ok=True, result=result.model_dump(mode="json"))
    except LedgerError as exc:
        out.update(ok=False, error=exc.to_json())
    except Exception as exc:  # a defect; the op's savepoint was rolled back, the run goes on
        sys.stderr.write(f"custody-app: internal error on line {number}: {exc!r}\n")
        out.update(ok=False, error={"code": "internal_error", "message": f"line {number} hit "
                                    f"an internal error ({type(exc).__name__}); nothing was "
                                    "written"})
    return out


def check_line(data: dict[str, Any], number: int, text: str | None = None) -> None:
    """Refuse a line with a field nested deeper than MAX_NESTING (parsers and the canonical form
    recurse), or holding text that is not valid Unicode (invalid UTF-8 read with
    surrogateescape, or a lone surrogate escape such as \\ud800). `text`: the line `data` was
    parsed from, when there is one: its characters settle both checks for most lines at once."""
    # A field nests at most as deep as the line has opening brackets (inside strings or not).
    if text is None or text.count("{") + text.count("[") > MAX_NESTING:
        for key, value in data.items():
            if depth_of(value) > MAX_NESTING:
                raise LedgerError("bad_request", f"line {number}: {nesting_message(str(key))}",
                                  field=str(key))
    # Parsed text holds a surrogate only from the line's own characters or from a \\u escape:
    # an ASCII line without a backslash holds none.
    if text is not None and text.isascii() and "\\" not in text:
        return
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise LedgerError("bad_json", f"line {number} is not valid UTF-8 text (or holds a lone "
                          "surrogate escape)") from None


def finite(value: Any) -> bool:
    """False when `value` holds a float that is NaN or infinite (Python's JSON parser reads
    `NaN`, `Infinity` and `1e400` as such), at any depth."""
    if isinstance(value, float):
        return math.isfinite(value)
    if not isinstance(value, list | dict):
        return True
    stack = [value]
    while stack:
        node = stack.pop()
        for item in node.values() if isinstance(node, dict) else node:
            if isinstance(item, float) and not math.isfinite(item):
                return False
            if isinstance(item, list | dict):
                stack.append(item)
    return True


def _finite_copy(value: Any) -> Any:
    """`value` with every non-finite float as null (what JavaScript and orjson write for one)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_copy(v) for v in value]
    return value


# json_text's encoder (the same output), except that a non-finite float raises instead of being
# written as NaN or Infinity, which no strict JSON parser reads.
_STRICT = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


def result_line(result: dict[str, Any]) -> str:
    """One output line, always strict JSON; text the output encoding cannot carry is escaped,
    never a crash. (A non-finite number is refused at the door, `id` included; one that got
    past would be written as null.)"""
    try:
        text = escape_json(_STRICT.encode(result))
    except ValueError:
        result = _finite_copy(result)
        text = escape_json(_STRICT.encode(result))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(result, allow_nan=False)
    return text + "\n"
