"""What an erasure leaves in a server's own table files, checked from a client after its commit
(issue 34): the transactions whose snapshot is older than the erasure (they may still read the
old row versions, and VACUUM must keep those while they live), and the old row versions
themselves: VACUUM of the ledger's tables, then their raw pages (heap, TOAST and indexes) read
back through pageinspect, where the role may, and searched for the erased byte strings; VACUUM
FULL only for a table whose pages still hold them (plain VACUUM leaves a page's freed bytes in
place, as it did for the last row of a page). Each check is one place of the certificate:
(place, outcome, detail) with outcome `clean`, `pending`, `found` (bytes in a dead row version or
a page's free space), `shared` (only live rows hold them) or `unverifiable`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from store.errors import StoreBusy
from store.postgres.pages import SUPERUSER, PageHit, inspection_barrier, search_pages

SNAPSHOTS_PLACE = "server: in-flight snapshots older than the erasure"
OLD_VERSIONS_PLACE = "server: old row versions in the ledger's table files (VACUUM, page inspection)"
# ledger_meta: the transaction id (xid8) of the newest erasure not yet finished.
HORIZON = "erasure_horizon"
SHOWN = 8
# A lock not granted within the timeout (psycopg's error, or the store's once its cursor
# translated it).
LOCK_WAIT = (psycopg.errors.LockNotAvailable, StoreBusy)

# Sessions of this database (not this one) whose snapshot xmin is at or before the erasure's
# transaction: its commit may be invisible to them. age() compares xids across wraparound. An
# autovacuum worker's snapshot holds nothing back (VACUUM ignores it) and reads no rows for
# anyone.
SNAPSHOTS = """
SELECT a.pid, coalesce(a.application_name, ''), coalesce(a.usename::text, ''),
       coalesce(to_char(a.xact_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), ''),
       coalesce(a.state, '')
FROM pg_stat_activity a
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
  AND a.backend_type IS DISTINCT FROM 'autovacuum worker'
  AND a.backend_xmin IS NOT NULL AND age(a.backend_xmin) >= age(xid(%(e)s::xid8))
ORDER BY a.xact_start NULLS FIRST, a.pid"""
PREPARED = """
SELECT gid, owner::text FROM pg_prepared_xacts
WHERE database = current_database() AND age(transaction) >= age(xid(%(e)s::xid8))
ORDER BY prepared"""
SLOTS = """
SELECT slot_name::text, slot_type FROM pg_replication_slots
WHERE xmin IS NOT NULL AND age(xmin) >= age(xid(%(e)s::xid8)) ORDER BY slot_name"""
# No erasure recorded its transaction (one left by an older version): every open snapshot.
NEXT_XID = "SELECT pg_snapshot_xmax(pg_current_snapshot())::text"
TABLES = """
SELECT c.oid, c.relname, c.relowner, pg_has_role(c.relowner, 'USAGE'),
       CASE WHEN current_setting('server_version_num')::int >= 170000
            THEN has_table_privilege(c.oid, 'MAINTAIN') ELSE false END
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relkind = 'r' ORDER BY c.relname"""



@dataclass(frozen=True, slots=True)
class Place:
    place: str
    outcome: str  # clean, pending, found, shared, unverifiable
    detail: str

    def row(self) -> tuple[str, str, str]:
        return self.place, self.outcome, self.detail


def horizon(conn: psycopg.Connection[Any], recorded: str | None) -> str:
    """The erasure's transaction id as recorded, else the next one (every open snapshot)."""
    if recorded:
        return recorded
    row = conn.execute(NEXT_XID).fetchone()
    return str(row[0]) if row else "0"


def old_snapshots(conn: psycopg.Connection[Any], erasure_xid: str) -> list[str]:
    """Each open transaction, prepared transaction or replication slot whose snapshot may still
    read the row versions the erasure replaced, named."""
    found = [f"pid {pid} (application {app or '-'}, user {user or '-'}, transaction started "
             f"{start or '(hidden from this role)'}, {state or 'state hidden'})"
             for pid, app, user, start, state in conn.execute(SNAPSHOTS, {"e": erasure_xid})]
    found += [f"prepared transaction {gid} of {owner}"
              for gid, owner in conn.execute(PREPARED, {"e": erasure_xid})]
    found += [f"replication slot {name} ({kind})"
              for name, kind in conn.execute(SLOTS, {"e": erasure_xid})]
    return found


