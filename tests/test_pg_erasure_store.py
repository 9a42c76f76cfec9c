"""store.postgres.erasure against store.sqlite.erasure: the same calls over the same rows give
the same results, on a real PostgreSQL server (the tombstones' triggers are the schema's,
tested with the ledger's core in tests/test_pg_store_core.py)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import psycopg

from store.postgres import erasure as pg_erasure
from store.postgres import recall as pg_recall
from store.postgres.erasure import ErasureStore
from store.rows import FactRow
from store.sqlite.opening import open_ledger
from tests.pg_scaffold import pg_prepare, put_rows

SPACES = ["zeta", "alpha", "Beta", "beta", "é-space", "_x"]


def _fact(seq: int, subject: str, space: str, ended: str | None = None, held: int = 0) -> FactRow:
    return FactRow(seq, f"f{seq:04d}", subject, "plan", space, f"2026-01-{seq % 28 + 1:02d}",
                   None, "observed", None, ended, None if ended is None else seq + 1000, None,
                   None, held, "agent", None, "active" if ended is None else "ended", None)


def _rows() -> tuple[list[tuple[object, ...]], list[FactRow]]:
    events: list[tuple[object, ...]] = []
    facts: list[FactRow] = []
    for seq in range(1, 41):
        subject = f"acct:{seq % 7}"
        space = SPACES[seq % len(SPACES)]
        ended = {0: "forgotten", 1: "expired", 2: "superseded"}.get(seq % 9)
        facts.append(_fact(seq, subject, space, ended, held=int(seq % 11 == 0)))
        body = json.dumps({"subject": subject, "n": seq})
        events.append((seq, "assert", f"2026-02-{seq % 28 + 1:02d}T00:00:{seq:02d}Z", "agent",
                       "p", f"f{seq:04d}", subject, body, b"v", "s", f"h{seq - 1}", f"h{seq}"))
    for i, kind in enumerate(["forget", "expire", "forget_subject", "checkpoint", "forget"]):
        seq = 41 + i
        fact_id = None if kind in ("forget_subject", "checkpoint") else f"f{(i + 1) * 9:04d}"
        events.append((seq, kind, f"2026-03-01T00:00:{i:02d}Z", "agent", "p", fact_id, None,
                       json.dumps({"kind": kind, "i": i}), None, None, f"h{seq - 1}", f"h{seq}"))
    return events, facts


CALLS: list[tuple[str, tuple[Any, ...]]] = [
    ("add_digest", ("ref1", "plan", "d1")),
    ("add_digest", ("ref1", "plan", "d1")),
    ("add_digests", ([("ref2", "plan", "d2"), ("ref1", "mail", "d3"), ("ref2", "plan", "d2")],)),
    ("has_digest", ("ref1", "plan", "d1")),
    ("has_digest", ("ref1", "plan", "nope")),
    ("digest_keys", ()),
    ("drop_digests", ("ref2",)),
    ("digest_keys", ()),
    ("erasure_events", ()),
    ("lexical_scope", (3,)),
    ("lexical_scope", (999,)),
    ("add_tombstone", (50, "sh1", "forget_subject", '{"facts": 2}', "2026-03-01T00:00:02Z")),
    ("add_tombstone", (51, "sh1", "forget_subject", '{"facts": 0}', "2026-03-02T00:00:00Z")),
    ("add_tombstone", (52, "sh2", "forget_subject", '{"facts": 1}', "2026-02-02T00:00:00Z")),
    ("last_tombstone_at", ("sh1",)),
    ("last_tombstone_at", ("nobody",)),
    ("tombstones", ()),
    ("add_pending", (["fB", "fa", "f_"], "2026-03-01T00:00:00Z")),
    ("add_pending", (["fZ", "fa"], "2026-01-01T00:00:00Z")),
    ("pending", ()),
    ("rewrite_due", ()),
    ("set_rewrite_due", ("2026-03-01T00:00:00Z", "vacuum pending")),
    ("rewrite_due", ()),
    ("clear_pending", ()),
    ("pending", ()),
    ("rewrite_due", ()),
    ("facts_of_subject", ("acct:3",)),
    ("erased_of_subject", ("acct:0",)),
    ("set_subject", (9, "gone")),
    ("erased_of_subject", ("acct:2",)),
    ("facts_of_subject", ("gone",)),
    ("sweep_candidates", ("beta", "2026-02-20")),
    ("sweep_candidates", ("Beta", "2026-02-20")),
    ("sweep_candidates_all", ("2026-02-10",)),
    ("learned_before", ("alpha", "2026-02-25")),
    ("learned_before", (None, "2026-02-25")),
    ("spaces", ()),
    ("events_of_kind", ("forget_subject",)),
    ("events_of_kind", ("forget",)),
    ("is_name", ("acct:4",)),
    ("is_name", ("alpha",)),
    ("is_name", ("plan",)),
    ("names", ()),
    ("held", ()),
    ("leaks", ()),
    ("add_leak", ({"seq": 41, "where": ["wal"]},)),
    ("add_leak", ({"seq": 42, "where": []},)),
    ("leaks", ()),
]


def test_every_method_answers_as_sqlite(pg_url: str, tmp_path: Path) -> None:
    events, facts = _rows()
    lf = open_ledger(tmp_path / "l.db")
    with psycopg.connect(pg_url) as pg:
        pg_prepare(pg, pg_erasure.DDL, pg_recall.DDL)
        pg_store = ErasureStore(pg)
        with lf.write(), pg.transaction():
            put_rows(pg, lf.conn, events, facts)
            for recall in (lf.recall, pg_recall.RecallStore(pg)):
                recall.create("test", 2)
                recall.add(3, "ha hb", "hs1 hs2", 0, bytes(8), "live", "alpha", "ref")
            answers = []
            for name, args in CALLS:
                want = getattr(lf.erasure, name)(*args)
                got = getattr(pg_store, name)(*args)
                assert got == want, name
                answers.append(want)
    # The comparison saw real rows, not two empty answers.
    assert answers[CALLS.index(("spaces", ()))] == sorted(SPACES)
    seen = {n for (n, _), a in zip(CALLS, answers, strict=True) if a}
    assert seen >= {"erasure_events", "tombstones", "facts_of_subject", "erased_of_subject",
                    "sweep_candidates", "sweep_candidates_all", "learned_before", "held",
                    "names", "leaks", "digest_keys", "pending", "rewrite_due", "is_name",
                    "has_digest", "lexical_scope", "last_tombstone_at", "events_of_kind"}
    lf.conn.close()


def test_every_public_method_of_the_sqlite_store_with_its_signature() -> None:
    from store.sqlite.erasure import ErasureStore as SqliteErasure

    names = [n for n in dir(SqliteErasure) if not n.startswith("_")]
    assert set(names) <= set(dir(ErasureStore))
    for name in names:
        want = inspect.signature(getattr(SqliteErasure, name))
        assert inspect.signature(getattr(ErasureStore, name)) == want, name
