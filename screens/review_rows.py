"""The review queue's rows (claims and pending retractions, marked or not, with their status
and provenance labels) and what an approve or reject dialog says about its targets."""

from __future__ import annotations

from rich.text import Text

from custody_app.domain.readmodels import FactView
from custody_app.ledger.readmodels import PendingRetraction, ReviewItem, ReviewPage
from screens.base import cut_cell, short
from screens.labels import Labels, styled

# Row key prefix of a pending retraction (the rest of the key is its fact id).
RETRACTION = "retraction:"


def queue_cells(page: ReviewPage, marked: set[str], labels: Labels,
                narrow: int | None = None) -> list[tuple[str, list[str | Text]]]:
    """(row key, cells) of a page: pending retractions first, then the claims; with `narrow`
    (the terminal's width, below 120), the narrow columns."""
    rows: list[tuple[str, list[str | Text], str]] = [
        (RETRACTION + r.fact.fact_id,
         _retraction_cells(r, RETRACTION + r.fact.fact_id in marked, labels),
         "retraction") for r in page.retractions]
    rows += [(i.fact.fact_id, _cells(i, i.fact.fact_id in marked, labels), why_waiting(i))
             for i in page.items]
    if narrow is None:
        return [(key, cells) for key, cells, _ in rows]
    return [(key, narrow_cells(key, cells, why, narrow)) for key, cells, why in rows]


# Rows a dialog lists before "… and N more": it must fit at 80x24 with its buttons.
SHOWN_TARGETS = 3


def details(page: ReviewPage | None, op: str, targets: list[str]) -> str:
    """What the reviewer is about to approve or reject, and what follows from it: a claim
    becomes believed (or never is); a pending retraction, approved, ends the belief in the
    fact it retracts (or, rejected, leaves it believed)."""
    shown = {i.fact.fact_id: i for i in (page.items if page else [])}
    pending = {RETRACTION + r.fact.fact_id: r for r in (page.retractions if page else [])}
    lines = []
    for key in targets[:SHOWN_TARGETS]:
        i, r = shown.get(key), pending.get(key)
        if r is not None:
            lines.append(f"retraction of {r.fact.fact_id}: {r.fact.subject} {r.fact.predicate}"
                         f" = {_value(r.fact)}, by {r.retractor}"
                         + (f" ({short(r.reason, 40)})" if r.reason else ""))
        elif i is not None:
            lines.append(f"{key}: {i.fact.subject} {i.fact.predicate} = {_value(i.fact)}, by "
                         f"{i.writer}")
        else:
            lines.append(f"{key.removeprefix(RETRACTION)} (on another page)")
    if len(targets) > SHOWN_TARGETS:
        lines.append(f"… and {len(targets) - SHOWN_TARGETS} more")
    retracting = any(t.startswith(RETRACTION) for t in targets)
    claims = any(not t.startswith(RETRACTION) for t in targets)
    if op == "confirm":
        if claims:  # the claims among the targets
            lines.append("Reads and recall return them from now on.")
        if retracting:
            lines.append("Approving a retraction: the fact stops being believed (reads and "
                         "recall no longer return it; its history keeps it).")
    else:
        if claims:
            lines.append("They are never believed; what they would replace stays believed.")
        if retracting:
            lines.append("Rejecting a retraction: it is discarded; the fact stays believed.")
    return "\n".join(lines)


def _value(fact: FactView) -> str:
    return "(erased)" if fact.erased else short(fact.value, 30)


def why_waiting(i: ReviewItem) -> str:
    """Why a claim waits, in a few words: a mark (previously forgotten...), the belief it would
    replace, or its writer's standing and the kind of its cause."""
    if i.marks:
        return ",".join(i.marks).replace("_", " ")
    if i.supersedes:
        return f"would replace {i.supersedes.status}"
    return f"{i.cause.kind} claim" if i.fact.provenance == "claimed" else i.fact.provenance


# Narrow (below 120 columns): what a reviewer judges a claim by, fitting 80 columns.
NARROW_COLUMNS = ("✓", "subject", "predicate", "value", "writer", "why it waits")
# Each column's width at 80 (79 inside the scrollbar, 2 of padding per cell) and its share
# of the width beyond 80.
NARROW_WIDTHS = ((1, 0.0), (12, 0.2), (12, 0.2), (14, 0.3), (14, 0.15), (14, 0.15))


def narrow_cells(key: str, cells: list[str | Text], why: str, width: int) -> list[str | Text]:
    """The narrow row of a claim or a pending retraction (its full cells: `queue_cells`)."""
    spare = max(0, width - 80)
    picked = [cells[0], cells[5], cells[6], cells[7], cells[3], why]
    out: list[str | Text] = []
    for cell, (least, share) in zip(picked, NARROW_WIDTHS, strict=True):
        limit = least + int(spare * share)
        out.append(cut_cell(cell, limit))
    return out



def _cells(i: ReviewItem, marked: bool, labels: Labels) -> list[str | Text]:
    f = i.fact
    old: str | Text = ""
    if i.supersedes:
        old = Text.assemble(f"{i.supersedes.fact_id} (",
                            labels.status(i.supersedes.status), ")")
    cause = f"{i.cause.kind}:{i.cause.ref}"
    cells: list[str | Text] = [
        "✓" if marked else " ", f.fact_id, i.tx_at[:19], i.writer, short(cause, 30), f.subject,
        f.predicate, "(erased)" if f.erased else short(f.value, 30),
        _state(labels, f.status, f.provenance), old, ",".join(i.marks)]
    return styled(cells, "bold reverse") if marked else cells


def _retraction_cells(r: PendingRetraction, marked: bool, labels: Labels) -> list[str | Text]:
    f = r.fact
    cells: list[str | Text] = [
        "✓" if marked else " ", f.fact_id, r.tx_at[:19], r.retractor,
        short(f"retract: {r.reason or ''}", 30), f.subject, f.predicate,
        "(erased)" if f.erased else short(f.value, 30),
        _state(labels, f.status, r.provenance or "claimed"), "", "pending retraction"]
    return styled(cells, "bold reverse") if marked else cells


def _state(labels: Labels, status: str, provenance: str) -> Text:
    """The fact's status and the claim's provenance, each a word in its style."""
    return Text.assemble(labels.status(status), " ", labels.provenance(provenance))
