"""The key ring: per-subject data keys (with the shred fence), the forget key, pepper and signing key."""

from __future__ import annotations

import hmac
import json
import socket
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

from custody_app.domain.errors import LedgerError
from custody_app.keys import crypto, marks
from custody_app.keys import epoch as epochs

# The key files beside a key store (custody_app.keys.master), named here as they always were.
from custody_app.keys.master import KEYSTORE_ENV as KEYSTORE_ENV
from custody_app.keys.master import MASTER_ENV as MASTER_ENV
from custody_app.keys.master import keystore_exists as keystore_exists
from custody_app.keys.master import keystore_path_for as keystore_path_for
from custody_app.keys.master import load_master as load_master
from custody_app.keys.master import master_from_env as master_from_env
from custody_app.keys.master import master_path_for as master_path_for
from custody_app.keys.master import missing_keystore as missing_keystore
from custody_app.keys.master import place_master as place_master
from custody_app.keys.master import public_key_path_for as public_key_path_for
from custody_app.keys.master import public_key_refusal as public_key_refusal
from custody_app.keys.master import read_public_key as read_public_key
from custody_app.keys.master import write_public_key as write_public_key
from custody_app.keys.master import write_secret as write_secret
from store import KeyStoreFile, open_keystore
from store.errors import StoreError
from store.rows import MarkRow

# Subjects whose refs and keys are cached (each cache is emptied when full): enough for a
# group's working set, and at ~300 bytes an entry, an RSS that does not grow with the ledger.
CACHED_SUBJECTS = 65_536
# Opens that read the key file just before another process's rotation committed: tried again.
RACED_ROTATION_TRIES = 4
# What an open that raced another process's rotation of this host's key file can meet.
RACED_CODES = ("epoch_rotated", "master_key_wrong", "master_key_invalid")


# ledger_meta: the fingerprint of the word index key the lexical index was built under
# (erasure/rotate.py writes it, inside the ledger transaction that re-indexes).
INDEX_KEY_ID = "index_key_id"


def index_key_id(key: bytes) -> str:
    """A fingerprint of a word index key, kept in the ledger (a random 256-bit key: it gives
    nothing away)."""
    return crypto.keyed_digest(key, "custody", "index key id")


def _ms(moment: str) -> str:
    """Millisecond prefix of a stored time: the fence compares at that resolution."""
    return moment[:23]


def _fence(subject: str, work_started: str, destroyed: str | None) -> None:
    """Refuse work that began at or before the subject's latest key destruction."""
    if destroyed is not None and _ms(work_started) <= _ms(destroyed):
        raise LedgerError(
            "key_fenced",
            f"the data of subject {subject} was erased at {destroyed}; work that began at "
            f"{work_started} cannot write it (start new work to re-key)")


