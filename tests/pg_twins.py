"""Twin stores for the backend-equivalence tests: the same data written to a real SQLite ledger
and to a fresh PostgreSQL database (the statement groups' DDL on a raw psycopg connection),
and the same call made on both."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from store.postgres import actions, browse, policies, projection, sessions, texts
from store.rows import EVENT_COLUMNS, FactRow, StateRow
from store.sqlite.connection import LedgerFile
from store.sqlite.opening import open_ledger

MODULES = (policies, projection, browse, sessions, actions, texts)
# Stand-ins for what the modules of others declare (events.py, schema.py): the columns of the
# SQLite schema in the default collation, no chain trigger (these tests write events by hand),
# and events.py's refusal function, as it is there.
STAND_INS = (
    """CREATE FUNCTION custody_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'custody: %', TG_ARGV[0] USING ERRCODE = 'integrity_constraint_violation';
END $$""",
    """CREATE TABLE events(
    seq bigint PRIMARY KEY, kind text NOT NULL, tx_at text NOT NULL, actor text NOT NULL,
    policy_hash text NOT NULL, fact_id text, subject text, body text NOT NULL, value bytea,
    salt text, prev_hash text NOT NULL, hash text NOT NULL)""",
    "CREATE TABLE ledger_meta(key text PRIMARY KEY, value text NOT NULL)",
)
_EVENT_INSERT = (f"INSERT INTO events({', '.join(EVENT_COLUMNS)}) "
                 f"VALUES ({', '.join(['%s'] * len(EVENT_COLUMNS))})")
# Names whose byte order differs from most locales' order (case, accents, scripts, emoji).
WORDS = ("", "a", "B", "b", "Z", "z", "é", "e\u0301", "ß", "ss", "日本", "😀", "a b", "A",
         "ab", "a-b", "_x", "~", "Ω", "\u00a0lead", "tab\there", "new\nline", "quote'\"")
KINDS = ("assert", "retract", "confirm", "reject", "hold", "release", "policy", "forget",
         "expire", "served", "acted", "supersede")
STATUSES = ("active", "quarantined", "superseded", "retracted", "rejected", "expired")


@dataclass
class Twins:
    """One SQLite ledger and one PostgreSQL database with the same statement groups."""

    lf: LedgerFile
    pg: psycopg.Connection[Any]
    world: World | None = None

    def loaded(self) -> World:
        """The world `load` wrote into both."""
        assert self.world is not None
        return self.world

    def stores(self, group: str) -> tuple[Any, Any]:
        pg_class = {"facts": projection.FactStore, "policies": policies.PolicyStore,
                    "browse": browse.BrowseStore, "sessions": sessions.SessionStore,
                    "actions": actions.ActionStore, "texts": texts.TextStore}[group]
        return getattr(self.lf, group), pg_class(self.pg)

    @contextmanager
    def write(self) -> Iterator[None]:
        with self.lf.write(), self.pg.transaction():
            yield

    def both(self, group: str, method: str, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """The call on each backend (reads outside any transaction)."""
        sq, pg = self.stores(group)
        return getattr(sq, method)(*args, **kwargs), getattr(pg, method)(*args, **kwargs)

    def same(self, group: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """The call on each backend; asserts equal results (dicts: in the same order too)."""
        a, b = self.both(group, method, *args, **kwargs)
        assert a == b, (method, args, kwargs, a, b)
        if isinstance(a, dict):
            assert list(a.items()) == list(b.items()), (method, args, kwargs)
        return a

    def write_both(self, group: str, method: str, *args: Any, **kwargs: Any) -> None:
        sq, pg = self.stores(group)
        with self.write():
            getattr(sq, method)(*args, **kwargs)
            getattr(pg, method)(*args, **kwargs)

    def add_events(self, rows: list[tuple[Any, ...]]) -> None:
        """Events written as rows by hand on both (no chain: these tests are about reads)."""
        with self.write():
            self.lf.conn.executemany(
                f"INSERT INTO events({', '.join(EVENT_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(EVENT_COLUMNS))})", rows)
            with self.pg.cursor() as cur:
                cur.executemany(_EVENT_INSERT, rows)


def make_twins(tmp_path: Path, pg_url: str) -> Iterator[Twins]:
    lf = open_ledger(tmp_path / "l.db")
    pg = psycopg.connect(pg_url, autocommit=True)
    with pg.transaction():
        for ddl in STAND_INS:
            pg.execute(ddl)
        for module in MODULES:
            for ddl in module.DDL:
                pg.execute(ddl)
    try:
        yield Twins(lf, pg)
    finally:
        pg.close()
        lf.conn.close()


@dataclass
class World:
    """Generated rows: events, facts with their state histories, and sources."""

    events: list[tuple[Any, ...]]
    facts: list[FactRow]
    states: list[StateRow]
    sources: list[tuple[str, str]]
    tx_ats: list[str]


def _moment(rng: random.Random, base: int) -> str:
    return f"2026-{1 + base // 28 % 12:02d}-{1 + base % 28:02d}T0{rng.randrange(10)}:00:00Z"


def world(seed: int = 7, n_events: int = 400) -> World:
    """A deterministic varied ledger: ties in times and names, unicode, empty strings, NULLs,
    values with zero bytes, facts in every status, several states each."""
    rng = random.Random(seed)
    pick: Callable[[tuple[str, ...]], str] = rng.choice
    events: list[tuple[Any, ...]] = []
    facts: list[FactRow] = []
    states: list[StateRow] = []
    tx_ats: list[str] = []
    minute = 0
    fact_ids: list[str] = []
    for seq in range(1, n_events + 1):
        if rng.random() < 0.6:  # ties in transaction time
            minute += 1
        tx_at = f"2026-01-01T{minute // 60:02d}:{minute % 60:02d}:00Z"
        tx_ats.append(tx_at)
        kind = "assert" if seq < 5 or rng.random() < 0.4 else pick(KINDS)
        fact_id = None
        if kind == "assert":
            fact_id = f"f{seq:04d}{pick(WORDS)}"
            fact_ids.append(fact_id)
        elif kind != "policy" and fact_ids and rng.random() < 0.9:
            fact_id = pick(tuple(fact_ids))
        value = (None if kind != "assert" or rng.random() < 0.1
                 else bytes(rng.randrange(256) for _ in range(rng.randrange(0, 12))) + b"\x00")
        events.append((seq, kind, tx_at, pick(WORDS), f"p{seq % 3}", fact_id,
                       pick(WORDS) if kind == "assert" else None, f'{{"n":{seq}}}', value,
                       None if value is None else "s", f"h{seq - 1}", f"h{seq}"))
        if kind == "assert":
            assert fact_id is not None
            vf = _moment(rng, rng.randrange(60))
            vt = None if rng.random() < 0.5 else _moment(rng, rng.randrange(60))
            facts.append(FactRow(
                assert_seq=seq, fact_id=fact_id, subject=pick(WORDS[:6]),
                predicate=pick(("plan", "tier", "")), space=pick(WORDS[:12]), valid_from=vf,
                valid_to=vt, provenance=pick(("claimed", "confirmed", "attested")),
                confirmed_seq=None if rng.random() < 0.5 else seq + 1,
                ended=None if rng.random() < 0.6 else pick(("retracted", "expired")),
                ended_seq=None if rng.random() < 0.6 else seq + 2,
                supersedes=None if rng.random() < 0.7 or not fact_ids else pick(tuple(fact_ids)),
                superseded_by=None if rng.random() < 0.7 else pick(tuple(fact_ids)),
                held=int(rng.random() < 0.3), actor=pick(WORDS),
                session=None if rng.random() < 0.3 else f"s{rng.randrange(6)}{pick(WORDS[:4])}",
                status=pick(STATUSES), marks=None if rng.random() < 0.8 else pick(WORDS)))
            from_seq = seq
            for _ in range(rng.randrange(1, 5)):
                status = pick(STATUSES)
                vto = None if rng.random() < 0.5 else _moment(rng, rng.randrange(60))
                states.append(StateRow(seq, from_seq, f"2026-01-01T{from_seq // 60:02d}:"
                                       f"{from_seq % 60:02d}:00Z", int(rng.random() < 0.8),
                                       rng.randrange(0, 3), status, pick(STATUSES), vto,
                                       None if rng.random() < 0.5 else vto))
                from_seq += rng.randrange(1, 40)
    sources = sorted({(pick(tuple(fact_ids)), pick(tuple(fact_ids))) for _ in range(150)})
    return World(events, facts, states, sources, tx_ats)


def load(t: Twins, w: World) -> None:
    """The world's events and projection into both backends (through the stores)."""
    t.add_events(w.events)
    sq, pg = t.stores("facts")
    with t.write():
        for store in (sq, pg):
            for f in w.facts:
                store.insert(f)
            store.push_states(w.states)
            by_fact: dict[str, list[str]] = {}
            for a, b in w.sources:
                by_fact.setdefault(a, []).append(b)
            for a, bs in by_fact.items():
                store.add_sources(a, bs)