def snapshots_place(held: list[str]) -> Place:
    if held:
        return Place(SNAPSHOTS_PLACE, "pending", (
            f"{len(held)} transaction(s) opened before the erasure may still read the old row "
            f"versions (and VACUUM must keep them while they live): {'; '.join(held[:SHOWN])}"
            + ("; ..." if len(held) > SHOWN else "")
            + "; re-checked at the next write, open or finish_scrubs"))
    return Place(SNAPSHOTS_PLACE, "clean",
                 "no transaction, prepared transaction or replication slot of this database "
                 "holds a snapshot older than the erasure")


def _ident(*names: str) -> sql.Composable:
    return sql.Identifier(*names)


def vacuum(conn: psycopg.Connection[Any], schema: str, tables: list[str], *,
           full: bool = False, lock_timeout_ms: int = 5000) -> None:
    """VACUUM (or VACUUM FULL, which rewrites the table and its indexes under an ACCESS
    EXCLUSIVE lock, waiting at most `lock_timeout_ms` for it) each table, outside any
    transaction (the connection is in autocommit)."""
    head = sql.SQL("VACUUM (FULL) {}") if full else sql.SQL("VACUUM {}")
    conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(f"{lock_timeout_ms}ms")))
    try:
        for table in tables:
            conn.execute(head.format(_ident(schema, table)))
    finally:
        conn.execute("RESET lock_timeout")


def maintainable(conn: psycopg.Connection[Any], schema: str) -> tuple[list[tuple[int, str]], list[str]]:
    """(the schema's tables this role may VACUUM, those it may not)."""
    row = conn.execute(SUPERUSER).fetchone()
    superuser = bool(row and row[1])
    may: list[tuple[int, str]] = []
    may_not: list[tuple[int, str]] = []
    for oid, name, _owner, owns, maintain in conn.execute(TABLES, (schema,)).fetchall():
        (may if superuser or owns or maintain else may_not).append((int(oid), str(name)))
    return may, [n for _o, n in may_not]


