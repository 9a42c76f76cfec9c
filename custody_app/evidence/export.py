"""`custody-app export`: the whole event log as JSON Lines, with a hashed and signed trailer."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from custody_app.core.texts import text_record
from custody_app.domain.chain import GENESIS, canonical
from custody_app.domain.readmodels import ReadModel
from custody_app.evidence.packs import event_record
from custody_app.files.output import ledger_files, output_file
from custody_app.keys import crypto

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore

EXPORT_FORMAT = "custody-export/1"


class ExportResult(ReadModel):
    """Where an export was written and what its trailer vouches for."""

    path: str
    events: int
    head: str | None
    last_line_hash: str
    signed: bool
    key_fingerprint: str | None


def line_hash(prev: str, record: dict[str, Any]) -> str:
    """Each line's hash covers the line (without this field) and the previous line's hash, so an
    edit of any field, hashed by the event chain or not (subject, value, salt), names its line."""
    body = canonical({k: v for k, v in record.items() if k != "line_hash"})
    return hashlib.sha256(prev.encode("ascii") + body.encode("utf-8")).hexdigest()


def trailer_statement(trailer_hash: str) -> bytes:
    """The exact bytes an export's trailer signs: the hash of the trailer line, which covers
    the trailer's fields and, through the chain of line hashes, every line before it."""
    return canonical({"custody_export": 1, "line_hash": trailer_hash}).encode("utf-8")


def export(ledger: LedgerCore, path: str | Path, *, force: bool = False) -> ExportResult:
    """Write every event, oldest first; erased values (and values whose key is gone) are null.
    Never over the ledger's own files, nor over an existing file without `force`."""
    prev, count, head = GENESIS, 0, None
    protected = ledger_files(ledger.db.path, ledger.keys.address if ledger.keys is not None else None)
    with output_file(path, force=force, protected=protected) as (out, target), ledger.db.read():
        for row in ledger.db.events.iter_all():
            text = (ledger.values.opener(row, json.loads(row.body))
                    if row.kind == "assert" and row.value is not None else None)
            record = event_record(row, text,
                                  text_record(ledger.db, ledger.texts, row.seq, row.body))
            record["line_hash"] = prev = line_hash(prev, record)
            # Canonical JSON, so the checker can tell that not one byte of a line changed.
            out.write(canonical(record) + "\n")
            count, head = count + 1, row.hash
        fingerprint = (crypto.public_fingerprint(ledger.keys.public_pem())
                       if ledger.keys is not None else None)
        trailer: dict[str, Any] = {"export": {
            "format": EXPORT_FORMAT, "events": count, "head": head, "last_line_hash": prev,
            "exported_at": ledger.now(), "key_fingerprint": fingerprint}}
        trailer["line_hash"] = line_hash(prev, trailer)
        if ledger.keys is not None:
            trailer["signature"] = crypto.sign(ledger.keys.signing_key,
                                               trailer_statement(trailer["line_hash"]))
        out.write(canonical(trailer) + "\n")
    return ExportResult(path=str(target), events=count, head=head, last_line_hash=prev,
                        signed=fingerprint is not None, key_fingerprint=fingerprint)
