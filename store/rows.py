"""Plain row types the store hands up: no apsw objects, no pydantic."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Protocol


@dataclass(slots=True)
class EventRow:
    """One row of the append-only events table."""

    seq: int
    kind: str
    tx_at: str
    actor: str
    policy_hash: str
    fact_id: str | None
    subject: str | None
    body: str
    value: bytes | None
    salt: str | None
    prev_hash: str
    hash: str
    # The writer key's Ed25519 signature over `hash` when the body names a `signer` (not hashed:
    # it signs the hash). Kept beside the event in `event_signatures` (append-only), so the
    # events table and every unsigned event stay byte for byte as they were.
    signature: bytes | None = None


@dataclass(slots=True)
class FactRow:
    """One fact of the projection, as it stands now."""

    assert_seq: int
    fact_id: str
    subject: str
    predicate: str
    space: str
    valid_from: str
    valid_to: str | None
    provenance: str
    confirmed_seq: int | None
    ended: str | None
    ended_seq: int | None
    supersedes: str | None
    superseded_by: str | None
    held: int
    actor: str
    session: str | None
    status: str
    marks: str | None


@dataclass(slots=True, frozen=True)
class StateRow:
    """A fact's state from transaction time `tx_from` (event `from_seq`) until the next row."""

    fact_seq: int
    from_seq: int
    tx_from: str
    live: int
    prov_rank: int
    status_all: str
    status_trusted: str
    vto_all: str | None
    vto_trusted: str | None


@dataclass(slots=True, frozen=True)
class AsOfRow:
    """One fact returned by an as-of query, with its state as of the asked moment."""

    fact_id: str
    subject: str
    predicate: str
    space: str
    value: bytes | None
    status: str
    prov_rank: int
    valid_from: str
    valid_to: str | None
    actor: str
    assert_seq: int


FACT_COLUMNS: tuple[str, ...] = tuple(FactRow.__slots__)
EVENT_COLUMNS: tuple[str, ...] = tuple(c for c in EventRow.__slots__ if c != "signature")
STATE_COLUMNS: tuple[str, ...] = tuple(StateRow.__slots__)
# A row's values in column order, as one C call (the bulk writes bind tens of thousands).
event_values = attrgetter(*EVENT_COLUMNS)
fact_values = attrgetter(*FACT_COLUMNS)
state_values = attrgetter(*STATE_COLUMNS)
# An UPDATE's: every column but the key, then the key (its WHERE).
fact_update_values = attrgetter(*(c for c in FACT_COLUMNS if c != "assert_seq"), "assert_seq")


@dataclass(slots=True, frozen=True)
class BeliefRow:
    """One fact as of event `seq` (state then) beside its state now, for the beliefs screen."""

    assert_seq: int
    fact_id: str
    subject: str
    predicate: str
    space: str
    value: bytes | None
    actor: str
    valid_from: str
    status_then: str | None
    live_then: int
    rank_then: int
    vto_then: str | None
    status_now: str
    live_now: int
    rank_now: int
    vto_now: str | None
    held: int


@dataclass(frozen=True, slots=True)
class Holder:
    """A live row whose columns contain the bytes: its table, key, and the fact it is about."""

    table: str
    column: str
    key: str
    fact_id: str | None
    subject: str | None


@dataclass(frozen=True, slots=True)
class RewriteOutcome:
    complete: bool  # the checkpoint after the VACUUM completed: the old pages are overwritten
    bytes_before: int
    bytes_after: int
    detail: str


@dataclass(frozen=True, slots=True)
class CheckpointOutcome:
    """A WAL checkpoint's result: complete when no WAL of the ledger's own holds old bytes."""

    complete: bool
    attempts: int
    wal_bytes: int
    detail: str


@dataclass(frozen=True, slots=True)
class RecallEngines:
    """What a backend's recall indexes are, in the words recall's strategy statement (a
    RecallResult's `note`) and the erasure proof use: each backend names its own, so a server
    ledger's never claims FTS5 or sqlite-vec."""

    lexical: str  # the lexical ranking and where it runs ("FTS5 bm25")
    vectors: str  # the stored vector table the in-process copy is loaded from
    float_rows: str  # where the exact float32 rows are re-read from
    knn: str  # the stored index's own KNN, when the in-process copy is not kept
    inside: str  # where the ranking happens when the copy is not used (" inside SQLite")
    places: str  # the indexes, as the erasure proof names the place it checks


# ledger_meta entries a server's write transaction does not read at its start with the rest
# (store.postgres.readcache): the certificates kept for the next epoch rotation
# (custody_app.erasure.epoch_certs), which a sweep's can make large; read when asked.
UNPRIMED_META = "epoch_certificate:"

