"""Where erased bytes still are: the b-tree of a file offset's page, and the rows holding them."""

from __future__ import annotations

import struct
from collections.abc import Callable

import ahocorasick_rs
import apsw

from store.rows import Holder
from store.sqlite.scan_many import ManyPlan
from store.sqlite.scrub import find_in_file, fragment_of, plan_many, wal_path

TABLES = ("SELECT name, sql FROM sqlite_schema WHERE type = 'table' "
          "AND name NOT LIKE 'sqlite_%' ORDER BY name")
INDEX_TABLE = "SELECT name, tbl_name FROM sqlite_schema WHERE type IN ('table', 'index')"
PAGE_NAMES = "SELECT name, pageno FROM dbstat"
# The fact (and plaintext subject) a row of a known table is about; other tables hold no fact.
FACT_OF = {
    "events": ("SELECT e.fact_id, coalesce(e.subject, f.subject) FROM events e "
               "LEFT JOIN facts f ON f.fact_id = e.fact_id WHERE e.seq = ?"),
    "facts": "SELECT fact_id, subject FROM facts WHERE assert_seq = ?",
    "fact_states": "SELECT fact_id, subject FROM facts WHERE assert_seq = ?",
    "recall_fts_content": "SELECT fact_id, subject FROM facts WHERE assert_seq = ?",
    "fact_sources": "SELECT fact_id, subject FROM facts WHERE fact_id = ?",
    "served_facts": "SELECT fact_id, subject FROM facts WHERE fact_id = ?",
    "event_texts": ("SELECT t.fact_id, f.subject FROM event_texts t "
                    "LEFT JOIN facts f ON f.fact_id = t.fact_id WHERE t.seq = ?"),
}
# The column that names a row in the report (and keys FACT_OF); else rowid (or, WITHOUT ROWID,
# the first primary-key column).
ROW_KEY = {"fact_states": "fact_seq", "fact_sources": "fact_id", "served_facts": "fact_id",
           "ledger_meta": "key", "policies": "hash", "pending_scrubs": "fact_id",
           "recall_fts_idx": "term", "recall_fts_config": "k", "forgotten_digests": "digest"}
ROWS_PER_TABLE = 50
WAL_HEADER = 32
WAL_FRAME_HEADER = 24




def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _tables(conn: apsw.Connection) -> list[tuple[str, str, list[str]]]:
    """(table, its row key, its columns) of every ordinary table; a virtual table's shadow
    tables are ordinary tables and are searched instead of it."""
    out = []
    for table, sql in list(conn.execute(TABLES)):
        if str(sql or "").upper().startswith("CREATE VIRTUAL"):
            continue
        info = list(conn.execute(f"PRAGMA table_info({_quote(table)})"))
        pk = [str(r[1]) for r in sorted(info, key=lambda r: int(r[5])) if int(r[5]) > 0]
        without_rowid = "WITHOUT ROWID" in str(sql or "").upper()
        key = ROW_KEY.get(table, pk[0] if without_rowid and pk else "rowid")
        out.append((str(table), key, [str(r[1]) for r in info]))
    return out


def _matcher(needles: list[bytes]) -> Callable[[bytes], set[int]]:
    """Which needles occur in a byte string: one overlapping pass over fragments, each
    candidate checked in full (a plain `in` per needle when they are few)."""
    if len(needles) <= 4:
        return lambda data: {i for i, n in enumerate(needles) if n in data}
    pieces: dict[bytes, list[tuple[int, int]]] = {}
    for i, needle in enumerate(needles):
        shift, fragment = fragment_of(needle)
        pieces.setdefault(fragment, []).append((i, shift))
    fragments = list(pieces)
    automaton = ahocorasick_rs.BytesAhoCorasick(fragments)

    def match(data: bytes) -> set[int]:
        found: set[int] = set()
        for k, at, _ in automaton.find_matches_as_indexes(data, overlapping=True):
            for i, shift in pieces[fragments[k]]:
                if i not in found and at >= shift and data.startswith(needles[i], at - shift):
                    found.add(i)
        return found

    return match


