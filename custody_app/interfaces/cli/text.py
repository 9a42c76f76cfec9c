"""Text renderings for the human subcommands: a fact in one line, its story, its history.
Stored strings are shown with control characters escaped, so nothing stored drives the terminal;
identifiers with invisible characters escaped too (`ident`), so a lookalike shows as one."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from custody_app.domain.escaping import IDENTIFIER_FIELDS, escape_identifier, escape_text
from custody_app.domain.readmodels import EventView, FactView, HistoryResult, WhyResult
from custody_app.domain.sealed_text import ERASED_TEXT, SEALED_TEXT
from custody_app.ledger.readmodels import BeliefView

# C0, DEL, C1 and the bidirectional overrides and isolates (DESIGN 13, "Files and output").
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
VALUE_WIDTH = 80


def plain(text: object) -> str:
    """`text` with every control character written as an escape (`\\x1b`, `\\u202e`)."""
    return _UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


def ident(text: object) -> str:
    """An identifier (subject, predicate, space, actor, session...) as `plain` shows text, with
    its invisible characters escaped too (`\\u200b`): one stored before the door refused them
    must not look exactly like the identifier without them. Values and reasons keep theirs."""
    return escape_identifier(str(text))


def value_text(value: Any, width: int | None = VALUE_WIDTH, sealed: bool = False) -> str:
    """A value as compact JSON, cut at `width` characters with an ellipsis; a null value is
    erased, or `sealed` (held, not opened: the key store is missing)."""
    if value is None:
        return SEALED_TEXT if sealed else ERASED_TEXT
    text = plain(json.dumps(value, ensure_ascii=False, separators=(", ", ": ")))
    return text if width is None or len(text) <= width else text[: width - 1] + "…"


def fact_line(fact: FactView | BeliefView, width: int | None = VALUE_WIDTH) -> str:
    return (f"{fact.fact_id}  {ident(fact.subject)} {ident(fact.predicate)} = "
            f"{value_text(fact.value, width, fact.sealed)}  [{fact.status}, {fact.provenance}, "
            f"{ident(fact.space)}]")


def write(lines: list[str]) -> None:
    """Human lines: whatever control character a caller left unescaped is escaped here (a
    stored or user-given string never drives the terminal); each line stays a line."""
    sys.stdout.write("".join(escape_text(line, keep_newlines=True) + "\n" for line in lines))


def _refs(title: str, refs: list[Any]) -> list[str]:
    return [f"  {title}: " + "; ".join(f"{r.fact_id} ({ident(r.predicate)}, now {r.status})"
                                       for r in refs)] if refs else []


def story(why: WhyResult, ledger: str) -> list[str]:
    """A human `why`: what is believed, who wrote it and why, what it replaced, who reviewed it,
    the policy by hash, and the commands to go further."""
    f, created = why.fact, why.created_by
    cause = f"{why.cause.kind} {ident(why.cause.ref)}"
    if why.cause.ref in (ERASED_TEXT, SEALED_TEXT):
        cause = f"{why.cause.kind} (ref: {why.cause.ref}" + (
            f", detail: {why.cause.ref})" if why.cause.detail else ")")
    elif why.cause.detail:
        cause += f' ("{plain(why.cause.detail)}")'
    valid = f"valid from {f.valid_from}" + (f" to {f.valid_to}" if f.valid_to else "")
    lines = [f"{f.fact_id}: {ident(f.subject)} {ident(f.predicate)} = {value_text(f.value, None, f.sealed)}",
             f"  {f.status}, {f.provenance}, space {ident(f.space)}, {valid}",
             f"  written by {ident(why.actor)} at {created.tx_at} (seq {created.seq}) because of "
             f"{cause}" + (f", in session {ident(why.session)}" if why.session else "")]
    if why.llm is not None:
        lines.append(f"  by model {plain(why.llm.model)}")
    lines += _refs("replaced", why.supersedes) + _refs("replaced by", why.superseded_by)
    lines += _refs("derived from", why.sources) + _refs("facts derived from it", why.dependents)
    for review in why.reviews:
        reason = f': "{plain(review.reason)}"' if review.reason else ""
        lines.append(f"  {review.kind} by {ident(review.actor)} at {review.tx_at} (seq "
                     f"{review.seq}){reason}")
    if f.status == "quarantined":
        lines.append("  waiting for review: reads leave it out until a reviewer confirms it")
    if why.salience_class:
        lines.append(f"  salience {why.salience_class} ({why.salience:.2f})")
    lines.append(f"  policy {why.policy.hash}" + (f" ({plain(why.policy.path)})" if why.policy.path
                                                  else ""))
    lines.append(f"  chain checked for this fact: {'yes' if why.events_verified else 'NO'}")
    lines.append(f"next: custody-app history {f.fact_id} --ledger {plain(ledger)}   |   "
                 f"custody-app show {f.fact_id} --policy-text --ledger {plain(ledger)}")
    return lines


# Shown in the line's own columns, in the fact's header, or chain bookkeeping a person skips.
_SKIP = {"seq", "event_id", "kind", "tx_at", "actor", "policy_hash", "prev_hash", "hash", "value",
         "salt", "commitment", "fact_id", "body", "subject", "subject_ref", "predicate", "space",
         "erased", "sealed", "cause"}


def _event_details(event: EventView) -> str:
    extra = event.model_extra or {}
    parts = []
    if "value" in extra:
        parts.append(f"value {value_text(extra['value'], 60, extra.get('sealed') is True)}")
    cause = extra.get("cause")
    if isinstance(cause, dict):
        parts.append(f"cause {plain(cause.get('kind'))} {ident(cause.get('ref'))}")
    for key in sorted(extra):
        item = extra[key]
        if key in _SKIP or item in (None, [], {}, ""):
            continue
        shown = item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)
        parts.append(f"{key} {(ident if key in IDENTIFIER_FIELDS else plain)(shown)[:60]}")
    return ", ".join(parts)


def history_lines(history: HistoryResult) -> list[str]:
    lines = [f"{history.fact_id}: {history.status} now; {len(history.events)} event(s)"]
    for e in history.events:
        details = _event_details(e)
        lines.append(f"  seq {e.seq:>6}  {e.tx_at}  {e.kind:<10} by {ident(e.actor)}"
                     + (f"  {details}" if details else ""))
    return lines
