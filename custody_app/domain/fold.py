"""as_of as a pure fold over the event list: the reference the SQL path must agree with."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from custody_app.domain.lifecycle import erased_subject, retraction_effect
from custody_app.domain.models import PROV_RANK
from custody_app.domain.records import EventRecord


@dataclass(frozen=True, slots=True)
class FoldedFact:
    """One fact believed as of (V, T), as the fold sees it."""

    fact_id: str
    subject: str
    predicate: str
    space: str
    value: Any
    status: str
    provenance: str
    valid_from: str
    valid_to: str | None
    actor: str
    erased: bool


def fold_as_of(
    events: Iterable[EventRecord],
    *,
    valid_at: str,
    tx_at: str,
    include: str = "attested",
    subject: str | None = None,
    predicate: str | None = None,
    space: str | None = None,
) -> list[FoldedFact]:
    """Replay the events known by `tx_at` from scratch and read off what held at `valid_at`."""
    known = [e for e in events if e.tx_at <= tx_at]
    asserts: dict[str, tuple[EventRecord, dict[str, Any]]] = {}
    killed: set[str] = set()
    erased_by_t: set[str] = set()
    confirmed: set[str] = set()
    for e in known:
        if e.kind == "assert" and e.fact_id is not None:
            asserts[e.fact_id] = (e, json.loads(e.body))
        elif e.kind in ("retract", "reject", "confirm") and e.fact_id:
            killed_now, confirms = retraction_effect(e.kind, json.loads(e.body))
            if killed_now:
                killed.add(e.fact_id)
            elif confirms:
                confirmed.add(e.fact_id)
        elif e.kind in ("forget", "expire") and e.fact_id:
            erased_by_t.add(e.fact_id)

    def rank(fact_id: str) -> int:
        r = PROV_RANK[asserts[fact_id][1]["provenance"]]
        return 1 if r == 0 and fact_id in confirmed else r

    want = PROV_RANK[include]
    children: dict[str, list[str]] = {}
    for fid, (_, body) in asserts.items():
        if body.get("supersedes"):
            children.setdefault(body["supersedes"], []).append(fid)

    def standing(fact_id: str) -> list[str]:
        """The replacements that stand: a retracted one hands over to its own replacements."""
        out: list[str] = []
        for child in children.get(fact_id, []):
            out += standing(child) if child in killed else [child]
        return out

    out: list[FoldedFact] = []
    for fid, (event, body) in asserts.items():
        if fid in killed or fid in erased_by_t or rank(fid) < want:
            continue
        subject_now = event.subject or erased_subject(body["subject_ref"])
        if (subject is not None and subject_now != subject) or (
            predicate is not None and body["predicate"] != predicate
        ) or (space is not None and body["space"] != space):
            continue
        status = "quarantined" if rank(fid) == 0 else "active"
        valid_to = body.get("valid_to")
        for rid in standing(fid):
            if include == "claimed" or rank(rid) >= 1:
                status = "superseded"
                cut = asserts[rid][1]["valid_from"]
                valid_to = cut if valid_to is None or cut < valid_to else valid_to
        if not (body["valid_from"] <= valid_at and (valid_to is None or valid_at < valid_to)):
            continue
        out.append(FoldedFact(
            fid, subject_now, body["predicate"], body["space"],
            None if event.value is None else json.loads(event.value), status,
            [p for p, r in PROV_RANK.items() if r == rank(fid)][0], body["valid_from"],
            valid_to, body["actor"], event.value is None,
        ))
    return out
