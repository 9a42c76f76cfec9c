"""Reading a server's table pages back from a client (pageinspect's get_raw_page, for a
superuser only) and searching them for erased byte strings: each hit located (relation, page,
offset) and told apart as held by a live row (or index entry) or residue (a dead row version,
or bytes left in a page's free space). Used by store.postgres.residue."""

from __future__ import annotations

import bisect
import hashlib
import re
import struct
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

SUPERUSER = "SELECT current_user::text, rolsuper FROM pg_roles WHERE rolname = current_user"
# A needle longer than this is searched by its prefix: TOAST splits a long value into chunks of
# about 2 kB, so the whole string is never contiguous in one page.
PREFIX = 64
PAGES_AT_ONCE = 256

# Every relation holding a table's bytes: the table, its TOAST table, and their indexes.
RELATIONS = """
SELECT r.oid, r.relname, r.relkind,
       pg_relation_size(r.oid, 'main') / current_setting('block_size')::int
FROM pg_class r
WHERE r.oid = %(t)s OR r.oid = (SELECT reltoastrelid FROM pg_class WHERE oid = %(t)s)
   OR r.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = %(t)s
                OR indrelid = (SELECT reltoastrelid FROM pg_class WHERE oid = %(t)s))
ORDER BY r.relkind DESC, r.relname"""

PAGEINSPECT = ("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
               "WHERE e.extname = 'pageinspect'")
AVAILABLE = "SELECT 1 FROM pg_available_extensions WHERE name = 'pageinspect'"
PAGES = ("SELECT b, {fn}(%s::oid::regclass::text, 'main', b) "
         "FROM generate_series(%s::bigint, %s::bigint) b")


@dataclass(frozen=True, slots=True)
class PageHit:
    """An erased byte string in a relation's page: where, which string (by number), and
    whether a live row (or index entry) holds it there, or it is residue: a dead row version,
    or bytes left in the page's free space."""

    table: str  # the table it belongs to
    relation: str  # the table itself, its TOAST table or an index
    page: int
    offset: int
    needle: int
    item: int | None  # the line pointer of the live item holding it; None: residue

    def text(self, needles: list[bytes]) -> str:
        digest = hashlib.sha256(needles[self.needle]).hexdigest()[:12]
        where = f"item {self.item}" if self.item is not None else f"offset {self.offset}"
        return (f"{self.relation} page {self.page} {where} (erased string {self.needle + 1}, "
                f"sha256 {digest})")


# A page: its header's pd_lower at byte 12, line pointers (32 bits: lp_off 15, lp_flags 2,
# lp_len 15) from byte 24. A heap tuple's header: t_xmax at 4, t_infomask at 20.
LP_NORMAL = 1
XMAX_INVALID, XMAX_LOCK_ONLY = 0x0800, 0x0080


def live_items(raw: bytes, heap: bool) -> list[tuple[int, int, int]]:
    """(line pointer number, start, end) of each item of the page a live row holds: a normal
    line pointer, and for a heap page a tuple no transaction deleted (after VACUUM with no
    older snapshot, a deleted one is gone, so one still there is residue). Everything else in
    the page (dead tuples, free space) is residue."""
    if len(raw) < 24:
        return []
    lower = struct.unpack_from("<H", raw, 12)[0]
    items = []
    for n, at in enumerate(range(24, min(lower, len(raw)) - 3, 4), start=1):
        word = struct.unpack_from("<I", raw, at)[0]
        off, flags, length = word & 0x7FFF, (word >> 15) & 3, word >> 17
        if flags != LP_NORMAL or length == 0 or off + length > len(raw):
            continue
        if heap and length >= 22:
            xmax = struct.unpack_from("<I", raw, off + 4)[0]
            mask = struct.unpack_from("<H", raw, off + 20)[0]
            if xmax and not mask & (XMAX_INVALID | XMAX_LOCK_ONLY):
                continue
        items.append((n, off, off + length))
    return items


def _holder(items: list[tuple[int, int, int]], starts: list[int], start: int,
            end: int) -> int | None:
    """The line pointer of the item holding bytes start..end (`starts`: the items' starts,
    ascending, as `items` is sorted), None when no item does."""
    at = bisect.bisect_right(starts, start) - 1
    if at >= 0 and end <= items[at][2]:
        return items[at][0]
    return None



def inspection_barrier(conn: psycopg.Connection[Any]) -> tuple[str | None, str | None]:
    """(the schema pageinspect's functions are in, None) when this role may read raw pages;
    (None, why not) otherwise."""
    row = conn.execute(SUPERUSER).fetchone()
    role, superuser = (str(row[0]), bool(row[1])) if row else ("?", False)
    where = conn.execute(PAGEINSPECT).fetchone()
    if where is None:
        extra = ("" if conn.execute(AVAILABLE).fetchone() else
                 "; the server does not even ship it (PostgreSQL's contrib)")
        return None, ("the pageinspect extension is not installed in this database (a "
                      f"superuser runs CREATE EXTENSION pageinspect){extra}")
    if not superuser:
        return None, (f"the role {role} may not read raw pages: pageinspect's get_raw_page "
                      "runs only for a superuser (no grant gives it); run the erasure's check "
                      "as a superuser, or rely on the epoch key for these copies")
    return str(where[0]), None


def _pattern(needles: list[bytes]) -> tuple[re.Pattern[bytes], dict[bytes, int]]:
    which: dict[bytes, int] = {}
    for i, needle in enumerate(needles):
        which.setdefault(needle[:PREFIX], i)
    alternatives = sorted(which, key=len, reverse=True)
    return re.compile(b"|".join(re.escape(a) for a in alternatives)), which


def search_pages(conn: psycopg.Connection[Any], tables: list[tuple[int, str]],
                 needles: list[bytes], pageinspect: str, *,
                 rebuilt: bool = False) -> tuple[list[PageHit], int]:
    """Every page of each table's relations (heap, TOAST, indexes), searched for the needles:
    (what was found, how many pages were read). A copy in an index item counts as held by a
    live row only once the index was `rebuilt` (VACUUM FULL): before, a B-tree's inner pages
    keep deleted keys as separators, in items as live as any."""
    pattern, which = _pattern(needles)
    pages = sql.SQL(PAGES).format(fn=sql.Identifier(pageinspect, "get_raw_page"))
    hits: list[PageHit] = []
    read = 0
    for oid, table in tables:
        for rel_oid, relation, kind, blocks in conn.execute(RELATIONS, {"t": oid}).fetchall():
            read += int(blocks)
            for first in range(0, int(blocks), PAGES_AT_ONCE):
                last = min(int(blocks), first + PAGES_AT_ONCE) - 1
                for page, raw in conn.execute(pages, (rel_oid, first, last)):
                    data = bytes(raw)
                    found = list(pattern.finditer(data))
                    if not found:
                        continue
                    items = sorted(live_items(data, heap=kind in ("r", "t"))
                                   if kind != "i" or rebuilt else [],
                                   key=lambda item: item[1])
                    starts = [lo for _n, lo, _hi in items]
                    hits += [PageHit(table, str(relation), int(page), m.start(),
                                     which[m.group()[:PREFIX]],
                                     _holder(items, starts, m.start(), m.end()))
                             for m in found]
    return hits, read


