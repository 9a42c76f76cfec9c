"""The doctor's key checks: key store, master key, forget key and signing key, read-only."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from custody_app.core import host_mark
from custody_app.doctor.report import DoctorCheck, check, loose_mode
from custody_app.domain.errors import LedgerError
from custody_app.keys import crypto, marks
from custody_app.keys import epoch as epochs
from custody_app.keys.keyring import (
    MASTER_ENV,
    keystore_path_for,
    load_master,
    master_path_for,
    public_key_path_for,
)
from custody_app.keys.subject_ids import subject_bind
from store import health, open_keystore
from store.address import address_of
from store.errors import StoreError

KEYSTORE_VERSION = health.keystore_version()
LOOSE = "anyone who can read it can unwrap every key of the ledger (chmod 600; custody-app init " \
        "sets 0600)"


def _keystore(path: Path) -> tuple[DoctorCheck, health.Inspection | None]:
    if not path.exists():
        return check("key-store", "FAIL", f"the key store {path} does not exist: the ledger's "
                     "values cannot be read, and every write is refused (keystore_missing) until it is "
                     "put back there or named with --keystore."), None
    try:
        store = health.inspect_keystore(path)
    except StoreError as exc:
        return check("key-store", "FAIL", f"{exc} ({exc.code})."), None
    problems = []
    if (mode := loose_mode(path)) is not None:
        problems.append(f"it is mode {mode:04o}: {LOOSE}")
    version = store.pragma("user_version") or 0
    if version != KEYSTORE_VERSION:
        problems.append(f"its user_version is {version}, not {KEYSTORE_VERSION}")
    expected, have = health.expected_keystore_triggers(), store.triggers()
    if missing := sorted(n for n in expected if have.get(n) != expected[n]):
        problems.append(f"triggers missing or altered: {', '.join(missing)}, so keys can be "
                        "overwritten or a destroyed key brought back")
    if problems:
        return check("key-store", "FAIL", f"key store {path}: {'; '.join(problems)}."), store
    return check("key-store", "ok", f"{path} is a key store readable by its owner only, with its "
                 f"{len(expected)} write-once triggers."), store


class _ServerKeys:
    """A key store on a server, read as the checks read a key store file's inspection: its
    entries and marks. The server migrates it when it is opened for writing, so it is always at
    this code's version; its write-once rules are the server's triggers."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def meta(self, name: str) -> bytes | None:
        value = self.store.meta(name)
        return None if value is None else bytes(value)

    def pragma(self, name: str) -> int | None:
        return KEYSTORE_VERSION if name == "user_version" else None

    def keystore(self) -> Any:
        return self.store

    def close(self) -> None:
        self.store.close()


def _server_keystore(address: str) -> tuple[DoctorCheck, Any]:
    """The key store of a server ledger (its own schema of the ledger's database), opened
    without creating one."""
    try:
        store = open_keystore(address, create=False)
    except StoreError as exc:
        return check("key-store", "FAIL", f"{exc} ({exc.code}): the ledger's values cannot be "
                     "read, and every write is refused (keystore_missing) until it is put back."), None
    return check("key-store", "ok", f"{store.path} is the ledger's key store on the server "
                 "(its write-once rules are the server's triggers)."), _ServerKeys(store)


