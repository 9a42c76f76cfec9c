"""Actions you can search: by tool, actor, session, subject and time, over the actions index."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from custody_app.domain.commands import Actions
from custody_app.domain.errors import LedgerError
from custody_app.evidence.readmodels import ActionsResult, ListedAction

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore


def search_actions(ledger: LedgerCore, cmd: Actions) -> ActionsResult:
    """A page of the actions matching every given filter, newest first."""
    subject_ref = None
    if cmd.subject is not None:
        if ledger.keys is None:
            raise LedgerError("keystore_missing", "searching by subject needs the key store (the "
                              "subject is recorded by its peppered hash)")
        subject_ref = ledger.keys.subject_ref(cmd.subject)
    db = ledger.db
    with db.read():
        seqs = db.actions.search(tool=cmd.tool, actor=cmd.actor, session=cmd.session,
                                 subject_ref=subject_ref, since=cmd.since, until=cmd.until,
                                 before_seq=cmd.before_seq, limit=cmd.limit + 1)
        rows = db.sessions.events_by_seq(seqs[:cmd.limit])
    listed = []
    for seq, _kind, tx_at, actor, body_text, _hash in sorted(rows, reverse=True):
        body = json.loads(body_text)
        receipt = body.get("receipt") or {}
        listed.append(ListedAction(
            seq=seq, tx_at=tx_at, tool=body["tool"], ref=body["ref"], outcome=body["outcome"],
            actor=actor, session=body["session"], subject_ref=body.get("subject_ref"),
            receipt_id=receipt.get("receipt_id"), principal=receipt.get("principal"),
            grant=receipt.get("grant")))
    more = len(seqs) > cmd.limit
    return ActionsResult(actions=listed, next_before_seq=listed[-1].seq if more and listed else None)
