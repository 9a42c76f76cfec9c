"""`custody-app doctor`: checks an install and a ledger, read-only, one verdict per check."""

from __future__ import annotations

import os
import re
from contextlib import closing
from pathlib import Path

from custody_app.doctor import keys as doctor_keys
from custody_app.doctor.identifiers import identifiers_check
from custody_app.doctor.integrity import check_integrity
from custody_app.doctor.report import DoctorCheck, DoctorReport, check, loose_mode
from custody_app.doctor.server import server_checks
from store import APPLICATION_ID, SCHEMA_VERSION, health, server_health, wal_path
from store.address import address_of
from store.errors import StoreError

__all__ = ["DoctorCheck", "DoctorReport", "diagnose"]

MIN_SQLITE_VEC = (0, 1, 9)
# secure_delete=1 is ON (2 would be FAST, which leaves freed bytes); temp_store=2 is MEMORY.
SECURE_DELETE_ON = 1
TEMP_STORE_MEMORY = 2


def parse_version(text: str) -> tuple[tuple[int, ...], bool]:
    """`v0.1.9` -> ((0, 1, 9), False); a pre-release (`v0.1.9-alpha.1`) sets the flag."""
    found = re.match(r"v?(\d+(?:\.\d+)*)(.*)", text.strip())
    if found is None:
        return (), True
    return tuple(int(p) for p in found.group(1).split(".")), found.group(2).startswith("-")


def sqlite_vec_ok(version: str) -> bool:
    numbers, pre = parse_version(version)
    return numbers > MIN_SQLITE_VEC or (numbers == MIN_SQLITE_VEC and not pre)


def check_sqlite_vec() -> DoctorCheck:
    minimum = ".".join(map(str, MIN_SQLITE_VEC))
    try:
        version = health.sqlite_vec_version()
    except StoreError as exc:
        return check("sqlite-vec", "FAIL", f"{exc}: the recall vector index cannot be used.")
    if not sqlite_vec_ok(version):
        return check("sqlite-vec", "FAIL", f"sqlite-vec {version} loads but is older than "
                     f"{minimum}, whose DELETE zeroes a vector in place (pip install "
                     f"'sqlite-vec>={minimum}').")
    return check("sqlite-vec", "ok", f"sqlite-vec {version} loads (at least {minimum} is needed).")


def _ledger_file(path: str) -> DoctorCheck:
    loose = [f"{p} is mode {m:04o}" for p in (path, wal_path(path)) if os.path.exists(p)
             and (m := loose_mode(p)) is not None]
    if loose:
        return check("ledger", "warn", f"{'; '.join(loose)}: others can read the subjects and "
                     "metadata it holds in plaintext (chmod 600; custody-app init sets 0600).")
    return check("ledger", "ok", f"{path} is a custody-app ledger readable by its owner only.")


def _schema(db: health.Inspection) -> tuple[DoctorCheck, int]:
    version = db.pragma("user_version") or 0
    objects = db.schema()[0]
    where = f"{db.path} (application_id {APPLICATION_ID:#x})"
    if version > SCHEMA_VERSION:
        return check("schema", "FAIL", f"{where} has user_version {version}, newer than the "
                     f"{SCHEMA_VERSION} this custody-app reads: upgrade custody-app."), version
    if version < 1:
        return check("schema", "FAIL", f"{where} has user_version {version}, which no "
                     "custody-app ledger has: it was set by hand or the file is damaged."), version
    if version < SCHEMA_VERSION:
        later = health.expected_ledger_schema(SCHEMA_VERSION)[0] - health.expected_ledger_schema(
            version)[0]
        if found := sorted(name for kind, name in later & objects if kind != "trigger"):
            return check("schema", "FAIL", f"{where} says user_version {version} but already has "
                         f"{', '.join(found)} of a later version: its user_version was changed "
                         "by hand, and the next upgrade would fail."), version
    wanted = {o for o in health.expected_ledger_schema(version)[0] if o[0] != "trigger"}
    if missing := sorted(f"{kind} {name}" for kind, name in wanted - objects):
        return check("schema", "FAIL", f"{where} at user_version {version} lacks "
                     f"{', '.join(missing)}."), version
    if version < SCHEMA_VERSION:
        return check("schema", "warn", f"{where} is at user_version {version}, older than "
                     f"{SCHEMA_VERSION}: the next read-write open upgrades it (read-only "
                     "commands refuse it until then)."), version
    return check("schema", "ok", f"{where} is at user_version {version} with all "
                 f"{len(wanted)} tables and indexes of that version."), version


