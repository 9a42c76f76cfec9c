"""Erasure certificates: what was erased, where it was checked, and what erasure cannot reach."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import SerializerFunctionWrapHandler, model_serializer

from custody_app.domain.readmodels import ReadModel, drop_unsaid
from custody_app.domain.timeutil import format_time, parse_duration, parse_time

Outcome = Literal["clean", "pending", "found", "shared", "unverifiable", "not_applicable",
                  "crypto-erased", "not-crypto-erased"]

# The place for copies taken before an erasure (custody_app.erasure.epoch): pending until
# rotate-epoch destroys the epoch key that wrapped the keys it destroyed. Settled by that
# rotation, never by a later write's re-check (which would re-run every other place for it).
SERVER_COPIES = "WAL, archives, backups and replicas"
FILE_COPIES = "copies of the ledger and key store files made before"
COPIES_PLACES = frozenset((SERVER_COPIES, FILE_COPIES))
# A server ledger whose policy keeps its recall vectors in the clear ([recall] server_vectors =
# "clear"): every certificate says that its copies keep the vectors (custody_app.erasure
# .epoch_place).
VECTOR_COPIES = "recall vectors in copies"

CANNOT_REACH = (
    "backups, snapshots and copies of the ledger file taken before this erasure (the keys that "
    "sealed the erased facts are destroyed: a forget or a sweep re-keys the subject, "
    "forget_subject destroys its key; a copy of the key store taken with them still opens them "
    "until `custody-app rotate-epoch` destroys the epoch key that wrapped them)",
    "in a copy of the ledger taken before this erasure: the embeddings (vectors are not "
    "encrypted, and approximate the erased text), and the word index rows, testable with the "
    "current key store until the index key is rotated (`custody-app rotate-index-key`)",
    "exports, evidence packs and reports already written out of the ledger",
    "an agent's or model's context window, caches, logs, transcripts or fine-tuned weights",
    "anything a person or program copied out of the ledger before the erasure",
    "freed blocks of the underlying disk or SSD (below the database, outside this software's "
    "reach)",
)


class ScanHit(ReadModel):
    """One erased byte string still in a file: what it was (never its bytes), whose it is now
    (`leak`: the erased fact's, a derived fact's or the erased subject's, or no live row's;
    `shared`: a live record not derived from it also holds these bytes) and where it lives."""

    string: str
    classification: Literal["leak", "shared"]
    file: str
    where: list[str]
    # Copies in a page no live row holding these bytes explains (SQLite's unallocated space, a
    # free page): a rewrite of the file removes them.
    residue: int = 0


class PlaceCheck(ReadModel):
    """One place the erased value could have been, and what checking it found."""

    place: str
    outcome: Outcome
    detail: str
    hits: list[ScanHit] = []


class ErasedFact(ReadModel):
    fact_id: str
    kind: Literal["forget", "expire"]
    status_before: str
    seq: int
    event_id: str
    root: str | None
    digest_kind: str
    digest: str | None


class ErasureCertificate(ReadModel):
    """A forget, forget_subject or sweep certificate; `complete` is false while anything is
    pending or was found."""

    operation: Literal["forget", "forget_subject", "sweep"]
    issued_at: str
    actor: str
    reason: str
    ledger: str
    root: str | None = None
    subject_hash: str | None = None
    erased: list[ErasedFact]
    cascade: list[str]
    places: list[PlaceCheck]
    complete: bool
    # The byte scan found erased bytes no live row explains, so the file was rewritten from its
    # live rows (VACUUM) and scanned again: the byte scans above are of the rewritten file.
    rewritten: bool = False
    cannot_reach: list[str] = list(CANNOT_REACH)
    never_held: bool = False
    """forget_subject of a subject the ledger never held a fact of: nothing was erased
    and the tombstone records the request (DESIGN 4). Said at the top, since a mistyped id
    otherwise reads as a clean erasure; present only then."""

    @model_serializer(mode="wrap")
    def _without_held(self, handler: SerializerFunctionWrapHandler) -> Any:
        return drop_unsaid(handler(self), never_held=False)

    def render(self) -> str:
        """The certificate as a person reads it."""
        head = {"forget": f"Forget certificate for fact {self.root}",
                "forget_subject": f"Subject erasure certificate (subject hash {self.subject_hash})",
                "sweep": "Retention sweep certificate"}[self.operation]
        lines = [head, f"  issued {self.issued_at} by {self.actor}, reason {self.reason}",
                 f"  ledger {self.ledger}", f"  erased {len(self.erased)} fact(s)"]
        if self.never_held:
            lines.append("  NEVER HELD: the ledger holds no fact of this subject and never "
                         "held one: nothing was erased, and the tombstone records the request. "
                         "Check the subject id if you expected facts.")
        for fact in self.erased:
            via = f" (derived, cascade from {fact.root})" if fact.root else ""
            digest = f", {fact.digest_kind} {fact.digest}" if fact.digest else ""
            lines.append(f"    {fact.fact_id} {fact.status_before} -> {fact.kind}, seq "
                         f"{fact.seq}{via}{digest}")
        lines.append("  checked:")
        for place in self.places:
            lines.append(f"    [{place.outcome}] {place.place}: {place.detail}")
            for hit in place.hits:
                lines.append(f"      {hit.classification}: {hit.string}")
                lines += [f"        in {where}" for where in hit.where]
        if self.rewritten:
            lines.append("  file rewritten: yes (erased bytes were left in unallocated space of "
                         "database pages; the scans above are of the rewritten file)")
        lines.append(f"  complete: {'yes' if self.complete else 'NO, see pending and found above'}")
        lines.append("  erasure cannot reach:")
        lines += [f"    - {item}" for item in self.cannot_reach]
        return "\n".join(lines)


class ForgetResult(ReadModel):
    """forget: the root fact's new state and the certificate."""

    fact_id: str
    event_id: str
    seq: int
    tx_at: str
    status: str
    certificate: ErasureCertificate


class SubjectForgetResult(ReadModel):
    subject_hash: str
    counts: dict[str, int]
    event_id: str
    seq: int
    tx_at: str
    keys_destroyed: int
    certificate: ErasureCertificate


class ExpiryReason(ReadModel):
    """Why a sweep expires a fact: the age of its root (itself, or the fact it was derived
    from, which the cascade follows) under a window rule or an explicit cutoff."""

    root: str
    learned_at: str  # when the root was learned (the transaction time of its assert)
    cutoff: str
    rule: str | None = None  # "pattern = duration" of the window; None for an explicit cutoff

    def expires_at(self) -> str | None:
        """learned_at plus the window: when the root became due (None for a cutoff). Made on
        demand: formatting a time per expired fact was a third of a dry run's cost."""
        if self.rule is None:
            return None
        window = parse_duration(self.rule.rpartition(" = ")[2])
        return format_time(parse_time(self.learned_at) + window)


class SweepResult(ReadModel):
    """What a sweep expired (or would, with dry_run) and which held facts it skipped."""

    cutoffs: dict[str, str]
    expired: list[str]
    held: list[str]
    dry_run: bool
    note: str | None = None
    certificate: ErasureCertificate | None = None
    # For each expired fact, why (a cascaded fact names the root whose age expired it).
    reasons: dict[str, ExpiryReason] = {}
