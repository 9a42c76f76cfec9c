"""Scenario files: loading, validation (naming scenario, op index and problem) and their digest."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from custody_app.domain.chain import canonical
from custody_app.domain.commands import OPS, parse_command
from custody_app.domain.errors import LedgerError

# The harness's own keys on an op; everything else goes to the batch protocol.
BAD, EXPECT, EXPECT_ERROR = "bad", "expect", "expect_error"
HARNESS_KEYS = (BAD, EXPECT, EXPECT_ERROR)
READ_OPS = ("as_of",)
WRITE_OPS = ("assert",)
_ALIAS_FIELDS = ("fact_id", "supersedes")
# Stands in for an alias while an op is validated against its command model.
_PLACEHOLDER_ID = "f_000000000000" + "0" * 10


@dataclass(frozen=True)
class Scenario:
    name: str
    ops: list[dict[str, Any]]
    description: str = ""

    def bad_values(self) -> set[tuple[str, str, str]]:
        """(subject, predicate, canonical value) of every write marked bad."""
        return {(op["subject"], op["predicate"], canonical(op["value"]))
                for op in self.ops if op.get(BAD) is True}


@dataclass(frozen=True)
class ScenarioFile:
    source: str
    digest: str
    scenarios: list[Scenario] = field(default_factory=list)


def builtin_scenarios_path() -> Path:
    return Path(__file__).resolve().parent / "scenarios.json"


def digest_of(document: Any) -> str:
    """sha256 over the RFC 8785 canonical JSON of the parsed file: layout does not change it."""
    return "sha256:" + hashlib.sha256(canonical(document).encode("utf-8")).hexdigest()


def _refuse(message: str, scenario: str | None = None, index: int | None = None) -> LedgerError:
    where = ""
    if scenario is not None:
        where = f"scenario {scenario!r}" + (f", op index {index}" if index is not None else "")
        where += ": "
    return LedgerError("scenario_invalid", where + message, scenario=scenario, op_index=index)


def load_scenarios(path: str | Path | None = None) -> ScenarioFile:
    """Read and validate a scenario file (the built-in one when `path` is None)."""
    chosen = Path(path) if path is not None else builtin_scenarios_path()
    try:
        document = json.loads(chosen.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LedgerError("scenario_unreadable",
                          f"cannot read scenario file {chosen}: {exc.strerror}") from None
    except (ValueError, RecursionError) as exc:
        raise _refuse(f"{chosen} is not JSON: {exc}") from None
    scenarios = parse_document(document)
    return ScenarioFile(source="built-in" if path is None else str(chosen),
                        digest=digest_of(document), scenarios=scenarios)


def parse_document(document: Any) -> list[Scenario]:
    if not isinstance(document, dict):
        raise _refuse("a scenario file is an object {\"version\": 1, \"scenarios\": [...]}")
    unknown = sorted(set(document) - {"version", "scenarios", "description"})
    if unknown:
        raise _refuse(f"unknown top-level key {unknown[0]!r}")
    if document.get("version") != 1:
        raise _refuse(f"version must be 1, not {document.get('version')!r}")
    items = document.get("scenarios")
    if not isinstance(items, list) or not items:
        raise _refuse("'scenarios' must be a non-empty list")
    out: list[Scenario] = []
    seen: set[str] = set()
    for position, item in enumerate(items):
        scenario = _parse_scenario(item, position)
        if scenario.name in seen:
            raise _refuse("a scenario of this name already exists", scenario.name)
        seen.add(scenario.name)
        out.append(scenario)
    return out


def _parse_scenario(item: Any, position: int) -> Scenario:
    if not isinstance(item, dict):
        raise _refuse(f"scenario at position {position} is not an object")
    name = item.get("name")
    if not isinstance(name, str) or not name.strip():
        raise _refuse(f"scenario at position {position} has no 'name'")
    unknown = sorted(set(item) - {"name", "ops", "description"})
    if unknown:
        raise _refuse(f"unknown key {unknown[0]!r}", name)
    ops = item.get("ops")
    if not isinstance(ops, list) or not ops:
        raise _refuse("'ops' must be a non-empty list", name)
    description = item.get("description", "")
    if not isinstance(description, str):
        raise _refuse("'description' must be a string", name)
    refs: set[str] = set()
    for index, op in enumerate(ops):
        _check_op(op, name, index, refs)
    scenario = Scenario(name=name, ops=ops, description=description)
    bad = scenario.bad_values()
    for index, op in enumerate(ops):
        if op["op"] in READ_OPS and op[EXPECT] is not None and (
                op["subject"], op["predicate"], canonical(op[EXPECT])) in bad:
            raise _refuse("'expect' equals a value marked bad", name, index)
    return scenario


def _check_op(op: Any, name: str, index: int, refs: set[str]) -> None:
    if not isinstance(op, dict):
        raise _refuse("an op is a JSON object", name, index)
    kind = op.get("op")
    if kind not in OPS:
        raise _refuse(f"unknown op {kind!r}", name, index)
    if BAD in op and (kind not in WRITE_OPS or not isinstance(op[BAD], bool)):
        raise _refuse("'bad' is true or false, and only on an assert", name, index)
    if kind in READ_OPS:
        if EXPECT not in op:
            raise _refuse("a read needs 'expect' (a value, or null for nothing believed)",
                          name, index)
        for key in ("subject", "predicate"):
            if not isinstance(op.get(key), str):
                raise _refuse(f"a read needs '{key}', so its answer can be scored", name, index)
    elif EXPECT in op:
        raise _refuse("'expect' belongs on a read (as_of) only", name, index)
    if EXPECT_ERROR in op and not (isinstance(op[EXPECT_ERROR], str) and op[EXPECT_ERROR]):
        raise _refuse("'expect_error' must be an error code", name, index)
    data = {k: v for k, v in op.items() if k not in (*HARNESS_KEYS, "op", "id", "ref")}
    try:
        canonical(op)
        for key in _ALIAS_FIELDS:
            data[key] = _placeholder(data[key], refs) if key in data else None
            if data[key] is None:
                del data[key]
        if isinstance(data.get("sources"), list):
            data["sources"] = [_placeholder(s, refs) for s in data["sources"]]
        parse_command(OPS[kind], data)
    except LedgerError as exc:
        raise _refuse(exc.message, name, index) from None
    except Exception as exc:  # rfc8785 raises several types for values that are not JSON
        raise _refuse(f"not canonical JSON: {exc}", name, index) from None
    ref = op.get("ref")
    if ref is not None:
        if kind != "assert" or not isinstance(ref, str) or not ref or ref.startswith("@"):
            raise _refuse("'ref' names an assert, as a plain name such as \"plan1\"", name, index)
        if ref in refs:
            raise _refuse(f"alias {ref!r} is defined twice", name, index)
        refs.add(ref)


def _placeholder(ref: Any, refs: set[str]) -> Any:
    if isinstance(ref, str) and ref.startswith("@"):
        if ref[1:] not in refs:
            raise LedgerError("unknown_alias", f"alias {ref} is not defined by an earlier assert")
        return _PLACEHOLDER_ID
    return ref
