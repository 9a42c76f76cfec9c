"""The key ring: per-subject data keys (with the shred fence), the forget key, pepper and signing key."""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable
from pathlib import Path

from custody_app.domain.errors import LedgerError
from custody_app.files.output import write_output
from custody_app.keys import crypto, marks
from store import KeyStoreFile, open_keystore
from store import keystore_exists as store_keystore_exists
from store.address import address_of
from store.errors import StoreError
from store.rows import MarkRow

MASTER_ENV = "CUSTODY_MASTER_KEY"
KEYSTORE_ENV = "CUSTODY_KEYSTORE"
# Subjects whose refs and keys are cached (each cache is emptied when full): enough for a
# group's working set, and at ~300 bytes an entry, an RSS that does not grow with the ledger.
CACHED_SUBJECTS = 65_536


def keystore_path_for(ledger_path: str | Path, keystore: str | Path | None = None) -> str:
    """`--keystore`, else $CUSTODY_KEYSTORE, else the ledger's own (`<ledger>.keys` beside a
    file ledger; the server ledger's database for a server ledger)."""
    chosen = keystore or os.environ.get(KEYSTORE_ENV)
    return str(chosen) if chosen else address_of(ledger_path).default_keystore()


def keystore_exists(keystore: str | Path) -> bool:
    return store_keystore_exists(str(keystore))


def master_path_for(keystore: str | Path) -> Path:
    return address_of(keystore).master_key_file()


def public_key_path_for(ledger_path: str | Path) -> Path:
    return address_of(ledger_path).sibling(".pub")


def write_public_key(ledger_path: str | Path, pem: str) -> Path:
    """`<ledger>.pub` (0644), written once: an existing file holding this key is kept, and one
    holding anything else is never replaced (`output_protected`)."""
    path = public_key_path_for(ledger_path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        if path.is_file() and path.read_text(encoding="utf-8") == pem:
            return path
    except (OSError, UnicodeDecodeError):
        pass
    return write_output(path, pem, public=True)


def _write_secret(path: Path, data: bytes) -> None:
    """Create `path` (0600) holding `data`, all or nothing: a process killed half-way leaves no
    empty key file behind (that would make the ledger unopenable). Never replaces a file."""
    # A server ledger's local key files live in a per-user folder made on first use (0700).
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(temp, path)  # fails if the file exists, like O_EXCL
    finally:
        temp.unlink(missing_ok=True)


def master_from_env() -> bytes | None:
    """$CUSTODY_MASTER_KEY as bytes, None when unset; refused unless 64 hex digits."""
    env = os.environ.get(MASTER_ENV)
    if not env:
        return None
    try:
        key = bytes.fromhex(env.strip())
    except ValueError:
        key = b""
    if len(key) != crypto.KEY_BYTES:
        raise LedgerError("master_key_invalid", f"{MASTER_ENV} must be 64 hex digits")
    return key


def load_master(keystore: str | Path, *, create: bool) -> bytes:
    """The master key: $CUSTODY_MASTER_KEY (64 hex digits), else the key file beside the store."""
    env = master_from_env()
    if env is not None:
        return env
    path = master_path_for(keystore)
    if not path.exists():
        if not create:
            raise LedgerError("master_key_missing", f"master key file {path} does not exist "
                              f"(copy it from the host that created the key store, or set "
                              f"${MASTER_ENV})")
        try:
            _write_secret(path, crypto.new_key().hex().encode())
        except FileExistsError:
            pass  # another process opening the same new ledger made it first: use theirs
    try:
        key = bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError):
        key = b""
    if len(key) != crypto.KEY_BYTES:
        raise LedgerError("master_key_invalid", f"master key file {path} is not 64 hex digits")
    return key


