"""The key files beside a key store: where they are (`<ledger>.keys`, its master key file, the
ledger's public key), and the master key's loading from its file or `$CUSTODY_MASTER_KEY`,
and its placing beside a copy."""

from __future__ import annotations

import os
from pathlib import Path

from custody_app.domain.errors import LedgerError
from custody_app.files.output import write_output
from custody_app.keys import crypto
from store import keystore_exists as store_keystore_exists
from store import ledger_holds_events
from store.address import address_of

MASTER_ENV = "CUSTODY_MASTER_KEY"
KEYSTORE_ENV = "CUSTODY_KEYSTORE"


def keystore_path_for(ledger_path: str | Path, keystore: str | Path | None = None) -> str:
    """`--keystore`, else $CUSTODY_KEYSTORE, else the ledger's own (`<ledger>.keys` beside a
    file ledger; the server ledger's database for a server ledger)."""
    chosen = keystore or os.environ.get(KEYSTORE_ENV)
    return str(chosen) if chosen else address_of(ledger_path).default_keystore()


def keystore_exists(keystore: str | Path) -> bool:
    return store_keystore_exists(str(keystore))


def missing_keystore(ledger_path: str | Path, keystore: str | Path | None = None
                     ) -> LedgerError | None:
    """`keystore_missing` when the ledger holds events and its key store is not where it is
    looked for (a mistyped --keystore, a key store moved or deleted): a new one would open none
    of its values and fail its marks, so only a new ledger gets one (init, --demo, --create).
    Asked before any file is created; None when the key store is there or the ledger is new."""
    path = keystore_path_for(ledger_path, keystore)
    if keystore_exists(path) or not ledger_holds_events(ledger_path):
        return None
    address = address_of(ledger_path)
    shown, where = address_of(path).display, ""
    if keystore or os.environ.get(KEYSTORE_ENV):
        where = " (named by " + ("--keystore" if keystore else f"${KEYSTORE_ENV}") + ")"
    elif address.file() != address.text:
        where = f" (beside {address.file()}, the file the symbolic link {address.text} points to)"
    beside_link = Path(f"{address.text}.keys")
    hint = (f"; a key store is at {beside_link}, named after the link: name it with --keystore "
            f"{beside_link} if it is this ledger's") if (
        not address.server and where.startswith(" (beside") and beside_link.exists()) else ""
    return LedgerError(
        "keystore_missing",
        f"the key store of {address.display} is missing: there is no {shown}{where}. The "
        "ledger holds events sealed under that key store's keys, so no new one is made for it "
        f"and nothing was changed: put the key store back at {shown}, or name where it is with "
        f"--keystore PATH{hint}", path=shown)


def master_path_for(keystore: str | Path) -> Path:
    return address_of(keystore).master_key_file()


def public_key_path_for(ledger_path: str | Path) -> Path:
    return address_of(ledger_path).sibling(".pub")


def public_key_refusal(ledger_path: str | Path, pem: str | None = None) -> LedgerError | None:
    """Why `<ledger>.pub` may not be written (`key_exists`), asked before anything is made:
    something is at that path (a file, a link, a folder) that is not this very key `pem`."""
    path = public_key_path_for(ledger_path)
    if not os.path.lexists(path):
        return None
    try:
        if pem is not None and path.is_file() and path.read_text(encoding="utf-8") == pem:
            return None
    except (OSError, UnicodeDecodeError):
        pass
    what = ("another file" if path.is_file() and not path.is_symlink()
            else "a symbolic link" if path.is_symlink() else "something that is not a file")
    return LedgerError(
        "key_exists", f"refusing to write the ledger's public key {path}: {what} is there "
        "already, and a key file is never replaced; nothing was created or changed: move "
        f"{path} away, or choose another ledger path", path=str(path))


def write_public_key(ledger_path: str | Path, pem: str) -> Path:
    """`<ledger>.pub` (0644), written once: an existing file holding this key is kept, and
    anything else there is never replaced (`key_exists`, see public_key_refusal)."""
    path = public_key_path_for(ledger_path)
    if (refused := public_key_refusal(ledger_path, pem)) is not None:
        raise refused
    if os.path.exists(path):
        return path  # holds this very key
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return write_output(path, pem, public=True)


def write_secret(path: Path, data: bytes) -> None:
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
            write_secret(path, crypto.new_key().hex().encode())
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
            write_secret(path, key.hex().encode())
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


def read_public_key(path: str | Path) -> str:
    """A public key file's PEM text; an unreadable file is a `key_unreadable` refusal."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise LedgerError("key_unreadable",
                          f"cannot read public key {path}: {exc.strerror}") from None
