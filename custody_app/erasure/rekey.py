"""Re-keying a subject whose facts an erasure took (issue 34). A forget, a sweep or a cascade
that erases facts of a subject that keeps other facts cannot destroy the subject's data key:
its other facts use it, and with it a copy of the ledger taken before the erasure (a backup,
a WAL archive, a replica) still opens the erased value. So the erasure re-keys the subject:

1. inside the erasure's transaction, a new key generation N+1 is made (the key store commits
   before the ledger, so no re-sealed value ever lacks its key), every surviving sealed value
   and free text of the subject under an older generation is sealed again under N+1 (same
   plaintext, same binding; the chain holds only salted commitments, so it still verifies),
   and the intent "retire the subject's generations below N+1" is recorded in the ledger;
2. after the ledger commits, the key store destroys those generations, and the intent goes.

A crash between the ledger's commit and the key store's destruction leaves the intent; the
next read-write open completes it (`roll_forward`). Until then every reader opens the
re-sealed values with N+1, and the old generations open only what the erased copies hold. A
subject is re-keyed once per erasure, however many of its facts it takes."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from custody_app.core.faults import crash_point
from custody_app.erasure.certificate import PlaceCheck
from custody_app.keys import crypto
from custody_app.keys.keyring import KeyRing
from custody_app.keys.subject_ids import SubjectIdCodec
from custody_app.keys.values import reseal, text_bind
from store.rows import FactRow

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore

# ledger_meta: the re-keys whose old generations the key store has yet to destroy, as JSON
# {subject ref: [the generation the values were re-sealed under, the erasure's time]}.
PENDING = "rekey_pending"


@dataclass
class Rekey:
    """One subject's re-key within an erasure."""

    ref: str
    subject: str
    generation: int  # the new generation, N+1
    at: str  # the erasure's time: the old generations' destruction time
    values: int = 0  # sealed values re-sealed under it
    texts: int = 0  # sealed free texts re-sealed under it
    retired: int = 0  # older generations destroyed
    subject_id: int = 0  # 1 when its sealed id (a server ledger's) was re-sealed under it

    def detail(self) -> str:
        sealed_id = " (its sealed id too)" if self.subject_id else ""
        return (f"subject {self.ref[:12]}...: key generation {self.generation - 1} destroyed "
                f"({self.retired} generation(s) in all), {self.values} value(s) and "
                f"{self.texts} free text(s) re-sealed under generation {self.generation}"
                + sealed_id)


def begin(ledger: LedgerCore, plans: dict[str, Rekey], facts: Iterable[FactRow], now: str, *,
          skip: str | None = None) -> None:
    """Inside the erasure's transaction, before it erases: a new key generation for each
    subject of `facts` not in `plans` yet (`skip`: a subject whose keys the erasure destroys
    whole, forget_subject's own)."""
    if ledger.keys is None:
        return
    for fact in facts:
        if fact.subject is None:
            continue
        ref = ledger.keys.subject_ref(fact.subject)
        if ref == skip or ref in plans:
            continue
        plans[ref] = Rekey(ref, fact.subject, ledger.keys.rekey_begin(ref, now), now)


def reseal_all(ledger: LedgerCore, plans: dict[str, Rekey]) -> None:
    """Inside the erasure's transaction, after it erased: every surviving sealed value and
    free text of each re-keyed subject sealed again under its new generation, and the intent
    recorded. A blob that no longer opens (tampered) stays as it is: verify names it."""
    if not plans or ledger.keys is None:
        return
    keys, db = ledger.keys, ledger.db
    ids = SubjectIdCodec(keys)
    for plan in plans.values():
        key = keys.key_for_read(plan.ref, plan.generation)
        assert key is not None  # made by begin() in this transaction
        facts = db.erasure.facts_of_subject(plan.subject)
        events = db.events.get_many([f.assert_seq for f in facts])
        values: list[tuple[int, bytes]] = []
        for fact in facts:
            blob = events[fact.assert_seq].value
            if blob is not None:
                sealed = _again(keys, plan, bytes(blob), fact.fact_id, key)
                if sealed is not None:
                    values.append((fact.assert_seq, sealed))
        texts: list[tuple[int, bytes]] = []
        for fact_id, rows in db.texts.of_facts([f.fact_id for f in facts]).items():
            for seq, blob in rows:
                if blob is not None:
                    sealed = _again(keys, plan, blob, text_bind(fact_id), key)
                    if sealed is not None:
                        texts.append((seq, sealed))
        db.events.reseal_values(values)
        db.texts.reseal(texts)
        plan.values, plan.texts = len(values), len(texts)
        # On a server the subject's id is sealed too (store.postgres.subjects): under N+1 now,
        # or the retirement of N would leave it unreadable.
        plan.subject_id = db.reseal_subject(
            plan.ref, partial(ids.reseal, plan.ref, generation=plan.generation))
    # The intents of this process's earlier re-keys go too (on a server, whose certificates
    # stay pending, no cleanup of pending rows comes to take them).
    pending = _without_done(ledger, _pending(ledger))
    pending.update({plan.ref: [plan.generation, plan.at] for plan in plans.values()})
    db.put_meta(PENDING, json.dumps(pending, sort_keys=True))


