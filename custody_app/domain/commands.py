"""Commands as pydantic models: the batch ops and the Python API validate through the same ones."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Annotated, Any, Literal

import rfc8785

try:
    import orjson
except ImportError:  # pragma: no cover - json_larger_than then always serialises with json
    orjson = None  # type: ignore[assignment]
from pydantic import Field, ValidationError, ValidationInfo, field_validator

from custody_app.domain.errors import LedgerError, suggest
from custody_app.domain.escaping import escape_identifier
from custody_app.domain.models import (
    Actor,
    ArgsDigest,
    Cause,
    FactId,
    Frozen,
    Hash,
    HeldIdent,
    Ident,
    LlmBlock,
    Provenance,
    ReasonCode,
    Text,
    Time,
)
from custody_app.domain.receipts import Receipt


class Command(Frozen):
    """Base of every command."""


class AssertFact(Command):
    subject: Ident
    predicate: Ident
    value: Any
    actor: Actor
    cause: Cause
    space: Ident | None = None
    provenance: Provenance = "claimed"
    valid_from: Time | None = None
    valid_to: Time | None = None
    session: Ident | None = None
    supersedes: FactId | None = None
    sources: Annotated[list[FactId], Field(min_length=1, max_length=1000)] | None = None
    llm: LlmBlock | None = None
    tool_output: Any = None
    """The tool's output, when `cause.pointer` names the value inside it: checked against the
    receipt's output digest at the door, never stored."""
    tool_arguments: Any = None
    """The tool call's arguments, when `cause.subject_pointer` names the subject inside them:
    checked against the receipt's arguments digest at the door, never stored."""

    @field_validator("value")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("value must not be null (null means erased)")
        if depth_of(value) > MAX_NESTING:
            raise ValueError(nesting_message("value"))
        if json_larger_than(value, MAX_VALUE_CHARS):
            raise ValueError(f"value is larger than {MAX_VALUE_CHARS:,} characters of JSON")
        return value

    @field_validator("tool_output", "tool_arguments")
    @classmethod
    def _bounded(cls, value: Any, info: ValidationInfo) -> Any:
        # Hashed whole at the door: bounded like a value (depth and size).
        if value is not None and depth_of(value) > MAX_NESTING:
            raise ValueError(nesting_message(str(info.field_name)))
        if value is not None and json_larger_than(value, MAX_VALUE_CHARS):
            raise ValueError(f"{info.field_name} is larger than {MAX_VALUE_CHARS:,} characters "
                             "of JSON")
        if value is not None and (gap := not_canonical(value)):
            raise ValueError(f"{info.field_name} {gap}, so it cannot be compared with the "
                             "receipt's digest")
        return value


def not_canonical(value: Any) -> str | None:
    """Why `value` has no RFC 8785 form (the form a receipt's digest is taken over), or None.
    Never quotes the value: an integer of thousands of digits stays out of the message."""
    try:
        rfc8785.dumps(value)
    except rfc8785.IntegerDomainError:
        return "holds an integer beyond +/-(2^53 - 1)"
    except rfc8785.FloatDomainError:
        return "holds a number that is not finite"
    except (rfc8785.CanonicalizationError, TypeError, ValueError, RecursionError):
        return "is not canonical JSON (a key that is not a string, or a lone surrogate)"
    return None


# The one nesting limit (docs/batch.md): a field's value may nest lists and objects this deep;
# the batch runner checks whole lines against it before parsing ops, the API checks values.
MAX_NESTING = 64


# A value is sealed, hashed, indexed and embedded whole: past this size one write costs memory
# hundreds of times its size (a 100 MB value took the process past 20 GB).
MAX_VALUE_CHARS = 1 << 20


def json_size(value: Any) -> int:
    """Characters of `value` as JSON; 0 for what is not JSON (refused later, by name)."""
    try:
        return len(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError, RecursionError):
        return 0


