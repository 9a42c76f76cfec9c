"""The doctor's `unsafe-identifiers` line: identifiers a ledger holds that the door now refuses (an
invisible character such as U+200B, a control or bidirectional one), stored by a version that
accepted them. Each is another identifier than the one it looks like: `acct:1042\\u200b`
outlives the erasure of `acct:1042`, `agent:support-bot\\u2060` passes for the real agent in
the review queue. Read from the distinct values only (store: `identifiers`)."""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from custody_app.doctor.report import DoctorCheck, check
from custody_app.domain.escaping import escape_identifier, unsafe_kind

NAME = "unsafe-identifiers"
FIELDS = ("subject", "predicate", "space", "actor", "session")
SHOWN = 10  # findings the line names; the others are counted


@dataclass(frozen=True, slots=True)
class Finding:
    """One stored identifier the door refuses."""

    field: str
    identifier: str  # as stored
    char: str  # the first character the door refuses in it, escaped (`\u200b`)
    kind: str  # "invisible", or "control or bidirectional"
    rows: int  # the facts holding it (subject, predicate, space) or the events (actor, session)
    live: int  # those facts (an actor's: the facts it wrote) believed or awaiting review

    @property
    def shown(self) -> str:
        return escape_identifier(self.identifier)

    def said(self) -> str:
        what = "event(s)" if self.field in ("actor", "session") else "fact(s)"
        live = ("" if self.field == "session" else f", {self.live} "
                + ("fact(s) it wrote " if self.field == "actor" else "")
                + "believed or awaiting review")
        return (f"{self.field} '{self.shown}' ({self.kind} {self.char}): {self.rows} "
                f"{what}{live}")


def findings(rows: Iterable[tuple[str, str, int, int]]) -> list[Finding]:
    """The store's (field, identifier, rows, live) rows, kept where the door refuses the
    identifier; a `writer` row (a fact's actor) gives its actor's live count."""
    rows = list(rows)
    wrote = {value: live for field, value, _, live in rows if field == "writer"}
    found = [Finding(field, value, *bad, count, wrote.get(value, 0) if field == "actor" else live)
             for field, value, count, live in rows
             if field in FIELDS and (bad := unsafe_kind(value)) is not None]
    return sorted(found, key=lambda f: (FIELDS.index(f.field), f.identifier))


def _to_do(found: list[Finding]) -> list[str]:
    """What to do, once for each field found (with its first identifier as the example)."""
    first = {f.field: f for f in reversed(found)}
    todo = []
    if "subject" in first:
        todo.append("a subject outlives `forget-subject` of the id it looks like: erase it by "
                    "the spelling shown (`custody-app forget-subject "
                    f"{shlex.quote(first['subject'].shown)} --reason error`), after re-asserting "
                    "under the clean id what should stay")
    listed = [f"`custody-app beliefs --{field} {shlex.quote(first[field].shown)}`"
              for field in ("predicate", "space") if field in first]
    if listed:
        todo.append("facts under such a predicate or space are neither superseded nor swept "
                    f"with those under the clean one: {' or '.join(listed)} lists them; "
                    "retract each and re-assert it under the clean id")
    if "actor" in first:
        todo.append("an actor's facts are another writer's than those of the actor it looks "
                    "like: review them (its claims in the review queue too) as such")
    return todo


def identifiers_check(where: str, rows: Iterable[tuple[str, str, int, int]], *,
                      subjects_sealed: bool = False) -> DoctorCheck:
    """The line for the ledger `where`; `subjects_sealed`: its subject ids are stored sealed
    (a server ledger), so the store could not read them and the line says so."""
    found = findings(rows)
    fields = [f for f in FIELDS if not (subjects_sealed and f == "subject")]
    sealed = (" Its subject ids are stored sealed (readable only with each subject's key), so "
              "this check does not read them." if subjects_sealed else "")
    if not found:
        return check(NAME, "ok", f"no {', '.join(fields[:-1])} or {fields[-1]} of {where} holds "
                     f"a character the door refuses (an invisible, control or bidirectional "
                     f"one).{sealed}")
    named = "; ".join(f.said() for f in found[:SHOWN]) + (
        f"; and {len(found) - SHOWN} more" if len(found) > SHOWN else "")
    said = (f"{where} holds {len(found)} identifier(s) the door now refuses, written before it "
            f"did, each another identifier than the one it looks like: {named}.{sealed}")
    # A warning, not a failure: the ledger is whole and verifies (the chain holds these as
    # written), every command works, and what to do is the operator's decision, as with
    # erasure leaks or a pending epoch. And only while there is something to do: a subject id
    # can be erased, a fact believed or awaiting review retracted; an actor, a session, or the
    # predicate of an ended fact stays in the chain for good and would otherwise fail
    # `doctor --strict` forever.
    if any(f.field == "subject" or f.live for f in found):
        return check(NAME, "warn", f"{said} To do: {'; '.join(_to_do(found))}.")
    return check(NAME, "ok", f"{said} None is a subject id or names a fact still believed or "
                 "awaiting review: the chain keeps them as written, and no new write can use "
                 "them.")