class KeyRing:
    """Unwrapped keys live only in memory here; the store holds them wrapped."""

    def __init__(self, store: KeyStoreFile, master: bytes, address: str | None = None) -> None:
        self.store = store
        # The key store's address as opened (a path, or a URL that may carry a password: never
        # printed; `path` is what messages show). The local key files are named from it.
        self.address = address if address is not None else store.path
        self._master = master
        self._cache: dict[tuple[str, int], bytes] = {}
        self._slots: dict[str, bytes] = {}
        self._refs: dict[str, str] = {}
        # Live (generation, key) per subject ref, trusted while no other connection committed.
        # (generation, key, latest destruction, key created at, the digest key derived from
        # it) per subject ref: dropped with the key, so the derived key never outlives it.
        self._live: dict[str, tuple[int, bytes, str | None, str, bytes]] = {}
        self._seen_version = -1
        # (key, fingerprint) of the word index key last fingerprinted (see held_index_id).
        self._index_id: tuple[bytes, str] | None = None
        # The genesis hash of the ledger opened with this key store (set by the open's check):
        # the first mark binds an unbound key store to it.
        self.genesis: Callable[[], str | None] | None = None
        check = store.meta("check")
        if check is None:
            store.put_meta("check", crypto.wrap(master, b"custody", "check"))
        else:
            try:
                crypto.unwrap(master, check, "check")
            except crypto.DecryptError:
                where = f"${MASTER_ENV}" if master_from_env() is not None else str(
                    master_path_for(self.address))
                stale = epochs.stale_message(store, master, where)
                if stale is not None:
                    raise LedgerError("epoch_rotated", stale) from None
                raise LedgerError("master_key_wrong",
                                  f"the master key does not open the key store {store.path}") from None
        try:
            self._mark_key = mark_key_of(store, master)
        except crypto.DecryptError:
            # The check opened, then another process's rotation committed before the marks'
            # key was read: `epoch_rotated`, which `open` tries again with the new key file.
            found = epochs.record(store)
            if found is None or found.get("id") == epochs.epoch_id(master):
                raise LedgerError("master_key_wrong", f"the marks' key in {store.path} does not "
                                  "open under the master key that opens its check") from None
            raise LedgerError("epoch_rotated", f"the key store {store.path} was rotated to the "
                              f"epoch {found.get('id')} while it was being opened") from None
        # Derived from the marks' key, which a rotation keeps: a host's mark made under one
        # epoch still holds under the next (core.host_mark).
        self._host_mark_key = marks.host_mark_key(self._mark_key)
        self._certificate_key = marks.certificate_key(self._mark_key)

    @classmethod
    def open(cls, ledger_path: str | Path, keystore: str | Path | None = None, *,
             readonly: bool = False) -> KeyRing:
        """The key ring of the ledger's key store. A `.next` key file a rotate-epoch cut short
        left is settled first (promoted or deleted); `readonly` leaves the files as they are
        and uses whichever of the two keys opens the key store."""
        path = keystore_path_for(ledger_path, keystore)
        # The store first: a file of another application is refused before a master key
        # file is made beside it.
        try:
            store = open_keystore(path)
        except StoreError as exc:
            raise LedgerError(exc.code, str(exc)) from None
        for attempt in range(RACED_ROTATION_TRIES):
            try:
                nxt = epochs.next_path(master_path_for(path))
                if master_from_env() is None and nxt.exists():
                    # A rotate-epoch cut short leaves `<master file>.next`: settled first.
                    if not readonly:
                        epochs.resolve(store, master_path_for(path))
                    elif epochs.opens(store, key := epochs.read_key(nxt)) and key is not None:
                        return cls(store, key, path)
                # A master key is made only for a new key store: one that already holds keys
                # was made under another (a server ledger opened from a second host, say), and
                # a fresh key file would open nothing.
                return cls(store, load_master(path, create=store.meta("check") is None), path)
            except LedgerError as exc:
                # A rotation in another process of this host committed between this open's
                # read of the key file and its check: the new key is in the file (or its
                # `.next`) by now, or soon. Another host's rotation is refused as it was.
                # So is a key file read in the instant a promotion had zeroed it and not yet
                # renamed the new one over it (`master_key_wrong`: the zero key opens nothing).
                if (exc.code not in RACED_CODES or master_from_env() is not None
                        or attempt == RACED_ROTATION_TRIES - 1):
                    store.close()
                    raise
                time.sleep(0.05 * (attempt + 1))
            except BaseException:
                store.close()
                raise
        raise AssertionError("unreachable: the last try raises or returns")

    def sibling(self) -> KeyRing:
        """A ring of its own on a new connection to the same key store, under the same master
        key: for a background thread (each thread its own connection; the caches of this one
        are not shared)."""
        try:
            store = open_keystore(self.address)
        except StoreError as exc:
            raise LedgerError(exc.code, str(exc)) from None
        try:
            return type(self)(store, self._master, self.address)
        except BaseException:
            store.close()
            raise

    @property
    def path(self) -> str:
        return self.store.path

    @property
    def master_file(self) -> Path:
        """Where this key store's master key file is (used when $CUSTODY_MASTER_KEY is unset)."""
        return master_path_for(self.address)

    @property
    def epoch(self) -> str:
        """The id of the epoch key this ring holds."""
        return epochs.epoch_id(self._master)

    def _wrap(self, key: bytes, purpose: str) -> bytes:
        """`key` wrapped under the epoch in force. Called inside a key store transaction, so
        no rotation commits between this check and the write: a key wrapped under an epoch
        another process has just retired would be lost with it."""
        self._follow_epoch()
        return crypto.wrap(self._master, key, purpose)

    def _open_wrapped(self, wrapped: bytes, purpose: str) -> bytes:
        """Unwrap under the epoch held here, else (another process rotated it since) under
        the epoch in force, read again from the key files."""
        try:
            return crypto.unwrap(self._master, wrapped, purpose)
        except crypto.DecryptError:
            if not self._follow_epoch():
                raise
        return crypto.unwrap(self._master, wrapped, purpose)

    def _follow_epoch(self) -> bool:
        """When the key store's epoch is not the one held here (another process ran
        rotate-epoch), take the new key from this host's key file (or the `.next` of a rotation
        that committed and has not renamed it yet); `epoch_rotated` when this host has none.
        True when the key changed. The unwrapped keys stay valid: a rotation re-wraps them."""
        found = epochs.record(self.store)
        if found is None or found.get("id") == self.epoch:
            return False
        wanted = str(found.get("id"))
        if master_from_env() is None:
            # Again after a pause: a promotion in another process may be between its two steps
            # (the read path holds no lock; a write holds the key store's, which a promotion
            # takes), or a newer rotation may have committed since the record was read (the
            # epoch wanted is read again each time).
            for attempt in range(RACED_ROTATION_TRIES):
                for path in (self.master_file, epochs.next_path(self.master_file)):
                    key = epochs.read_key(path)
                    if key is not None and epochs.epoch_id(key) == wanted and epochs.opens(
                            self.store, key):
                        self._master = key
                        return True
                time.sleep(0.05 * (attempt + 1))
                wanted = str((epochs.record(self.store) or found).get("id"))
        where = f"${MASTER_ENV}" if master_from_env() is not None else str(self.master_file)
        raise LedgerError("epoch_rotated", epochs.stale_message(self.store, self._master, where)
                          or f"the key store {self.path} is under epoch {wanted}, which the "
                          f"key in {where} is not: copy the key file of the host that rotated "
                          "it")

    def rotate_epoch(self, at: str, seq: int,
                     crash_point: Callable[[str], None] = lambda _: None) -> dict[str, object]:
        """A new epoch key: every live wrapped key re-wrapped under it in one key store
        transaction that records the new epoch (its id, `at`, the ledger head `seq` it
        covers), then the old key file overwritten and replaced (custody_app.keys.epoch).
        Refused (`epoch_key_in_env`) while $CUSTODY_MASTER_KEY gives the key: the product
        cannot destroy an environment variable. Returns the rotation recorded. `crash_point`:
        the kill trials' hook (custody_app.core.faults), called at each step."""
        if master_from_env() is not None:
            raise LedgerError(
                "epoch_key_in_env",
                f"rotate-epoch destroys the old epoch key, and the key here comes from "
                f"${MASTER_ENV}, which this program cannot destroy: nothing was changed. Write "
                f"the key to the master key file {self.master_file} (mode 0600), unset "
                f"${MASTER_ENV} and run rotate-epoch again")
        path = self.master_file
        nxt = epochs.next_path(path)
        epochs.resolve(self.store, path)
        with self.store.write():
            self._follow_epoch()
            old, new = self._master, crypto.new_key()
            write_secret(nxt, new.hex().encode())
            crash_point("epoch.next_written")
            try:
                rows = [(ref, gen, crypto.wrap(new, crypto.unwrap(old, wrapped,
                                                                  f"data:{ref}:{gen}"),
                                               f"data:{ref}:{gen}"))
                        for ref, gen, wrapped in self.store.live_keys()]
                self.store.rewrap_keys(rows)
                if self.store.meta(epochs.MARK_KEY_META) is None:
                    self.store.put_meta(epochs.MARK_KEY_META,
                                        crypto.wrap(new, self._mark_key, epochs.MARK_KEY_META))
                for name in epochs.WRAPPED_META:
                    wrapped = self.store.meta(name)
                    if wrapped is not None and not (name == epochs.MARK_KEY_META and
                                                    _opens(new, wrapped, name)):
                        self.store.replace_meta(
                            name, crypto.wrap(new, crypto.unwrap(old, wrapped, name), name))
                self.store.replace_meta("check", crypto.wrap(new, b"custody", "check"))
                found = epochs.record(self.store) or {}
                rotation = {"retired": self.epoch, "id": epochs.epoch_id(new), "at": at,
                            "seq": seq, "host": socket.gethostname(), "file": str(path),
                            "keys": len(rows)}
                history = [*epochs.rotations(self.store), rotation]
                value = json.dumps({"id": rotation["id"], "at": at, "host": rotation["host"],
                                    "file": str(path), "rotations": history},
                                   sort_keys=True).encode()
                if found:
                    self.store.replace_meta(epochs.EPOCH_META, value)
                else:
                    self.store.put_meta(epochs.EPOCH_META, value)
                crash_point("epoch.before_commit")
            except BaseException:
                nxt.unlink(missing_ok=True)  # the transaction rolls back: the new key opens nothing
                raise
        crash_point("epoch.keys_committed")
        self._master = new
        # Under the key store's lock again: an open in another process may be settling the
        # same `.next` (it promotes it as this would).
        epochs.resolve(self.store, path, crash_point)
        crash_point("epoch.promoted")
        return rotation

    def close(self) -> None:
        self._cache.clear()
        self._slots.clear()
        self.store.close()

    def _slot(self, name: str, make: bytes | None = None) -> bytes:
        """A named key, created on first use (forget key, pepper, signing key)."""
        if name not in self._slots:
            wrapped = self.store.meta(name)
            if wrapped is None:
                with self.store.write():
                    self.store.put_meta(name, self._wrap(make or crypto.new_key(), name))
                wrapped = self.store.meta(name)
                assert wrapped is not None
            self._slots[name] = self._open_wrapped(wrapped, name)
        return self._slots[name]

    @property
    def forget_key(self) -> bytes:
        """Keyed the digests of forgotten values before they were keyed per subject."""
        return self._slot("forget")

    def legacy_forget_key(self) -> bytes | None:
        """The forget key if the key store has one (never made here): reads old digests."""
        if "forget" not in self._slots and self.store.meta("forget") is None:
            return None
        return self._slot("forget")

    def digest_key(self, ref: str) -> bytes | None:
        """The key of the subject's forgotten-value digests: derived from its live data key,
        destroyed with that key. Once the subject is re-keyed (issue 34) the derived key is
        kept wrapped beside its data keys (`_pin_digest`), so the digests kept before stay
        recognisable; forget_subject destroys it with them. None without a live key."""
        self._follow_store()
        live = self._live.get(ref)
        if live is not None:
            # The subject's latest key, live, as the key store stood at its change counter.
            generation, key = live[0], live[1]
            if generation == 1:
                return live[4]
        else:
            row = self.store.latest(ref)
            if row is None or row[1] is None or row[3] is not None:
                return None
            generation, key = row[0], self._unwrap(ref, row[0], row[1])
        if generation > 1:
            # Pinned at the subject's first re-key, which made generation 2 or later: a subject
            # still at its first generation has none (and costs no read for it).
            pinned = self.store.latest(_digest_ref(ref))
            if pinned is not None and pinned[1] is not None and pinned[3] is None:
                return self._unwrap(_digest_ref(ref), pinned[0], pinned[1])
        return _derived_digest_key(key)

    def _follow_store(self) -> None:
        """Forget the live keys known here when the key store changed since they were read
        (its change counter moved: another connection's commit, or a write of this one not
        followed here)."""
        version = self.store.data_version()
        if version != self._seen_version:
            self._live.clear()
            self._seen_version = version

    @property
    def index_key(self) -> bytes:
        """Keys the word hashes of the lexical index, so it holds no plaintext words."""
        return self._slot("index")

    def pending_index_key(self) -> bytes | None:
        """The new word index key of a rotation under way (its recorded intent), if any."""
        wrapped = self.store.meta("index_next")
        return None if wrapped is None else self._open_wrapped(wrapped, "index_next")

    def begin_index_rotation(self) -> bytes:
        """Record the intent of a rotation: a fresh key beside the current one (or the key of
        a rotation already under way). The ledger re-indexes under it next."""
        pending = self.pending_index_key()
        if pending is not None:
            return pending
        self._slot("index")  # the slot must exist before it is replaced
        new = crypto.new_key()
        with self.store.write():
            self.store.put_meta("index_next", self._wrap(new, "index_next"))
        return new

    def follow_index(self, recorded: str | None) -> None:
        """Read with the pending key when the ledger's index is already under it (a rotation
        cut short after the ledger committed, before a read-write open finishes it)."""
        pending = self.pending_index_key()
        if pending is not None and recorded == index_key_id(pending):
            self._slots["index"] = pending

    def held_index_id(self) -> str | None:
        """The fingerprint of the word index key this ring holds in memory (None: none loaded
        yet, so the next use reads the key store afresh)."""
        key = self._slots.get("index")
        if key is None:
            return None
        if self._index_id is None or self._index_id[0] != key:
            self._index_id = (key, index_key_id(key))
        return self._index_id[1]

    def fence_index(self, recorded: str | None) -> bool:
        """Inside a write transaction (both files locked): make sure the word index key held
        here is the one the ledger's index is under (`recorded`, its fingerprint in the
        ledger; None: never rotated). Another process may have rotated it since this one
        loaded it: then the key is read again from the key store (the pending key of a
        rotation under way, else the current one), so no index row is ever written under a
        destroyed key. True when the held key was dropped for another."""
        held = self.held_index_id()
        if recorded is None or held == recorded:
            return False
        self._slots.pop("index", None)
        pending = self.pending_index_key()
        if pending is not None and index_key_id(pending) == recorded:
            self._slots["index"] = pending
        return True

    def finish_index_rotation(self, expected: bytes | None = None) -> None:
        """The pending key replaces the index key in one key store transaction; the old key is
        destroyed (overwritten in place, secure_delete, rollback journal) and the intent goes.
        The intent is read inside that transaction, and with `expected` only that rotation is
        finished: another process may have finished it and begun the next since this one
        read it (a read-write open rolling forward beside a running rotate-epoch)."""
        with self.store.write():
            new = self.pending_index_key()
            if new is None or (expected is not None and new != expected):
                return
            self.store.replace_meta("index", self._wrap(new, "index"))
            self.store.drop_meta("index_next")
        self._slots["index"] = new

    @property
    def signing_key(self) -> bytes:
        if "signing" not in self._slots and self.store.meta("signing") is None:
            return self._slot("signing", crypto.new_signing_key())
        return self._slot("signing")

    def public_pem(self) -> str:
        return crypto.public_pem(self.signing_key)

    def subject_ref(self, subject: str) -> str:
        """The peppered subject hash: names a subject without its plaintext."""
        ref = self._refs.get(subject)
        if ref is None:
            if len(self._refs) >= CACHED_SUBJECTS:
                self._refs.clear()
            ref = self._refs[subject] = crypto.keyed_digest(self._slot("pepper"), "subject",
                                                            subject)
        return ref

    def key_for_write(self, subject: str, work_started: str, now: str,
                      erased_at: str | None = None) -> tuple[int, bytes]:
        """The subject's current data key; refuses work that began before the subject's latest
        erasure, even when newer work has minted a key since (the key fence). `erased_at` is
        the ledger's latest tombstone of the subject: the ledger commits an erasure before the
        key store destroys the key, so a destruction the key store has not recorded yet is
        completed here first (rolled forward), and fences all the same."""
        ref = self.subject_ref(subject)
        self._follow_store()
        live = self._live.get(ref)
        if live is not None and erased_at is not None and live[3] <= erased_at and (
                live[2] is None or live[2] < erased_at):
            live = None  # its erasure is not in the key store yet
        if live is None:
            destroyed = self.store.last_destroyed(ref)
            if erased_at is not None and (destroyed is None or destroyed < erased_at):
                self.destroy(subject, erased_at)
                destroyed = erased_at
            _fence(subject, work_started, destroyed)
            generation, key, created = self._key_for_write(ref, now)
            if len(self._live) >= CACHED_SUBJECTS:  # caches, bounded: RSS stays flat
                self._live.clear()
            live = self._live[ref] = (generation, key, destroyed, created,
                                      _derived_digest_key(key))
        _fence(subject, work_started, live[2])
        return live[0], live[1]

    def _key_for_write(self, ref: str, now: str) -> tuple[int, bytes, str]:
        row = self.store.latest(ref)
        if row is not None and row[3] is None:
            return row[0], self._unwrap(ref, row[0], row[1]), row[2]
        generation = 1 if row is None else row[0] + 1
        key = crypto.new_key()
        # Inside a key store transaction (the epoch check in _wrap holds until it ends); the
        # enclosing write's when there is one: a savepoint would cost a server a round trip.
        with nullcontext() if self.store.writing() else self.store.write():
            self.store.add(ref, generation, self._wrap(key, f"data:{ref}:{generation}"), now)
        # This write is the key store's change: the keys cached here stay current (the next
        # key_for_write of this transaction needs no second look at the store).
        self._seen_version = self.store.data_version()
        if len(self._cache) >= CACHED_SUBJECTS:
            self._cache.clear()
        self._cache[(ref, generation)] = key
        return generation, key, now

    def key_for_read(self, ref: str, generation: int) -> bytes | None:
        """The key (by subject ref) a value was sealed with, or None when it was destroyed."""
        if (ref, generation) in self._cache:
            return self._cache[(ref, generation)]
        row = self.store.generation(ref, generation)
        if row is None or row[1] is None:
            return None
        return self._unwrap(ref, generation, row[1])

    def key_for_open(self, ref: str, generation: int) -> bytes | None:
        """key_for_read() for opening a stored blob: None when the key was destroyed (the
        blob is erased), DecryptError when the key store never held that generation (a blob
        put there by hand: a re-seal's rule lets only a higher generation in, issue 34)."""
        key = self.key_for_read(ref, generation)
        if key is None and self.store.generation(ref, generation) is None:
            raise crypto.DecryptError(f"a stored value is sealed under key generation "
                                      f"{generation}, which the key store never held")
        return key

    def snapshot_keys(self) -> Callable[[str, int], bytes | None]:
        """key_for_open() answered from every key row read in one query now (a walk over
        every sealed blob, verify's, instead of one query per subject): each key unwrapped when
        first asked. A generation the read did not hold is asked of the key store again (a
        re-key another process committed since, which the ledger's later snapshot may name)
        before it is called never held."""
        rows = {(ref, gen): wrapped for ref, gen, wrapped in self.store.key_rows()}

        def key_for(ref: str, generation: int) -> bytes | None:
            slot = (ref, generation)
            if slot not in rows:
                if self.store.generation(ref, generation) is None:
                    raise crypto.DecryptError(f"a stored value is sealed under key generation "
                                              f"{generation}, which the key store never held")
                return self.key_for_read(ref, generation)
            wrapped = rows[slot]
            return None if wrapped is None else self._unwrap(ref, generation, wrapped)
        return key_for

    def _unwrap(self, ref: str, generation: int, wrapped: bytes | None) -> bytes:
        if (ref, generation) not in self._cache:
            if len(self._cache) >= CACHED_SUBJECTS:
                self._cache.clear()
            assert wrapped is not None
            self._cache[(ref, generation)] = self._open_wrapped(wrapped,
                                                                f"data:{ref}:{generation}")
        return self._cache[(ref, generation)]

    def drop_cache(self) -> None:
        """Forget unwrapped keys: a rolled-back write may have created one that never landed."""
        self._live.clear()
        self._cache.clear()

    def destroy(self, subject: str, at: str) -> int:
        """Destroy every live data key of the subject (crypto-shredding); the rows stay as tombstones."""
        return self.destroy_ref(self.subject_ref(subject), at)

    # ---- re-keying a subject whose facts an erasure took (issue 34, erasure/rekey.py) ----

    def rekey_begin(self, ref: str, now: str) -> int:
        """A new data key generation for the subject (by peppered ref), returned; the next
        write and the re-seal use it. Its digest key is pinned first, so re-keying does not
        change it. Inside the erasure's transaction: the key store commits before the ledger,
        so no re-sealed value lacks its key."""
        with self.store.write():
            self._pin_digest(ref, now)
            row = self.store.latest(ref)
            generation = 1 if row is None else row[0] + 1
            key = crypto.new_key()
            self.store.add(ref, generation,
                           crypto.wrap(self._master, key, f"data:{ref}:{generation}"), now)
        self._live.pop(ref, None)
        self._cache[(ref, generation)] = key
        return generation

    def _pin_digest(self, ref: str, now: str) -> None:
        digest_ref = _digest_ref(ref)
        pinned = self.store.latest(digest_ref)
        if pinned is not None and pinned[3] is None:
            return
        key = self.digest_key(ref)
        if key is None:
            return
        generation = 1 if pinned is None else pinned[0] + 1
        self.store.add(digest_ref, generation,
                       crypto.wrap(self._master, key, f"data:{digest_ref}:{generation}"), now)

    def retire(self, ref: str, below: int, at: str) -> int:
        """Destroy the subject's data key generations older than `below` (the re-key's end:
        nothing sealed under them is left). Fences no work: generation `below` lives on."""
        self._cache = {k: v for k, v in self._cache.items() if k[0] != ref or k[1] >= below}
        self._live.pop(ref, None)
        return self.store.retire(ref, below, at)

    def record_mark(self, head: tuple[int, str, str] | None, *, accepted: bool = False) -> None:
        """Record the ledger's head as the high-water mark (rollback detection), MAC'd, and
        bind an unbound key store to the ledger's genesis."""
        if head is None:
            return
        with self.store.write():
            # Only this transaction's own writes move the change counter from here (the key
            # store's lock is held): if the live keys known here were current at its start,
            # they still are after it.
            current = self.store.data_version() == self._seen_version
            if self.genesis is not None and self.store.meta("ledger") is None:
                genesis = self.genesis()
                if genesis is not None:
                    self.store.put_meta("ledger", genesis.encode("ascii"))
            last = self.newest_trusted_mark()
            self.store.add_mark(head[0], head[1], head[2],
                                lambda row: marks.mark_mac(self._mark_key, row),
                                accepted=accepted, last=last)
            if current:
                self._seen_version = self.store.data_version()

    def host_mark_mac(self, genesis: str, seq: int, head: str, at: str) -> str:
        """The MAC of a host's own copy of the ledger's high-water mark (kept outside the
        database: custody_app.core.host_mark), under a key derived from the marks' key."""
        return marks.host_mark_mac(self._host_mark_key, genesis, seq, head, at)

    def certificate_mac(self, record: str) -> str:
        """The MAC of a certificate kept in the ledger for the next rotation
        (custody_app.erasure.epoch_certs): the database alone cannot forge or edit one."""
        return crypto.keyed_digest(self._certificate_key, "epoch certificate", record)

    def newest_trusted_mark(self) -> MarkRow | None:
        """The newest mark whose MAC holds: the newest row alone when it holds (the usual
        case, one row read), else the page-by-page search of trusted_mark."""
        newest = self.store.newest_mark()
        if newest is not None and newest[5] is not None and hmac.compare_digest(
                newest[5], marks.mark_mac(self._mark_key, newest)):
            return newest
        return self.trusted_mark()[0]

    def trusted_mark(self) -> tuple[MarkRow | None, list[MarkRow]]:
        """(the newest mark whose MAC holds, the untrusted rows newer than it)."""
        return marks.trusted_mark(self.store, self._mark_key)

    def bound_ledger(self) -> str | None:
        """The genesis hash of the ledger this key store belongs to, once bound."""
        value = self.store.meta("ledger")
        return None if value is None else value.decode("ascii", "replace")

    def destroy_ref(self, ref: str, at: str) -> int:
        """destroy() by peppered subject hash (the roll-forward of an erasure has no plaintext);
        the subject's pinned digest key goes with its data keys."""
        digest_ref = _digest_ref(ref)
        self._cache = {k: v for k, v in self._cache.items() if k[0] not in (ref, digest_ref)}
        self._live.pop(ref, None)
        with self.store.write():
            pinned = self.store.latest(digest_ref)
            if pinned is not None and pinned[3] is None:
                self.store.destroy(digest_ref, at)
            return self.store.destroy(ref, at)

    def destroyed_at(self, subject: str) -> str | None:
        row = self.store.latest(self.subject_ref(subject))
        return None if row is None else row[3]


def _digest_ref(ref: str) -> str:
    """Where a re-keyed subject's digest key is kept among the subject keys (a subject ref is
    hex: no subject's own ref looks like this)."""
    return f"digest:{ref}"


def _derived_digest_key(key: bytes) -> bytes:
    """The forgotten-value digest key of a subject still at its first key: derived from it."""
    return bytes.fromhex(crypto.keyed_digest(key, "custody", "forgotten digests"))


def _opens(key: bytes, wrapped: bytes, purpose: str) -> bool:
    try:
        crypto.unwrap(key, wrapped, purpose)
    except crypto.DecryptError:
        return False
    return True


def mark_key_of(store: KeyStoreFile, master: bytes) -> bytes:
    """The marks' MAC key: the one a rotation kept (wrapped in the key store), else derived from
    the master key (a key store never rotated: marks made before any rotation verify)."""
    wrapped = store.meta(epochs.MARK_KEY_META)
    if wrapped is None:
        return marks.mark_key(master)
    return crypto.unwrap(master, wrapped, epochs.MARK_KEY_META)
