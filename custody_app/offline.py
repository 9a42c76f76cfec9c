"""Offline checks of what leaves the ledger: evidence packs and exports, from the file alone."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from custody_app import crypto
from custody_app.chain import GENESIS, canonical, check_event, commitment, verify_chain
from custody_app.checkpoints import CheckpointAudit, statement
from custody_app.evidence import PACK_FORMAT, signed_bytes
from custody_app.export import EXPORT_FORMAT, line_hash, trailer_statement
from custody_app.readmodels import ReadModel
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


def _event_problem(record: Any) -> str | None:
    """What is wrong with one event on its own: its hash, its mirrored fields, its value."""
    try:
        row = to_row(record)
    except (KeyError, TypeError, ValueError) as exc:
        return f"an event is malformed ({exc!r})"
    problem = check_event(row, row.prev_hash, row.seq, _opened)
    return None if problem is None else problem


# ---- evidence packs ------------------------------------------------------------------------

def _check_signature(document: dict[str, Any], pem: str, problems: list[str]) -> str:
    fingerprint = crypto.public_fingerprint(pem)
    sig = document.get("signature")
    if not isinstance(sig, dict) or not isinstance(sig.get("value"), str):
        problems.append("the pack carries no signature")
    elif sig.get("alg") != "ed25519" or set(sig) != {"alg", "key_fingerprint", "value"}:
        problems.append("the pack's signature block is not an ed25519 signature")
    elif sig.get("key_fingerprint") != fingerprint:
        problems.append(f"the pack was signed by key {sig.get('key_fingerprint')}, not by the "
                        f"given key {fingerprint}")
    elif not crypto.verify_signature(pem, signed_bytes(document), sig["value"]):
        problems.append("the signature does not verify under the given key: the pack was "
                        "changed after it was signed")
    return fingerprint


def _check_certificate(document: dict[str, Any], events: list[dict[str, Any]],
                       problems: list[str]) -> None:
    fact_id = document.get("fact_id")
    erasures = {e.get("seq"): e for e in events
                if e.get("kind") in ("forget", "expire") and e.get("fact_id") == fact_id}
    cert = document.get("forget_certificate")
    if cert is None:
        if erasures:
            problems.append(f"fact {fact_id} was erased but the pack has no forget certificate")
        return
    if not isinstance(cert, dict):
        problems.append("the forget certificate is malformed")
        return
    entries = [e for e in cert.get("erased") or [] if isinstance(e, dict)]
    named = cert.get("root") == fact_id or any(e.get("fact_id") == fact_id for e in entries)
    if not named:
        problems.append(f"the forget certificate names {cert.get('root')}, not fact {fact_id}")
        return
    for entry in (e for e in entries if e.get("fact_id") == fact_id):
        event = erasures.get(entry.get("seq"))
        body = event.get("event", {}) if event else {}
        if (event is None or entry.get("event_id") != event.get("hash")
                or entry.get("digest") != body.get("digest")
                or entry.get("digest_kind") != body.get("digest_kind")):
            problems.append(f"the forget certificate's entry for {fact_id} (seq "
                            f"{entry.get('seq')}) matches no forget or expire event in the pack: "
                            "the certificate is forged")
    if not any(e.get("fact_id") == fact_id for e in entries) and erasures:
        problems.append(f"the forget certificate lists no erasure of {fact_id}")


def verify_pack(pack: str | dict[str, Any], pem: str) -> OfflineReport:
    """Check a pack with nothing but the pack (its file's text, or the parsed document) and the
    ledger's public key (PEM)."""
    problems: list[str] = []
    document: Any = pack
    if isinstance(pack, str):
        try:
            document = json.loads(pack)
        except ValueError as exc:
            return OfflineReport(valid=False, what="pack", events=0,
                                 problems=[f"the pack is not JSON: {exc}"])
        if not _canonical_line(pack, document):
            problems.append("the pack file is not the canonical JSON it was written as: it was "
                            "edited")
    if not isinstance(document, dict) or document.get("format") != PACK_FORMAT:
        return OfflineReport(valid=False, what="pack", events=0,
                             problems=[*problems, f"not a {PACK_FORMAT} document"])
    fingerprint = _check_signature(document, pem, problems)
    events = [e for e in document.get("events") or [] if isinstance(e, dict)]
    first_bad = None
    for event in events:
        problem = _event_problem(event)
        if problem is not None:
            problems.append(problem)
            first_bad = first_bad or event.get("seq")
    by_seq = {e.get("seq"): e for e in events}
    for e in events:
        before = by_seq.get(e.get("seq", 0) - 1) if isinstance(e.get("seq"), int) else None
        if before is not None and e.get("prev_hash") != before.get("hash"):
            problems.append(f"event {e.get('seq')} does not link to event {before.get('seq')}")
    manifest = [[e.get("seq"), e.get("hash")] for e in events]
    if manifest != document.get("manifest"):
        listed = {tuple(m) for m in document.get("manifest") or [] if isinstance(m, list)}
        missing = sorted(str(s) for s, _ in listed - {tuple(m) for m in manifest})
        problems.append("the events do not match the pack's manifest"
                        + (f": missing event(s) {', '.join(missing)}" if missing else ""))
    policies = {p.get("hash"): p for p in document.get("policies") or [] if isinstance(p, dict)}
    for h, p in policies.items():
        if hashlib.sha256(str(p.get("canonical")).encode()).hexdigest() != h:
            problems.append(f"policy text {str(h)[:12]}... does not hash to its hash")
    for e in events:
        if e.get("policy_hash") not in policies:
            problems.append(f"event {e.get('seq')}: the policy in force is not in the pack")
    _check_certificate(document, events, problems)
    checkpoint = document.get("checkpoint")
    if isinstance(checkpoint, dict):
        problem = _event_problem(checkpoint)
        body = checkpoint.get("event", {})
        if problem is None and not crypto.verify_signature(pem, statement(
                body["checkpoint_seq"], body["head_hash"], body["head_tx_at"]),
                body["signature"]):
            problem = f"the checkpoint at seq {checkpoint.get('seq')} is not signed by the given key"
        if problem is not None:
            problems.append(problem)
    value = document.get("fact", {}).get("value") if isinstance(document.get("fact"), dict) else None
    assert_event = next((e for e in events if e.get("kind") == "assert"
                         and e.get("fact_id") == document.get("fact_id")), None)
    if assert_event is None:
        problems.append(f"the pack holds no assert of fact {document.get('fact_id')}")
    elif value is not None and assert_event.get("salt") and commitment(
            assert_event["salt"], canonical(value)) != assert_event.get("event", {}).get("commitment"):
        problems.append("the fact's value does not match the commitment in its assert event")
    return OfflineReport(valid=not problems, what="pack", events=len(events), problems=problems,
                         first_bad_seq=first_bad, key_fingerprint=fingerprint,
                         checkpoints=1 if checkpoint else 0, signature_checked=True)


# ---- exports -------------------------------------------------------------------------------

def _lines(path: Path) -> Iterator[tuple[int, str, Any]]:
    with path.open(encoding="utf-8", newline="\n") as handle:
        for number, text in enumerate(handle, start=1):
            try:
                yield number, text, json.loads(text)
            except ValueError:
                yield number, text, None


def _canonical_line(text: str, record: Any) -> bool:
    """Is the line exactly as an export writes it (canonical JSON and one newline)?"""
    try:
        return text == canonical(record) + "\n"
    except Exception:  # rfc8785 raises several types for what is not plain JSON
        return False


def verify_export(path: str | Path, pem: str | None = None) -> OfflineReport:
    """Recompute an export's chain from the file alone; with `pem`, also check its signed
    checkpoints and the trailer's signature."""
    path = Path(path)
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
            if not _canonical_line(text, record):
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
            try:
                yield to_row(record)
            except (KeyError, TypeError, ValueError):
                state["problem"] = f"line {number} (seq {record.get('seq')}) is not an event"
                return

    report = verify_chain(rows(), None, _opened, audit.check)
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

