"""Backend equivalence of the PostgreSQL statement groups (policies, projection, browse):
the same calls on a real SQLite ledger and a real PostgreSQL database give the same results,
in the same order."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import itertools
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from store.errors import StoreError, StoreIntegrityError
from store.postgres import bulk
from tests.pg_twins import MODULES, STATUSES, WORDS, Twins, load, make_twins, world


@pytest.fixture
def twins(tmp_path: Path, pg_url: str) -> Iterator[Twins]:
    yield from make_twins(tmp_path, pg_url)


@pytest.fixture(params=[7, 21])
def loaded(twins: Twins, request: pytest.FixtureRequest) -> Twins:
    """Both backends holding the same generated ledger (two seeds)."""
    twins.world = world(seed=request.param)
    load(twins, twins.world)
    return twins


def test_every_text_column_compares_bytewise(twins: Twins) -> None:
    """SQLite compares text by bytes: every text column of the groups' tables is COLLATE "C",
    so order and ranges do not follow the server's locale."""
    rows = twins.pg.execute(
        "SELECT table_name, column_name, collation_name FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND data_type = 'text' "
        "AND table_name NOT IN ('events', 'ledger_meta')").fetchall()
    assert len(rows) == 40
    assert [r for r in rows if r[2] != "C"] == []


def test_ddl_declares_each_table_once() -> None:
    names = [ddl.split("(")[0].split()[-1] for m in MODULES for ddl in m.DDL
             if ddl.startswith("CREATE TABLE")]
    assert sorted(names) == sorted(set(names))
    assert set(names) == {"policies", "facts", "fact_states", "fact_sources", "served_facts",
                          "session_events", "sessions", "actions", "event_texts"}


def test_policies(twins: Twins) -> None:
    rows = [(f"h{w}", f"canon {w}", w, None if i % 2 else f"/p/{w}")
            for i, w in enumerate(WORDS)]
    for r in rows + [(rows[0][0], "other", "other", None)]:  # a second put is ignored
        twins.write_both("policies", "put", *r)
    assert twins.same("policies", "get", rows[0][0]) == rows[0][1:]
    assert twins.same("policies", "get", "missing") is None
    assert len(twins.same("policies", "all")) == len(WORDS)


def test_fact_reads(loaded: Twins) -> None:
    w = loaded.loaded()
    t = loaded
    ids = [f.fact_id for f in w.facts]
    for f in w.facts[:40]:
        t.same("facts", "get", f.fact_id)
        t.same("facts", "get_by_seq", f.assert_seq)
        t.same("facts", "latest_state", f.assert_seq)
        t.same("facts", "sources_of", f.fact_id)
        t.same("facts", "derived_from", f.fact_id)
        t.same("facts", "replacements", f.fact_id)
        t.same("facts", "superseded_by", f.fact_id)
    assert t.same("facts", "get", "nope") is None
    assert t.same("facts", "get_by_seq", 10**9) is None
    assert t.same("facts", "latest_state", 10**9) is None
    mixed = ids[::-3] + ["nope", ids[0], ""]
    assert len(t.same("facts", "get_many", mixed)) > 10
    assert t.same("facts", "get_many", []) == []
    assert len(t.same("facts", "ends_of", mixed)) > 10
    assert t.same("facts", "ends_of", []) == {}
    seqs = [f.assert_seq for f in w.facts][::-1] + [10**9]
    for chunk in (1, 7, 5000):
        assert len(t.same("facts", "latest_states", seqs, chunk=chunk)) == len(w.facts)
    # Ties in fact_id across several sources: the order SQLite gives them.
    sources = sorted({b for _, b in w.sources})
    derived = t.same("facts", "derived_from_many", sources[::-1] + ["nope"])
    assert len(derived) == len(w.sources)
    assert t.same("facts", "derived_from_many", []) == []
    for subject, predicate in itertools.product(WORDS[:6], ("plan", "tier", "", "x")):
        t.same("facts", "active_of", subject, predicate)
        t.same("facts", "in_sessions", subject, predicate)
        t.same("facts", "of_subject_predicate", subject, predicate)
    for status in (*STATUSES, "nope"):
        t.same("facts", "with_status", status)
    counts = t.same("facts", "counts_by_status")
    assert sum(counts.values()) == len(w.facts)
    facts, states, links = t.same("facts", "dump")
    assert (len(facts), len(states), len(links)) == (len(w.facts), len(w.states), len(w.sources))


