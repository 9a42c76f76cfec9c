"""Events and their parts as frozen pydantic models, validated at the door."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from custody_app.domain.errors import LedgerError
from custody_app.domain.escaping import escape_identifier, unsafe_character, unsafe_kind
from custody_app.domain.receipts import Pointer, Receipt
from custody_app.domain.timeutil import normalise

ACTOR_KINDS = ("user", "agent", "llm", "reviewer", "system", "rule")
CAUSE_KINDS = ("message", "tool", "document", "manual", "rule", "import")
REASON_CODES = ("subject_request", "retention", "legal_order", "consent_withdrawn", "error", "policy")
PROVENANCES = ("claimed", "attested", "verified")
PROV_RANK = {p: i for i, p in enumerate(PROVENANCES)}
STATUSES = ("quarantined", "active", "superseded", "retracted", "forgotten", "expired")

Provenance = Literal["claimed", "attested", "verified"]
ReasonCode = Literal[
    "subject_request", "retention", "legal_order", "consent_withdrawn", "error", "policy"
]
_ACTOR_RE = re.compile(r"^([a-z]+):(\S.{0,199})$")


def check_actor(text: str) -> str:
    """`kind:id` with kind from the closed set; raises a pydantic error coded `invalid_actor`
    naming the problem: the kind, or a character no identifier may hold (`check_identifier`)."""
    match = _ACTOR_RE.match(text) if isinstance(text, str) else None
    if match is not None and match.group(1) in ACTOR_KINDS and unsafe_character(text) is None:
        return text
    bad = unsafe_kind(text) if isinstance(text, str) else None
    if bad is not None and text.partition(":")[1] and text.partition(":")[0] in ACTOR_KINDS:
        # The kind is fine: the character is the problem (a control or bidi character, or an
        # invisible one making a lookalike of another actor), so that is what is named.
        raise PydanticCustomError(
            "invalid_actor", "actor '{actor}' holds the {what} character {char}; actors may not",
            {"actor": escape_identifier(text), "what": bad[1], "char": bad[0]})
    raise PydanticCustomError(
        "invalid_actor",
        "actor '{actor}' must be kind:id with kind one of " + ", ".join(ACTOR_KINDS),
        {"actor": escape_identifier(text) if isinstance(text, str) else text},
    )


def check_identifier(text: str) -> str:
    """Identifiers (subject, predicate, space, actor, session, refs) are shown to reviewers and
    matched exactly: no control character or bidirectional override may hide in one, nor an
    invisible character (U+200B ZERO WIDTH SPACE, a word joiner, a soft hyphen...) that would
    make it a different identifier looking exactly like another."""
    if (bad := unsafe_kind(text)) is not None:
        raise PydanticCustomError("unsafe_identifier", identifier_refused(*bad))
    return text


def identifier_refused(char: str, what: str) -> str:
    """Why the door refuses an identifier holding `char` (`unsafe_kind`'s pair), one clause."""
    if what != "invisible":
        return f"holds the control or bidirectional character {char}; identifiers may not"
    return (f"holds the invisible character {char} (it would look exactly like the identifier "
            "without it); identifiers may not")


def actor_kind(actor: str) -> str:
    return actor.split(":", 1)[0]


def _check_time(value: Any) -> Any:
    if value is None:
        return None
    try:
        return normalise(value)
    except LedgerError as exc:
        raise PydanticCustomError("invalid_time", exc.message) from None


Actor = Annotated[str, AfterValidator(check_actor)]
Ident = Annotated[str, Field(min_length=1, max_length=500), AfterValidator(check_identifier)]
# An identifier a command names only to erase what the ledger holds (forget_subject's subject):
# a ledger written before the door refused a character may hold one with it, and must be able
# to erase it. The command checks it against the ledger instead (domain.spelling.require_held).
HeldIdent = Annotated[str, Field(min_length=1, max_length=500)]
Time = Annotated[str, BeforeValidator(_check_time)]
Text = Annotated[str, Field(min_length=1, max_length=500)]
FactId = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(check_identifier)]
Hash = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Signer = Annotated[str, Field(pattern=r"^ed25519:[0-9a-f]{64}$")]


