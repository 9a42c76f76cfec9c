"""Where an erasure's bytes are still found, and whose they are: `leak` or `shared` per string."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from custody_app.domain.lifecycle import erased_subject
from custody_app.erasure.certificate import ScanHit
from store import db_page, wal_page
from store.rows import Holder

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore
    from custody_app.erasure.work import ErasureWork

# Identifiers of an erased fact that stay by design after forget and sweep (forget_subject
# removes the subject): a value string inside one is there as the identifier, not as the value.
IDENTIFIERS = {("events", "subject"), ("facts", "subject"), ("facts", "space"),
               ("facts", "predicate"), ("facts", "session"), ("events", "actor"), ("facts", "actor")}
# Rows and offsets listed per string: the rest are counted, so a common word cannot flood it.
SHOWN = 8


def _printable(text: str) -> str:
    """Stored strings shown with control characters escaped, so none can drive a terminal."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)


def describe(needle: bytes, label: str) -> str:
    """The string as the certificate names it: where it came from, its size and a digest
    prefix, never its bytes (the certificate must not repeat what was erased)."""
    digest = hashlib.sha256(needle).hexdigest()[:12]
    return f"{label} ({len(needle)} bytes, sha256 {digest})"


def _holder_text(h: Holder, leak: bool) -> str:
    about = f"; about fact {h.fact_id}" if h.fact_id else ""
    why = (" (the erased fact, a derived one or the erased subject)" if leak else
           " (an identifier of the erased fact, kept by design)" if (h.table, h.column) in IDENTIFIERS
           else "")
    return _printable(f"table {h.table} row {h.key}, column {h.column}{about}{why}")


def _leaks(h: Holder, erased: set[str], subject: str | None,
           erased_name: str | None = None) -> bool:
    """A row of the erased facts; for forget_subject, any row of the subject, by its plaintext
    id or by what stands for it once erased (its facts erased earlier, or by a first try):
    the subject's own rows are never a live record to share bytes with."""
    if subject is not None:
        return h.fact_id in erased or h.subject == subject or (
            erased_name is not None and h.subject == erased_name)
    return h.fact_id in erased and (h.table, h.column) not in IDENTIFIERS


def classify(ledger: LedgerCore, work: ErasureWork,
             found: dict[str, dict[int, list[int]]]) -> dict[str, list[ScanHit]]:
    """Per file, one ScanHit per erased string still there. A string is a leak when a row of
    the erased facts (or, for forget_subject, of the subject) holds it, or when a copy of it
    sits in a page no live row holding it explains (a free page, a stale index cell)."""
    erased = {e.fact_id for e in work.erased}
    erased_name = (erased_subject(ledger.keys.subject_ref(work.subject))
                   if work.subject is not None and ledger.keys is not None else None)
    page_size = ledger.db.locate.page_size()
    pages: dict[tuple[str, int], int] = {}
    frames: dict[tuple[str, int], int] = {}
    for path, per_needle in found.items():
        is_wal = path.endswith("-wal")
        for offsets in per_needle.values():
            for off in offsets:
                if not is_wal:
                    pages[(path, off)] = db_page(off, page_size)
                elif (located := wal_page(path, off, page_size)) is not None:
                    frames[(path, off)], pages[(path, off)] = located
    names = ledger.db.locate.page_names(set(pages.values())) if pages else {}
    holders = ledger.db.locate.holders(list(dict.fromkeys(
        work.needles[i] for per_needle in found.values() for i in per_needle)))
    out: dict[str, list[ScanHit]] = {}
    for path, per_needle in found.items():
        for i, offsets in sorted(per_needle.items()):
            needle = work.needles[i]
            rows = holders[needle]
            leaking = [h for h in rows if work.leaked_before
                       or _leaks(h, erased, work.subject, erased_name)]
            tables = {h.table for h in rows}
            residue = [off for off in offsets if names.get(pages.get((path, off), -1)) not in tables]
            where = [_holder_text(h, h in leaking) for h in rows[:SHOWN]]
            if len(rows) > SHOWN:
                where.append(f"... and {len(rows) - SHOWN} more row(s)")
            for off in residue[:SHOWN]:
                page = pages.get((path, off))
                frame = f"WAL frame {frames[(path, off)]}, " if (path, off) in frames else ""
                where.append(f"offset {off} ({frame}page {page}: {names.get(page or -1, 'unknown')}"
                             "; no live row holding these bytes explains it)")
            out.setdefault(path, []).append(ScanHit(
                string=describe(needle, work.labels[i]),
                classification="leak" if leaking or residue or work.leaked_before
                else "shared",
                file=path, where=where, residue=len(residue)))
    return out
