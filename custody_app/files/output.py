"""The one way a command writes a file (refuse what it must never replace; a temporary file in
the same folder, fsync, rename, a fixed mode whatever the umask), and the check that a path
named as input is a regular file (opening a FIFO blocks; reading a device never ends)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from custody_app.domain.errors import LedgerError
from store.address import address_of

SECRET_MODE = 0o600
PUBLIC_MODE = 0o644

# First bytes of files no output may ever replace, whoever's they are: SQLite databases (a
# ledger or key store), their write-ahead logs, and key material (PEM, a bare 64-hex master key).
_SQLITE = b"SQLite format 3\x00"
_WAL = (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83")
_PEM = b"-----BEGIN"
_PROTECTED_SUFFIXES = ("-wal", "-shm", "-journal", ".keys", ".keys.master", ".pub",
                       ".keys-wal", ".keys-shm", ".keys-journal")
# The files SQLite keeps beside a database, under its name plus these.
_SIDECARS = ("-wal", "-shm", "-journal")
_SQLITE_WHY = "it is a SQLite database (a ledger or key store)"


def ledger_files(ledger: str | Path, keystore: str | Path | None = None) -> list[Path]:
    """A ledger's own files: the database, its WAL, SHM and journal, its key store, master key
    and public key; none of them may be an output."""
    own = address_of(ledger)
    found = [own.sibling(suffix) for suffix in ("", *_PROTECTED_SUFFIXES)
             if suffix or own.own_file() is not None]
    if keystore is not None:
        store = address_of(keystore)
        found.append(store.master_key_file())
        if (file := store.own_file()) is not None:
            found += [Path(file), *(Path(f"{file}{suffix}") for suffix in _SIDECARS)]
    return found


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)  # follows symlinks: a link to the ledger is the ledger
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _sniff(path: Path) -> str | None:
    """Why an existing regular file is precious by its content, or None."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(80)
    except OSError:
        return None
    if head.startswith(_SQLITE):
        return _SQLITE_WHY
    if head[:4] in _WAL:
        return "it is a SQLite write-ahead log"
    if head.lstrip().startswith(_PEM):
        return "it holds key material (PEM)"
    text = head.strip()
    if len(text) == 64 and all(c in b"0123456789abcdefABCDEF" for c in text):
        return "it looks like a key file (64 hex digits)"
    return None


