"""Epoch keys (issue 34): the master key is the epoch key. `custody-app rotate-epoch` re-wraps
every live key under a new one and destroys the old, so a copy of the key store (a backup, a
WAL archive, a replica, a copied file) taken before an erasure no longer opens the keys it
destroyed, even with the current key file.

The key files of a rotation, crash-safe in this order: the new key is written to
`<master file>.next` (0600, fsynced, never replacing a file); the key store re-wraps every key
under it and records the new epoch in one transaction; the old file is overwritten with zeroes
and `.next` renamed over it (the folder fsynced). At every open, a `.next` beside the master
file is resolved under the key store's write lock by which key opens the key store's `check`:
the new one (the transaction committed) is promoted, else `.next` is deleted. So a kill at any
instant leaves one usable epoch, never none."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from custody_app.keys import crypto
from store import KeyStoreFile


class MetaReader(Protocol):
    """What reading the epoch needs of a key store (doctor's read-only inspection has it too)."""

    def meta(self, name: str) -> bytes | None: ...

# The key store's plain record of the epoch in force and the rotations before it (JSON): read
# without any key, so a host whose key file was retired learns when and how to get the new one.
EPOCH_META = "epoch"
# The marks' MAC key, wrapped (written at the first rotation): marks made under a master key
# derived it; it outlives that master.
MARK_KEY_META = "mark_key"
# The entries wrapped under the master key, each re-wrapped by a rotation (`check` last).
WRAPPED_META = ("forget", "pepper", "signing", "index", "index_next", MARK_KEY_META)


def epoch_id(key: bytes) -> str:
    """An epoch key's fingerprint (a keyed digest of a random 256-bit key: it gives nothing
    away), how certificates and error messages name an epoch."""
    return crypto.keyed_digest(key, "custody", "epoch id")[:16]


def next_path(master_file: Path) -> Path:
    return master_file.with_name(master_file.name + ".next")


def record(store: MetaReader) -> dict[str, Any] | None:
    """The epoch record (None: never rotated)."""
    raw = store.meta(EPOCH_META)
    if raw is None:
        return None
    try:
        found = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def rotations(store: MetaReader) -> list[dict[str, Any]]:
    """Each rotation, oldest first: {"retired", "id", "at", "seq", "host", "file"}."""
    found = record(store)
    listed = found.get("rotations", []) if found else []
    return [r for r in listed if isinstance(r, dict)]


def current_id(store: MetaReader, master: bytes) -> str:
    """The id of the epoch in force (a key store never rotated: its master key's)."""
    found = record(store)
    return str(found["id"]) if found and "id" in found else epoch_id(master)


def read_key(path: Path) -> bytes | None:
    """A key file's key; None when it is missing or not 64 hex digits."""
    try:
        key = bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return key if len(key) == crypto.KEY_BYTES else None


def opens(store: MetaReader, key: bytes | None) -> bool:
    """Does `key` open the key store's `check` (no check yet: a new store, any key does)?"""
    check = store.meta("check")
    if key is None:
        return False
    if check is None:
        return True
    try:
        crypto.unwrap(key, check, "check")
    except crypto.DecryptError:
        return False
    return True


def fsync_folder(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def promote(master_file: Path, crash_point: Callable[[str], None] = lambda _: None) -> None:
    """`.next` over the master file: the old key overwritten with zeroes first (so its bytes do
    not wait for the blocks to be reused), then the rename, then the folder fsynced. A kill in
    between leaves `.next` and a master file that no longer opens: resolve() promotes it. Run
    under the key store's write lock only (resolve), so no two processes promote at once: one
    would zero the key the other had just put in place."""
    nxt = next_path(master_file)
    new = read_key(nxt)
    if new is None:
        return
    if read_key(master_file) != new:
        try:
            size = master_file.stat().st_size
            with open(master_file, "r+b") as handle:
                handle.write(b"0" * size)
                handle.flush()
                os.fsync(handle.fileno())
        except FileNotFoundError:
            pass
    crash_point("epoch.zeroed")
    os.replace(nxt, master_file)
    fsync_folder(master_file.parent)


def resolve(store: KeyStoreFile, master_file: Path,
            crash_point: Callable[[str], None] = lambda _: None) -> str | None:
    """A `.next` beside the master file (a rotation cut short, or one that just committed),
    settled under the key store's write lock (a rotation under way in another process holds
    it): promoted when its key opens the key store, deleted when it does not. Returns what was
    done, if anything."""
    nxt = next_path(master_file)
    if not nxt.exists():
        return None
    with store.write():  # nothing is written: the lock waits for a rotation under way
        if not nxt.exists():
            return None
        if opens(store, read_key(nxt)):
            promote(master_file, crash_point)
            return "promoted"
        nxt.unlink(missing_ok=True)
        fsync_folder(master_file.parent)
        return "deleted"


def stale_message(store: MetaReader, master: bytes, where: str) -> str | None:
    """Why `master` (from `where`) no longer opens the key store, when a rotation retired it
    (None: it is no epoch this key store ever had)."""
    mine = epoch_id(master)
    for rotation in rotations(store):
        if rotation.get("retired") == mine:
            found = record(store) or {}
            return (f"the epoch key in {where} (epoch {mine}) was retired by `custody-app "
                    f"rotate-epoch` at {rotation.get('at')} on host {rotation.get('host')}: "
                    f"the key store is now under epoch {found.get('id')} (rotated at "
                    f"{found.get('at')} on host {found.get('host')}); copy its key file "
                    f"{found.get('file')} from that host to {where} (mode 0600)")
    return None
