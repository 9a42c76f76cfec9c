"""`custody-app --batch`: JSON Lines in, one JSON result per op out (DESIGN sections 9 and 10)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, TextIO

from custody_app.domain.commands import NOT_YET, OPS, parse_command
from custody_app.domain.errors import LedgerError
from custody_app.domain.readmodels import VerifyResult
from custody_app.ledger.facade import Ledger

# Ops per write transaction: results are printed only once their transaction has committed.
CHUNK = 500
_ALIAS_FIELDS = ("fact_id", "supersedes")


@dataclass
class BatchOutcome:
    ok: int = 0
    failed: int = 0
    first_failure: dict[str, Any] | None = None
    stopped: bool = False


@dataclass
class _Aliases:
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


# Public name for callers that run ops one at a time (the eval harness).
Aliases = _Aliases


def _lines(stream: Iterable[str]) -> Iterator[tuple[int, str]]:
    for number, text in enumerate(stream, start=1):
        stripped = text.strip()
        if stripped and not stripped.startswith("#"):
            yield number, stripped


def run_op(ledger: Ledger, aliases: _Aliases, number: int, text: str) -> dict[str, Any]:
    """One input line to one output object; a failure writes nothing."""
    out: dict[str, Any] = {"line": number, "id": None, "op": None}
    try:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise LedgerError("bad_json", f"line {number} is not JSON: {exc}") from None
        except RecursionError:
            raise LedgerError("bad_json", f"line {number} nests too deeply to parse") from None
        if not isinstance(data, dict):
            raise LedgerError("bad_request", f"line {number} is not a JSON object")
        check_line(data, number)
        out["id"] = data.pop("id", None)
        op = data.pop("op", None)
        out["op"] = op if isinstance(op, str) else None
        if op is None:
            raise LedgerError("bad_request", "missing field 'op'", field="op")
        if not isinstance(op, str) or op not in OPS:
            hint = " (not available in this version)" if op in NOT_YET else ""
            raise LedgerError("unknown_op", f"unknown op {op!r}{hint}")
        ref = data.pop("ref", None) if op == "assert" else None
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


# Deeper lines are refused before any op sees them (parsers and the canonical form recurse).
MAX_DEPTH = 64


def check_line(data: dict[str, Any], number: int) -> None:
    """Refuse a line nested deeper than MAX_DEPTH or holding text that is not valid Unicode
    (invalid UTF-8 read with surrogateescape, or a lone surrogate escape such as \\ud800)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise LedgerError("bad_request", f"line {number} nests deeper than {MAX_DEPTH} levels")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise LedgerError("bad_json", f"line {number} is not valid UTF-8 text (or holds a lone "
                          "surrogate escape)") from None


def result_line(result: dict[str, Any]) -> str:
    """One output line; text the output encoding cannot carry is escaped, never a crash."""
    text = json.dumps(result, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(result)
    return text + "\n"


def _group_failed(pending: list[dict[str, Any]], exc: LedgerError, outcome: BatchOutcome,
                  fail_fast: bool) -> None:
    for result in pending:
        if result["ok"]:
            outcome.ok -= 1
            outcome.failed += 1
            result.pop("result", None)
            result.update(ok=False, error=exc.to_json())
            outcome.first_failure = outcome.first_failure or result
    outcome.stopped = outcome.stopped or (fail_fast and bool(pending))


# Erasure ops run in a transaction of their own, so their WAL checkpoint and byte scan see
# the erasure committed.
_STANDALONE = ("forget", "forget_subject", "sweep")


def _op_name(text: str) -> Any:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return data.get("op") if isinstance(data, dict) else None


def _groups(lines: Iterator[tuple[int, str]], chunk: int
            ) -> Iterator[tuple[bool, list[tuple[int, str]]]]:
    """(shared transaction?, lines): up to `chunk` ops together, erasure ops alone."""
    group: list[tuple[int, str]] = []
    for item in lines:
        if _op_name(item[1]) in _STANDALONE:
            if group:
                yield True, group
                group = []
            yield False, [item]
            continue
        group.append(item)
        if len(group) >= chunk:
            yield True, group
            group = []
    if group:
        yield True, group


def run_batch(ledger: Ledger, stream: Iterable[str], out: TextIO, *,
              fail_fast: bool = False, chunk: int = CHUNK, sign: bool = True) -> BatchOutcome:
    """Run every op; groups of ops share a transaction, each op in its own savepoint. Results
    are printed once their transaction committed; a run that wrote ends with a signed
    checkpoint of the chain head (`sign`)."""
    outcome = BatchOutcome()
    aliases = _Aliases()
    pending: list[dict[str, Any]] = []
    head_before = ledger.db.events.head()
    for shared, group in _groups(_lines(stream), chunk):
        saved = dict(aliases.names)
        entered = False
        try:
            with ledger.transaction() if shared else nullcontext():
                entered = True
                for number, text in group:
                    result = run_op(ledger, aliases, number, text)
                    pending.append(result)
                    if result["ok"]:
                        outcome.ok += 1
                        continue
                    outcome.failed += 1
                    outcome.first_failure = outcome.first_failure or result
                    if fail_fast:
                        outcome.stopped = True
                        break
        except LedgerError as exc:
            aliases.names = saved
            if not entered:
                raise
            # The group's transaction did not commit (e.g. disk_full): none of its ops stands.
            _group_failed(pending, exc, outcome, fail_fast)
        except BaseException:
            aliases.names = saved
            raise
        for result in pending:
            out.write(result_line(result))
        out.flush()
        pending.clear()
        if outcome.stopped:
            break
    if sign and ledger.keys is not None and ledger.db.events.head() != head_before:
        try:
            ledger.checkpoint()
        except LedgerError as exc:  # e.g. disk_full: the ops' results above stand
            sys.stderr.write(f"custody-app: the closing signed checkpoint was not written: "
                             f"{exc.message} ({exc.code})\n")
    if outcome.stopped and outcome.first_failure is not None:
        f = outcome.first_failure
        sys.stderr.write(f"custody-app: stopped at line {f['line']} ({f['error']['code']}): "
                         f"{f['error']['message']}\n")
    return outcome
