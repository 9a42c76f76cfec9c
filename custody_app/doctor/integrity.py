"""Doctor's integrity lines: the ledger opened read-only and verified (DESIGN 13's list), and
any subject erasure half done across the two files (which only a read-write open completes)."""

from __future__ import annotations

from pathlib import Path

from custody_app.doctor.report import DoctorCheck, check
from custody_app.domain.errors import LedgerError
from custody_app.erasure import rekey
from custody_app.erasure.epoch import pending_erasures
from custody_app.erasure.rollforward import unfinished
from custody_app.ledger.facade import Ledger
from store.address import address_of


def check_integrity(path: str, keystore: str | Path | None,
                    policy: str | Path | None = None) -> list[DoctorCheck]:
    shown = address_of(path).display  # a server's address without its password
    wal = address_of(path).sibling("-wal")  # beside the file a symbolic link points to
    # No WAL to read: an immutable snapshot, so the check leaves no -wal or -shm behind.
    immutable = not wal.exists() or wal.stat().st_size == 0
    try:
        # Read-only: a --policy is checked and compared, never adopted (DESIGN 14).
        with Ledger.open(path, readonly=True, keystore=keystore, immutable=immutable,
                         policy=policy) as ledger:
            report = ledger.verify()
            half = unfinished(ledger)
            waiting = pending_erasures(ledger)
            rekeys = rekey.unfinished(ledger)
            in_force = _policy_line(ledger, policy)
            vectors = _vectors_line(ledger, shown)
    except LedgerError as exc:
        return [check("integrity", "FAIL", f"{shown} could not be verified: {exc.message} "
                      f"({exc.code}).")]
    if report.valid:
        lines = [check("integrity", "ok", f"{shown}: {report.events} events, the projection, "
                       "the derived tables (sessions, served reads, actions, salience "
                       "presentations, pending retractions, spent receipts), policy texts, "
                       "tombstones and recall indexes verified.")]
    else:
        where = f" at seq {report.first_bad_seq}" if report.first_bad_seq else ""
        lines = [check("integrity", "FAIL", f"{shown} fails verify{where}: {report.problem}")]
    lines.append(in_force)
    lines.append(vectors)
    if half or rekeys:
        seqs = ", ".join(str(seq) for seq, _, _ in half[:5])
        said = (f"{len(half)} subject erasure(s) of {shown} (seq {seqs}) are committed in the "
                "ledger but their key destruction is not in the key store yet" if half else "")
        if rekeys:
            said += ("; " if said else "") + (
                f"{len(rekeys)} re-keyed subject(s) of {shown} have their values re-sealed in "
                "the ledger but their old key generations not destroyed yet")
        lines.append(check("erasure-half-state", "warn",
                           f"{said}: the next read-write open completes it."))
    else:
        lines.append(check("erasure-half-state", "ok",
                           f"every subject erasure of {shown} is complete in the key store too."))
    if waiting:
        first = waiting[0]
        lines.append(check("epoch-pending", "warn", (
            f"{len(waiting)} erasure(s) of {shown} ({_kinds(waiting)}; the first at "
            f"{first['tx_at']}, seq {first['seq']}) wait for the epoch key to be rotated: a "
            "backup, WAL archive, replica or copy taken before them, read with the current key "
            "files, still yields what they destroyed until `custody-app rotate-epoch` runs.")))
    else:
        lines.append(check("epoch-pending", "ok", f"no erasure of {shown} waits for an "
                           "epoch rotation."))
    return lines


# How the epoch-pending line names each kind of erasure that destroyed keys.
_KIND_NAMES = (("forget_subject", "subject erasure(s)"), ("forget", "single-fact forget(s)"),
               ("sweep", "retention sweep(s)"))


def _kinds(waiting: list[dict[str, object]]) -> str:
    """`1 subject erasure(s), 2 single-fact forget(s)`: the kinds that wait, counted."""
    counts = {op: sum(1 for e in waiting if e["operation"] == op) for op, _ in _KIND_NAMES}
    return ", ".join(f"{counts[op]} {name}" for op, name in _KIND_NAMES if counts[op])


def _vectors_line(ledger: Ledger, shown: str) -> DoctorCheck:
    """Whether believed facts wait for the vector a model embedder makes after the write (a
    `--batch` makes none; recall finds them by their words until they have it)."""
    index = ledger.index
    if not index.deferred:
        return check("vectors", "ok", f"{shown}: its embedder ({index.embedder.name}) makes "
                     "each fact's vector in the write.")
    waiting = index.unembedded()
    if not waiting:
        return check("vectors", "ok", f"{shown}: every believed fact has its vector "
                     f"({index.embedder.name}).")
    # Not a warning: a state the default reaches after every short-lived process that writes.
    return check("vectors", "ok", (
        f"{waiting:,} believed fact(s) of {shown} wait for their vector ({index.embedder.name}): "
        "recall finds them by their words only until `custody-app embed` makes them (the "
        "terminal app, `serve` and the Python API make them in the background)."))


def _policy_line(ledger: Ledger, named: str | Path | None) -> DoctorCheck:
    """Which policy is in force, and whether a named one is it (a write would adopt it)."""
    with ledger.db.read():
        recorded = ledger.db.events.last_policy_hash()
    if named is None:
        return check("policy", "ok", f"{ledger.db.path}: policy in force {ledger.policy.hash[:12]}"
                     + (" (recorded by the ledger)" if recorded else " (the shipped default; "
                        "the ledger has recorded none yet)"))
    if recorded == ledger.policy.hash:
        return check("policy", "ok", f"{named} ({ledger.policy.hash[:12]}) is the policy "
                     f"{ledger.db.path} records.")
    return check("policy", "warn", f"{named} ({ledger.policy.hash[:12]}) is valid but is not "
                 f"the policy {ledger.db.path} records ({(recorded or 'none')[:12]}): a write "
                 "command given it would adopt it.")