def require_regular(path: str | Path, what: str, code: str, *, may_be_missing: bool = True) -> None:
    """Refuse (`code`) a path that exists but is not a regular file (through symlinks); one that
    does not exist passes when `may_be_missing` (a ledger is created on first open)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if may_be_missing:
            return
        raise LedgerError(code, f"cannot read {what} {path}: no such file", path=str(path)) from None
    except OSError as exc:
        raise LedgerError(code, f"cannot read {what} {path}: {exc.strerror}", path=str(path)) from None
    if not stat.S_ISREG(st.st_mode):
        kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
                "not a regular file")
        raise LedgerError(code, f"refusing {what} {path}: it is {kind}, not a regular file",
                          path=str(path))


def _sidecar(target: Path) -> str | None:
    """Why `target` (or what a link there names) is a SQLite file's -wal, -shm or -journal, or
    a ledger's key store or master key, by its name beside the file it belongs to: SQLite
    replays or deletes such a file when that database is next opened, so writing or creating
    one destroys or forges what the ledger holds, whether it exists now or not."""
    for path in dict.fromkeys((Path(os.path.abspath(target)), Path(os.path.realpath(target)))):
        name = path.name
        for suffix in _SIDECARS:
            owner = path.with_name(name[:-len(suffix)]) if name.endswith(suffix) else None
            if owner is not None and owner.name and _sniff(owner) == _SQLITE_WHY:
                return f"it is the {suffix[1:]} file of {owner}, which SQLite reads at its next open"
        for suffix, what in ((".keys", "key store"), (".keys.master", "master key")):
            owner = path.with_name(name[:-len(suffix)]) if name.endswith(suffix) else None
            if owner is not None and owner.name and _sniff(owner) == _SQLITE_WHY:
                return f"it is the {what} of the ledger {owner}"
    return None


def refuse_reason(target: Path, *, force: bool, protected: Iterable[str | Path] = ()) -> str | None:
    """Why `target` may not be written, or None when it may."""
    if (why := _sidecar(target)) is not None:
        return why
    mine = _identity(target)
    if mine is not None:
        for other in protected:
            if _identity(Path(other)) == mine:
                return f"it is {other}, one of the ledger's own files"
    for other in protected:
        if os.path.abspath(other) == os.path.abspath(target):
            return f"it is {other}, one of the ledger's own files"
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        return f"it cannot be checked ({exc.strerror})"
    if st is None:
        if os.path.islink(target):
            return "it is a dangling symbolic link"
        return None
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file (a directory, device, FIFO or socket)"
    if (why := _sniff(target)) is not None:
        return why
    if not force:
        return EXISTS
    return None


EXISTS = "it already exists (pass --force to replace it)"


def refusal(target: Path, why: str) -> LedgerError:
    """`output_exists` when --force would do; `output_protected` when nothing may."""
    code = "output_exists" if why == EXISTS else "output_protected"
    return LedgerError(code, f"refusing to write {target}: {why}", path=str(target))


def write_output(path: str | Path, data: str, *, force: bool = False, public: bool = False,
                 protected: Iterable[str | Path] = ()) -> Path:
    """Write `data` to `path` all or nothing; see `output_file`."""
    with output_file(path, force=force, public=public, protected=protected) as (handle, target):
        handle.write(data)
    return target


def write_new_files(files: Sequence[tuple[str | Path, str, bool]]) -> list[Path]:
    """Write new files (path, text, public) that are never replaced, as a key pair is: every
    path is checked before any is written, so a refusal (`key_exists` for a file that exists,
    whatever it holds; `output_protected` for a device, directory, FIFO or dangling link)
    leaves nothing behind, and one that fails half-way removes what it wrote."""
    for path, _, _ in files:
        if (why := refuse_reason(Path(path), force=False)) is None:
            continue
        if not os.path.isfile(path) or _sidecar(Path(path)) is not None:
            raise refusal(Path(path), why)
        kind = "" if why == EXISTS else f" ({why})"
        raise LedgerError("key_exists", f"refusing to write {path}: it already exists{kind}, "
                          "and a key file is never replaced", path=str(path))
    written: list[Path] = []
    try:
        for path, text, public in files:
            written.append(write_output(path, text, public=public))
    except BaseException:
        for done in written:
            done.unlink(missing_ok=True)
        raise
    return written


@contextmanager
def output_file(path: str | Path, *, force: bool = False, public: bool = False,
                protected: Iterable[str | Path] = ()) -> Iterator[tuple[TextIO, Path]]:
    """A text handle on a temporary file beside `path`, renamed onto it (after fsync) when the
    block ends without an exception; mode 0600 (0644 when `public`) whatever the umask.

    Refused (`output_exists`, nothing written) when the path exists and `force` is not set,
    and always (`output_protected`) when it is one of `protected` (compared by device and
    inode, so through any link), a database, WAL or key file by its content, or not a regular
    file."""
    if str(path) in ("", ".") or str(path).endswith(("/", os.sep)):
        # Path() would read "out/" as the file "out", and "" as the current folder.
        raise LedgerError("output_protected", f"refusing to write {str(path)!r}: it names a "
                          "folder, not a file", path=str(path))
    if str(path) == "-":
        # `--batch -` reads stdin; here "-" would silently become a file named "-" holding
        # what may be plaintext: these outputs go to a named file only.
        raise LedgerError("output_protected", "refusing to write '-': this output is written "
                          "to a named file, never to stdout; give a path (write ./- for a "
                          "file of that name)", path=str(path))
    target = Path(path)
    protected = list(protected)
    if (why := refuse_reason(target, force=force, protected=protected)) is not None:
        raise refusal(target, why)
    if os.path.islink(target):
        target = Path(os.path.realpath(target))  # replace what the link names, keep the link
    mode = PUBLIC_MODE if public else SECRET_MODE
    # Bounded (40 characters are at most 160 bytes), so a name near the 255-byte limit still works.
    temp = target.with_name(f".{target.name[:40]}.{os.getpid()}.partial")
    try:
        fd = os.open(temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, mode)
    except OSError as exc:
        raise LedgerError("output_unwritable", f"cannot write {target}: {exc.strerror}",
                          path=str(target)) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            os.fchmod(handle.fileno(), mode)  # the umask narrows (or widens) nothing
            yield handle, target
            handle.flush()
            os.fsync(handle.fileno())
        _publish(temp, target, force=force)
    except OSError as exc:
        raise LedgerError("output_unwritable", f"cannot write {target}: {exc.strerror}",
                          path=str(target)) from None
    finally:
        temp.unlink(missing_ok=True)


def _publish(temp: Path, target: Path, *, force: bool) -> None:
    if force:
        os.replace(temp, target)
    else:
        # link() fails if the name appeared meanwhile: never replace a file made by another.
        try:
            os.link(temp, target)
        except FileExistsError:
            raise refusal(target, EXISTS) from None
    _sync_dir(target.parent)


def _sync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot fsync a directory; the rename is still atomic
    finally:
        os.close(fd)
