"""The review queue's rows (claims and pending retractions, marked or not, with their status
and provenance labels) and what an approve or reject dialog says about its targets."""

from __future__ import annotations

from rich.text import Text

from custody_app.ledger.readmodels import PendingRetraction, ReviewItem, ReviewPage
from screens.base import short
from screens.labels import Labels, styled

# Row key prefix of a pending retraction (the rest of the key is its fact id).
RETRACTION = "retraction:"


def queue_cells(page: ReviewPage, marked: set[str],
                labels: Labels) -> list[tuple[str, list[str | Text]]]:
    """(row key, cells) of a page: pending retractions first, then the claims."""
    waiting = [(RETRACTION + r.fact.fact_id, _retraction_cells(
        r, RETRACTION + r.fact.fact_id in marked, labels)) for r in page.retractions]
    return waiting + [(i.fact.fact_id, _cells(i, i.fact.fact_id in marked, labels))
                      for i in page.items]


def details(page: ReviewPage | None, op: str, targets: list[str]) -> str:
    """What the reviewer is about to approve or reject, and what follows from it."""
    shown = {i.fact.fact_id: i for i in (page.items if page else [])}
    lines = []
    for fact_id in targets[:5]:
        i = shown.get(fact_id)
        lines.append(f"{fact_id}  {i.fact.subject} {i.fact.predicate} = "
                     f"{'(erased)' if i.fact.erased else short(i.fact.value, 60)}  by "
                     f"{i.writer}" if i else f"{fact_id}  (on another page)")
    if len(targets) > 5:
        lines.append(f"… and {len(targets) - 5} more")
    lines.append("Reads and recall return them from now on." if op == "confirm" else
                 "They are never believed; what they would replace stays believed.")
    return "\n".join(lines)



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
