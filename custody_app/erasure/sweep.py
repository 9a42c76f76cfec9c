"""Retention sweeps: expire what the policy's windows (or an explicit cutoff) allow, cascading
like a forget and skipping what a legal hold protects."""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING

from custody_app.core.faults import crash_point
from custody_app.domain.commands import Sweep
from custody_app.domain.retention import cutoff_for, window_for
from custody_app.domain.timeutil import parse_time
from custody_app.erasure import rekey
from custody_app.erasure.cascade import Descendants, cascade
from custody_app.erasure.certificate import ExpiryReason, SweepResult
from custody_app.erasure.epoch import after_erasure, await_epoch, with_epoch_place
from custody_app.erasure.forget import erase
from custody_app.erasure.group import Member, erase_group
from custody_app.erasure.proof import certificate
from custody_app.erasure.scrubs import Scrubs
from custody_app.erasure.work import ErasureWork

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore


def _cutoffs(ledger: LedgerCore, cmd: Sweep) -> tuple[dict[str, str], dict[str, str]]:
    """Cutoff per space, and the window each came from (none for an explicit cutoff)."""
    if cmd.before:
        # One cutoff for every space ("*") or for the one named.
        return {cmd.space or "*": cmd.before}, {}
    spaces = [cmd.space] if cmd.space else ledger.db.erasure.spaces()
    now = parse_time(ledger.now())
    cutoffs: dict[str, str] = {}
    windows: dict[str, str] = {}
    for space in spaces:
        found = window_for(space, ledger.policy.policy.retention.windows)
        if found is not None:
            cutoffs[space] = cutoff_for(now, found[1])
            windows[space] = f"{found[0]} = {found[1]}"
    return cutoffs, windows


def _expire(ledger: LedgerCore, cmd: Sweep, cutoffs: dict[str, str], windows: dict[str, str],
            work: ErasureWork, tx_at: str, expired: list[str], held: set[str],
            reasons: dict[str, ExpiryReason], grouped: bool,
            plans: dict[str, rekey.Rekey]) -> None:
    """Each space's candidates past its cutoff, expired (a dry run only lists them); a cascade
    that reaches a held fact is skipped whole. `reasons` gets why each expires (its root).
    `grouped`: every expiry written at the end as one group (`erase_group`), which stores
    exactly what erasing each cascade in turn (`erase`) does: erasing a cascade changes no
    row another cascade reads but its own facts', which `done` already leaves out. `plans`
    gets each subject to re-key (once, however many of its facts expire)."""
    done: set[str] = set()
    members: list[Member] = []
    for space, cutoff in sorted(cutoffs.items()):
        candidates = (ledger.db.erasure.sweep_candidates_all(cutoff) if space == "*"
                      else ledger.db.erasure.sweep_candidates(space, cutoff))
        learned = ledger.db.erasure.learned_before(None if space == "*" else space, cutoff)
        # Nothing is written until the group at the end: the descendants can be read ahead.
        known = Descendants(ledger.db, candidates) if grouped else None
        for root in candidates:
            if root.fact_id in done:
                continue
            facts, root_of = cascade(ledger.db, [root], known)
            facts = [f for f in facts if f.fact_id not in done]
            blockers = [f.fact_id for f in facts if f.held]
            if blockers:
                held.update(blockers)
                continue
            done.update(f.fact_id for f in facts)
            expired += [f.fact_id for f in facts]
            why = ExpiryReason(root=root.fact_id, cutoff=cutoff, rule=windows.get(space),
                               learned_at=learned.get(root.fact_id, root.valid_from))
            reasons.update({f.fact_id: why for f in facts})
            extra = {"cutoff": cutoff, "window": windows.get(space)}
            if cmd.dry_run:
                continue
            if grouped:
                members += [(f, root_of.get(f.fact_id), extra) for f in facts]
            else:
                rekey.begin(ledger, plans, facts, tx_at)
                erase(ledger, facts, root_of, kind="expire", reason=cmd.reason,
                      actor=cmd.actor, tx_at=tx_at, work=work, extra=extra)
    rekey.begin(ledger, plans, [fact for fact, _, _ in members], tx_at)
    erase_group(ledger, members, kind="expire", reason=cmd.reason, actor=cmd.actor, tx_at=tx_at,
                work=work)


def sweep(ledger: LedgerCore, scrubs: Scrubs, cmd: Sweep, *, grouped: bool = True) -> SweepResult:
    """Expire what the cutoffs allow, then prove it. `grouped=False` erases cascade by cascade
    through `erase`, the reference the grouped writes are tested against."""
    work = ErasureWork()
    with ledger.db.read():
        cutoffs, windows = _cutoffs(ledger, cmd)
    if not cutoffs:
        return SweepResult(cutoffs={}, expired=[], held=[], dry_run=cmd.dry_run,
                           note="no retention window applies and no cutoff was given: "
                           "nothing to do")
    expired: list[str] = []
    held: set[str] = set()
    reasons: dict[str, ExpiryReason] = {}
    plans: dict[str, rekey.Rekey] = {}
    with (ledger.db.read() if cmd.dry_run else ledger.transaction()):
        tx_at = ledger.tx_at() if not cmd.dry_run else ledger.now()
        batched = nullcontext() if cmd.dry_run else ledger.index.removals_batched()
        with batched:
            _expire(ledger, cmd, cutoffs, windows, work, tx_at, expired, held, reasons, grouped,
                    plans)
        rekey.reseal_all(ledger, plans)
        if expired and not cmd.dry_run:
            crash_point("erasure.before_commit")
    if expired and not cmd.dry_run:
        crash_point("erasure.ledger_committed")
        rekey.finish(ledger, plans)
        if ledger.keys is not None:
            ledger.keys.record_mark(ledger.db.events.head())
    cert = None
    if expired and not cmd.dry_run:
        cert = certificate(ledger, "sweep", work, actor=cmd.actor, reason=cmd.reason,
                           keys_place=rekey.keys_place(plans))
        after_erasure(ledger)
        cert = with_epoch_place(ledger, cert, work.erased[-1].seq, destroyed_keys=bool(plans))
        if plans:  # it re-keyed: rotate-epoch re-issues its certificate (erasure/epoch.py)
            await_epoch(ledger, cert, work.erased[-1].seq)
        scrubs.settle(ledger, cert, work)
    return SweepResult(cutoffs=cutoffs, expired=expired, held=sorted(held), dry_run=cmd.dry_run,
                       certificate=cert, reasons=reasons)
