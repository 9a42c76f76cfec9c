"""The cascade of an erasure: a fact and every fact derived from it through `sources`,
transitively (over-erasure is deliberate), and the legal holds that refuse it whole."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from custody_app.domain.errors import LedgerError
from custody_app.erasure.proof import ERASED
from store import LedgerFile
from store.rows import FactRow


class Descendants:
    """Every fact derived from some roots, transitively, read level by level in bulk (a sweep
    cascades from tens of thousands of roots, most with no derived fact: a query per level,
    not one per root). Valid while nothing is written: what `cascade` reads through it."""

    def __init__(self, db: LedgerFile, roots: Iterable[FactRow]) -> None:
        self.children: dict[str, list[str]] = {}
        self.rows: dict[str, FactRow] = {}
        frontier = list(dict.fromkeys(r.fact_id for r in roots))
        seen = set(frontier)
        while frontier:
            level: list[str] = []
            for child, source in db.facts.derived_from_many(frontier):  # by child id, as one's
                self.children.setdefault(source, []).append(child)
                if child not in seen:
                    seen.add(child)
                    level.append(child)
            self.rows.update((f.fact_id, f) for f in db.facts.get_many(level))
            frontier = level

    def derived_from(self, fact_id: str) -> list[str]:
        return self.children.get(fact_id, [])

    def get(self, fact_id: str) -> FactRow | None:
        return self.rows.get(fact_id)


def cascade(db: LedgerFile, roots: Iterable[FactRow],
            known: Descendants | None = None) -> tuple[list[FactRow], dict[str, str]]:
    """Roots and every fact derived from them, transitively, to a fixpoint (roots first).
    Returns the facts still holding a value and, for each derived one, the root it came from.
    `known`: the descendants read ahead (else read here, a query per fact)."""
    lineage = db.facts if known is None else known
    order: list[FactRow] = []
    root_of: dict[str, str] = {}
    seen: set[str] = set()
    queue = deque((r, r.fact_id) for r in roots)
    for fact, _ in queue:
        seen.add(fact.fact_id)
    while queue:
        fact, root = queue.popleft()
        if fact.ended in ERASED:
            continue
        order.append(fact)
        if fact.fact_id != root:
            root_of[fact.fact_id] = root
        for child_id in lineage.derived_from(fact.fact_id):
            if child_id not in seen:
                seen.add(child_id)
                child = lineage.get(child_id)
                if child is not None:
                    queue.append((child, root))
    return order, root_of


def refuse_held(facts: list[FactRow], action: str) -> None:
    for fact in facts:
        if fact.held:
            raise LedgerError("on_hold", f"fact {fact.fact_id} is on legal hold; the {action} "
                              "is refused whole (release the hold first)", fact_id=fact.fact_id)