def _triggers(db: health.Inspection, version: int) -> DoctorCheck:
    expected = health.expected_ledger_schema(min(max(version, 1), SCHEMA_VERSION))[1]
    have = db.triggers()
    missing = sorted(set(expected) - set(have))
    altered = sorted(n for n in expected if n in have and have[n] != expected[n])
    extra = sorted(set(have) - set(expected))
    problems = ([f"missing {', '.join(missing)}"] if missing else []) + (
        [f"altered {', '.join(altered)}"] if altered else [])
    if problems:
        return check("triggers", "FAIL", f"{db.path}: {'; '.join(problems)}: events or "
                     "tombstones can be changed or deleted by any SQLite session.")
    if extra:
        return check("triggers", "warn", f"{db.path} has triggers custody-app did not make: "
                     f"{', '.join(extra)}.")
    return check("triggers", "ok", f"{db.path} has its {len(expected)} append-only triggers on "
                 "events and tombstones, unaltered.")


def _secure_delete(db: health.Inspection) -> DoctorCheck:
    problems = []
    if db.pragma("secure_delete") != SECURE_DELETE_ON:
        problems.append(f"secure_delete is {db.pragma('secure_delete')}, not ON (1)")
    if db.pragma("temp_store") != TEMP_STORE_MEMORY:
        problems.append(f"temp_store is {db.pragma('temp_store')}, not MEMORY (2)")
    fts = db.fts_secure_delete()
    if fts is not None and fts != 1:
        problems.append("the recall FTS5 index lacks its secure-delete option, so deleted "
                        "words stay in its pages")
    if problems:
        return check("secure-delete", "FAIL", f"{db.path}: {'; '.join(problems)}.")
    index = "" if fts is None else ", and its recall FTS5 index has secure-delete=1"
    return check("secure-delete", "ok", f"connections to {db.path} get secure_delete=ON and "
                 f"temp_store=MEMORY{index}.")


def _wal(path: str) -> DoctorCheck:
    wal = wal_path(path)
    if not health.journal_is_wal(path):
        return check("wal", "warn", f"{path} is not in WAL mode (its header says a rollback "
                     "journal): the next read-write open switches it back.")
    size = health.file_size(wal)
    if size is None:
        return check("wal", "ok", f"{path} is in WAL mode and has no {wal}: everything is "
                     "checkpointed into the database file.")
    if size == 0:
        return check("wal", "ok", f"{path} is in WAL mode and {wal} is empty.")
    return check("wal", "ok", f"{path} is in WAL mode and {wal} holds {size:,} bytes not yet "
                 "checkpointed (normal while a connection has the ledger open).")


def _pending(db: health.Inspection) -> DoctorCheck:
    pending = db.pending_scrubs()
    if pending is None:
        return check("pending-scrubs", "FAIL", f"{db.path} has no pending_scrubs table.")
    due = db.rewrite_due()
    if due is not None:
        return check("pending-scrubs", "warn", f"an erasure of {db.path} ({len(pending)} erased "
                     f"fact(s) pending) needs the file rewritten since {due.get('since')} "
                     f"({due.get('why')}) and the rewrite has not finished, so erased bytes may "
                     "still be in unallocated space of its pages: the erasure is pending, not "
                     "complete. The next read-write open (or write) rewrites the file and "
                     "re-issues the certificate once no reader holds the WAL.")
    if not pending:
        return check("pending-scrubs", "ok", f"no erasure in {db.path} waits for its WAL "
                     "checkpoint or a file rewrite.")
    facts = ", ".join(f for f, _ in pending[:5]) + (", ..." if len(pending) > 5 else "")
    return check("pending-scrubs", "warn", f"{len(pending)} erased fact(s) of {db.path} since "
                 f"{pending[0][1]} ({facts}) await a complete WAL checkpoint, so their old bytes "
                 f"may still be in {db.path} or {wal_path(db.path)}: the next write or read-write "
                 "open finishes it once no reader holds the WAL.")


