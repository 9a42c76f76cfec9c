"""Erasure receipts: the tombstones and erasure events of a ledger (reason, counts, cascade
depth, time), and whether a given subject was erased, matched by its peppered hash."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

from custody_app.domain.errors import LedgerError
from custody_app.domain.readmodels import ReadModel
from custody_app.domain.spelling import as_held
from custody_app.erasure.epoch_place import covering
from custody_app.keys.epoch import rotations

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore


class ErasureReceipt(ReadModel):
    """One erasure transaction: a forget (with its cascade), a subject erasure or a sweep."""

    operation: Literal["forget", "forget_subject", "sweep"]
    tx_at: str
    actor: str
    reason: str
    first_seq: int
    last_seq: int
    facts: int
    derived: int
    cascade_depth: int
    roots: list[str]
    subject_hash: str | None = None
    counts: dict[str, int] | None = None
    # How many of its erased facts are still pending: a place of its certificate (a WAL
    # checkpoint a reader blocked, a server transaction older than it) is not finished yet.
    pending: int = 0
    # An erasure that destroyed keys (a subject erasure; a forget or sweep that re-keyed the
    # subjects of its facts, issue 34): `pending` while the epoch key that wrapped them is live
    # (a copy taken before still yields them), `crypto-erased` once rotate-epoch destroyed it
    # (at `epoch_destroyed_at`). None for an erasure that destroyed no key (a forget or sweep
    # by code older than the re-key, or of a subject that had no key).
    epoch: Literal["pending", "crypto-erased"] | None = None
    epoch_destroyed_at: str | None = None


class SubjectErasure(ReadModel):
    subject_hash: str
    erased: bool
    at: str | None = None
    seq: int | None = None
    reason: str | None = None


class ErasuresResult(ReadModel):
    erasures: list[ErasureReceipt]
    tombstones: int
    subject: SubjectErasure | None = None
    # Erasures whose epoch key is still live (`custody-app rotate-epoch` completes them).
    pending_epochs: int = 0

    def render(self) -> str:
        lines = [f"{len(self.erasures)} erasure(s), {self.tombstones} subject tombstone(s)"]
        if self.pending_epochs:
            lines.append(f"{self.pending_epochs} erasure(s) pending on a live epoch key "
                         "(copies taken before still yield what they destroyed): run "
                         "`custody-app rotate-epoch`")
        for r in self.erasures:
            who = f" subject {r.subject_hash}" if r.subject_hash else ""
            lines.append(
                f"  {r.tx_at} {r.operation}{who} by {r.actor}, reason {r.reason}: {r.facts} "
                f"fact(s) ({r.derived} derived, cascade depth {r.cascade_depth}), seq "
                f"{r.first_seq}-{r.last_seq}" + (f", counts {json.dumps(r.counts)}" if r.counts
                                                 else "")
                + (f", PENDING for {r.pending} fact(s)" if r.pending else "")
                + (f", epoch {r.epoch}" + (f" at {r.epoch_destroyed_at}"
                                           if r.epoch_destroyed_at else "") if r.epoch else ""))
        if self.subject is not None:
            s = self.subject
            lines.append(f"subject {s.subject_hash}: " + (
                f"ERASED at {s.at} (seq {s.seq}, reason {s.reason})" if s.erased
                else "no erasure of this subject is recorded"))
        return "\n".join(lines)


def _depths(core: LedgerCore, facts: dict[str, str | None]) -> int:
    """How many layers of derivation the cascade went through (0: only roots were erased)."""
    reached = {f for f, root in facts.items() if root is None}
    left = {f for f, root in facts.items() if root is not None}
    depth = 0
    while left:
        layer = {d for d in left if set(core.db.facts.sources_of(d)) & reached}
        if not layer:
            break  # reached by another relation than sources (a supersession): not a layer
        depth += 1
        reached |= layer
        left -= layer
    return depth


def erasures(core: LedgerCore, subject: str | None = None) -> ErasuresResult:
    """Every erasure, grouped by transaction, oldest first; with `subject`, whether it was
    erased (its peppered hash against the tombstones: the plaintext is never stored)."""
    with core.db.read():
        rows = sorted((seq, json.loads(body)) for kind in ("forget", "expire", "forget_subject")
                      for seq, body in core.db.erasure.events_of_kind(kind))
        tombstones = core.db.erasure.tombstones()
        pending = {fact_id for fact_id, _since in core.db.erasure.pending()}
        receipts = [_receipt(core, group, pending) for group in _transactions(rows)]
        refs = _first_refs(core, receipts)
        if subject is not None:
            if core.keys is None:
                raise LedgerError("keystore_missing", "the key store is needed to match a subject")
            keys, erased = core.keys, {t[1] for t in tombstones}
            # As `doctor` shows one the door now refuses (acct:1042\u200b), as forget_subject
            # takes it: the subject erased or still held under that spelling.
            subject = as_held(subject, lambda s: keys.subject_ref(s) in erased
                              or bool(core.db.erasure.facts_of_subject(s)))
    receipts = _with_epochs(core, receipts, refs)
    found = None
    if subject is not None and core.keys is not None:
        ref = core.keys.subject_ref(subject)
        hit = next((t for t in tombstones if t[1] == ref), None)
        found = SubjectErasure(subject_hash=ref, erased=hit is not None,
                               at=hit[4] if hit else None, seq=hit[0] if hit else None,
                               reason=hit[2] if hit else None)
    return ErasuresResult(erasures=receipts, tombstones=len(tombstones), subject=found,
                          pending_epochs=sum(1 for r in receipts if r.epoch == "pending"))


def _first_refs(core: LedgerCore, receipts: list[ErasureReceipt]) -> dict[int, str]:
    """Inside a read: the subject ref of one erased fact of each forget and sweep (by its
    first seq). Such an erasure re-keys every subject of its facts at once (erasure/rekey.py),
    so one fact tells whether it destroyed keys."""
    out: dict[int, str] = {}
    for r in receipts:
        if r.operation == "forget_subject" or not r.roots:
            continue
        fact = core.db.facts.get(r.roots[0])
        event = core.db.events.get(fact.assert_seq) if fact is not None else None
        ref = json.loads(event.body).get("subject_ref") if event is not None else None
        if isinstance(ref, str):
            out[r.first_seq] = ref
    return out


def _destroyed_keys(core: LedgerCore, r: ErasureReceipt, refs: dict[int, str]) -> bool:
    """A subject erasure destroys its subject's keys; a forget or sweep destroyed a key when
    its re-key retired a generation of its facts' subject at its instant (read back from the
    key store: not for one cut short before its retirement, until the next open finishes it)."""
    if r.operation == "forget_subject":
        return True
    assert core.keys is not None
    ref = refs.get(r.first_seq)
    return ref is not None and core.keys.store.destroyed_at(ref, r.tx_at)


def _with_epochs(core: LedgerCore, receipts: list[ErasureReceipt],
                 refs: dict[int, str]) -> list[ErasureReceipt]:
    """Each erasure that destroyed keys with its epoch's state (see erasure/epoch.py)."""
    if core.keys is None:
        return receipts
    done = rotations(core.keys.store)
    out = []
    for r in receipts:
        if _destroyed_keys(core, r, refs):
            found = covering(done, r.last_seq)
            r = r.model_copy(update={"epoch": "crypto-erased" if found else "pending",
                                     "epoch_destroyed_at": found.get("at") if found else None})
        out.append(r)
    return out


