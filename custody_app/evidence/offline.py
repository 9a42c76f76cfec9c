"""Offline checks of exports from the file alone, and the event checks packs share."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from custody_app.domain.chain import GENESIS, canonical, check_event, verify_chain
from custody_app.domain.readmodels import ReadModel
from custody_app.domain.sealed_text import BODY_KEY, Texts, text_commitment
from custody_app.evidence.checkpoints import CheckpointAudit
from custody_app.evidence.export import EXPORT_FORMAT, line_hash, trailer_statement
from custody_app.keys import crypto
from store.rows import EventRow


class OfflineReport(ReadModel):
    """The outcome of an offline check: `valid` is false with every problem found named."""

    valid: bool
    what: str
    events: int
    problems: list[str]
    first_bad_seq: int | None = None
    first_bad_line: int | None = None
    key_fingerprint: str | None = None
    checkpoints: int = 0
    signature_checked: bool = False


def to_row(record: dict[str, Any]) -> EventRow:
    """An exported or packed event back as the row the chain code checks."""
    value = record.get("value")
    return EventRow(
        seq=record["seq"], kind=record["kind"], tx_at=record["tx_at"], actor=record["actor"],
        policy_hash=record["policy_hash"], fact_id=record.get("fact_id"),
        subject=record.get("subject"), body=canonical(record["event"]),
        value=None if value is None else canonical(value).encode("utf-8"),
        salt=record.get("salt"), prev_hash=record["prev_hash"], hash=record["hash"])


def _opened(row: EventRow, body: dict[str, Any]) -> str | None:
    return None if row.value is None else row.value.decode("utf-8")


def _texts(record: dict[str, Any]) -> Texts | None:
    text = record.get("text")
    return text if isinstance(text, dict) else None


def text_problem(record: dict[str, Any]) -> str | None:
    """A packed or exported event's opened free text against the commitment its body holds
    (nothing to check once erased: the text and its salt are null)."""
    body = record.get("event")
    blk = body.get(BODY_KEY) if isinstance(body, dict) else None
    text, salt = record.get("text"), record.get("text_salt")
    if blk is None or text is None:
        return None
    if (not isinstance(blk, dict) or not isinstance(text, dict) or not isinstance(salt, str)
            or text_commitment(salt, text) != blk.get("commitment")):
        return f"event {record.get('seq')} free text does not match its commitment"
    return None


def event_problem(record: Any) -> str | None:
    """What is wrong with one event on its own: its hash, its mirrored fields, its value and
    its free text."""
    try:
        row = to_row(record)
    except (KeyError, TypeError, ValueError) as exc:
        return f"an event is malformed ({exc!r})"
    try:
        return (check_event(row, row.prev_hash, row.seq, _opened, lambda r: _texts(record))
                or text_problem(record))
    except (TypeError, ValueError) as exc:
        return f"event {row.seq} is malformed ({exc!r})"


def events_problems(events: list[dict[str, Any]], problems: list[str],
                    first_bad: Any = None) -> Any:
    """Check each event of a pack on its own, adding what is wrong to `problems`; returns the
    seq of the first bad one (or `first_bad` when none is worse)."""
    for event in events:
        problem = event_problem(event)
        if problem is not None:
            problems.append(problem)
            first_bad = first_bad or event.get("seq")
    return first_bad


def canonical_line(text: str, record: Any) -> bool:
    """Is the line exactly as an export writes it (canonical JSON and one newline)?"""
    try:
        return text == canonical(record) + "\n"
    except Exception:  # rfc8785 raises several types for what is not plain JSON
        return False


# ---- exports -------------------------------------------------------------------------------

def _lines(path: Path) -> Iterator[tuple[int, str, Any]]:
    with path.open(encoding="utf-8", newline="\n") as handle:
        for number, text in enumerate(handle, start=1):
            try:
                yield number, text, json.loads(text)
            except ValueError:
                yield number, text, None


def verify_export(path: str | Path, pem: str | None = None) -> OfflineReport:
    """Recompute an export's chain from the file alone; with `pem`, also check its signed
    checkpoints and the trailer's signature."""
    try:
        return _verify_export(Path(path), pem)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        return OfflineReport(valid=False, what="export", events=0,
                             problems=[f"the export is malformed ({exc!r})"])