def place_master(keystore: str | Path, key: bytes, *, check_only: bool = False) -> str:
    """Make `key` the master key of the key store at `keystore` (a copy's: its wrapped keys
    are under the source's master key): nothing to write when `$CUSTODY_MASTER_KEY` gives
    it; else its master key file, 0600, kept when it holds this key already, never
    replaced when it holds another (`master_key_conflict`). Returns where the key is (with
    `check_only`: where it would be, refusing the same conflicts, writing nothing)."""
    env = master_from_env()
    if env is not None:
        if env != key:
            raise LedgerError("master_key_conflict",
                              f"${MASTER_ENV} is not the source's master key: unset it (the "
                              "copy then writes the key file) or set it to the source's key")
        return f"${MASTER_ENV}"
    path = master_path_for(keystore)
    if not path.exists() and not path.is_symlink():
        if check_only:
            return str(path)
        try:
            _write_secret(path, key.hex().encode())
            return str(path)
        except FileExistsError:
            pass
    try:
        held = bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError):
        held = b""
    if held != key:
        raise LedgerError("master_key_conflict",
                          f"the master key file {path} exists and holds another key: a copy "
                          "keeps the source's master key (its keys are wrapped under it); "
                          "move that file away or name another destination")
    return str(path)


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
        # (generation, key, latest destruction, key created at) per subject ref.
        self._live: dict[str, tuple[int, bytes, str | None, str]] = {}
        self._seen_version = -1
        self._mark_key = marks.mark_key(master)
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
                raise LedgerError("master_key_wrong",
                                  f"the master key does not open the key store {store.path}") from None

    @classmethod
    def open(cls, ledger_path: str | Path, keystore: str | Path | None = None) -> KeyRing:
        path = keystore_path_for(ledger_path, keystore)
        # The store first: a file of another application is refused before a master key
        # file is made beside it.
        try:
            store = open_keystore(path)
        except StoreError as exc:
            raise LedgerError(exc.code, str(exc)) from None
        try:
            # A master key is made only for a new key store: one that already holds keys was
            # made under another (a server ledger opened from a second host, say), and a fresh
            # key file would open nothing.
            return cls(store, load_master(path, create=store.meta("check") is None), path)
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

    def close(self) -> None:
        self._cache.clear()
        self._slots.clear()
        self.store.close()

    def _slot(self, name: str, make: bytes | None = None) -> bytes:
        """A named key, created on first use (forget key, pepper, signing key)."""
        if name not in self._slots:
            wrapped = self.store.meta(name)
            if wrapped is None:
                self.store.put_meta(name, crypto.wrap(self._master, make or crypto.new_key(), name))
                wrapped = self.store.meta(name)
                assert wrapped is not None
            self._slots[name] = crypto.unwrap(self._master, wrapped, name)
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
        pinned = self.store.latest(_digest_ref(ref))
        if pinned is not None and pinned[1] is not None and pinned[3] is None:
            return self._unwrap(_digest_ref(ref), pinned[0], pinned[1])
        row = self.store.latest(ref)
        if row is None or row[1] is None or row[3] is not None:
            return None
        key = self._unwrap(ref, row[0], row[1])
        return bytes.fromhex(crypto.keyed_digest(key, "custody", "forgotten digests"))

    @property
    def index_key(self) -> bytes:
        """Keys the word hashes of the lexical index, so it holds no plaintext words."""
        return self._slot("index")

    def pending_index_key(self) -> bytes | None:
        """The new word index key of a rotation under way (its recorded intent), if any."""
        wrapped = self.store.meta("index_next")
        return None if wrapped is None else crypto.unwrap(self._master, wrapped, "index_next")

    def begin_index_rotation(self) -> bytes:
        """Record the intent of a rotation: a fresh key beside the current one (or the key of
        a rotation already under way). The ledger re-indexes under it next."""
        pending = self.pending_index_key()
        if pending is not None:
            return pending
        self._slot("index")  # the slot must exist before it is replaced
        new = crypto.new_key()
        self.store.put_meta("index_next", crypto.wrap(self._master, new, "index_next"))
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

    def finish_index_rotation(self) -> None:
        """The pending key replaces the index key in one key store transaction; the old key is
        destroyed (overwritten in place, secure_delete, rollback journal) and the intent goes."""
        new = self.pending_index_key()
        if new is None:
            return
        with self.store.write():
            self.store.replace_meta("index", crypto.wrap(self._master, new, "index"))
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
        version = self.store.data_version()
        if version != self._seen_version:
            self._live.clear()
            self._seen_version = version
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
            live = self._live[ref] = (generation, key, destroyed, created)
        _fence(subject, work_started, live[2])
        return live[0], live[1]

    def _key_for_write(self, ref: str, now: str) -> tuple[int, bytes, str]:
        row = self.store.latest(ref)
        if row is not None and row[3] is None:
            return row[0], self._unwrap(ref, row[0], row[1]), row[2]
        generation = 1 if row is None else row[0] + 1
        key = crypto.new_key()
        self.store.add(ref, generation, crypto.wrap(self._master, key, f"data:{ref}:{generation}"),
                       now)
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

    def _unwrap(self, ref: str, generation: int, wrapped: bytes | None) -> bytes:
        if (ref, generation) not in self._cache:
            if len(self._cache) >= CACHED_SUBJECTS:
                self._cache.clear()
            assert wrapped is not None
            self._cache[(ref, generation)] = crypto.unwrap(self._master, wrapped,
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
            if self.genesis is not None and self.store.meta("ledger") is None:
                genesis = self.genesis()
                if genesis is not None:
                    self.store.put_meta("ledger", genesis.encode("ascii"))
            last, _ = marks.trusted_mark(self.store, self._mark_key)
            self.store.add_mark(head[0], head[1], head[2],
                                lambda row: marks.mark_mac(self._mark_key, row),
                                accepted=accepted, last=last)

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


def read_public_key(path: str | Path) -> str:
    """A public key file's PEM text; an unreadable file is a `key_unreadable` refusal."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise LedgerError("key_unreadable",
                          f"cannot read public key {path}: {exc.strerror}") from None
