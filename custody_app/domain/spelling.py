"""Naming an identifier the ledger holds although the door now refuses it (a ledger written before
the door refused invisible characters may hold `acct:1042\\u200b`): the commands that find or
erase what the ledger holds take it as stored, or as `doctor` and text output show it."""

from __future__ import annotations

from collections.abc import Callable

from custody_app.domain.errors import LedgerError
from custody_app.domain.escaping import unescape_identifier, unsafe_kind
from custody_app.domain.models import identifier_refused


def as_held(given: str, holds: Callable[[str], bool]) -> str:
    """The identifier `given` names: itself, unless it is the shown spelling (escaped, as
    `escape_identifier` writes it) of one the ledger `holds` while it holds nothing spelled as
    `given` is. `holds` is asked only when `given` contains such an escape."""
    stored = unescape_identifier(given)
    if stored == given or holds(given) or not holds(stored):
        return given
    return stored


def require_held(field: str, name: str, held: bool) -> None:
    """Refuse `name` as the door would (`bad_request` naming the field and the character) when
    it holds a character no identifier may and the ledger does not hold it: naming it can only
    erase what an older version stored, never reach something new."""
    bad = unsafe_kind(name)
    if bad is None or held:
        return
    raise LedgerError("bad_request", f"field '{field}': {identifier_refused(*bad)}, and the "
                      f"ledger holds no {field} spelled so", field=field)
