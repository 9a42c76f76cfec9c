"""The proof step of an erasure: the places checked after its transaction, and the certificate."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, cast

from custody_app.core.faults import crash_point
from custody_app.domain.timeutil import format_time
from custody_app.erasure.certificate import ErasureCertificate, Outcome, PlaceCheck
from custody_app.erasure.hits import classify
from custody_app.erasure.rewrites import REWRITE_PLACE, rewrite
from custody_app.erasure.work import MIN_SCAN_BYTES, ErasureWork, keyed_needles
from store.rows import VACUUMED

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore
    from store import ManyPlan
    from store.rows import RewriteOutcome

ERASED = ("forgotten", "expired")


def places(ledger: LedgerCore, work: ErasureWork, *, keys_place: PlaceCheck) -> list[PlaceCheck]:
    """Check every place the values could be, after the transaction committed."""
    if work.keyed:  # the keyed words no live index row holds (the erasure removed its rows)
        # One count per word through the port (an FTS5 phrase query here found nothing on a
        # server, so every word a live fact still has became a needle found in live rows).
        held = ledger.db.recall.doc_freq([k.decode("ascii") for k in work.keyed]) or {}
        keyed_needles(work, lambda term: held.get(term, 0) > 0)
    checks = row_places(ledger, work, keys_place=keys_place)
    # Built while the background pass over the erasure's WAL may still run (no commit waits for
    # one: `Checkpointer.before_write`); the checkpoint below waits for it.
    plan = ledger.db.locate.plan(work.needles)
    outcome = ledger.db.wal_checkpoint()
    crash_point("erasure.checkpointed")
    checks.append(PlaceCheck(
        place="WAL checkpoint (TRUNCATE)", outcome="clean" if outcome.complete else "pending",
        detail=f"{outcome.detail} ({outcome.attempts} attempt(s))"))
    scans = scan_places(ledger, work, checkpoint_done=outcome.complete, plan=plan)
    checks += rewrite_if_residue(ledger, work, scans, plan) if outcome.complete else scans
    return checks


def row_places(ledger: LedgerCore, work: ErasureWork, *,
               keys_place: PlaceCheck) -> list[PlaceCheck]:
    """The rows of the erased facts (value, sealed text, projection, recall), the key store
    and the operation's own checks: what needs no byte of the erased values."""
    checks: list[PlaceCheck] = []
    # One statement a check: a sweep erases tens of thousands of facts.
    missing = ledger.db.events.missing([e.seq for e in work.erased])
    ids = [e.fact_id for e in work.erased]
    ends = ledger.db.facts.ends_of(ids)
    asserts = [ends[fact_id] for fact_id in ids if fact_id in ends]  # (assert seq, ended)
    holding = ledger.db.events.holding_value([seq for seq, _ in asserts])
    left = sum(1 for seq, _ in asserts if seq in holding)
    checks.append(PlaceCheck(
        place="events table: value and salt of each assert",
        outcome="clean" if left == 0 and not missing else "found",
        detail=f"{len(work.erased)} assert(s) hold no value and no salt" if left == 0
        else f"{left} assert(s) still hold a value"))
    sealed = ledger.db.texts.still_sealed(list(dict.fromkeys(ids)))
    kept = [f"seq {seq}" for fact_id in ids for seq in sealed.get(fact_id, ())]
    checks.append(PlaceCheck(
        place="event_texts: sealed free text (cause, reasons) of each erased fact",
        outcome="found" if kept else "clean",
        detail="none holds sealed text any more" if not kept else f"still sealed: {', '.join(kept)}"))
    bad = [fact_id for fact_id in ids if fact_id in ends and ends[fact_id][1] not in ERASED]
    checks.append(PlaceCheck(
        place="facts projection", outcome="found" if bad else "clean",
        detail="every erased fact is forgotten or expired; no value is kept there" if not bad
        else f"still live: {', '.join(bad)}"))
    if ledger.db.recall.exists():
        indexed = ledger.db.recall.which_indexed([seq for seq, _ in asserts])
        # The in-process copy of the vectors too: it must have dropped them in the erasure.
        stale = [fact_id for fact_id in ids if fact_id in ends and (
            (seq := ends[fact_id][0]) in indexed or ledger.index.matrix.holds(seq))]
        checks.append(PlaceCheck(
            place=f"recall indexes ({ledger.db.recall.engines().places}, its in-process copy)",
            outcome="found" if stale else "clean",
            detail="no erased fact is indexed (its rows removed in the erasure's transaction)"
            if not stale else f"still indexed: {', '.join(stale)}"))
    else:
        checks.append(PlaceCheck(place=f"recall indexes ({ledger.db.recall.engines().places})",
                                 outcome="not_applicable", detail="this ledger has no recall index"))
    checks.append(keys_place)
    checks += work.notes
    checks += server_places(ledger, work)
    return checks


