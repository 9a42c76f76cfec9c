"""What the console script says when a name is wrong: an unknown subcommand (a usage error with
a suggestion, never taken as a ledger path) and a ledger that is not there (how to name one)."""

from __future__ import annotations

import difflib
import os
import re
import sys
from pathlib import Path

from custody_app.domain.errors import LedgerError
from custody_app.domain.escaping import escape_text
from custody_app.domain.resources import DEFAULT_LEDGER, LEDGER_ENV
from store import APPLICATION_ID, ledger_exists
from store.address import address_of
from store.errors import StoreError

# The subcommands that create a ledger path that does not exist (DESIGN 11); the others refuse.
CREATES = ("init",)

# A first argument of this shape names a subcommand; a ledger path has a dot or a slash in it.
_WORD = re.compile(r"[A-Za-z][A-Za-z_-]*")


def unknown_subcommand(first: str, known: tuple[str, ...]) -> str | None:
    """The usage error for `first` when it reads as a mistyped or unknown subcommand (and is
    not an existing file), else None."""
    if not _WORD.fullmatch(first) or os.path.exists(first):
        return None
    close = difflib.get_close_matches(first, known, n=1, cutoff=0.6)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return (f"unknown subcommand '{first}'{hint}. Subcommands: {', '.join(sorted(known))}. "
            f"To open a ledger file named {first}, write ./{first}")


def _is_ledger(path: Path) -> bool:
    """A custody-app ledger by its header (SQLite, with the ledger's application_id)."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(100)
    except OSError:
        return False
    return (len(header) == 100 and header.startswith(b"SQLite format 3\x00")
            and int.from_bytes(header[68:72], "big") == APPLICATION_ID)


def _similar_files(path: str, n: int = 2) -> list[str]:
    """Existing ledgers in the same folder (*.db files and any file with a ledger's header),
    closest name first; those whose names are close to the one given, else the closest one."""
    folder = Path(path).parent
    try:
        names = [p.name for p in folder.iterdir()
                 if p.is_file() and not p.is_symlink() and (p.suffix == ".db" or _is_ledger(p))
                 and p.name != Path(path).name]
    except OSError:
        return []
    names = [name for name in names if _is_ledger(folder / name)] or names
    close = difflib.get_close_matches(Path(path).name, names, n=n, cutoff=0.7) or \
        difflib.get_close_matches(Path(path).name, names, n=1, cutoff=0.0)
    return [str(folder / c) if str(folder) != "." else c for c in close]


def missing_ledger(path: str) -> LedgerError:
    """A ledger that does not exist, with how to name one (and a close existing name, if any)."""
    address = address_of(path)
    close = _similar_files(path) if address.own_file() is not None else []
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    # A server's address is shown without its password (`init` asks for it again).
    shown = address.display
    return LedgerError("ledger_missing", f"no ledger at {shown}; {hint}name one with --ledger PATH "
                       f"(or ${LEDGER_ENV}; default ./{DEFAULT_LEDGER}), create one with "
                       f"`custody-app init --ledger {shown}`, or try `custody-app --demo`",
                       path=shown)


def refuse_missing(path: str, *, create: bool = False) -> LedgerError | None:
    """Why `path` may not be opened as a ledger by a command that does not create one (DESIGN
    11 and 14: only init, --demo and an explicit --create do), else None. A symbolic link to
    nothing is refused even with --create: creating through it would write elsewhere."""
    try:
        if ledger_exists(path):
            return None
    except StoreError as exc:  # a server that cannot be reached: said as opening it says it
        return LedgerError(exc.code, str(exc))
    if os.path.islink(path):
        return LedgerError("ledger_missing", f"no ledger at {path}: it is a symbolic link to "
                           f"{os.readlink(path)}, which does not exist; point it at a ledger or "
                           "remove it", path=path)
    return None if create else missing_ledger(path)


def confirm_create(path: str) -> bool:
    """Ask on the terminal before the terminal app creates a ledger file (DESIGN 11)."""
    close = _similar_files(path) if address_of(path).own_file() is not None else []
    path = address_of(path).display
    if close:
        sys.stderr.write(escape_text(f"custody-app: there is no {path}, but there is "
                                     f"{' and '.join(close)}.") + "\n")
    sys.stderr.write(escape_text(f"custody-app: create a new, empty ledger at {path} (and its "
                                 "key files)? [y/N] "))
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")
