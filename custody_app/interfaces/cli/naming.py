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


def _similar_files(path: str) -> list[str]:
    """Existing ledger files in the same folder whose names are close to the one given."""
    folder = Path(path).parent
    try:
        names = [p.name for p in folder.iterdir() if p.suffix == ".db" and p.is_file()]
    except OSError:
        return []
    return [str(folder / n) if str(folder) != "." else n
            for n in difflib.get_close_matches(Path(path).name, names, n=2, cutoff=0.7)]


def missing_ledger(path: str) -> LedgerError:
    """A ledger that does not exist, with how to name one (and a close existing name, if any)."""
    close = _similar_files(path)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return LedgerError("ledger_missing", f"no ledger at {path}; {hint}name one with --ledger PATH "
                       f"(or ${LEDGER_ENV}; default ./{DEFAULT_LEDGER}), create one with "
                       f"`custody-app init --ledger {path}`, or try `custody-app --demo`",
                       path=path)


def confirm_create(path: str) -> bool:
    """Ask on the terminal before the terminal app creates a ledger file (DESIGN 11)."""
    close = _similar_files(path)
    if close:
        sys.stderr.write(escape_text(f"custody-app: there is no {path}, but there is "
                                     f"{' and '.join(close)}.") + "\n")
    sys.stderr.write(escape_text(f"custody-app: create a new, empty ledger at {path} (and its "
                                 "key files)? [y/N] "))
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")