def old_versions_place(conn: psycopg.Connection[Any], schema: str, needles: list[bytes], *,
                       run_vacuum: bool = True, lock_timeout_ms: int = 5000) -> Place:
    """VACUUM the ledger's tables, read their pages back and search them; VACUUM FULL a table
    whose pages still hold an erased string, and search it again. `run_vacuum=False` inspects
    the pages as they are (what the check finds when nothing removed the old versions)."""
    tables, refused = maintainable(conn, schema)
    if refused:
        return Place(OLD_VERSIONS_PLACE, "unverifiable", (
            f"the role may not VACUUM {', '.join(refused[:SHOWN])} (grant it MAINTAIN on the "
            "ledger's tables, or run as their owner): the old row versions stay until "
            "autovacuum removes them, and nothing here can tell when"))
    done = "no VACUUM was run"
    if run_vacuum:
        try:
            vacuum(conn, schema, [name for _oid, name in tables], lock_timeout_ms=lock_timeout_ms)
        except LOCK_WAIT:
            return Place(OLD_VERSIONS_PLACE, "pending", (
                "VACUUM could not take its lock (another session is vacuuming or altering a "
                "table); retried at the next write, open or finish_scrubs"))
        # The key store's rows too (a destroyed key's wrapped bytes in its old row version);
        # not searched: those bytes are not known here.
        keys, _ = maintainable(conn, f"{schema}_keys")
        vacuum(conn, f"{schema}_keys", [name for _oid, name in keys],
               lock_timeout_ms=lock_timeout_ms)
        done = ("VACUUM ran on the ledger's tables" + (
            " and the key store's (not searched: a destroyed key's bytes are not known here)"
            if keys else ""))
    pageinspect, why_not = inspection_barrier(conn)
    if pageinspect is None:
        return Place(OLD_VERSIONS_PLACE, "unverifiable", (
            f"{done}, but plain VACUUM can leave a removed row's bytes in its page's free space, "
            f"and the pages could not be read back: {why_not}"))
    if not needles:
        return Place(OLD_VERSIONS_PLACE, "unverifiable", (
            f"{done}; the erased byte strings are not known here (the erasure was left pending "
            "by another process, and its strings went with it), so the pages were not searched"))
    hits, count = search_pages(conn, tables, needles, pageinspect)
    rewritten: list[str] = []
    if run_vacuum and any(h.item is None for h in hits):
        rewritten = sorted({h.table for h in hits if h.item is None})
        try:
            vacuum(conn, schema, rewritten, full=True, lock_timeout_ms=lock_timeout_ms)
        except LOCK_WAIT:
            return Place(OLD_VERSIONS_PLACE, "pending", (
                f"after VACUUM the pages of {', '.join(rewritten)} still hold erased bytes, and "
                "VACUUM FULL could not take its lock (another session is using the table); "
                "retried at the next write, open or finish_scrubs"))
        hits = [h for h in hits if h.table not in rewritten] + search_pages(
            conn, [t for t in tables if t[1] in rewritten], needles, pageinspect,
            rebuilt=True)[0]
    searched = (f"{count} page(s) of {len(tables)} table(s), their TOAST tables and indexes "
                f"read with pageinspect and searched for {len(needles)} erased byte string(s)")
    full = (f"; VACUUM FULL rewrote {', '.join(rewritten)}, whose pages plain VACUUM had left "
            "holding erased bytes" if rewritten else "")
    residue = [h for h in hits if h.item is None]
    held = [h for h in hits if h.item is not None]
    if residue:
        return Place(OLD_VERSIONS_PLACE, "found", (
            f"{done}{full}; {searched}: {len(residue)} copy(ies) in dead row versions or free "
            f"space: {_listed(residue, needles)}" + (f"; and held by live rows: "
                                                     f"{_listed(held, needles)}" if held else "")))
    if held:
        return Place(OLD_VERSIONS_PLACE, "shared", (
            f"{done}{full}; {searched}: no dead row version or free space holds them; "
            f"{len(held)} copy(ies) are held by live rows (by design, or a row the checks above "
            f"name): {_listed(held, needles)}"))
    return Place(OLD_VERSIONS_PLACE, "clean", f"{done}{full}; {searched}: none found")


def _listed(hits: list[PageHit], needles: list[bytes]) -> str:
    more = f"; and {len(hits) - SHOWN} more" if len(hits) > SHOWN else ""
    return "; ".join(h.text(needles) for h in hits[:SHOWN]) + more


def server_places(conn: psycopg.Connection[Any], schema: str, needles: list[bytes],
                  recorded_xid: str | None, *, in_transaction: bool,
                  lock_timeout_ms: int = 5000) -> list[tuple[str, str, str]]:
    """The snapshots place, then the old row versions place (not checked while a snapshot may
    still read them: VACUUM must keep them)."""
    if in_transaction:
        why = ("the erasure's proof ran inside a transaction not committed yet (VACUUM cannot "
               "run inside one); re-checked at the next write, open or finish_scrubs")
        return [Place(SNAPSHOTS_PLACE, "pending", why).row(),
                Place(OLD_VERSIONS_PLACE, "pending", why).row()]
    held = old_snapshots(conn, horizon(conn, recorded_xid))
    snapshots = snapshots_place(held)
    if held:
        old = Place(OLD_VERSIONS_PLACE, "pending", (
            "not removed yet: VACUUM must keep the old row versions while a transaction older "
            "than the erasure lives (above); removed and inspected once it ends"))
    else:
        old = old_versions_place(conn, schema, needles, lock_timeout_ms=lock_timeout_ms)
    return [snapshots.row(), old.row()]