def _verify_export(path: Path, pem: str | None) -> OfflineReport:
    checkpoints = [(r["seq"], canonical(r["event"])) for _, _, r in _lines(path)
                   if isinstance(r, dict) and r.get("kind") == "checkpoint"
                   and isinstance(r.get("event"), dict) and isinstance(r.get("seq"), int)]
    audit = CheckpointAudit(checkpoints, pem)
    state: dict[str, Any] = {"line": 0, "prev": GENESIS, "trailer": None, "problem": None,
                             "seq": None, "last_seq": 0}

    def rows() -> Iterator[EventRow]:
        for number, text, record in _lines(path):
            state["line"] = number
            if state["trailer"] is not None:
                state["problem"] = f"line {number} comes after the export's trailer"
                return
            if not isinstance(record, dict):
                state["problem"] = f"line {number} is not a JSON object"
                return
            state["seq"] = record.get("seq")
            if not canonical_line(text, record):
                state["problem"] = (f"line {number} (seq {record.get('seq')}) was edited: it is "
                                    "not the canonical JSON it was written as")
                return
            if "export" in record:
                state["trailer"], state["trailer_line"] = record, number
                continue
            wanted = state["last_seq"] + 1
            if record.get("seq") != wanted:
                state["problem"] = (f"line {number}: event {wanted} is missing or out of order "
                                    f"(this line holds seq {record.get('seq')})")
                return
            state["last_seq"] = wanted
            expected = line_hash(state["prev"], record)
            if record.get("line_hash") != expected:
                state["problem"] = (f"line {number} (seq {record.get('seq')}) was changed: it "
                                    "does not match its line hash")
                return
            state["prev"] = expected
            state["record"] = record
            try:
                yield to_row(record)
            except (KeyError, TypeError, ValueError):
                state["problem"] = f"line {number} (seq {record.get('seq')}) is not an event"
                return

    def extra(row: EventRow) -> str | None:
        return audit.check(row) or text_problem(state["record"])

    report = verify_chain(rows(), None, _opened, extra, lambda r: _texts(state["record"]))
    problems: list[str] = []
    bad_line = None
    if state["problem"] is not None:
        problems.append(state["problem"])
        bad_line = state["line"]
        report = replace(report, first_bad_seq=state["seq"] if isinstance(state["seq"], int)
                         else None)
    elif not report.valid:
        problems.append(f"line {state['line']}: {report.problem}")
        bad_line = state["line"]
    signed = False
    trailer = state["trailer"]
    if not problems:
        bad_line = state.get("trailer_line")
        summary = trailer.get("export") if isinstance(trailer, dict) else None
        if not isinstance(summary, dict) or not isinstance(trailer, dict):
            problems.append("the export has no trailer: it was cut short or is not an export")
        elif trailer.get("line_hash") != line_hash(state["prev"], {"export": summary}):
            problems.append(f"line {bad_line} (the trailer) was changed: it does not match its "
                            "line hash")
        elif summary.get("format") != EXPORT_FORMAT:
            problems.append(f"the trailer names format {summary.get('format')!r}, not "
                            f"{EXPORT_FORMAT}")
        elif (summary.get("events") != report.events or summary.get("head") != report.head
              or summary.get("last_line_hash") != state["prev"]):
            problems.append(f"the trailer vouches for {summary.get('events')} event(s) ending "
                            f"{str(summary.get('head'))[:12]}..., but the file holds "
                            f"{report.events} ending {str(report.head)[:12]}...: lines were "
                            "removed or added")
        elif pem is not None:
            signed = True
            fingerprint = crypto.public_fingerprint(pem)
            if summary.get("key_fingerprint") != fingerprint:
                problems.append(f"the export was signed by key {summary.get('key_fingerprint')},"
                                f" not by the given key {fingerprint}")
            elif not crypto.verify_signature(pem, trailer_statement(str(trailer["line_hash"])),
                                             str(trailer.get("signature"))):
                problems.append("the export's trailer signature does not verify under the "
                                "given key")
        if not problems:
            bad_line = None
    return OfflineReport(valid=not problems, what="export", events=report.events,
                         problems=problems, first_bad_seq=report.first_bad_seq,
                         first_bad_line=bad_line,
                         key_fingerprint=crypto.public_fingerprint(pem) if pem else None,
                         checkpoints=audit.count, signature_checked=signed)

