"""Writing an output file safely: never over a file unless --force, never over the ledger, its
WAL, SHM, key store or key files or anything not a regular file; temp file, rename, 0600."""

from __future__ import annotations

import os
from pathlib import Path

from custody_app.domain.errors import LedgerError


def protected_paths(ledger_path: str | Path) -> set[Path]:
    """The files of a ledger that no output may replace, even with --force."""
    base = str(ledger_path)
    return {Path(f"{base}{s}").resolve() for s in ("", "-wal", "-shm", "-journal", ".keys",
                                                    ".keys.master", ".pub")}


def write_output(path: str | Path, text: str, *, force: bool, protected: set[Path]) -> None:
    target = Path(path)
    if target.resolve() in protected:
        raise LedgerError("output_protected", f"{target} is a file of the ledger; choose another "
                          "output path")
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise LedgerError("output_protected", f"{target} is not a regular file; refusing to "
                          "write over it")
    if target.exists() and not force:
        raise LedgerError("output_exists", f"{target} already exists; pass --force to replace it")
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)
