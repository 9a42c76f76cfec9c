"""Paths a user names as input (ledger, key store, batch file): refused at once when they are
not regular files, because opening a FIFO blocks and reading a device never ends."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from custody_app.domain.errors import LedgerError


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