def _again(keys: KeyRing, plan: Rekey, blob: bytes, bind: str, key: bytes) -> bytes | None:
    try:
        return reseal(keys, plan.ref, blob, bind, plan.generation, key)
    except crypto.DecryptError:
        return None


def _pending(ledger: LedgerCore) -> dict[str, list[object]]:
    raw = ledger.db.meta(PENDING)
    found = json.loads(raw) if raw else {}
    return found if isinstance(found, dict) else {}


def finish(ledger: LedgerCore, plans: dict[str, Rekey]) -> None:
    """After the ledger committed: the key store destroys the old generations. The intent
    leaves the ledger with the erasure's next ledger write (`clear_intents`, in the pending
    rows' cleanup after the proof: no write of its own between the commit and the proof's
    checkpoint); a crash before that is completed by `roll_forward`."""
    if not plans or ledger.keys is None:
        return
    retired = _retire(ledger, {p.ref: [p.generation, p.at] for p in plans.values()})
    for plan in plans.values():
        plan.retired = retired.get(plan.ref, 0)
        ledger.rekeys_retired[plan.ref] = plan.generation


def _retire(ledger: LedgerCore, todo: dict[str, list[object]]) -> dict[str, int]:
    assert ledger.keys is not None
    retired: dict[str, int] = {}
    with ledger.keys.store.write():
        for ref, (generation, at) in sorted(todo.items()):
            retired[ref] = ledger.keys.retire(ref, int(str(generation)), str(at))
    crash_point("rekey.keys_retired")
    return retired


def clear_intents(ledger: LedgerCore) -> None:
    """Inside a ledger write: drop the intents of the re-keys this process finished (an
    intent recorded since for a newer generation stays)."""
    if not ledger.rekeys_retired:
        return
    pending = _pending(ledger)
    left = _without_done(ledger, pending)
    if left != pending:
        ledger.db.put_meta(PENDING, json.dumps(left, sort_keys=True) if left else None)


def _without_done(ledger: LedgerCore, pending: dict[str, list[object]]) -> dict[str, list[object]]:
    done, ledger.rekeys_retired = ledger.rekeys_retired, {}
    return {ref: entry for ref, entry in pending.items()
            if ref not in done or int(str(entry[0])) > done[ref]}


def unfinished(ledger: LedgerCore) -> dict[str, list[object]]:
    """The recorded re-keys whose old generations the key store still holds (by subject ref:
    [generation, time]); an intent whose generations are destroyed already is done."""
    if ledger.keys is None:
        return {}
    out = {}
    for ref, entry in _pending(ledger).items():
        below = ledger.keys.store.generation(ref, int(str(entry[0])) - 1)
        if below is not None and below[1] is not None:
            out[ref] = entry
    return out


def roll_forward(ledger: LedgerCore) -> int:
    """At a read-write open: complete every re-key cut short after its ledger committed, and
    drop every intent."""
    with ledger.db.read():
        todo = _pending(ledger)
    if not todo or ledger.keys is None:
        return 0
    _retire(ledger, todo)
    with ledger.db.write():
        # Only what was retired here: another process may have recorded a re-key since.
        ledger.rekeys_retired = {ref: int(str(entry[0])) for ref, entry in todo.items()}
        clear_intents(ledger)
    return len(todo)


def keys_place(plans: dict[str, Rekey], *,
               place: str = "key store: the subject's data key") -> PlaceCheck:
    """The certificate's key place for an erasure that re-keyed its subjects."""
    if not plans:
        return PlaceCheck(place=place, outcome="not_applicable",
                          detail="no subject keeps facts sealed under a key the erased facts "
                          "used")
    return PlaceCheck(
        place=place, outcome="clean",
        detail="; ".join(plan.detail() for plan in sorted(plans.values(), key=lambda p: p.ref))
        + ": copies of the ledger made before this erasure can no longer be decrypted for "
        "the erased facts with any key the key store still holds")