@pytest.mark.parametrize("in_transaction", [False, True])
def test_dump_rows_streams_the_dump(loaded: Twins, in_transaction: bool) -> None:
    sq, pg = loaded.stores("facts")
    want = [list(rows) for rows in sq.dump_rows()]
    if in_transaction:
        with loaded.pg.transaction():
            got = [list(rows) for rows in pg.dump_rows()]
    else:
        got = [list(rows) for rows in pg.dump_rows()]
    assert got == want
    assert [len(x) for x in got] == [len(x) for x in pg.dump()]
    # Read in turns, a page from each, as verify does; one left half read.
    facts, states, sources = pg.dump_rows()
    assert next(facts) == want[0][0]
    assert list(states) == want[1]
    assert list(sources) == want[2]


def test_as_of(loaded: Twins) -> None:
    t = loaded
    w = loaded.loaded()
    calls = 0
    for valid_at, tx_at in itertools.product(("2026-01-05T00:00:00Z", "2026-03-01T05:00:00Z",
                                              "2027-01-01T00:00:00Z"),
                                             ("2026-01-01T00:30:00Z", "2026-01-01T09:00:00Z")):
        for min_rank, pending in itertools.product((0, 1, 2), (False, True)):
            rows = t.same("facts", "as_of", valid_at=valid_at, tx_at=tx_at, min_rank=min_rank,
                          include_pending=pending)
            calls += bool(rows)
            for limit, after in ((0, 0), (3, 0), (5, 50), (-1, 120)):
                t.same("facts", "as_of", valid_at=valid_at, tx_at=tx_at, min_rank=min_rank,
                       include_pending=pending, limit=limit, after_seq=after)
    for f in w.facts[:15]:
        for kw in ({"subject": f.subject}, {"predicate": f.predicate}, {"space": f.space},
                   {"subject": f.subject, "predicate": f.predicate, "space": f.space}):
            t.same("facts", "as_of", valid_at="2026-06-01T00:00:00Z",
                   tx_at="2026-01-01T09:00:00Z", min_rank=0, include_pending=True, **kw)
    assert calls > 10  # the grid found facts


def test_fact_writes(twins: Twins) -> None:
    w = world(seed=11, n_events=120)
    load(twins, w)
    t = twins
    changed = [dataclasses.replace(f, status="retracted", held=1 - f.held, marks="m\u00e9")
               for f in w.facts[::2]]
    t.write_both("facts", "update", changed[0])
    t.write_both("facts", "update_many", changed[1:] + [changed[1]])
    extra = [dataclasses.replace(s, from_seq=s.from_seq + 1000, status_all="expired")
             for s in w.states[:30]]
    t.write_both("facts", "push_state", extra[0])
    t.write_both("facts", "push_states", extra[1:])
    t.write_both("facts", "add_sources", w.facts[0].fact_id, ["zz", "", "zz", "é"])
    t.write_both("facts", "add_sources", w.facts[0].fact_id, [])
    got = t.same("facts", "sources_of", w.facts[0].fact_id)
    assert [s for s in got if s in ("", "zz", "é")] == ["", "zz", "é"]
    t.same("facts", "dump")
    sq, pg = t.stores("facts")
    assert sq.dump() == pg.dump()


def test_insert_of_a_taken_fact_is_refused_and_the_transaction_goes_on(twins: Twins) -> None:
    w = world(seed=3, n_events=30)
    load(twins, w)
    sq, pg = twins.stores("facts")
    f = w.facts[0]
    for i, taken in enumerate((f, dataclasses.replace(f, assert_seq=10**6),
                               dataclasses.replace(f, fact_id="fresh"))):
        with twins.write():
            for store in (sq, pg):
                with pytest.raises(StoreIntegrityError):
                    store.insert(taken)
                store.push_state(dataclasses.replace(w.states[0], from_seq=10**6 + i))
    assert sq.dump() == pg.dump()
    state = pg.latest_state(f.assert_seq)
    assert state is not None and state.from_seq == 10**6 + 2


def test_replace_all(twins: Twins) -> None:
    load(twins, world(seed=5, n_events=60))
    other = world(seed=9, n_events=500)
    # More links than one array batch, with repeats that are ignored.
    links = [(f"d{i % 9000:05d}", f"s{i % 7}") for i in range(bulk.BATCH * 2 + 17)]
    twins.write_both("facts", "replace_all", other.facts, other.states, links)
    sq, pg = twins.stores("facts")
    assert pg.dump() == sq.dump()
    assert len(pg.dump()[2]) == len(set(links))