def server_places(ledger: LedgerCore, work: ErasureWork) -> list[PlaceCheck]:
    """The places the store checks itself beyond the rows (a server's snapshots and old row
    versions, searched for the erased strings; none on SQLite, whose files are scanned)."""
    return [PlaceCheck(place=place, outcome=cast(Outcome, outcome), detail=detail)
            for place, outcome, detail in ledger.db.places_beyond_scan(work.needles)]


def residue_of(scans: list[PlaceCheck]) -> tuple[int, int]:
    """(strings, copies) the scans found where no live row holding those bytes explains them."""
    hits = [h for p in scans if p.place.startswith("byte scan") for h in p.hits if h.residue]
    return len(hits), sum(h.residue for h in hits)


def rewrite_if_residue(ledger: LedgerCore, work: ErasureWork, scans: list[PlaceCheck],
                       plan: ManyPlan | None = None) -> list[PlaceCheck]:
    """After a complete checkpoint: when the scans found erased bytes no live row explains
    (residue SQLite leaves in a rebuilt page's unallocated space, which secure_delete does not
    zero), rewrite the file from its live rows and scan it again; otherwise the scans as they
    are. Bytes a live row holds (`shared`, or a leaking row) are not residue: a rewrite keeps
    them, so they never cause one. One rewrite per proof: what it leaves is reported."""
    strings, copies = residue_of(scans)
    if not strings:
        return scans
    done = rewrite(ledger, f"the byte scan found {strings} erased string(s) in space no live "
                   "row explains")
    place = PlaceCheck(
        place=REWRITE_PLACE, outcome="clean" if done.complete else "pending",
        detail=f"the first scan found {strings} erased string(s) ({copies} copies) in space no "
        f"live row explains (left by SQLite when it rebuilt pages); rewritten: {done.detail}")
    return [place, *scan_places(ledger, work, checkpoint_done=done.complete, plan=plan)]


def scan_places(ledger: LedgerCore, work: ErasureWork, *, checkpoint_done: bool,
                plan: ManyPlan | None = None) -> list[PlaceCheck]:
    """The byte scan of each file, each string still found located and classified (`plan`:
    the search for these needles, prepared ahead)."""
    out: list[PlaceCheck] = []
    found = ledger.db.locate.find(work.needles, plan)
    hits = classify(ledger, work, {p: f for p, f in found.items() if f}) if any(
        found.values()) else {}
    for path in found:
        listed = hits.get(path, [])
        leaks = sum(1 for h in listed if h.classification == "leak")
        if not listed:
            out.append(PlaceCheck(place=f"byte scan of {path}", outcome="clean",
                                  detail=f"none of {len(work.needles)} erased byte string(s) "
                                  "(sealed values, their JSON and strings) found"))
            continue
        if not checkpoint_done:
            outcome: Outcome = "pending"
        else:
            outcome = "found" if leaks else "shared"
        detail = (f"{len(listed)} of {len(work.needles)} erased byte string(s) still present: "
                  f"{leaks} leak(s), {len(listed) - leaks} shared with live records not derived "
                  "from the erased facts (listed below with where)")
        if not checkpoint_done:
            detail += "; expected until the checkpoint completes"
        out.append(PlaceCheck(place=f"byte scan of {path}", outcome=outcome, detail=detail,
                              hits=listed))
    if work.short_values:
        out.append(PlaceCheck(
            place="byte scan of short values", outcome="unverifiable",
            detail=f"{work.short_values} value(s) shorter than {MIN_SCAN_BYTES} bytes as JSON: a "
            "scan cannot tell them from unrelated bytes (their sealed form was scanned)"))
    return out