def _master(keystore: str | Path, store: health.Inspection | None) -> tuple[DoctorCheck, bytes | None]:
    from_env = bool(os.environ.get(MASTER_ENV))
    path = master_path_for(keystore)
    where = f"${MASTER_ENV}" if from_env else str(path)
    try:
        master = load_master(keystore, create=False)
    except LedgerError as exc:
        return check("master-key", "FAIL", f"{exc.message}: no key of the key store {keystore} "
                     "can be unwrapped."), None
    # Checked after loading, so the checks of the keys it unwraps still run.
    if not from_env and (mode := loose_mode(path)) is not None:
        return check("master-key", "FAIL", f"the master key file {path} is mode {mode:04o}: "
                     f"{LOOSE}."), master
    if store is None:
        return check("master-key", "warn", f"the master key in {where} is well formed, but the "
                     f"key store {keystore} is unusable, so it was not tried on it."), master
    wrapped = store.meta("check")
    if wrapped is None:
        return check("master-key", "ok", f"the master key in {where} is well formed; the key "
                     f"store {keystore} has no check entry to try it on yet."), master
    try:
        crypto.unwrap(master, wrapped, "check")
    except crypto.DecryptError:
        nxt = epochs.next_path(path)
        if not from_env and (key := epochs.read_key(nxt)) is not None and _opens_check(key,
                                                                                   wrapped):
            return check("master-key", "warn", f"the key store {keystore} is under the new "
                         f"epoch key in {nxt} (a rotate-epoch cut short before it replaced "
                         f"{path}): the next read-write open moves it over."), key
        if (stale := epochs.stale_message(store, master, where)) is not None:
            return check("master-key", "FAIL", f"{stale}."), None
        return check("master-key", "FAIL", f"the master key in {where} does not open the key "
                     f"store {keystore}: it belongs to another key store."), None
    mode_note = "" if from_env else ", readable by its owner only,"
    return check("master-key", "ok", f"the master key in {where}{mode_note} opens the key "
                 f"store {keystore}."), master


def _opens_check(key: bytes, wrapped: bytes) -> bool:
    try:
        crypto.unwrap(key, wrapped, "check")
    except crypto.DecryptError:
        return False
    return True


def _epoch(store: health.Inspection | None, keystore: str | Path) -> DoctorCheck:
    """The epoch key (issue 34): a rotation cut short, and when the last rotation was."""
    nxt = epochs.next_path(master_path_for(keystore))
    if not os.environ.get(MASTER_ENV) and nxt.exists():
        return check("epoch-key", "warn", f"a rotate-epoch of {keystore} was cut short: {nxt} "
                     "is left beside the master key file; the next read-write open moves it "
                     "over the master key file (the key store committed under it) or deletes "
                     "it (it did not).")
    if store is None:
        return check("epoch-key", "warn", f"the epoch of {keystore} cannot be read: the key "
                     "store is unusable.")
    found = epochs.record(store)
    if found is None:
        return check("epoch-key", "ok", f"the key store {keystore} is under its first epoch "
                     "key (never rotated: `custody-app rotate-epoch`).")
    return check("epoch-key", "ok", f"the key store {keystore} is under epoch {found.get('id')}, "
                 f"rotated at {found.get('at')} on host {found.get('host')} "
                 f"({len(found.get('rotations', []))} rotation(s)).")


def _slot(name: str, label: str, store: health.Inspection | None, keystore: str | Path,
          master: bytes | None) -> tuple[DoctorCheck | None, bytes | None]:
    """A named key of the key store, unwrapped; or the check saying why it cannot be."""
    if store is None:
        return check(name, "FAIL", f"the {label} cannot be checked: the key store {keystore} "
                     "is unusable."), None
    wrapped = store.meta(label.split()[0])
    if wrapped is None:
        return check(name, "warn", f"the key store {keystore} has no {label} yet: it is made "
                     "on first use (custody-app init makes it up front)."), None
    if master is None:
        return check(name, "FAIL", f"the {label} in {keystore} cannot be unwrapped without a "
                     "usable master key."), None
    try:
        return None, crypto.unwrap(master, wrapped, label.split()[0])
    except crypto.DecryptError:
        return check(name, "FAIL", f"the {label} in {keystore} does not unwrap under the master "
                     "key: it was damaged or replaced."), None


def _forget(store: health.Inspection | None, keystore: str | Path, master: bytes | None) -> DoctorCheck:
    failed, _ = _slot("forget-key", "forget key", store, keystore, master)
    return failed or check("forget-key", "ok", f"the forget key (digests of values forgotten "
                           "before digests were keyed per subject) is in the key store "
                           f"{keystore}, outside the ledger, and unwraps.")


