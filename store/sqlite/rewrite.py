"""Rewriting the ledger file from its live rows (VACUUM), for an erasure whose byte scan found
erased bytes no live row explains: SQLite's secure_delete zeroes freed cells and pages, but not
the unallocated gap a b-tree balance leaves when it rebuilds a page, where copies of the cells it
moved away survive (and outlive their later deletion)."""

from __future__ import annotations

from collections.abc import Callable

import apsw

from store.rows import VACUUMED, RewriteOutcome
from store.sqlite.scrub import CHECKPOINT_DELAYS, checkpoint_truncate, file_size

# VM steps between calls of `during` while the VACUUM runs (a crash trial kills it there).
PROGRESS_STEPS = 20_000
Hook = Callable[[], None]


def rewrite_file(conn: apsw.Connection, db_path: str,
                 delays: tuple[float, ...] = CHECKPOINT_DELAYS, *,
                 during: Hook | None = None, vacuumed: Hook | None = None) -> RewriteOutcome:
    """VACUUM (outside any transaction), then the truncating checkpoint that copies the new
    pages over the old file and cuts it to its new length. secure_delete and an in-memory
    temp store are set first: VACUUM builds its copy in the temp database, which must not be a
    file holding the ledger's bytes (so it costs memory about the size of the file).
    `during` is called every PROGRESS_STEPS VM steps of the VACUUM, `vacuumed` between the
    VACUUM and the checkpoint (the points a crash trial kills the process at)."""
    before = file_size(db_path)
    conn.pragma("secure_delete", "ON")
    conn.pragma("temp_store", "MEMORY")
    # Read through the page cache, not the memory map: every mapped page VACUUM reads would
    # stay in the process's RSS on top of the temp copy (twice the file size in all).
    mapped = int(conn.pragma("mmap_size"))
    conn.pragma("mmap_size", 0)
    if during is not None:
        conn.set_progress_handler(lambda: bool(during()), PROGRESS_STEPS)
    try:
        conn.execute("VACUUM")
    except (apsw.BusyError, apsw.FullError, apsw.SQLError) as exc:
        # Another writer holds the ledger, the disk cannot take the WAL (which grows to the
        # file's size), or this connection has a transaction or statement open: the erasure
        # stays pending and the rewrite is tried again when it is finished.
        why = ("another writer held the ledger" if isinstance(exc, apsw.BusyError) else
               "the disk is full" if isinstance(exc, apsw.FullError) else str(exc))
        return RewriteOutcome(False, before, before, f"not done ({why}); it is tried again when "
                              "the pending erasure is finished")
    finally:
        if during is not None:
            conn.set_progress_handler(None)
        conn.pragma("mmap_size", mapped)
    if vacuumed is not None:
        vacuumed()
    outcome = checkpoint_truncate(conn, db_path, delays)
    after = file_size(db_path)
    if outcome.complete:
        detail = f"VACUUM, then {outcome.detail}: {before} -> {after} bytes"
    else:
        detail = (f"{VACUUMED} {outcome.detail}; until then the old pages stay in the "
                  "database file")
    return RewriteOutcome(outcome.complete, before, after, detail)