# json.dumps writes at most this many characters for each byte orjson writes for the same JSON
# value: a space after each ',' and ':', and a float's exponent ('1e+16' for '1e16'), a
# non-finite float ('-Infinity' for 'null') at worst 2.25 times; escapes alike.
_JSON_OVER_ORJSON = 4


def json_larger_than(value: Any, limit: int) -> bool:
    """`json_size(value) > limit`, serialising with json only when orjson's (compact, several
    times faster) form does not settle it: most values are a small fraction of the limit."""
    if orjson is not None:
        try:
            if len(orjson.dumps(value)) * _JSON_OVER_ORJSON <= limit:
                return False
        except Exception:  # what orjson refuses (non-string keys, big integers): json decides
            pass
    return json_size(value) > limit


def nesting_message(field: str) -> str:
    # `field` may be any key of an input line: escaped, so it cannot drive a terminal.
    return (f"field '{escape_identifier(field)}' nests deeper than {MAX_NESTING} levels of lists "
            "and objects")


def depth_of(value: Any) -> int:
    """How many levels of lists and objects nest (a scalar is 0, `[[1]]` is 2); iterative, so a
    hostile value cannot blow the stack, and it stops once past the limit."""
    # Level by level: the members of every list and object of one level make the next.
    deepest, level = 0, [value]
    while level and deepest <= MAX_NESTING:
        below: list[Any] = []
        for node in level:
            if isinstance(node, dict):
                below.extend(node.values())
            elif isinstance(node, list | tuple):
                below.extend(node)
            else:
                continue
            below.append(None)  # this level held a list or object (even an empty one)
        if not below:
            break
        deepest += 1
        level = below
    return deepest


class Retract(Command):
    fact_id: FactId
    actor: Actor
    reason: Text
    session: Ident | None = None
    # The retractor's standing, as on a write; None: the highest it may declare.
    provenance: Provenance | None = None


class Confirm(Command):
    fact_id: FactId
    actor: Actor
    reason: Text | None = None
    session: Ident | None = None
    # True: confirm the fact's pending retraction instead of the fact itself.
    retraction: bool = False
    # The event id of the pending retraction the reviewer read (implies `retraction`): the
    # review is refused unless that very retraction is the one waiting (DESIGN 14).
    retraction_event: Hash | None = None


class Reject(Command):
    fact_id: FactId
    actor: Actor
    reason: Text
    session: Ident | None = None
    # True: discard the fact's pending retraction (the fact stays as it is).
    retraction: bool = False
    # The event id of the pending retraction the reviewer read (implies `retraction`).
    retraction_event: Hash | None = None


class Affirm(Command):
    fact_id: FactId
    actor: Actor
    session: Ident | None = None


class AsOf(Command):
    valid_at: Time | None = None
    tx_at: Time | None = None
    space: Ident | None = None
    subject: Ident | None = None
    predicate: Ident | None = None
    include: Provenance = "attested"
    limit: Annotated[int, Field(ge=1, le=1_000_000_000)] | None = None
    session: Ident | None = None


class Recall(Command):
    query: Annotated[str, Field(min_length=1, max_length=2000)]
    k: Annotated[int, Field(ge=1, le=1000)] = 10
    space: Ident | None = None
    subject: Ident | None = None
    session: Ident | None = None
    include_claimed: bool = False
    strategy: Literal["hybrid", "lexical", "vector"] = "hybrid"


class History(Command):
    fact_id: FactId
    session: Ident | None = None


class Why(Command):
    fact_id: FactId
    session: Ident | None = None


class Verify(Command):
    pass


class SetClock(Command):
    set: Time


class Hold(Command):
    fact_id: FactId
    actor: Actor
    reason: Text
    session: Ident | None = None


class Release(Command):
    fact_id: FactId
    actor: Actor
    reason: Text
    session: Ident | None = None


class Forget(Command):
    fact_id: FactId
    actor: Actor
    reason: ReasonCode


class ForgetSubject(Command):
    subject: HeldIdent
    actor: Actor
    reason: ReasonCode


