"""Which policy a ledger opened without one is under: the text it recorded last (DESIGN 14,
"Policy in force"), checked against its hash, or the shipped default for a ledger that never
recorded one. Only a policy named by the caller is ever adopted."""

from __future__ import annotations

from custody_app.domain.errors import LedgerError
from custody_app.domain.policy import LoadedPolicy, load_policy, policy_from_text
from store import LedgerFile


def recorded_policy(db: LedgerFile, ledger: str) -> tuple[LoadedPolicy, LedgerError | None]:
    """The policy `db` recorded last, parsed from its stored text; the shipped default when
    it recorded none (a fresh ledger). A stored text that no longer hashes to its key, or that
    is missing, is refused (the caller reads on, but never records another policy in its
    place: see `LedgerCore.open`). A stored policy that reads but may no longer be put to use
    (a writer registered by a bearer key's sha256, before writer keys were key pairs) comes
    back with that refusal: reads go on under it, a write must name a policy first."""
    with db.read():
        recorded = db.events.last_policy_hash()
        stored = db.policies.get(recorded) if recorded is not None else None
    if recorded is None:
        return load_policy(None), None
    if stored is None:
        raise LedgerError("policy_missing", f"the ledger {ledger} records policy "
                          f"{recorded[:12]}... but not its text; name a policy file with "
                          "--policy (a write adopts it)", policy_hash=recorded)
    canonical, source, path = stored
    name = path or f"(policy stored in {ledger})"
    try:
        loaded = policy_from_text(source, name, stored=True)
    except LedgerError:
        loaded = None
    if loaded is None or loaded.hash != recorded or loaded.canonical != canonical:
        raise LedgerError("policy_tampered", f"the stored text of policy {recorded[:12]}..., "
                          f"the one {ledger} records in force, does not hash to its key: it was "
                          "replaced (run verify); name a policy file with --policy",
                          policy_hash=recorded)
    try:
        policy_from_text(source, name)
    except LedgerError as exc:
        return loaded, LedgerError(exc.code, f"{exc.message}; the ledger {ledger} records this "
                                   "policy in force: name the new one with --policy (a write "
                                   "adopts it)", policy_hash=recorded)
    return loaded, None
