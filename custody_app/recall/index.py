"""The recall indexes of one ledger file (FTS5 over keyed word hashes, sqlite-vec vectors),
kept equal to the believed facts in the transaction of each event that changes belief; a model
embedder's vectors are added after it, by a background worker (recall/embedding.py)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from custody_app.domain.errors import LedgerError
from custody_app.domain.policy import LoadedPolicy
from custody_app.keys.keyring import INDEX_KEY_ID, KeyRing
from custody_app.keys.values import ValueCodec
from custody_app.keys.vectors import SEALED, Clear, Lenient, VectorCipher
from custody_app.recall import text
from custody_app.recall.cells import CellIndex
from custody_app.recall.embedders import (
    Embedder,
    dense,
    embedder_for,
    make_embedder,
    model_bytes,
)
from custody_app.recall.embedding import (
    OFF_WRITE_PATH,
    EmbeddingWorker,
    as_stored,
    off_write_path,
    stored_value,
)
from custody_app.recall.loading import reader
from custody_app.recall.matrix import VectorMatrix
from custody_app.recall.recluster import Maintenance
from custody_app.recall.removals import BatchedRemovals
from store import LedgerFile
from store.address import address_of
from store.rows import FactRow, VecRow, vec_row

# Status in the indexes for each fact status; a fact in any other status is not indexed. The
# status is a column of the vector rows only: the lexical rows hold no status (schema 6), and a
# live-only lexical search reads it from the facts table.
INDEXED = {"active": "live", "quarantined": "quarantined"}
# Deferred adds are written once this many wait: one embed call and one executemany amortise
# their fixed costs, while the op that reaches this (or a group's end) stays one short write:
# 32 facts took 15-30 ms here at load 8 (64 took 50 ms p50, the ops' p99).
FLUSH_AT = 32
# Removals are written after the adds waiting with them, this many at most at once (status
# moves, cheap, FLUSH_AT at once): a secure-delete FTS5 delete of a fact (~40 distinct word
# hashes) costs 3-5 ms at 10k facts here (charged to the next statement, when FTS5 writes its
# pending changes out) and a vec0 delete 0.7-3.6 ms, so a flush of 6 stays well under the
# 100 ms a single write may take (16 made the ops' p99.9 120-160 ms at 10k). A status move is
# only an UPDATE of the vector row's status column.
MOVE_AT = 6
REINDEX_BATCH = 100
# A fact waiting to be indexed: the fact, its index status, the text recall matches it on.
Pending = tuple[FactRow, str, str]
# What a savepoint restores: the adds, the removals and the status moves not yet written.
Deferred = tuple[dict[int, Pending], set[int], dict[int, str]]


class _Hashed(dict[str, str]):
    """Word -> its keyed hash, each hashed at its first lookup (a word met again is a plain
    dict lookup in C, with no Python call: a fact's words are mostly ones met before)."""

    def __init__(self, key: bytes) -> None:
        super().__init__()
        self.key = key

    def __missing__(self, word: str) -> str:
        hashed = self[word] = text.term(self.key, word)
        return hashed


class RecallIndex(BatchedRemovals):
    """What recall keeps for one open ledger: the file, the keys its word hashes and values
    need, the policy's embedder and the vector cells. The core calls `sync` after projecting
    each event; searches read through it."""

    def __init__(self, db: LedgerFile, keys: KeyRing | None, values: ValueCodec,
                 policy: LoadedPolicy) -> None:
        self.db = db
        self.keys = keys
        self.values = values
        self.policy = policy
        self.embedder: Embedder = make_embedder(policy.policy.recall.embedder)
        self.cells = CellIndex(db, policy, self.embedder.dimensions)
        # Exact vector search in process while the vectors fit its budget (rebuilt from
        # sqlite-vec, kept in step with every change made here, reloaded after any other; a
        # large one in the background, on a connection of its own).
        self.matrix = VectorMatrix(db, self.embedder.dimensions, opener=self._reader,
                                   model_bytes=model_bytes(self.embedder),
                                   sign_bits=dense(self.embedder))
        # A server's vectors and centroids are read and written through the form recorded
        # with its index (sealed, or in the clear); a rebuild writes the policy's form.
        self.seal_as_recorded()
        # Re-clustering runs here, on a connection of its own, never inside a write.
        self.maintenance = Maintenance(db.path, policy, seal=self.fixed_seal)
        # Adds not yet written, by assert seq: (fact, index status, its text); flushed before
        # commit and before any read of the index rows.
        self._pending: dict[int, Pending] = {}
        # Rows to delete, and rows to move to a status, written with the adds (FTS5 is far
        # cheaper when a transaction's deletes do not come between its inserts).
        self._removed: set[int] = set()
        self._moved: dict[int, str] = {}
        # Inside `removals_batched`: removals wait for its end, not for MOVE_AT; the facts
        # `removing_ahead` already took out of both indexes.
        self._batching = False
        self._gone: set[int] = set()
        # Set by `use_recorded_embedder` when no embedder here can read the stored vectors.
        self.foreign: str | None = None
        # A model embedder's vectors are made by a background worker, not in the write (on
        # both backends: on a server, one worker in each process that writes).
        self.deferred = off_write_path(self.embedder)
        self.embedding: EmbeddingWorker | None = None
        # The lowest seq this transaction indexed lexically only (the worker is woken from
        # there once it commits).
        self._unembedded_from: int | None = None

    def key(self) -> bytes:
        """The key of the lexical index's word hashes."""
        if self.keys is None:
            raise LedgerError("keystore_missing", "the key store is not available")
        return self.keys.index_key

    def follow_key(self) -> bool:
        """Hold the word index key the ledger's index is under now (its fingerprint in the
        ledger's meta), reading it again from the key store if another process rotated it
        since this one loaded it (the index key fence, see KeyRing.fence_index)."""
        if self.keys is None:
            return False
        return self.keys.fence_index(self.db.meta(INDEX_KEY_ID))

    def subject_ref(self, subject: str) -> str:
        assert self.keys is not None  # key() refused a ledger without its key store
        return self.keys.subject_ref(subject)

    def is_current(self) -> bool:
        """Were the vectors made by the policy's embedder, and stored in the form it asks
        (else `rebuild` re-embeds)?"""
        return (self.db.recall.embedder() == (self.embedder.name, self.embedder.dimensions)
                and self.db.recall.vector_form() == self.wanted_form())

    def wanted_form(self) -> str:
        """How the policy wants the vectors stored: sealed on a server (unless its [recall]
        server_vectors = "clear"), in the clear in a file ledger (sqlite-vec searches them;
        its erasure's byte scan covers them) or without a key store."""
        if (self.keys is None or not address_of(self.db.path).server
                or self.policy.policy.recall.server_vectors == "clear"):
            return "clear"
        return SEALED

    def seal_as_recorded(self, form: str | None = None) -> None:
        """Read and write the vectors in `form` (default: the form recorded with the index)."""
        form = self.db.recall.vector_form() if form is None else form
        self.db.recall.seal_vectors(VectorCipher(self.key) if form == SEALED else None)

    def reform(self) -> int | None:
        """Vectors the policy's embedder made, stored in another form than the policy asks
        (an index built before vectors were sealed, or a policy that changed server_vectors):
        each one sealed (or opened) in place, in the caller's transaction, without
        re-embedding. Returns how many; None when a rebuild is needed instead."""
        want = self.wanted_form()
        have = self.db.recall.vector_form()
        if (want == have or self.db.recall.embedder()
                != (self.embedder.name, self.embedder.dimensions)):
            return None
        old = VectorCipher(self.key) if have == SEALED else Clear()
        new = VectorCipher(self.key) if want == SEALED else Clear()
        try:
            done = self.db.recall.reseal(old, new)
        except BaseException:
            self.seal_as_recorded(have)
            raise
        self.seal_as_recorded(want)
        return done

    @contextmanager
    def lenient_vectors(self) -> Iterator[None]:
        """Inside: a sealed vector that does not open reads as no bytes (verify --deep names
        its row) instead of refusing."""
        if self.db.recall.vector_form() != SEALED:
            yield
            return
        self.db.recall.seal_vectors(Lenient(VectorCipher(self.key)))
        try:
            yield
        finally:
            self.seal_as_recorded()

    def fixed_seal(self) -> VectorCipher | None:
        """For another connection (a background re-clustering): the cipher of the index key
        held now, when the vectors are sealed."""
        if self.db.recall.vector_form() != SEALED:
            return None
        return VectorCipher.fixed(self.key())

    def _reader(self) -> Callable[[], LedgerFile]:
        """For the vector copy's background load: what opens its own connection."""
        return reader(str(self.db.path), self.fixed_seal())

    def use_recorded_embedder(self) -> None:
        """For a read-only open whose vectors another embedder made (it cannot re-embed):
        queries are embedded by that embedder, never compared with incomparable vectors; when
        this install lacks it, vector recall is refused (`foreign`) and the rest reads as usual."""
        recorded = self.db.recall.embedder()
        embedder = embedder_for(recorded) if recorded is not None else None
        if recorded is not None and embedder is None:
            self.foreign = recorded[0]
            # Its vectors were made off the write path: some may still be missing.
            self.deferred = recorded[0] in OFF_WRITE_PATH
        elif embedder is not None:
            self.embedder = embedder
            self.cells = CellIndex(self.db, self.policy, embedder.dimensions)
            self.matrix = VectorMatrix(self.db, embedder.dimensions, opener=self._reader,
                                       model_bytes=model_bytes(embedder),
                                       sign_bits=dense(embedder))
            self.deferred = off_write_path(embedder)

    def term(self, word: str) -> str:
        return text.term(self.key(), word)

    def scope(self, space: str, subject: str, key: bytes | None = None) -> str:
        """The lexical row's filter tokens: its space and subject (a fact never changes
        either), hashed like its words."""
        key = key or self.key()
        return text.term(key, "space:" + space) + " " + text.term(key, "subject:" + subject)

    def _index_many(self, pending: list[Pending], removed: list[int] | None = None,
                    moved: list[tuple[int, str]] | None = None) -> None:
        """Index (fact, status, text) rows: one embed call for all, one executemany each; the
        rows `removed` and `moved` (seq, status) are written in the same batch."""
        if not pending:
            if removed or moved:
                self._apply(removed or [], moved or [], [], [])
            return
        key = self.key()
        if self.deferred:  # lexical rows only: the worker adds the vectors after the commit
            vectors, cells = None, None
            low = min(fact.assert_seq for fact, _, _ in pending)
            self._unembedded_from = min(low, self._unembedded_from or low)
        else:
            vectors = as_stored(self.embedder.embed([body for _, _, body in pending]))
            cells = self.cells.cells_for(vectors)
        gone = set(removed or ())
        # [0]: rows inserted at once; [1]: rows of facts also removed in this batch (a hold and
        # its release in one group), inserted after the delete of their old rows.
        lexical: tuple[list[tuple[int, str, str]], ...] = ([], [])
        vector: tuple[list[VecRow], ...] = ([], [])
        # Each distinct word (and space: or subject: token) of the batch is hashed once: its
        # facts share most of them. The map lives for this batch only.
        term = _Hashed(key).__getitem__
        for n, (fact, status, body) in enumerate(pending):
            late = fact.assert_seq in gone
            lexical[late].append((fact.assert_seq, " ".join(map(term, text.words(body))),
                                  term("space:" + fact.space) + " "
                                  + term("subject:" + fact.subject)))
            if vectors is not None and cells is not None:
                vector[late].append(vec_row(fact.assert_seq, int(cells[n]),
                                            vectors[n].tobytes(), status, fact.space,
                                            self.subject_ref(fact.subject)))
        old, new = self.db.recall.add_many(lexical[0], vector[0])
        self.matrix.changed(old, new, added=vector[0])
        if removed or moved or lexical[1]:
            self._apply(removed or [], moved or [], lexical[1], vector[1])

    def _apply(self, removed: list[int], moved: list[tuple[int, str]],
               lexical: list[tuple[int, str, str]],
               vector: list[VecRow]) -> None:
        """Removals, status moves and rows of facts removed in the same batch, to both
        indexes and the in-process copy of the vectors."""
        old, new = self.db.recall.apply(removed, moved, lexical, vector)
        self.matrix.changed(old, new, removed=removed, moved=moved, added=vector)

    def writing(self) -> None:
        """An event is being appended (committed or not yet): the embedding worker waits for a
        pause in the writes, and a group of hundreds of appends inside one transaction is none.
        (Counted by commits only, the worker embedded in the middle of every group longer than
        its pause: about 10% more writer CPU, and the writes 1.5-2x slower in wall time, for
        a few dozen vectors a second; bench/results_contract_floor.md.)"""
        if self.embedding is not None:
            self.embedding.wrote()

    def after_commit(self) -> None:
        """A write transaction committed: start a re-clustering in the background if due;
        wake the embedding worker for the facts it indexed lexically only."""
        if self.embedding is not None:
            self.embedding.wrote()
        if self._unembedded_from is not None:
            if self.embedding is not None:
                self.embedding.wake(self._unembedded_from)
            self._unembedded_from = None
        worker_due = self.embedding is not None and self.embedding.take_recluster_due()
        if self.cells.due or worker_due:
            self.cells.due = False
            self.maintenance.start()

    def start_embedding(self) -> None:
        """A writable open: start the worker that makes the vectors of facts indexed
        lexically only (a model embedder), from the first fact."""
        if not self.deferred or self.keys is None or self.embedding is not None:
            return
        self.embedding = EmbeddingWorker(self.db.path, self.policy, self.embedder, self.keys,
                                         INDEXED)
        self.embedding.start()

    def settle_embedding(self, timeout: float | None = None) -> bool:
        """Wait until every believed fact has its vector (tests, benchmarks); True at once
        when no worker runs."""
        return self.embedding.drain(timeout) if self.embedding is not None else True

    def unembedded(self) -> int:
        """Believed facts indexed lexically whose vector the worker has not made yet (0 when
        vectors are made in the write): found by recall lexically only meanwhile."""
        if not self.deferred or not self.db.recall.exists():
            return 0
        with self.db.read():
            return max(0, self.db.recall.lexical_rows_count() - self.db.recall.vector_count())

    def settle(self) -> None:
        """Wait for background index maintenance to finish (tests, benchmarks, exit)."""
        self.maintenance.join()
        if self.maintenance.error is not None:
            raise self.maintenance.error

    def close(self) -> None:
        if self.embedding is not None:
            self.embedding.close()
        self.maintenance.close()
        self.matrix.drop()

    def pending(self) -> Deferred:
        """A copy of the changes not yet written (a savepoint restores it if it rolls back)."""
        return dict(self._pending), set(self._removed), dict(self._moved)

    def restore(self, pending: Deferred) -> None:
        self._pending, self._removed, self._moved = pending

    def _waiting(self) -> int:
        return len(self._pending) + len(self._removed) + len(self._moved)

    def take_embedded(self) -> None:
        """Apply the vectors the worker committed since to the in-process copy, in commit
        order (a copy at another version drops itself and reloads, as after any other
        connection's change): a search during a long backlog does not reload every vector
        after each batch."""
        if self.embedding is None:
            return
        written = self.embedding.take_written()
        if written is None:
            self.matrix.drop()
            return
        for old, new, rows in written:
            self.matrix.changed(old, new, added=rows)

    def flush(self, *, adds_only: bool = False) -> None:
        """Write the changes deferred by `sync`: before the transaction commits, and before
        anything on this connection reads or changes the index rows. `adds_only`: only the new
        rows (of facts not also removed), as a large group goes along."""
        self.take_embedded()
        if not self._waiting():
            return
        saved = self.pending()
        removed: set[int] = set()
        moved: dict[int, str] = {}
        if adds_only:
            batch = {s: p for s, p in self._pending.items() if s not in self._removed}
            self._pending = {s: p for s, p in self._pending.items() if s in self._removed}
        else:
            batch, removed, moved = saved
            self._pending, self._removed, self._moved = {}, set(), {}
        self.cells.count_before_writing()
        try:
            self._index_many(list(batch.values()), sorted(removed),
                             [(seq, moved[seq]) for seq in sorted(moved)])
        except BaseException:
            self.restore(saved)  # the caller's savepoint decides what stands
            raise
        # Under deferred embedding these rows carry no vector: the worker counts the vectors it
        # adds (counted here as facts, the index looked due at every commit past ann_min_facts
        # while the vectors lagged, and each commit began a re-clustering that read every
        # vector's seq to find it was not due).
        self.cells.added((0 if self.deferred else len(batch)) - len(removed))

    def sync(self, changes: list[tuple[FactRow, str | None]], fresh: dict[str, str]) -> None:
        """Keep the indexes equal to the believed facts, in the transaction of the event that
        changed belief. `fresh` holds value texts just written (no need to decrypt them)."""
        for fact, old in changes:
            want = INDEXED.get(fact.status)
            had = INDEXED.get(old) if old is not None else None
            if want == had:
                continue
            seq = fact.assert_seq
            if want is None:
                self._moved.pop(seq, None)
                if self._pending.pop(seq, None) is None:  # a pending row was never written
                    self._removed.add(seq)
            elif had is None:
                value_text = fresh.get(fact.fact_id) or self.stored_text(fact)
                if value_text is not None:
                    # Deferred: a transaction group embeds and inserts its facts together.
                    self._pending[seq] = (fact, want, text.fact_text(
                        fact.subject, fact.predicate, json.loads(value_text)))
            elif seq in self._pending:
                self._pending[seq] = (fact, want, self._pending[seq][2])
            else:
                self._moved[seq] = want
        if not self._batching and (len(self._removed) >= MOVE_AT or len(self._moved) >= FLUSH_AT):
            self.flush()
        elif len(self._pending) >= FLUSH_AT:
            self.flush(adds_only=True)

    def stored_text(self, fact: FactRow) -> str | None:
        """The fact's value as canonical JSON text; None when erased or its key is gone."""
        return stored_value(self.db, self.values, fact)

    def rebuild(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Drop and rebuild both indexes for the policy's embedder, re-embedding every
        believed fact (inside the caller's write transaction). Returns how many facts were
        indexed."""
        self.seal_as_recorded(self.wanted_form())
        try:
            self.db.recall.create(self.embedder.name, self.embedder.dimensions)
        except BaseException:
            self.seal_as_recorded()
            raise
        self.matrix.drop()
        believed = [f for status in INDEXED for f in self.db.facts.with_status(status)]
        self._pending, self._removed, self._moved = {}, set(), {}
        batch: list[Pending] = []
        for n, fact in enumerate(sorted(believed, key=lambda f: f.assert_seq), start=1):
            value_text = self.stored_text(fact)
            if value_text is not None:
                batch.append((fact, INDEXED[fact.status], text.fact_text(
                    fact.subject, fact.predicate, json.loads(value_text))))
            # Re-embedding goes in batches of REINDEX_BATCH, each reported: the semantic
            # embedder takes ~10 s for 100 texts here, so the progress line moves every few s.
            if n % REINDEX_BATCH == 0 or n == len(believed):
                self._index_many(batch)
                batch = []
                if progress is not None:
                    progress(n, len(believed))
        self.cells.rebuilt()
        self.db.recall.refresh_statistics()
        return len(believed)

    def differences(self) -> list[str]:
        """Where the indexes disagree with the believed facts (what verify reports)."""
        self.flush()
        want = {seq: INDEXED[status] for status in INDEXED
                for seq in self.db.facts.seqs_with_status(status)}
        lexical, vector = self.db.recall.indexed()
        out: list[str] = []
        if set(lexical) != set(want):
            stray, missing = sorted(set(lexical) - set(want)), sorted(set(want) - set(lexical))
            out.append(f"lexical index holds {len(stray)} fact(s) not believed{_seqs(stray)} "
                       f"and misses {len(missing)}{_seqs(missing)}")
        vectors = dict(vector)
        # A model's vectors come after the write: a believed fact without one yet is waiting
        # for the worker (recall finds it lexically); a vector of a fact not believed, or in
        # the wrong status, is still a difference.
        # Judged by the embedder the vectors were made by, as recorded in this snapshot: a
        # reader whose own policy embeds in the write (or that opened before any vector was
        # recorded) still checks a model's ledger as one whose vectors may be waiting.
        recorded = self.db.recall.embedder()
        waiting = self.deferred or (recorded is not None and recorded[0] in OFF_WRITE_PATH)
        expected = {k: v for k, v in want.items() if k in vectors} if waiting else want
        if vectors != expected:
            wrong = sorted(k for k in set(vectors) | set(expected)
                           if vectors.get(k) != expected.get(k))
            out.append("vector index does not match the believed facts and their statuses"
                       f"{_seqs(wrong)}")
        return out


def _seqs(seqs: list[int]) -> str:
    """Names the rows (by the fact's assert seq) a difference is about, the first few."""
    if not seqs:
        return ""
    more = ", ..." if len(seqs) > 3 else ""
    return " (assert seq " + ", ".join(map(str, seqs[:3])) + more + ")"
