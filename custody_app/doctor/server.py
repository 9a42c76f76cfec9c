"""The doctor's lines for a ledger on a server (it has no file of its own): what the store's
`server_health` reports (the server and pgvector versions, the schema version, the append-only
triggers and the connecting role's rights), one verdict each. The SQLite file checks (modes,
WAL, secure delete, pending scrubs) have nothing to look at there and are not run."""

from __future__ import annotations

from typing import Any

from custody_app.doctor.identifiers import identifiers_check
from custody_app.doctor.report import DoctorCheck, check

MIN_SERVER = 15  # DESIGN 15: PostgreSQL 15 or later


def server_checks(health: Any) -> tuple[list[DoctorCheck], bool]:
    """(the checks, whether a ledger is there): no ledger in the schema stops the doctor as a
    missing file does."""
    where = f"{health.address} (schema {health.schema})"
    major = int(str(health.server_version).split(".")[0] or 0)
    checks = [check("server", "ok" if major >= MIN_SERVER else "FAIL",
                    f"PostgreSQL {health.server_version} serves {where}"
                    + ("." if major >= MIN_SERVER else f": a ledger needs {MIN_SERVER} or later."))]
    if health.schema_version is None:
        checks.append(check("ledger", "FAIL", f"no ledger in {where}: create one with "
                            f"`custody-app init --ledger {health.address}` (ledger_missing); "
                            "nothing else was checked."))
        return checks, False
    checks += [_pgvector(health), _schema(health, where), _triggers(health, where),
               _role(health, where), _pending(health, where), _inspection(health, where),
               identifiers_check(where, health.identifiers,
                                 subjects_sealed=health.subjects_sealed)]
    return checks, True


def _pending(health: Any, where: str) -> DoctorCheck:
    """Erasures whose certificate a place of the server keeps pending (issue 34)."""
    pending, held = health.pending_erasures, health.erasure_snapshots
    if not pending:
        return check("pending-erasures", "ok", f"no erasure of {where} is pending.")
    facts = ", ".join(f for f, _ in pending[:5]) + (", ..." if len(pending) > 5 else "")
    why = (f"held back by {len(held)} transaction(s) older than the erasure that may still read "
           f"the old row versions: {'; '.join(held[:5])}" if held else
           "no older transaction holds it back now")
    return check("pending-erasures", "warn", f"{len(pending)} erased fact(s) of {where} since "
                 f"{pending[0][1]} ({facts}) are pending, {why}. The next write, read-write "
                 "open or finish_scrubs re-checks and re-issues the certificate.")


def _inspection(health: Any, where: str) -> DoctorCheck:
    if health.page_inspection is None:
        return check("page-inspection", "ok", f"erasure certificates of {where} read the "
                     "ledger's pages back (pageinspect) and search the old row versions.")
    return check("page-inspection", "warn", f"erasure certificates of {where} cannot search the "
                 f"old row versions (`unverifiable`): {health.page_inspection}.")


def _pgvector(health: Any) -> DoctorCheck:
    if health.pgvector_available is None:
        return check("pgvector", "warn", "pgvector is not available on this server: recall "
                     "ranks by exact vectors computed in process, which is slower on a large "
                     "ledger (install the extension on the server to use it).")
    installed = (f"installed ({health.pgvector_installed}, schema {health.pgvector_schema})"
                 if health.pgvector_installed else "not installed in this database")
    return check("pgvector", "ok", f"pgvector {health.pgvector_available} is available on the "
                 f"server, {installed}.")


def _schema(health: Any, where: str) -> DoctorCheck:
    version, supported = health.schema_version, health.supported_version
    if version > supported:
        return check("schema", "FAIL", f"{where} is at schema version {version}, newer than the "
                     f"{supported} this custody-app reads: upgrade custody-app.")
    if version < supported:
        return check("schema", "warn", f"{where} is at schema version {version}, older than "
                     f"{supported}: the next read-write open upgrades it.")
    return check("schema", "ok", f"{where} is at schema version {version}.")


def _triggers(health: Any, where: str) -> DoctorCheck:
    if health.trigger_problems:
        return check("triggers", "FAIL", f"{where}: {'; '.join(health.trigger_problems)}: "
                     "events or tombstones can be changed or deleted by any session.")
    return check("triggers", "ok", f"{where} has its {len(health.triggers)} chain and "
                 "append-only triggers on events and tombstones, present and enabled.")


def _role(health: Any, where: str) -> DoctorCheck:
    rights = health.rights
    granted = [name for name, has in (("UPDATE", rights.events_update),
                                      ("DELETE", rights.events_delete),
                                      ("TRUNCATE", rights.events_truncate)) if has]
    said = (f"the role {rights.role} has the {'/'.join(granted)} privilege on events (the "
            "triggers refuse those statements; a least-privilege role has none of them)"
            if granted else f"the role {rights.role} may not UPDATE, DELETE or TRUNCATE events")
    if rights.may_bypass_triggers:
        return check("role", "warn", f"{where}: {'; '.join(health.notes[-1:])}; {said}.")
    return check("role", "ok", f"{where}: {said}, owns none of the ledger's tables and is no "
                 "superuser: it cannot switch the triggers off.")
