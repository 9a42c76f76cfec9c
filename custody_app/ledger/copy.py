"""`custody-app copy SRC DST`: a whole ledger into an empty place, on either backend (a SQLite
file, a schema of a PostgreSQL database), every event as it is (its hash, signature row, sealed
value and salt, sealed free text), the policies, the ledger's id and meta, the erasure records
and the key store (wrapped keys under the same master key, destroyed keys still destroyed, the
signing key, the marks), so `verify --key` passes on the copy and every read answers as on the
source.

What is copied, and in which order, is decided here; how a table's rows are read and loaded is
the store's (`columns`, `copy_rows`, `load_rows`: a batch at a time, never a whole table in
memory). The recall indexes are laid out differently by each backend: they are rebuilt on the
destination, never copied. The source is read under its write lock (no writer appends
meanwhile); its schema and free text are brought up to date first, as any read-write open does.

A copy is refused, changing nothing anywhere, when the destination (ledger or key store) holds
anything, when source and destination are one place, or when the source is missing. The
destination carries a `copy_incomplete` mark from before its first row until after its last,
so a copy killed half-way leaves a ledger every open refuses (`copy_incomplete`), never one
that looks whole."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from custody_app.core.faults import crash_point
from custody_app.core.ledger_core import COPY_INCOMPLETE, LedgerCore
from custody_app.core.rollback import check_high_water
from custody_app.domain.errors import LedgerError
from custody_app.domain.readmodels import ReadModel
from custody_app.domain.timeutil import WallClock, format_time
from custody_app.keys.keyring import (
    KeyRing,
    keystore_exists,
    keystore_path_for,
    load_master,
    place_master,
    public_key_path_for,
    write_public_key,
)
from custody_app.keys.subject_ids import SubjectIdCodec
from custody_app.ledger.facade import Ledger
from store import ledger_exists, occupied, open_keystore, open_ledger
from store.address import address_of
from store.errors import StoreError

# The ledger's tables, in the order they are loaded (an event before its signature; the
# projection and the indexes of sessions and actions are copied as they are: each is the fold
# of the events verify re-derives). Not here: ledger_meta (below, row by row), the recall
# indexes (rebuilt), the server's schema_version (the destination's own).
LEDGER_TABLES = ("policies", "events", "event_signatures", "event_texts", "tombstones",
                 "forgotten_digests", "pending_scrubs", "facts", "fact_states", "fact_sources",
                 "served_facts", "session_events", "sessions", "actions")
# The key store's: its entries (keystore_meta) row by row, then these.
KEY_TABLES = ("subject_keys", "ledger_marks")
# ledger_meta entries about the recall indexes or one backend, not the ledger: the
# destination writes its own (the index rebuild, its creation).
NOT_COPIED_META = frozenset({
    "embedder", "embedder_dims", "recall_layout", "recall_vec_version", "recall_cells_version",
    "recall_cells_n", "recall_cells_moving", "recall_maintenance_error", "sqlite_vec_version",
    "recall_vec_form", "subject_ids", COPY_INCOMPLETE})
Progress = Callable[[str, int], None]


class CopyResult(ReadModel):
    """What a copy wrote, and where the destination's keys are."""

    source: str
    destination: str
    events: int
    facts: int
    subject_keys: int
    destroyed_keys: int
    marks: int
    indexed: int
    rows: dict[str, int]
    keystore: str
    master_key: str
    public_key: str | None

    def render(self) -> str:
        return "\n".join([
            f"copied {self.source} to {self.destination}: {self.events} event(s), "
            f"{self.facts} fact(s), {self.subject_keys} subject key(s) "
            f"({self.destroyed_keys} destroyed), {self.marks} mark(s)",
            f"  key store: {self.keystore}",
            f"  master key: {self.master_key}",
            f"  public key: {self.public_key or '-'}",
            f"  recall indexes rebuilt: {self.indexed} believed fact(s)",
            f"  check it: custody-app verify --ledger {self.destination}"
            + (f" --key {self.public_key}" if self.public_key else "")])


def _refuse(code: str, message: str) -> LedgerError:
    return LedgerError(code, message)


def preflight(src: str, dst: str, src_keys: str, dst_keys: str) -> None:
    """Every refusal that needs no open: the source is there, the destination is another
    place, and nothing is at the destination (ledger, key store) yet."""
    shown_src, shown_dst = address_of(src).display, address_of(dst).display
    if not ledger_exists(src):
        raise _refuse("ledger_missing", f"no ledger at {shown_src} to copy; name an existing "
                      "ledger as the source")
    if address_of(src).place() == address_of(dst).place():
        raise _refuse("copy_same_place", f"{shown_src} and {shown_dst} are the same ledger: "
                      "name another destination")
    if not keystore_exists(src_keys):
        raise _refuse("keystore_missing", f"the source's key store {address_of(src_keys).display} "
                      "does not exist: name it with --keystore (without it nothing sealed "
                      "could be read on the copy)")
    for what, place in (("ledger", dst), ("key store", dst_keys)):
        try:
            held = occupied(place)
        except StoreError as exc:
            raise _refuse(exc.code, str(exc)) from None
        if held is not None:
            raise _refuse("copy_destination_not_empty", (
                f"the destination {what} {address_of(place).display} already holds {held}: "
                "copy writes only into an empty place and never merges; name a new file, or "
                "an empty schema (?schema=NAME), or remove what is there first"))


