"""What the service returns: pydantic read models shared by the API, --batch and the TUI."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from custody_app.domain.models import Cause, LlmBlock


class ReadModel(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True)


class FactOpResult(ReadModel):
    """A write that touched one fact."""

    fact_id: str
    event_id: str
    seq: int
    tx_at: str
    status: str


def drop_unsaid(data: Any, **unsaid: Any) -> Any:
    """A dumped model without each field that holds its `unsaid` value (None, False): fields
    added later appear only when they say something, so older outputs read as they did."""
    if isinstance(data, dict):
        for key, value in unsaid.items():
            if key in data and data[key] is value:
                del data[key]
    return data


class RetractResult(FactOpResult):
    """A retraction: `pending` when it waits in the review queue (the fact stays believed)."""

    pending: bool


class ReceiptUnused(ReadModel):
    """Why a genuine receipt the write cited earned it nothing: `check` names the reason as
    a refused receipt's `check` does (`spent`: the receipt already raised a fact for this
    field), `message` says it in one sentence."""

    check: str
    receipt_id: str
    message: str


class AssertResult(FactOpResult):
    provenance: str
    redacted: dict[str, list[str]] | None = None
    """Which kinds of identifier redaction masked in which field (`value`, `cause.ref`, ...),
    value-free; absent when nothing was masked, so a masked write never passes unsaid."""
    receipt_unused: ReceiptUnused | None = None
    """Present when the write cited a receipt that earned it nothing: it keeps the writer's
    own standing (`provenance`), and this says why."""

    @model_serializer(mode="wrap")
    def _without_empty_redacted(self, handler: SerializerFunctionWrapHandler) -> Any:
        return drop_unsaid(handler(self), redacted=None, receipt_unused=None)


class ContradictingAssert(AssertResult):
    """A write that gave a `one` predicate a second active value without `supersedes`."""

    contradicts: list[str]
    warning: str


class FactView(ReadModel):
    """One fact as of a moment. `value` is null and `erased` true when the value was erased;
    null and `sealed` true when it is held sealed and was not opened (no key store)."""

    fact_id: str
    subject: str
    predicate: str
    value: Any
    space: str
    status: str
    provenance: str
    valid_from: str
    valid_to: str | None
    actor: str
    erased: bool = False
    sealed: bool = False
    """The value is held, sealed, but this read could not open it: the key store is missing
    (present only then, so a read with its key store reads as it always did)."""

    @model_serializer(mode="wrap")
    def _without_unsealed(self, handler: SerializerFunctionWrapHandler) -> Any:
        return drop_unsaid(handler(self), sealed=False)


class AsOfResult(ReadModel):
    valid_at: str
    tx_at: str
    facts: list[FactView]


class Contradiction(ReadModel):
    """Two or more values believed at once for a predicate the policy says has one."""

    subject: str
    predicate: str
    fact_ids: list[str]


class ContestedAsOf(AsOfResult):
    """An as_of whose facts hold a contradiction (only then has it this field)."""

    contradictions: list[Contradiction]


class EventView(ReadModel):
    """One event as history shows it: the envelope, its own fields and (asserts) the value."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="allow")
    seq: int
    event_id: str
    kind: str
    tx_at: str
    actor: str
    policy_hash: str


class HistoryResult(ReadModel):
    fact_id: str
    status: str
    events: list[EventView]


class FactRef(ReadModel):
    """A related fact, briefly."""

    fact_id: str
    status: str
    subject: str
    predicate: str
    valid_from: str


class Review(ReadModel):
    kind: str
    actor: str
    tx_at: str
    seq: int
    reason: str | None = None


class PolicyText(ReadModel):
    """A policy exactly as it was in force: its hash, canonical JSON and the TOML it came from."""

    hash: str
    canonical: str
    source: str
    path: str | None


class WhyResult(ReadModel):
    """Why the agent believes (or believed) a fact."""

    fact: FactView
    created_by: EventView
    actor: str
    cause: Cause
    session: str | None
    llm: LlmBlock | None
    sources: list[FactRef]
    dependents: list[FactRef]
    policy: PolicyText
    supersedes: list[FactRef]
    superseded_by: list[FactRef]
    reviews: list[Review]
    events_verified: bool
    salience: float | None = None
    salience_class: str | None = None


class VerifyResult(ReadModel):
    valid: bool
    events: int
    head: str | None
    first_bad_seq: int | None = None
    problem: str | None = None
    checkpoints: int = 0
    last_checkpoint_seq: int | None = None
    values_unchecked: int = 0
    keystore_missing: str | None = None
    """The key store looked for and not found (a ledger file verified alone): the chain, the
    projection and the checkpoints were checked, but no sealed value or free text was opened
    (`values_unchecked` counts the values). Absent when the key store was open."""
    index_problems: list[str] = []
    ledger_id: str | None = None
    """What a tool receipt's `audience` names for this ledger."""
    ledger_id_chained: bool = False
    """Whether that id is in the chain (its first event); false: ledger id not chained (older
    ledger), kept in the file's meta only."""

    @model_serializer(mode="wrap")
    def _without_absent_keystore(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Only a verify without its key store says so: one with it reads as it always did.
        return drop_unsaid(handler(self), keystore_missing=None)


class RebuildResult(ReadModel):
    """The projection recomputed from the events, compared with the stored one."""

    facts: int
    states: int
    differences: list[str]
    repaired: bool


class ClockResult(ReadModel):
    now: str


class CheckpointResult(ReadModel):
    """A signed statement of the chain head, appended as a `checkpoint` event."""

    event_id: str
    seq: int
    tx_at: str
    checkpoint_seq: int
    head_hash: str
    key_fingerprint: str


class RecallHit(ReadModel):
    """One recalled fact, its fused score, and its salience now."""

    fact: FactView
    score: float
    lexical_rank: int | None
    vector_rank: int | None
    salience: float
    salience_class: str


class EmbedResult(ReadModel):
    """`custody-app embed`: the vectors a model embedder's worker still owed, made now."""
    embedder: str
    embedded: int  # believed facts given their vector by this run
    waiting: int  # believed facts still without one (0 unless interrupted)
    in_write: bool  # the embedder makes its vectors inside each write: nothing ever waits


class RecallResult(ReadModel):
    query: str
    strategy: str
    note: str
    embedder: str | None
    results: list[RecallHit]
    # Believed facts the background worker has not embedded yet (a model embedder's vectors
    # come after the write): a vector or hybrid recall finds them by their words only.
    unembedded: int = 0