def test_browse(loaded: Twins) -> None:
    t = loaded
    w = loaded.loaded()
    head = t.same("browse", "head_seq")
    assert head == len(w.events)
    for seq in (0, 1, 2, head // 2, head, head + 1):
        t.same("browse", "tx_at_of", seq)
        t.same("browse", "event_brief", seq)
    for status in STATUSES:
        for after, limit in ((0, 5), (100, 50), (0, 0), (0, -1)):
            t.same("browse", "with_status_page", status, after, limit)
    for before, limit in ((head + 1, 0), (50, 100), (3, -1), (head + 1, 10)):
        rows = t.same("browse", "events_newest", before, limit)
    assert len(rows) == 10 and any(r[8] is not None and b"\x00" in r[8] for r in rows)
    for after, limit in ((0, 7), (200, 1000), (0, -1)):
        t.same("browse", "held_page", after, limit)
    for f in w.facts[:20]:
        for kind in ("assert", "hold", "retract", "nope"):
            t.same("browse", "last_event_of_kind", f.fact_id, kind)
    spaces = t.same("browse", "spaces_page", "", 1000)
    assert len(spaces) > 5
    for space_after in ("", "a", "Z", "é", "\U0010ffff"):
        for limit in (0, -1, 1, 3, 100):
            t.same("browse", "spaces_page", space_after, limit)
    t.same("browse", "policy_history")


def test_seq_at(loaded: Twins) -> None:
    w = loaded.loaded()
    probes = sorted(set(w.tx_ats))
    probes += ["", "2025", "2026-01-01T00:00:00Y", "2026-01-01T00:30:00", "9999", "2026-01-01T01"]
    for at in probes:
        loaded.same("browse", "seq_at", at)


def test_seq_at_empty_and_with_a_gap(twins: Twins) -> None:
    assert twins.same("browse", "seq_at", "2026") == 0
    rows = [(s, "served", f"2026-01-0{s}", "a", "p", None, None, "{}", None, None, "h", "h")
            for s in (1, 2, 3, 5, 6)]  # seq 4 missing: a gap counts as "after"
    twins.add_events(rows)
    for at in ("2026-01-0", "2026-01-01", "2026-01-03", "2026-01-04", "2026-01-05", "2026-01-07"):
        twins.same("browse", "seq_at", at)


def test_beliefs(loaded: Twins) -> None:
    t = loaded
    w = loaded.loaded()
    head = len(w.events)
    found = 0
    for seq, diff, pending in itertools.product((head // 3, head), (False, True),
                                                (False, True)):
        for statuses in ((), ("retracted",), ("superseded", "expired", "rejected", "active")):
            for min_rank, limit, after in ((0, 50, 0), (1, 5, 30), (2, -1, 0), (0, 0, 0)):
                rows = t.same("browse", "beliefs", valid_at="2026-04-01T00:00:00Z", seq=seq,
                              head=head, min_rank=min_rank, pending=pending,
                              statuses=statuses, diff=diff, after_seq=after, limit=limit)
                found += len(rows)
    for f in w.facts[:10]:
        t.same("browse", "beliefs", valid_at="2026-04-01T00:00:00Z", seq=head, head=head,
               min_rank=0, pending=True, statuses=("active",), diff=True, subject=f.subject,
               predicate=f.predicate, space=f.space, limit=1000)
    assert found > 100


def test_text_with_a_nul_character_is_refused_by_postgresql(twins: Twins) -> None:
    """The one difference of data: PostgreSQL text holds no NUL character (SQLite's does)."""
    _, pg = twins.stores("policies")
    with pytest.raises(psycopg.DataError):
        pg.put("h", "canon\x00", "s", None)


@pytest.mark.parametrize("name", ["policies.PolicyStore", "projection.FactStore",
                                  "browse.BrowseStore", "sessions.SessionStore",
                                  "actions.ActionStore", "texts.TextStore"])
def test_same_public_methods_as_the_sqlite_twin(name: str) -> None:
    """The layers above cannot tell the backends apart: the same public methods, each with
    the same parameters (names, kinds, defaults) and the same return annotation."""
    module, cls = name.split(".")
    sq = getattr(importlib.import_module(f"store.sqlite.{module}"), cls)
    pg = getattr(importlib.import_module(f"store.postgres.{module}"), cls)

    def face(c: type) -> dict[str, object]:
        out: dict[str, object] = {}
        for attr, fn in vars(c).items():
            if attr.startswith("_") or not callable(fn):
                continue
            sig = inspect.signature(fn)
            out[attr] = ([(p.name, p.kind, p.default, p.annotation)
                          for p in sig.parameters.values()], sig.return_annotation)
        return out

    assert face(pg) == face(sq)
    assert face(pg)


def test_bulk_failures_are_store_errors(twins: Twins) -> None:
    """A COPY refused (a taken key) is the store's integrity error, not psycopg's: the
    connection's cursors translate statements, and a COPY goes around them."""
    w = world(seed=5, n_events=40)
    _, pg = twins.stores("facts")
    with pytest.raises(StoreIntegrityError), twins.pg.transaction():
        pg.replace_all(w.facts, w.states + w.states[:1], [])
    assert pg.dump() == ([], [], [])
    with pytest.raises(StoreError) as refused, twins.pg.transaction():
        list(bulk.lazy_rows(twins.pg, "SELECT 1/0"))
    assert refused.value.code == "postgres_error"