# How an outcome's detail begins when the VACUUM ran but its checkpoint did not complete.
VACUUMED = "VACUUM done, but"


TextRow = tuple[str, str, bytes | None, str | None]


MarkRow = tuple[int, int, str, str, bool, str | None]


def filter_code(kind: str, value: str) -> int:
    """The vector table's code of a filter value: `kind` "space" (a space's name) or "subject"
    (a subject's keyed reference, never the subject itself), as a signed 64-bit integer from
    its hash. Two values may share a code, however unlikely: a KNN filtered by code may return
    another space's or subject's row, so the reader checks the fact itself (recall's hydrate)."""
    digest = hashlib.blake2b(f"{kind}:{value}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


VecRow = tuple[int, int, bytes, str, int, int]  # fact_seq, cell, vector, status, space/subject codes
# Rows of the vector index in bulk (`RecallStore.iter_vector_blocks`): fact seqs (int64), float32
# vectors (rows x dimensions), statuses (bytes), space and subject codes (int64).
VecBlock = tuple[Any, Any, Any, Any, Any]


def blocks_of(pages: Iterable[list[tuple[int, bytes, str, int, int]]],
              dimensions: int) -> Iterator[VecBlock]:
    """Pages of `iter_vectors` rows as blocks (a store without a bulk read of its own)."""
    import numpy as np  # only where a block is made

    for page in pages:
        if not page:
            continue
        yield (np.fromiter((r[0] for r in page), dtype=np.int64, count=len(page)),
               np.frombuffer(b"".join(r[1] for r in page), dtype=np.float32).reshape(
                   len(page), dimensions),
               # A status longer than 12 bytes (none is written) reads as empty, as in
               # sqlite-vec's chunks (store.sqlite.vec_chunks): no search asks for one.
               np.array([s if len(s := r[2].encode()) <= 12 else b"" for r in page],
                        dtype="S12"),
               np.fromiter((r[3] for r in page), dtype=np.int64, count=len(page)),
               np.fromiter((r[4] for r in page), dtype=np.int64, count=len(page)))


class VectorSeal(Protocol):
    """How a server's recall vectors and cell centroids are stored (issue 34: nothing erasable
    in the clear): the layer above, which holds the keys, hands one in
    (`RecallStore.seal_vectors`); the store calls it on every vector and centroid it writes
    or reads and never sees a key. Each blob is bound to its row (the fact's assert seq, the
    cell), so one moved to another row does not open."""

    form: str  # recorded with the index: "sealed"

    def seal(self, fact_seq: int, vector: bytes) -> bytes: ...
    def open(self, fact_seq: int, blob: bytes) -> bytes: ...
    def seal_centroid(self, cell: int, centroid: bytes) -> bytes: ...
    def open_centroid(self, cell: int, blob: bytes) -> bytes: ...


def vec_row(fact_seq: int, cell: int, vector: bytes, status: str, space: str,
            subject_ref: str) -> VecRow:
    """The vector table's row of a fact."""
    return (fact_seq, cell, vector, status, filter_code("space", space),
            filter_code("subject", subject_ref))


def text_row(row: Sequence[Any]) -> TextRow:
    """A sealed-text row (fact id, subject ref, sealed, salt) as every backend hands it up."""
    sealed = row[2]
    return (str(row[0]), str(row[1]), sealed if sealed is None or type(sealed) is bytes
            else bytes(sealed), None if row[3] is None else str(row[3]))


def mark_row(found: Sequence[Any]) -> MarkRow:
    """A key store's mark row (n, seq, head, at, accepted, mac) as every backend hands it up."""
    n, seq, head, at, accepted, mac = found
    return (int(n), int(seq), str(head), str(at), bool(accepted), None if mac is None else str(mac))


class MarkReads:
    """What a key store derives from its marks and meta, the same on every backend (mixed into
    each backend's KeyStoreFile, which provides `marks` and `meta`)."""

    def marks(self) -> Iterator[MarkRow]:
        raise NotImplementedError

    def meta(self, name: str) -> bytes | None:
        raise NotImplementedError

    def high_water(self) -> tuple[int, str, str, bool] | None:
        """(seq, head hash, at, accepted) of the newest mark row, trusted or not (the key ring
        decides which row is trusted)."""
        for row in self.marks():
            return row[1], row[2], row[3], row[4]
        return None

    def legacy_marks_upto(self) -> int:
        """Rows up to this number were written before marks had a MAC."""
        value = self.meta("marks_legacy_upto")
        try:
            return int(value or b"0")
        except ValueError:
            return 0