class Frozen(BaseModel):
    """Base of every domain model: immutable, unknown fields refused."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")


class Cause(Frozen):
    """Why a write happened."""

    kind: Literal["message", "tool", "document", "manual", "rule", "import"]
    ref: Annotated[str, Field(min_length=1, max_length=500, pattern=r"\S"),
                   AfterValidator(check_identifier)]
    detail: Annotated[str, Field(max_length=2000)] | None = None
    receipt: Receipt | None = None
    """A tool gateway's signed receipt for the call the value came from (checked at the door)."""
    pointer: Pointer | None = None
    """RFC 6901 pointer to the value inside the receipt's output (absent: the whole output)."""
    subject_pointer: Pointer | None = None
    """RFC 6901 pointer to the fact's subject inside the receipt's signed call arguments (for a
    receipt without a signed `subject` claim; the write gives the arguments as `tool_arguments`)."""

    @model_serializer(mode="wrap")
    def _without_absent_evidence(self, handler: SerializerFunctionWrapHandler) -> Any:
        # A cause without a receipt reads as it did before receipts existed.
        data = handler(self)
        if isinstance(data, dict):
            for key in ("receipt", "pointer", "subject_pointer"):
                if data.get(key) is None:
                    data.pop(key, None)
        return data


class LlmBlock(Frozen):
    """What an `llm` actor was: model and hashes of what it saw and said."""

    model: Annotated[str, Field(min_length=1, max_length=200)]
    prompt_hash: str | None = None
    input_hash: str | None = None
    output_hash: str | None = None
    tokens: Annotated[int, Field(ge=0)] | None = None


class Event(Frozen):
    """The envelope every event shares."""

    seq: Annotated[int, Field(ge=1)]
    kind: str
    tx_at: Time
    actor: Actor
    policy_hash: Hash
    signer: Signer | None = None
    """The writer key that signed the event (`ed25519:<64 hex>`, registered for `actor` by the
    policy in force); absent on an unsigned event, so older events hash as they did."""


class PolicyAdopted(Event):
    """A policy (by hash) came into force."""

    kind: Literal["policy"] = "policy"
    ledger_id: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    """The ledger's id (what a receipt's `audience` names), in the first event of a ledger
    created since issue 31: chained, so editing the file's meta cannot change it. Absent in
    every later policy event and in older ledgers, whose events hash as they did."""


class FactAsserted(Event):
    """A fact was written. Neither the value nor the subject is here: the chain hashes the
    value's salted commitment and the subject's peppered hash, so both can be erased."""

    kind: Literal["assert"] = "assert"
    fact_id: FactId
    subject_ref: Hash
    predicate: Text
    space: Text
    valid_from: Time
    valid_to: Time | None = None
    provenance: Provenance
    cause: Cause
    session: Text | None = None
    supersedes: FactId | None = None
    sources: Annotated[list[FactId], Field(min_length=1)] | None = None
    llm: LlmBlock | None = None
    marks: list[str] | None = None
    redactions: list[dict[str, Any]] | None = None
    commitment: Hash

    @model_validator(mode="after")
    def _consistent(self) -> FactAsserted:
        if (actor_kind(self.actor) == "llm") != (self.llm is not None):
            raise PydanticCustomError(
                "llm_block", "an llm block is required if and only if the actor is llm:..."
            )
        if self.valid_to is not None and self.valid_to <= self.valid_from:
            raise PydanticCustomError("invalid_interval", "valid_to must be after valid_from")
        return self


class FactRetracted(Event):
    """Should never have been believed (history kept). `provenance` is the retractor's
    standing; a `pending` retraction changes no belief until a reviewer confirms it."""

    kind: Literal["retract"] = "retract"
    fact_id: FactId
    reason: Text
    session: Text | None = None
    provenance: Provenance | None = None
    pending: Literal[True] | None = None
    redactions: list[dict[str, Any]] | None = None


class FactConfirmed(Event):
    """A reviewer lifted a quarantined fact, or (with `retraction`, the seq of a pending
    retraction of it) confirmed that retraction, which then takes effect."""

    kind: Literal["confirm"] = "confirm"
    fact_id: FactId
    reason: Text | None = None
    session: Text | None = None
    retraction: Annotated[int, Field(ge=1)] | None = None
    corroborated_by: list[FactId] | None = None
    redactions: list[dict[str, Any]] | None = None