class Sweep(Command):
    before: Time | None = None
    space: Ident | None = None
    dry_run: bool = False
    actor: Actor = "system:retention"
    reason: ReasonCode = "retention"


class Checkpoint(Command):
    actor: Actor = "system:custody"


class Act(Command):
    """Record an action an agent took in a session (a tool call and its outcome)."""

    session: Ident
    tool: Ident
    ref: Ident
    outcome: Text
    actor: Actor
    args_digest: ArgsDigest | None = None
    subject: Ident | None = None
    receipt: Receipt | None = None
    cause: Cause | None = None


class Actions(Command):
    """Search recorded actions, newest first, one page at a time."""

    tool: Text | None = None
    actor: Actor | None = None
    session: Text | None = None
    subject: Text | None = None
    since: Time | None = None
    until: Time | None = None
    before_seq: Annotated[int, Field(ge=1)] | None = None
    limit: Annotated[int, Field(ge=1, le=1000)] = 100


class Blast(Command):
    fact_id: FactId


class Explain(Command):
    action_ref: Ident


# Batch op names.
OPS: dict[str, type[Command]] = {
    "assert": AssertFact, "retract": Retract, "confirm": Confirm, "reject": Reject,
    "affirm": Affirm, "as_of": AsOf, "history": History, "why": Why, "verify": Verify,
    "clock": SetClock, "hold": Hold, "release": Release, "forget": Forget,
    "forget_subject": ForgetSubject, "sweep": Sweep, "checkpoint": Checkpoint, "recall": Recall,
    "act": Act, "blast": Blast, "explain": Explain, "actions": Actions,
}
# Ops of the protocol that later versions bring; named so the error says so.
NOT_YET: tuple[str, ...] = ()


def refusal(exc: ValidationError, known: Iterable[str] = (),
            hints: dict[str, str] | None = None) -> LedgerError:
    """Turn the first validation problem into a coded, one-sentence refusal naming the field
    (when the field is unknown: its hint in `hints`, else the closest of the `known` field
    names). A field name from the input is escaped in the message (`field` keeps it as given)."""
    errors = exc.errors()
    # A mistyped field is also a missing one: name the typo, which has the suggestion.
    err = next((e for e in errors if e["type"] == "extra_forbidden" and known), errors[0])
    field = ".".join(str(p) for p in err["loc"]) or "(input)"
    shown = escape_identifier(field)
    kind = err["type"]
    if kind == "missing":
        return LedgerError("bad_request", f"missing field '{shown}'", field=field)
    if kind == "extra_forbidden":
        hint = (hints or {}).get(field)
        return LedgerError("bad_request", f"unknown field '{shown}'"
                           + (f"; {hint}" if hint else suggest(field, known)), field=field)
    if kind in ("invalid_time", "invalid_actor", "invalid_interval", "llm_block"):
        return LedgerError(kind, f"field '{shown}': {err['msg']}" if field != "(input)"
                           else err["msg"], field=field)
    return LedgerError("bad_request", f"field '{shown}': {err['msg']}", field=field)


def _hints(kind: type[Command]) -> dict[str, str]:
    """What an unknown field most likely meant, where a suggestion by spelling would mislead:
    `ref` on an op that has none is the alias an assert names its fact by."""
    if "ref" in kind.model_fields or kind is AssertFact:
        return {}
    hint = ("'ref' names an assert's fact (an alias, used as \"@name\" on later lines), so only "
            "an assert takes it")
    if "action_ref" in kind.model_fields:
        hint += "; the action's ref is the field 'action_ref'"
    return {"ref": hint}


def parse_command(kind: type[Command], data: dict[str, Any]) -> Command:
    """Strict: `true` is never read as 1 (nor `1` as true, nor `"5"` as 5)."""
    try:
        return kind.model_validate(data, strict=True)
    except ValidationError as exc:
        known = ("op", "id", *(("ref",) if kind is AssertFact else ()), *kind.model_fields)
        raise refusal(exc, known, _hints(kind)) from None
