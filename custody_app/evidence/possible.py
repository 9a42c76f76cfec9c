"""Blast radius, what is possible beside what is known (issue 32): the sessions with no
recorded read that could have read a fact (INCOMPLETE), and every other session of the ledger
counted as ruled out, per reason."""

from __future__ import annotations

from typing import TYPE_CHECKING

from custody_app.evidence.readmodels import Reason, RuledOut
from store.rows import FactRow

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore


# Why a session that is neither served the fact nor INCOMPLETE is left out of its blast radius.
RULED_OUT: dict[Reason, str] = {
    "reads_recorded": "its recorded reads never returned the fact or a fact reached from it",
    "not_active_while_believed": "no recorded reads, and no write or action while the fact "
                                 "was believed",
    "unrelated": "no recorded reads, and while the fact was believed it wrote or acted on "
                 "neither the fact's subject nor its space",
}
_NO_END = 1 << 62


def possible_sessions(ledger: LedgerCore, root: FactRow,
                      served: set[str]) -> tuple[list[str], list[RuledOut]]:
    """The sessions that could have read `root` without a recorded read (INCOMPLETE): no read
    recorded, a write or action while it was believed (after its assert, before whatever ended
    it), and one of those about its subject or in its space (an action naming its subject).
    Every other session of the ledger is counted as ruled out, per reason."""
    db = ledger.db
    after = root.assert_seq
    before = root.ended_seq if root.ended is not None and root.ended_seq is not None else _NO_END
    with_reads, without = db.sessions.session_counts()
    possible: list[str] = []
    inactive = without
    unrelated = 0
    subject_ref: str | None = None
    for name, active, touching in db.sessions.unread_in_window(after, before, root.subject,
                                                                root.space):
        if not active:
            continue  # counted in `inactive` already
        inactive -= 1
        if not touching:
            # An action names its subject by the peppered hash: computed only when an action
            # carries one (the pepper then exists, so a read never creates it).
            refs = db.sessions.action_subjects(name, after, before)
            if refs and ledger.keys is not None:
                subject_ref = subject_ref or ledger.keys.subject_ref(root.subject)
                touching = subject_ref in refs
        if touching:
            possible.append(name)
        else:
            unrelated += 1
    counts: dict[Reason, int] = {"reads_recorded": with_reads - len(served),
              "not_active_while_believed": inactive, "unrelated": unrelated}
    return possible, [RuledOut(reason=k, sessions=n, why=RULED_OUT[k])
                      for k, n in counts.items() if n]

