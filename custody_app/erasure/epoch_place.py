"""The erasure certificate's place for copies taken before an erasure (a backup, a WAL
archive, a replica, a copy of the files): pending (or, for a file ledger's copies, which are the
user's own files, unverifiable) while the epoch key that wrapped the keys the erasure destroyed
is live; crypto-erased once rotate-epoch destroyed it. Apart from erasure/epoch.py (the
rotation itself), so the erasure modules that compute this place import nothing that imports
them back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from custody_app.erasure.certificate import (
    FILE_COPIES,
    SERVER_COPIES,
    VECTOR_COPIES,
    ErasureCertificate,
    PlaceCheck,
)
from custody_app.keys import epoch as epochs
from store.address import address_of

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore


def copies_place_name(core: LedgerCore) -> str:
    return SERVER_COPIES if address_of(core.db.path).own_file() is None else FILE_COPIES


def covering(rotations: list[dict[str, Any]], seq: int) -> dict[str, Any] | None:
    """The first rotation made once the ledger's head was at or past `seq`."""
    return next((r for r in rotations if int(r.get("seq", -1)) >= seq), None)


def epoch_place(core: LedgerCore, seq: int, *, destroyed_keys: bool) -> PlaceCheck:
    """The certificate's place for copies taken before an erasure whose last event is `seq`."""
    name = copies_place_name(core)
    if not destroyed_keys:
        return PlaceCheck(place=name, outcome="not_applicable", detail=(
            "this erasure destroyed no key: none of its facts had a value or free text sealed "
            "under a subject's key"))
    if core.keys is None:
        return PlaceCheck(place=name, outcome="pending", detail="no key store to read the "
                          "epoch from")
    found = covering(epochs.rotations(core.keys.store), seq)
    if found is not None:
        return PlaceCheck(place=name, outcome="crypto-erased", detail=(
            f"the epoch {found.get('retired')} that wrapped the keys this erasure destroyed was "
            f"destroyed at {found.get('at')} (rotate-epoch): a copy taken before this erasure "
            "no longer yields its values, free text, index words or sealed recall vectors, "
            "even with the current key files (a plaintext subject id in such a copy's rows is "
            "not under any key)"))
    current = (epochs.record(core.keys.store) or {}).get("id") or core.keys.epoch
    return PlaceCheck(
        place=name, outcome="pending" if name == SERVER_COPIES else "unverifiable",
        detail=f"the epoch {current} that wraps the keys this erasure destroyed is still live: "
        "a copy taken before this erasure, read with the current key files, still yields what "
        "it destroyed until `custody-app rotate-epoch` destroys that epoch (or the policy's "
        "[erasure] rotate_epoch runs it)")


def vector_place(core: LedgerCore) -> PlaceCheck | None:
    """On a server whose policy keeps recall vectors in the clear: the place that says copies
    keep them (None: sealed, or a file ledger, whose byte scan covers its vectors)."""
    if (address_of(core.db.path).own_file() is not None
            or core.db.recall.vector_form() == "sealed"):
        return None
    why = ("the policy's [recall] server_vectors = \"clear\"" if
           core.policy.policy.recall.server_vectors == "clear" else
           "the recall index's vectors are stored in the clear (an index built before vectors "
           "were sealed, or without a key store)")
    return PlaceCheck(place=VECTOR_COPIES, outcome="not-crypto-erased", detail=(
        f"{why}: the erased facts' vectors were deleted from the live table, but a backup, WAL "
        "archive, replica or old row version taken before this erasure keeps them as plain "
        "float32 rows under no key, and a fact's words can be approximated from its vector; "
        "rotate-epoch does not reach them"))


def with_epoch_place(core: LedgerCore, cert: ErasureCertificate, seq: int, *,
                     destroyed_keys: bool) -> ErasureCertificate:
    """The certificate with its epoch place (re)computed (after it, on a server keeping its
    vectors in the clear, the place that says so), and `complete` with it. The epoch place
    stays the last one."""
    name = copies_place_name(core)
    places = [p for p in cert.places if p.place not in (name, VECTOR_COPIES)]
    vectors = vector_place(core)
    if vectors is not None:
        places.append(vectors)
    places.append(epoch_place(core, seq, destroyed_keys=destroyed_keys))
    complete = all(p.outcome not in ("pending", "found") for p in places)
    return cert.model_copy(update={"places": places, "complete": complete})
