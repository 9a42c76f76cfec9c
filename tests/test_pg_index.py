"""Backend equivalence of the PostgreSQL session index, actions index and sealed texts: the
same calls on a real SQLite ledger and a real PostgreSQL database give the same results, in
the same order; and the sealed texts' triggers refuse what SQLite's refuse."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from pathlib import Path

import apsw
import psycopg
import pytest

from store.errors import StoreIntegrityError
from tests.pg_twins import WORDS, Twins, make_twins, world

SESSIONS = ("s1", "s2", "", "sé", "S1", "😀")


@pytest.fixture
def twins(tmp_path: Path, pg_url: str) -> Iterator[Twins]:
    yield from make_twins(tmp_path, pg_url)


def _sessions_and_actions(t: Twins, seed: int = 1) -> list[tuple[str, int, str, str | None]]:
    """Events, facts and a session index written the same way to both: asserts, served reads
    (repeats included) and actions, over ties in names and sessions."""
    w = world(seed=seed, n_events=300)
    t.add_events(w.events)
    sq, pg = t.stores("facts")
    with t.write():
        for f in w.facts:
            sq.insert(f)
            pg.insert(f)
    rng = random.Random(seed)
    ids = [f.fact_id for f in w.facts]
    recorded: list[tuple[str, int, str, str | None]] = []
    with t.write():
        for seq in range(1, 301):
            session = rng.choice(SESSIONS)
            kind = rng.choice(("assert", "served", "served", "acted"))
            fact_id = rng.choice(ids) if kind == "assert" else None
            ref = f"ref{rng.randrange(5)}{rng.choice(WORDS[:5])}" if kind == "acted" else None
            served = ([rng.choice(ids) for _ in range(rng.randrange(0, 6))]
                      if kind == "served" else None)
            for store in t.stores("sessions"):
                store.record(session, seq, kind, fact_id, ref, served)
            if kind == "acted":
                row = (seq, rng.choice(("shell", "mail", "", "é")), rng.choice(WORDS[:6]),
                       session, None if rng.random() < 0.3 else f"sub{rng.randrange(4)}",
                       w.tx_ats[seq - 1])
                for store in t.stores("actions"):
                    store.record(row)
            recorded.append((session, seq, kind, fact_id))
    return recorded


def test_sessions(twins: Twins) -> None:
    t = twins
    recorded = _sessions_and_actions(t)
    served, events, summaries = t.same("sessions", "dump")
    assert len(events) == 300 and len(summaries) == len(SESSIONS) and len(served) > 100
    facts = sorted({r[0] for r in served})
    for n, after in ((3, 0), (10, 100), (len(facts), 250)):
        first = t.same("sessions", "first_serves", {f: after - i for i, f in
                                                    enumerate(facts[:n][::-1])})
    assert first and t.same("sessions", "first_serves", {}) == []
    for session in (*SESSIONS, "nope"):
        for seq in (0, 150, 300):
            t.same("sessions", "events_after", session, seq)
            t.same("sessions", "served_before", session, seq)
        for after, before in ((0, 301), (100, 200), (250, 10)):
            t.same("sessions", "action_subjects", session, after, before)
    windows = 0
    w = world(seed=1, n_events=300)
    for (after, before), f in itertools.product(((0, 301), (50, 150), (290, 300)), w.facts[:8]):
        windows += len(t.same("sessions", "unread_in_window", after, before, f.subject, f.space))
    assert t.same("sessions", "session_counts") is not None
    for ref in {f"ref{i}{x}" for i in range(5) for x in WORDS[:5]} | {"nope"}:
        t.same("sessions", "actions_by_ref", ref)
    seqs = [s for _, s, _, _ in recorded][::-7] + [10**6, 3, 3]
    assert len(t.same("sessions", "events_by_seq", seqs)) == len(set(seqs)) - 1
    assert t.same("sessions", "events_by_seq", []) == []


def test_sessions_without_reads(twins: Twins) -> None:
    """Sessions that only wrote: the unread window's rows (SQLite's `reads = 0` sessions)."""
    t = twins
    w = world(seed=4, n_events=60)
    t.add_events(w.events)
    with t.write():
        for f in w.facts:
            for store in t.stores("facts"):
                store.insert(f)
        for i, f in enumerate(w.facts):
            for store in t.stores("sessions"):
                store.record(SESSIONS[i % len(SESSIONS)], f.assert_seq, "assert", f.fact_id,
                             None)
    found = 0
    for after, before in ((0, 61), (10, 40), (59, 61)):
        for f in w.facts[:10]:
            found += sum(a and t for _, a, t in
                         twins.same("sessions", "unread_in_window", after, before, f.subject,
                                    f.space))
    assert found > 0
    assert twins.same("sessions", "session_counts") == (0, len(SESSIONS))


def test_sessions_replace_all(twins: Twins) -> None:
    _sessions_and_actions(twins)
    sq, _ = twins.stores("sessions")
    served, events, summaries = sq.dump()
    served = served + served[:5]  # repeats are ignored
    big = [(f"f{i}", "s", i) for i in range(12000)]
    twins.write_both("sessions", "replace_all", served + big, events, summaries)
    dumped = twins.same("sessions", "dump")
    assert len(dumped[0]) == len(set(served)) + len(big)


def test_actions(twins: Twins) -> None:
    _sessions_and_actions(twins, seed=2)
    t = twins
    rows = t.same("actions", "dump")
    assert len(rows) > 30
    tools = ("shell", "mail", "", "é", "nope", None)
    actors = (*WORDS[:6], None)
    values = {"tool": tools, "actor": actors, "session": (*SESSIONS, None),
              "subject_ref": ("sub0", "sub3", "", None)}
    times = sorted({r[5] for r in rows})
    bounds = (None, "", times[0], times[len(times) // 2], times[-1], "2027")
    hits = 0
    for key, options in values.items():
        for value, since, until in itertools.product(options, bounds, bounds):
            for before, limit in ((None, 1000), (200, 3), (None, -1), (None, 0)):
                kw = dict.fromkeys(values)
                kw[key] = value
                hits += len(t.same("actions", "search", since=since, until=until,
                                   before_seq=before, limit=limit, **kw))
    assert hits > 1000
    assert t.same("actions", "search", tool="shell", actor=None, session="s1",
                  subject_ref="sub0", since=None, until=None, before_seq=None, limit=5) is not None
    with pytest.raises(psycopg.errors.UniqueViolation), twins.pg.transaction():
        twins.stores("actions")[1].record(tuple(rows[0]))
    twins.write_both("actions", "replace_all", rows[::2])
    assert t.same("actions", "dump") == rows[::2]


def _texts(t: Twins) -> list[tuple[int, str, str, bytes | None, str | None]]:
    w = world(seed=6, n_events=200)
    t.add_events(w.events)
    rng = random.Random(6)
    rows = []
    for seq in range(1, 201, 2):
        sealed = None if rng.random() < 0.1 else bytes(rng.randrange(256) for _ in range(
            rng.randrange(0, 40))) + b"\x00\x00"
        rows.append((seq, f"f{rng.randrange(20)}{rng.choice(WORDS)}", rng.choice(WORDS),
                     sealed, None if sealed is None else rng.choice(WORDS)))
    with t.write():
        for r in rows:
            for store in t.stores("texts"):
                store.put(*r)
    return rows


def test_texts(twins: Twins) -> None:
    t = twins
    rows = _texts(t)
    fact_ids = sorted({r[1] for r in rows})
    for seq in (1, 2, 3, 199, 10**6):
        t.same("texts", "get", seq)
    for batch in (1, 7, 5000):
        sq, pg = t.stores("texts")
        assert list(sq.iter_all(batch)) == list(pg.iter_all(batch))
    assert len(list(t.stores("texts")[1].iter_all())) == len(rows)
    for f in fact_ids[:10] + ["nope"]:
        t.same("texts", "of_fact", f)
    mixed = fact_ids[::-2] + ["nope", fact_ids[0]]
    for chunk in (1, 3, 5000):
        t.same("texts", "of_facts", mixed, chunk=chunk)
    t.same("texts", "still_sealed", mixed)
    assert list(t.stores("texts")[0].seqs()) == list(t.stores("texts")[1].seqs())
    assert t.same("texts", "count") == len(rows)
    t.same("texts", "erased_facts")
    for after, limit in ((0, 10), (50, 1000), (0, -1), (0, 0)):
        t.same("texts", "candidates", after, limit)
    t.write_both("texts", "erase_fact", fact_ids[0])
    t.write_both("texts", "erase_facts", fact_ids[1:4] + ["nope", fact_ids[1]])
    t.write_both("texts", "erase_facts", [])
    t.same("texts", "still_sealed", fact_ids)
    sq, pg = t.stores("texts")
    assert list(sq.iter_all()) == list(pg.iter_all())
    assert t.same("texts", "of_facts", fact_ids[:5])[fact_ids[0]]
    with t.write():
        for store in (sq, pg):  # a second row of a seq: refused, and the transaction goes on
            with pytest.raises(StoreIntegrityError):
                store.put(*rows[0])
            store.put(10**6, "f", "s", b"\x00", "salt")
    t.same("texts", "get", 10**6)


@pytest.mark.parametrize("change", [
    "UPDATE event_texts SET sealed = {blob} WHERE seq = 1",
    "UPDATE event_texts SET salt = 'x' WHERE seq = 1",
    "UPDATE event_texts SET sealed = NULL, salt = NULL, fact_id = 'other' WHERE seq = 1",
    "UPDATE event_texts SET sealed = NULL, salt = NULL, seq = 99999 WHERE seq = 1",
    "UPDATE event_texts SET sealed = NULL, salt = NULL, subject_ref = 'o' WHERE seq = 1",
    "UPDATE event_texts SET sealed = NULL WHERE seq = 1",
    "DELETE FROM event_texts WHERE seq = 1",
    "INSERT INTO event_texts(seq, fact_id, subject_ref) VALUES (1, 'f', 's')",
])
def test_sealed_texts_change_only_by_erasure(twins: Twins, change: str) -> None:
    _texts(twins)
    with pytest.raises(apsw.ConstraintError) as sq:
        twins.lf.conn.execute(change.format(blob="x'00'"))
    with pytest.raises(psycopg.IntegrityError) as pg, twins.pg.transaction():
        twins.pg.execute(change.format(blob="'\\x00'::bytea"))
    twins.same("texts", "get", 1)
    if not change.startswith("INSERT"):  # the same words (a second row: the primary key's)
        said = str(sq.value)
        assert said[said.index("custody:"):] == pg.value.diag.message_primary


def test_sealed_texts_refuse_truncate_and_upsert(twins: Twins) -> None:
    _texts(twins)
    for sql in ("TRUNCATE event_texts",
                "INSERT INTO event_texts(seq, fact_id, subject_ref) VALUES (1, 'f', 's') "
                "ON CONFLICT (seq) DO UPDATE SET sealed = '\\x01'::bytea"):
        with pytest.raises(psycopg.IntegrityError), twins.pg.transaction():
            twins.pg.execute(sql)
    assert twins.stores("texts")[1].count() == twins.stores("texts")[0].count()
    # Erasing, the one change allowed, is allowed however it is spelled.
    with twins.pg.transaction():
        twins.pg.execute("UPDATE event_texts SET sealed = NULL, salt = NULL")


def test_rewrite_bodies_and_meta(twins: Twins) -> None:
    t = twins
    w = world(seed=8, n_events=40)
    t.add_events(w.events)
    # A stand-in for events.py's append-only trigger, in ALWAYS mode: it must come back so.
    t.pg.execute("""CREATE FUNCTION no_update() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'append-only' USING ERRCODE = 'integrity_constraint_violation';
        END $$""")
    t.pg.execute("CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events "
                 "FOR EACH ROW EXECUTE FUNCTION no_update()")
    t.pg.execute("ALTER TABLE events ENABLE ALWAYS TRIGGER events_append_only_update")
    with pytest.raises(psycopg.IntegrityError), t.pg.transaction():
        t.pg.execute("UPDATE events SET body = 'x' WHERE seq = 1")
    bodies = [(s, f'{{"new":{s},"é":"\\u0000"}}') for s in (1, 5, 9)]
    with t.write():
        for store in t.stores("texts"):
            store.rewrite_bodies(iter(bodies))
    t.write_both("texts", "rewrite_bodies", [])
    t.same("texts", "candidates", 0, -1)
    t.same("browse", "events_newest", 100, -1)
    mode = t.pg.execute("SELECT tgenabled FROM pg_trigger "
                        "WHERE tgname = 'events_append_only_update'").fetchone()
    assert mode == ("A",)
    with pytest.raises(psycopg.IntegrityError), t.pg.transaction():
        t.pg.execute("UPDATE events SET body = 'x' WHERE seq = 1")
    for key, value in (("k", "v"), ("k", "w"), ("é", "")):
        t.write_both("texts", "set_meta", key, value)
    for key in ("k", "é", "nope"):
        assert t.lf.meta(key) == (t.pg.execute("SELECT value FROM ledger_meta WHERE key = %s",
                                               (key,)).fetchone() or (None,))[0]


def test_refusals_in_pipeline_mode(twins: Twins) -> None:
    """A store run inside a pipeline (as the connection may group a write's statements) still
    refuses a taken fact or text row at the call, and the transaction goes on."""
    w = world(seed=12, n_events=20)
    twins.add_events(w.events)
    facts, texts = twins.stores("facts")[1], twins.stores("texts")[1]
    with twins.pg.transaction(), twins.pg.pipeline():
        facts.insert(w.facts[0])
        texts.put(1, "f", "s", b"\x00", None)
        with pytest.raises(StoreIntegrityError):
            facts.insert(w.facts[0])
        with pytest.raises(StoreIntegrityError):
            texts.put(1, "f", "s", None, None)
        facts.insert(w.facts[1])
    assert [f.fact_id for f in facts.dump()[0]] == [w.facts[0].fact_id, w.facts[1].fact_id]
    assert texts.get(1) == ("f", "s", b"\x00", None)
