"""The Beliefs table's rows: change marks and styles (diff vs now), the status, now and
provenance labels, and the contradiction mark of a `one` predicate with two believed values."""

from __future__ import annotations

from rich.text import Text

from custody_app.domain.policy import CardinalityPolicy
from custody_app.ledger.readmodels import BeliefView
from screens.base import short
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
