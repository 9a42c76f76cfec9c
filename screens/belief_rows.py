"""The Beliefs table's rows: change marks and styles (diff vs now), the status, now and
provenance labels, and the contradiction mark of a `one` predicate with two believed values."""

from __future__ import annotations

from rich.text import Text

from custody_app.domain.policy import CardinalityPolicy
from custody_app.ledger.readmodels import BeliefView
from screens.base import cut_cell, short
from screens.labels import Labels, styled

MARK = {"same": " ", "added": "+", "ended": "-", "changed": "~"}
STYLE = {"same": "", "added": "bold green", "ended": "red strike", "changed": "bold yellow"}


def contested_of(facts: list[BeliefView], policy: CardinalityPolicy) -> set[str]:
    """Believed facts sharing a subject and a `one` predicate with another on this page."""
    by_key: dict[tuple[str, str], list[str]] = {}
    for v in facts:
        if v.believed and policy.of(v.predicate) == "one":
            by_key.setdefault((v.subject, v.predicate), []).append(v.fact_id)
    return {i for ids in by_key.values() if len(ids) > 1 for i in ids}


def belief_cells(v: BeliefView, labels: Labels, contested: bool = False,
           width: int = 40) -> list[str | Text]:
    style = STYLE[v.change] or ("bold magenta" if contested else "")
    value = "(erased)" if v.erased else short(v.value, width)
    status = labels.status(v.status, "—" if v.status == "not_asserted" else v.status)
    if contested:
        status.append(" ⚠contradiction")
    now = labels.status(v.status_now)
    if v.held:
        now.append_text(labels.status("held", " ⚑held"))
    cells: list[str | Text] = [
        MARK[v.change], v.fact_id, v.subject, v.predicate, value, v.space, status, now,
        labels.provenance(v.provenance), v.valid_from[:19], (v.valid_to or "")[:19], v.actor,
        v.salience_class or ""]
    if not style:
        return cells  # the other cells plain: styled Text costs more to lay out
    return styled(cells, style)


# At a narrow width (below 120 columns) the table keeps what a reader judges a belief by, each
# cut to a share of the width: Δ, subject, predicate, value, status, provenance. At 80 columns
# they fit without scrolling; the fact id and the rest are one enter away.
# (cell index, width at 80 columns, share of each column beyond 80). At 80: 79 columns inside
# the scrollbar, 2 of padding per cell, Δ 1, status 11 ("quarantined"), provenance 8.
NARROW_SHARES = ((0, 1, 0.0), (2, 14, 0.3), (3, 16, 0.3), (4, 17, 0.4), (6, 11, 0.0),
                 (8, 8, 0.0))


def narrow_cells(cells: list[str | Text], width: int) -> list[str | Text]:
    """The narrow columns of a row at a terminal `width`: fixed ones (Δ, status, provenance)
    at their width, the others sharing what is left; a status with a mark keeps its word."""
    out: list[str | Text] = []
    spare = max(0, width - 80)
    for index, least, share in NARROW_SHARES:
        cell = cells[index]
        limit = least + int(spare * share) if share else 0
        if index == 6 and isinstance(cell, Text) and "contradiction" in cell.plain:
            cell = cell[: len(cell.plain) - len(" ⚠contradiction")] + Text("⚠")
        out.append(cut_cell(cell, limit) if limit else cell)
    return out