def _leaks(db: health.Inspection) -> DoctorCheck:
    """Separate from pending: the checkpoint completed, but the byte scan found erased bytes
    that belong to the erased facts or subject (a leak), so the erasure is not complete."""
    leaks = db.erasure_leaks()
    if not leaks:
        return check("erasure-leaks", "ok", f"no erasure of {db.path} was certified with "
                     "erased bytes still leaking.")
    last = leaks[-1]
    facts = last.get("facts")
    named = [str(f) for f in facts[:5]] if isinstance(facts, list) else []
    return check("erasure-leaks", "warn", f"{len(leaks)} erasure(s) of {db.path} found erased "
                 f"bytes still present after a complete checkpoint; latest {last.get('operation')} "
                 f"at {last.get('issued_at')}: {last.get('leaks')} leaking string(s) about "
                 f"{', '.join(named)}. Their certificates list "
                 "where each string lives (free text of the erased facts is not yet sealed).")


def _maintenance(db: health.Inspection) -> DoctorCheck:
    error = db.recall_maintenance_error()
    if error is None:
        return check("recall-maintenance", "ok", f"no background re-clustering of the recall "
                     f"vector cells of {db.path} has failed.")
    return check("recall-maintenance", "warn", f"the last background re-clustering of the "
                 f"recall vector cells of {db.path} failed ({error}). Recall still answers "
                 "(every cell is read while a re-clustering is unfinished) but may be slower. "
                 "The next write through a read-write open retries it and clears this on "
                 "success; if it fails again, fix the cause named here (disk space, file "
                 "permissions, a lock held by another program).")


def diagnose(ledger: str | Path, *, keystore: str | Path | None = None,
             policy: str | Path | None = None) -> DoctorReport:
    """Check the install and the ledger at `ledger` (and its key store, `<ledger>.keys` unless
    `keystore` or $CUSTODY_KEYSTORE says otherwise) without writing to any of them."""
    path = str(ledger)
    checks = [check_sqlite_vec()]
    if address_of(path).own_file() is None:
        return _diagnose_server(path, checks, keystore, policy)
    try:
        db = health.inspect_ledger(path)
    except StoreError as exc:
        checks.append(check("ledger", "FAIL", f"{exc} ({exc.code}): nothing else was checked."))
        return DoctorReport(ledger=path, opened=False, checks=checks, ok=False)
    with closing(db):
        try:
            checks.append(_ledger_file(path))
            schema, version = _schema(db)
            checks += [schema, _triggers(db, version), _secure_delete(db), _wal(path),
                       _pending(db), _leaks(db), _maintenance(db),
                       identifiers_check(db.path, db.identifiers())]
            sample = db.last_subject()
        except StoreError as exc:
            checks.append(check("ledger", "FAIL", f"{exc} ({exc.code}): the file is damaged."))
            return DoctorReport(ledger=path, opened=False, checks=checks, ok=False)
    checks += doctor_keys.check_keys(path, keystore, sample)
    checks += check_integrity(path, keystore, policy)
    return DoctorReport(ledger=path, opened=True, checks=checks,
                        ok=all(c.outcome != "FAIL" for c in checks))


def _diagnose_server(address: str, checks: list[DoctorCheck], keystore: str | Path | None,
                     policy: str | Path | None) -> DoctorReport:
    """A ledger with no file of its own (on a server): the server's health in place of the
    file checks, then the same key and integrity checks."""
    shown = address_of(address).display
    try:
        found = server_health(address)
    except StoreError as exc:
        checks.append(check("ledger", "FAIL", f"{exc} ({exc.code}): nothing else was checked."))
        return DoctorReport(ledger=shown, opened=False, checks=checks, ok=False)
    lines, present = server_checks(found)
    checks += lines
    if not present:
        return DoctorReport(ledger=shown, opened=False, checks=checks, ok=False)
    checks += doctor_keys.check_keys(address, keystore, found.last_subject,
                                     sealed=found.last_subject_sealed)
    checks += check_integrity(address, keystore, policy)
    return DoctorReport(ledger=shown, opened=True, checks=checks,
                        ok=all(c.outcome != "FAIL" for c in checks))