def rows_holding(conn: apsw.Connection, needles: list[bytes]) -> dict[bytes, list[Holder]]:
    """For each needle, every row (at most ROWS_PER_TABLE a table) of every ordinary table
    with its bytes in one of its columns (text and blobs compared as bytes). One read of each
    table for all the needles, however many: this runs only when a scan found something."""
    out: dict[bytes, list[Holder]] = {n: [] for n in needles}
    if not needles:
        return out
    match = _matcher(needles)
    for table, key, cols in _tables(conn):
        select = ", ".join(_quote(c) for c in cols)
        keyed = "rowid" if key == "rowid" else _quote(key)
        shown: dict[int, int] = {}
        for row in list(conn.execute(f"SELECT {keyed}, {select} FROM {_quote(table)}")):
            for col, value in zip(cols, row[1:], strict=True):
                if isinstance(value, str):
                    data = value.encode("utf-8")
                elif isinstance(value, bytes):
                    data = value
                else:
                    continue
                for i in match(data):
                    if shown.get(i, 0) >= ROWS_PER_TABLE:
                        continue
                    shown[i] = shown.get(i, 0) + 1
                    out[needles[i]].append(_holder(conn, table, col, row[0]))
    return out


def _holder(conn: apsw.Connection, table: str, col: str, value: object) -> Holder:
    fact_id = subject = None
    if table in FACT_OF:
        row = conn.execute(FACT_OF[table], (value,)).fetchone()
        if row is not None:
            fact_id, subject = row[0], row[1]
    return Holder(table, col, str(value), fact_id, subject)


def page_names(conn: apsw.Connection, pages: set[int]) -> dict[int, str]:
    """The table or index each page belongs to (dbstat); a page in none is a free page."""
    owner = {str(n): str(t) for n, t in conn.execute(INDEX_TABLE)}
    names: dict[int, str] = {}
    for name, pageno in conn.execute(PAGE_NAMES):
        if int(pageno) in pages:
            names[int(pageno)] = owner.get(str(name), str(name))
    return {p: names.get(p, "free page") for p in pages}


def db_page(offset: int, page_size: int) -> int:
    return offset // page_size + 1


def wal_page(wal: str, offset: int, page_size: int) -> tuple[int, int] | None:
    """(frame number, database page) of a WAL offset; None inside the WAL header."""
    if offset < WAL_HEADER:
        return None
    frame = (offset - WAL_HEADER) // (WAL_FRAME_HEADER + page_size)
    with open(wal, "rb") as handle:
        handle.seek(WAL_HEADER + frame * (WAL_FRAME_HEADER + page_size))
        head = handle.read(4)
    if len(head) < 4:
        return None
    return frame + 1, int(struct.unpack(">I", head)[0])


class Locator:
    """The byte scan of one ledger's files, and the lookups that say where each hit lives."""

    def __init__(self, conn: apsw.Connection, path: str) -> None:
        self._conn = conn
        self.path = path

    def files(self) -> list[str]:
        return [self.path, wal_path(self.path)]

    def find(self, needles: list[bytes], plan: ManyPlan | None = None,
             ) -> dict[str, dict[int, list[int]]]:
        """For each of the ledger's files: needle index -> offsets where it is still present
        (`plan`: the many-needle search prepared ahead by `plan`)."""
        return {path: find_in_file(path, needles, plan=plan) for path in self.files()}

    def plan(self, needles: list[bytes]) -> ManyPlan | None:
        """The many-needle search for `needles`, built now from a sample of the database file
        (None for few needles): to build while something else waits, and pass to `find`."""
        return plan_many(self.path, needles)

    def page_size(self) -> int:
        return int(self._conn.pragma("page_size"))

    def holders(self, needles: list[bytes]) -> dict[bytes, list[Holder]]:
        return rows_holding(self._conn, needles)

    def page_names(self, pages: set[int]) -> dict[int, str]:
        return page_names(self._conn, pages)