def _signing(ledger: str, store: health.Inspection | None, keystore: str | Path,
             master: bytes | None) -> DoctorCheck:
    failed, raw = _slot("signing-key", "signing key", store, keystore, master)
    if failed is not None or raw is None:
        assert failed is not None
        return failed
    pub = public_key_path_for(ledger)
    pem = crypto.public_pem(raw)
    if not pub.exists():
        return check("signing-key", "warn", f"the signing key in {keystore} unwraps but its "
                     f"public half {pub} is missing (custody-app init or checkpoint writes it).")
    if pub.read_text(encoding="utf-8").strip() != pem.strip():
        return check("signing-key", "FAIL", f"{pub} is not the public half of the signing key in "
                     f"{keystore}: `verify --key {pub}` would reject every checkpoint.")
    return check("signing-key", "ok", f"the Ed25519 signing key in {keystore} unwraps and {pub} "
                 f"is its public half ({crypto.public_fingerprint(pem)}).")


def _match(ledger: str, sample: tuple[int, str, str] | None, store: health.Inspection | None,
           keystore: str | Path, master: bytes | None, sealed: bytes | None = None) -> DoctorCheck:
    """Does this key store belong to this ledger? Its pepper must give the subject hash that the
    ledger's newest assert recorded (another ledger's key store reads every value as erased)."""
    if sample is None:
        return check("keys-match", "ok", f"{ledger} has no assert with a subject yet to match "
                     f"the key store {keystore} against.")
    seq, subject, body = sample
    failed, pepper = _slot("keys-match", "pepper", store, keystore, master)
    if failed is not None and failed.outcome == "warn":
        failed = check("keys-match", "FAIL", f"the key store {keystore} has no pepper, yet "
                       f"{ledger} holds subject hashes made with one: it is not this ledger's "
                       "key store.")
    if failed is not None or pepper is None:
        assert failed is not None
        return failed
    try:
        recorded = json.loads(body).get("subject_ref")
    except ValueError:
        recorded = None
    if subject == recorded:
        # A server ledger stores each subject by its ref, its id sealed under its data key
        # (issue 34): the id is opened with the key store's key of that ref first.
        subject = _sealed_id(store, master, recorded, sealed) or ""
    if crypto.keyed_digest(pepper, "subject", subject) != recorded:
        return check("keys-match", "FAIL", f"the key store {keystore} does not reproduce the "
                     f"subject hash of event {seq} in {ledger}: it belongs to another ledger, "
                     "and this ledger's values would read as erased.")
    return check("keys-match", "ok", f"the key store {keystore} reproduces the subject hash of "
                 f"event {seq} in {ledger}: it is this ledger's key store.")


def _sealed_id(store: health.Inspection | None, master: bytes | None, ref: str,
               sealed: bytes | None) -> str | None:
    """A server ledger's sealed subject id opened with the key store's key of its ref (None:
    no key opens it, as with another ledger's key store)."""
    if store is None or master is None or sealed is None:
        return None
    try:
        generation = crypto.sealed_generation(sealed)
        row = store.keystore().generation(ref, generation)
        if row is None or row[1] is None:
            return None
        key = crypto.unwrap(master, row[1], f"data:{ref}:{generation}")
        return crypto.open_sealed(key, sealed, subject_bind(ref)).decode("utf-8")
    except (crypto.DecryptError, UnicodeDecodeError, StoreError):
        return None


def _marks(store: health.Inspection | None, keystore: str | Path, master: bytes | None) -> DoctorCheck:
    """Every mark row's MAC (DESIGN 14): a row that fails it is named, and never trusted."""
    if store is None or master is None:
        return check("ledger-marks", "warn", f"the marks of the key store {keystore} cannot be "
                     "checked without a usable key store and master key.")
    if (store.pragma("user_version") or 0) < KEYSTORE_VERSION:
        return check("ledger-marks", "warn", f"the key store {keystore} predates authenticated "
                     "marks: the next read-write open upgrades it.")
    try:
        key = _marks_key(store, master)
    except crypto.DecryptError:
        return check("ledger-marks", "FAIL", f"the marks' MAC key in the key store {keystore} "
                     "does not unwrap under the master key: it was damaged or replaced.")
    bad = marks.untrusted_marks(store.keystore(), key)
    if bad:
        named = ", ".join(marks.describe(row) for row in bad[:5])
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        return check("ledger-marks", "FAIL", f"the key store {keystore} holds {len(bad)} mark "
                     f"row(s) whose MAC fails: {named}{more}. They were not written with the "
                     "master key (added or edited by hand) and are never trusted as the "
                     "ledger's high-water mark.")
    return check("ledger-marks", "ok", f"every high-water mark in the key store {keystore} "
                 "carries a valid MAC under the master key.")