class FactRejected(Event):
    """A reviewer turned a quarantined fact down (counts as a retraction), or (with
    `retraction`) discarded a pending retraction of it, which leaves the fact as it was."""

    kind: Literal["reject"] = "reject"
    fact_id: FactId
    reason: Text
    session: Text | None = None
    retraction: Annotated[int, Field(ge=1)] | None = None
    redactions: list[dict[str, Any]] | None = None


class FactAffirmed(Event):
    """A believed fact was witnessed again."""

    kind: Literal["affirm"] = "affirm"
    fact_id: FactId
    session: Text | None = None


class FactHeld(Event):
    """A legal hold: the fact cannot be forgotten or swept until released."""

    kind: Literal["hold"] = "hold"
    fact_id: FactId
    reason: Text
    session: Text | None = None
    redactions: list[dict[str, Any]] | None = None


class FactReleased(Event):
    """A legal hold was lifted."""

    kind: Literal["release"] = "release"
    fact_id: FactId
    reason: Text
    session: Text | None = None
    redactions: list[dict[str, Any]] | None = None


DigestKind = Literal["hmac-sha256", "sha256", "none"]


class FactForgotten(Event):
    """The value was erased; `root` names the forgotten fact a cascade started from."""

    kind: Literal["forget"] = "forget"
    fact_id: FactId
    reason: ReasonCode
    digest_kind: DigestKind
    digest: Hash | None = None
    root: FactId | None = None
    subject_hash: Hash | None = None


class FactExpired(Event):
    """A retention sweep erased the value (as a forget, with status `expired`)."""

    kind: Literal["expire"] = "expire"
    fact_id: FactId
    reason: ReasonCode
    cutoff: Time
    window: str | None = None
    digest_kind: DigestKind
    digest: Hash | None = None
    root: FactId | None = None


class SubjectForgotten(Event):
    """A data principal was erased: content-free (peppered subject hash, counts, reason)."""

    kind: Literal["forget_subject"] = "forget_subject"
    subject_hash: Hash
    reason: ReasonCode
    counts: dict[str, Annotated[int, Field(ge=0)]]


class ChainCheckpoint(Event):
    """A signed statement of the chain head, checkable with the ledger's public key."""

    kind: Literal["checkpoint"] = "checkpoint"
    checkpoint_seq: Annotated[int, Field(ge=1)]
    head_hash: Hash
    head_tx_at: Time
    key_fingerprint: str
    signature: Annotated[str, Field(pattern=r"^[0-9a-f]{128}$")]


class FactsServed(Event):
    """Facts a read or recall returned to a session (ids only, never values)."""

    kind: Literal["served"] = "served"
    session: Text
    fact_ids: list[FactId]
    via: Literal["as_of", "recall", "history", "why"]


ArgsDigest = Annotated[str, Field(pattern=r"^([a-z0-9-]{1,20}:)?[0-9a-f]{32,128}$")]


class ActionRecorded(Event):
    """An action an agent took in a session (a tool call): what, a reference, the outcome."""

    kind: Literal["acted"] = "acted"
    session: Text
    tool: Text
    ref: Text
    outcome: Text
    args_digest: ArgsDigest | None = None
    subject_ref: Hash | None = None
    receipt: Receipt | None = None
    cause: Cause | None = None
    redactions: list[dict[str, Any]] | None = None


class TextsSealed(Event):
    """The schema upgrade sealed the free text of `events` earlier events; `digest` covers
    the bodies it rewrote (sealed_text.upgrade_digest), so they stay tamper-evident after an
    erasure takes the text their original hashes covered."""

    kind: Literal["seal_text"] = "seal_text"
    events: Annotated[int, Field(ge=0)]
    digest: Hash


EVENT_MODELS: dict[str, type[Event]] = {
    m.model_fields["kind"].default: m
    for m in (PolicyAdopted, FactAsserted, FactRetracted, FactConfirmed, FactRejected,
              FactAffirmed, FactHeld, FactReleased, FactForgotten, FactExpired, SubjectForgotten,
              ChainCheckpoint, FactsServed, ActionRecorded, TextsSealed)
}