def _transactions(rows: list[tuple[int, dict[str, Any]]]) -> list[list[tuple[int, dict[str, Any]]]]:
    """Erasure events (in seq order) cut into erasures: a sweep is its expire events of one
    instant and actor; a forget starts at its root's event (no `root`) and takes the derived
    ones after it; a subject erasure runs to its forget_subject event."""
    groups: list[list[tuple[int, dict[str, Any]]]] = []
    for seq, event in rows:
        cur = groups[-1] if groups else None
        same = cur is not None and (cur[-1][1]["tx_at"], cur[-1][1]["actor"]) == (
            event["tx_at"], event["actor"]) and cur[-1][1]["kind"] != "forget_subject"
        if not same or cur is None:
            groups.append([(seq, event)])
        elif event["kind"] == "expire" or event["kind"] == "forget_subject" or event.get("root"):
            cur.append((seq, event))
        elif "subject_hash" in event and all("subject_hash" in e or e.get("root") for _, e in cur):
            cur.append((seq, event))
        else:
            groups.append([(seq, event)])
    return groups


def _receipt(core: LedgerCore, rows: list[tuple[int, dict[str, Any]]],
             pending: set[str]) -> ErasureReceipt:
    first = rows[0][1]
    tx_at, actor = str(first["tx_at"]), str(first["actor"])
    operation = "sweep" if first["kind"] == "expire" else "forget"
    subject_row = next((e for _, e in rows if e["kind"] == "forget_subject"), None)
    facts = {str(e["fact_id"]): (str(e["root"]) if e.get("root") else None)
             for _, e in rows if e.get("fact_id")}
    counts = subject_row.get("counts") if subject_row else None
    return ErasureReceipt(
        operation="forget_subject" if subject_row else operation,  # type: ignore[arg-type]
        tx_at=tx_at, actor=actor, reason=str(rows[0][1].get("reason")),
        first_seq=rows[0][0], last_seq=rows[-1][0], facts=len(facts),
        derived=sum(1 for r in facts.values() if r), cascade_depth=_depths(core, facts),
        roots=sorted({r for r in facts.values() if r} | {f for f, r in facts.items() if not r}
                     if not subject_row else set()),
        subject_hash=str(subject_row["subject_hash"]) if subject_row else None,
        counts=counts if isinstance(counts, dict) else None, pending=len(set(facts) & pending))