def _marks_key(store: health.Inspection, master: bytes) -> bytes:
    """The marks' MAC key: the one a rotation kept (wrapped in the key store), else derived from
    the master key. Raises crypto.DecryptError when the wrapped one does not unwrap."""
    wrapped = store.meta(epochs.MARK_KEY_META)
    return (marks.mark_key(master) if wrapped is None
            else crypto.unwrap(master, wrapped, epochs.MARK_KEY_META))


def _host_mark(ledger: str, shown: str, store: health.Inspection | None,
               master: bytes | None) -> DoctorCheck | None:
    """This host's own copy of the newest head it saw of a server ledger (core.host_mark):
    whether it is there and holds its MAC. None for a file ledger (it keeps none)."""
    path = host_mark.host_mark_file(ledger)
    if path is None:
        return None
    try:
        key = None if store is None or master is None else marks.host_mark_key(
            _marks_key(store, master))
    except crypto.DecryptError:
        key = None
    if key is None:
        return check("host-mark", "warn", f"this host's record of how far {shown} had come "
                     f"({path}) cannot be checked without a usable key store and master key.")
    mark, why = host_mark.read(path, lambda *parts: marks.host_mark_mac(key, *parts))
    if why is not None:
        return check("host-mark", "warn", f"{why}: it is never trusted as the bar a restored "
                     "database must pass, and the next open replaces it with the head it sees.")
    if mark is None:
        folder = next((p for p in (path.parent, *path.parents) if p.exists()), path.parent)
        if not os.access(folder, os.W_OK):
            return check("host-mark", "warn", f"this host cannot record how far {shown} had "
                         f"come: {folder} is not writable, so a database restored from an older "
                         "dump would not be noticed here.")
        return check("host-mark", "ok", f"this host has not recorded how far {shown} had come "
                     f"yet ({path} is written at its first open).")
    return check("host-mark", "ok", f"this host saw {shown} reach event {mark.seq} "
                 f"({mark.head[:12]}...) at {mark.at} ({path}): a database restored from before "
                 "that is refused at open.")


def _rotation(store: health.Inspection | None, keystore: str | Path) -> DoctorCheck:
    """A rotate-index-key cut short leaves its intent (the new key) in the key store."""
    if store is not None and store.meta("index_next") is not None:
        return check("index-key", "warn", f"a rotation of the word index key in {keystore} was "
                     "cut short (its new key is recorded beside the old one): the next "
                     "read-write open finishes it (re-indexing under the new key if needed).")
    return check("index-key", "ok", f"no rotation of the word index key in {keystore} is "
                 "under way.")


def check_keys(ledger: str, keystore: str | Path | None,
               sample: tuple[int, str, str] | None = None, *,
               sealed: bytes | None = None) -> list[DoctorCheck]:
    """The key store beside the ledger (or where `keystore`/$CUSTODY_KEYSTORE says), its master
    key, the forget and signing keys inside it, and that it is this ledger's (`sample`: the
    newest assert with its subject, from the ledger)."""
    address = keystore_path_for(ledger, keystore)
    # Named in messages as displayed (a server's address without its password); the key files
    # named after it are the same either way.
    path: Any = address_of(address).display
    given, ledger = ledger, address_of(ledger).display
    store = None
    try:
        if (own := address_of(address).own_file()) is None:
            first, store = _server_keystore(address)
        else:
            path = Path(own)
            first, store = _keystore(path)
        master_check, master = _master(path, store)
        lines = [first, master_check, _forget(store, path, master),
                 _signing(ledger, store, path, master), _match(ledger, sample, store, path, master, sealed),
                 _marks(store, path, master), _rotation(store, path), _epoch(store, path)]
        seen = _host_mark(given, ledger, store, master)
        return lines if seen is None else [*lines, seen]
    except StoreError as exc:
        return [check("key-store", "FAIL", f"{exc} ({exc.code}): the key store is damaged.")]
    finally:
        if store is not None:
            store.close()