def certificate(ledger: LedgerCore, operation: Literal["forget", "forget_subject", "sweep"],
                work: ErasureWork, *, actor: str, reason: str, root: str | None = None,
                subject_hash: str | None = None, keys_place: PlaceCheck) -> ErasureCertificate:
    """The proof step, after the erasure's transaction committed: check every place."""
    checks = places(ledger, work, keys_place=keys_place)
    complete = all(p.outcome not in ("pending", "found") for p in checks)
    cert = ErasureCertificate(
        operation=operation, issued_at=format_time(ledger.clock.now()), actor=actor,
        reason=reason, ledger=ledger.db.path, root=root, subject_hash=subject_hash,
        erased=work.erased, cascade=[e.fact_id for e in work.erased if e.root], places=checks,
        complete=complete, rewritten=was_rewritten(checks))
    return cert


# A certificate issued again by another process (erasure/completion.py) no longer knows the
# re-key's counts: what the erasure did to the key, in general (erasure/rekey.py).
SUBJECT_REKEYED = PlaceCheck(
    place="key store: the subject's data key", outcome="clean",
    detail="re-keyed: the subject's other facts were re-sealed under a new key generation and "
    "the generations the erased facts used destroyed once the ledger committed (a re-key cut "
    "short is completed at the next read-write open)")


def reissue(ledger: LedgerCore, cert: ErasureCertificate, work: ErasureWork,
            rewritten: RewriteOutcome | None = None) -> ErasureCertificate:
    """The certificate again once a pending checkpoint completed: checkpoint and scans redone.
    `rewritten`: the file rewrite the finish did first (a rewrite was due)."""
    # The store's own places checked again (a server: the snapshot that held them may be gone).
    fresh = {p.place: p for p in server_places(ledger, work)}
    kept = [fresh.get(p.place, p) for p in cert.places
            if not p.place.startswith(("WAL checkpoint", "byte scan", REWRITE_PLACE))]
    checks = kept + [PlaceCheck(place="WAL checkpoint (TRUNCATE)", outcome="clean",
                                detail="completed after the reader that blocked it closed")]
    if rewritten is not None:
        checks.append(PlaceCheck(place=REWRITE_PLACE, outcome="clean", detail=(
            f"a rewrite was due when the erasure was finished: {rewritten.detail}")))
    else:
        # A rewrite whose checkpoint a reader blocked is complete now that the checkpoint is;
        # one that never ran (a busy writer, a full disk) is not: the scans below find the
        # residue again and rewrite.
        checks += [p.model_copy(update={"outcome": "clean", "detail": p.detail + "; its "
                                        "checkpoint completed after the reader that blocked it "
                                        "closed"})
                   for p in cert.places if p.place == REWRITE_PLACE and p.outcome == "pending"
                   and VACUUMED in p.detail]
    checks += rewrite_if_residue(ledger, work, scan_places(ledger, work, checkpoint_done=True))
    complete = all(p.outcome not in ("pending", "found") for p in checks)
    return cert.model_copy(update={"places": checks, "complete": complete,
                                   "rewritten": cert.rewritten or was_rewritten(checks),
                                   "issued_at": format_time(ledger.clock.now())})


def was_rewritten(checks: list[PlaceCheck]) -> bool:
    return any(p.place == REWRITE_PLACE and p.outcome == "clean" for p in checks)