def copy_ledger(src: str | Path, dst: str | Path, *, keystore: str | Path | None = None,
                to_keystore: str | Path | None = None,
                progress: Progress | None = None) -> CopyResult:
    """Copy the ledger at `src` (its key store: `keystore`, else its own) to `dst` (its key
    store: `to_keystore`, else its own), refusing as the module says."""
    src, dst = str(src), str(dst)
    src_keys = keystore_path_for(src, keystore)
    dst_keys = str(to_keystore) if to_keystore else address_of(dst).default_keystore()
    preflight(src, dst, src_keys, dst_keys)
    master = load_master(src_keys, create=False)
    master_at = place_master(dst_keys, master, check_only=True)
    source = Ledger.open(src, keystore=keystore)
    try:
        assert source.keys is not None  # opened read-write: its key store is open
        pem = source.keys.public_pem() if source.keys.store.meta("signing") else None
        _check_public_key(dst, pem)
        if source.keys.store.legacy_marks_upto():
            raise _refuse("copy_unsupported", "the source's key store holds marks written "
                          "before marks were authenticated; copy cannot carry their trust over")
        return _copy(source, src, dst, dst_keys, master, master_at, pem, progress)
    finally:
        source.close()


def _check_public_key(dst: str, pem: str | None) -> None:
    path = public_key_path_for(dst)
    if pem is None or not (path.exists() or path.is_symlink()):
        return
    try:
        same = path.read_text(encoding="utf-8") == pem
    except (OSError, UnicodeDecodeError):
        same = False
    if not same:
        raise _refuse("copy_destination_not_empty", f"the destination's public key file {path} "
                      "exists and holds another key: move it away or name another destination")


def _copy(source: Ledger, src: str, dst: str, dst_keys: str, master: bytes, master_at: str,
          pem: str | None, progress: Progress | None) -> CopyResult:
    counts: dict[str, int] = {}
    destroyed = 0
    try:
        db = open_ledger(dst, create=True)
    except StoreError as exc:
        raise _refuse(exc.code, str(exc)) from None
    keys: KeyRing | None = None
    store: Any = None
    try:
        db.put_meta(COPY_INCOMPLETE, f"copy of {address_of(src).display} begun at "
                    f"{format_time(WallClock().now())}")
        with source.transaction():  # the source's write lock: nothing is appended meanwhile
            for key, value in _all_rows(source.db, "ledger_meta", ("key", "value")):
                if key not in NOT_COPIED_META:
                    db.put_meta(str(key), str(value))
            # The key store first: a server destination seals each subject id as its rows
            # load (issue 34: never stored in the clear, not even for a moment).
            master_at = place_master(dst_keys, master)
            store = open_keystore(dst_keys)
            keys_src = source.keys
            assert keys_src is not None
            for name, value in _all_rows(keys_src.store, "keystore_meta", ("name", "value")):
                held = store.meta(str(name))
                if held is None:
                    store.put_meta(str(name), bytes(value))
                elif held != bytes(value):
                    raise _refuse("copy_unsupported", f"the new key store's entry {name!r} "
                                  "differs from the source's")
            for table in KEY_TABLES:
                counts[table] = _copy_table(keys_src.store, store, table, progress)
            for row in _all_rows(store, "subject_keys", ("wrapped",)):
                destroyed += row[0] is None
            keys, store = KeyRing(store, master), None
            db.use_subject_codec(SubjectIdCodec(keys))
            for table in LEDGER_TABLES:
                counts[table] = _copy_table(source.db, db, table, progress)
        # The destination read as any open reads it: bound to this ledger, its marks held.
        core = LedgerCore(db, source.policy, keys=keys)
        check_high_water(db, keys, dst, readonly=False)
        indexed = core.reindex()
        crash_point("copy.indexed")
        db.put_meta(COPY_INCOMPLETE, None)
        public = str(write_public_key(dst, pem)) if pem is not None else None
    except (StoreError, LedgerError) as exc:
        code = exc.code
        raise _refuse(code, f"{exc}; the copy stopped: {address_of(dst).display} is left "
                      "marked incomplete (every open refuses it): remove it, its key store and "
                      "its master key file, then copy again") from None
    finally:
        if store is not None:
            store.close()
        if keys is not None:
            keys.close()
        db.close()
    return CopyResult(
        source=address_of(src).display, destination=address_of(dst).display,
        events=counts["events"], facts=counts["facts"], subject_keys=counts["subject_keys"],
        destroyed_keys=destroyed, marks=counts["ledger_marks"], indexed=indexed, rows=counts,
        keystore=address_of(dst_keys).display, master_key=master_at, public_key=public)


def _copy_table(src: Any, dst: Any, table: str, progress: Progress | None) -> int:
    """One table, a batch at a time, with the source's column names."""
    names = src.columns(table)
    done = 0
    for batch in src.copy_rows(table, names):
        done += dst.load_rows(table, names, batch)
        crash_point("copy.loading")
        if progress is not None:
            progress(table, done)
    return done


def _all_rows(store: Any, table: str, names: tuple[str, ...] | None = None) -> Any:
    """Every row of a small table (or the `names` columns of any), one at a time."""
    for batch in store.copy_rows(table, list(names) if names else store.columns(table)):
        yield from batch
