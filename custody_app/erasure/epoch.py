"""`custody-app rotate-epoch`: the word index key re-keyed (erasure/rotate.py), then every live
key re-wrapped under a new epoch key and the old one destroyed (custody_app.keys.epoch). What
a subject erasure destroyed is then gone from every copy taken before it (a backup, a WAL
archive, a replica, a copied file), even read with the key files that remain.

An erasure is covered by the first rotation whose recorded ledger head is at or after its last
event: until then its certificate's place for those copies is pending (on a file ledger, whose
copies are the user's own files, `unverifiable`), after it `crypto-erased` with that rotation's
time. Every erasure that destroyed keys waits for one: a subject erasure, and a forget or a
retention sweep, which re-key the subjects of what they erase (erasure/rekey.py). `erasures`
and `doctor` list the erasures still waiting for one."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from custody_app.core.faults import crash_point
from custody_app.domain.errors import LedgerError
from custody_app.domain.readmodels import ReadModel
from custody_app.domain.timeutil import format_time
from custody_app.erasure import epoch_certs
from custody_app.erasure.certificate import SERVER_COPIES as SERVER_COPIES
from custody_app.erasure.certificate import ErasureCertificate
from custody_app.erasure.epoch_place import with_epoch_place as with_epoch_place
from custody_app.erasure.receipts import erasures
from custody_app.erasure.rotate import RotateResult, index_key_place, rotate_index_key
from custody_app.keys.keyring import MASTER_ENV, master_from_env

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore



class EpochResult(ReadModel):
    """A rotation: the epoch retired and the new one, how many keys were re-wrapped, the word
    index's re-keying, and the erasures it completed (subject erasures, forgets and sweeps that
    destroyed keys; the certificates stored for them re-issued, whichever process issued them)."""

    retired: str
    epoch: str
    at: str
    seq: int
    keys: int
    seconds: float
    index: RotateResult
    completed: list[dict[str, Any]]
    certificates: list[ErasureCertificate] = []
    detail: str


def pending_erasures(core: LedgerCore) -> list[dict[str, Any]]:
    """The erasures that destroyed keys (a subject erasure; a forget or sweep that re-keyed
    its subjects) no rotation has covered yet, oldest first."""
    if core.keys is None:
        return []
    return [{"tx_at": r.tx_at, "seq": r.last_seq, "operation": r.operation,
             "subject_hash": r.subject_hash}
            for r in erasures(core).erasures if r.epoch == "pending"]


def await_epoch(core: LedgerCore, cert: ErasureCertificate, seq: int) -> None:
    """Keep the certificate of an erasure that destroyed keys (its last event `seq`) in the
    ledger for the next rotation, whichever process runs it, to re-issue
    (erasure/epoch_certs.py), unless one covered it already (the policy's after_erasure)."""
    if not any(p.outcome == "crypto-erased" for p in cert.places):
        epoch_certs.keep(core, cert, seq)


def refuse_env() -> None:
    if master_from_env() is not None:
        raise LedgerError(
            "epoch_key_in_env",
            f"rotate-epoch destroys the old epoch key, and the key here comes from "
            f"${MASTER_ENV}, which this program cannot destroy: nothing was changed. Write the "
            f"key to the ledger's master key file (mode 0600), unset ${MASTER_ENV} and run "
            "rotate-epoch again")


def rotate_epoch(core: LedgerCore, *, reissue: bool = True) -> EpochResult:
    """Re-key the word index, then re-wrap every key under a new epoch and destroy the old;
    then re-issue the stored certificates it covered (`reissue`; not in a rotation run at the
    end of an erasure, whose result is not shown: the next rotate-epoch re-issues them)."""
    if core.keys is None:
        raise LedgerError("keystore_missing", "the key store is not available")
    refuse_env()  # before anything is re-keyed
    started = time.perf_counter()
    waiting = pending_erasures(core)
    index = rotate_index_key(core)
    head = core.db.events.head()
    seq = head[0] if head else 0
    at = format_time(core.clock.now())
    rotation = core.keys.rotate_epoch(at, seq, crash_point)
    done = [e for e in waiting if e["seq"] <= seq]
    certificates, forged = (epoch_certs.reissue(core, index_key_place(index), at) if reissue
                            else ([], 0))
    return EpochResult(
        retired=str(rotation["retired"]), epoch=str(rotation["id"]), at=at, seq=seq,
        keys=int(str(rotation["keys"])), seconds=round(time.perf_counter() - started, 3),
        index=index, completed=done, certificates=certificates,
        detail=f"{rotation['keys']} live key(s) re-wrapped under the epoch {rotation['id']}; "
        f"the epoch {rotation['retired']} is destroyed, so a copy of the ledger or key store "
        f"taken before {at} no longer yields what an erasure before it destroyed; "
        f"{len(done)} erasure(s) completed by it; {len(certificates)} certificate(s) re-issued"
        + (f"; {forged} stored certificate(s) failed their MAC or matched no erasure in the "
           "chain and were dropped, not re-issued" if forged else ""))


def after_erasure(core: LedgerCore) -> EpochResult | None:
    """The policy's `rotate_epoch = "after_erasure"`: a rotation at the end of an erasure."""
    if core.policy.policy.erasure.rotate_epoch != "after_erasure" or core.keys is None:
        return None
    return rotate_epoch(core, reissue=False)
