"""The cascade of an erasure: a fact and every fact derived from it through `sources`,
transitively (over-erasure is deliberate), and the legal holds that refuse it whole."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from custody_app.domain.errors import LedgerError
from custody_app.erasure.proof import ERASED
from store import LedgerFile
from store.rows import FactRow


def cascade(db: LedgerFile, roots: Iterable[FactRow]) -> tuple[list[FactRow], dict[str, str]]:
    """Roots and every fact derived from them, transitively, to a fixpoint (roots first).
    Returns the facts still holding a value and, for each derived one, the root it came from."""
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
        for child_id in db.facts.derived_from(fact.fact_id):
            if child_id not in seen:
                seen.add(child_id)
                child = db.facts.get(child_id)
                if child is not None:
                    queue.append((child, root))
    return order, root_of


def refuse_held(facts: list[FactRow], action: str) -> None:
    for fact in facts:
        if fact.held:
            raise LedgerError("on_hold", f"fact {fact.fact_id} is on legal hold; the {action} "
                              "is refused whole (release the hold first)", fact_id=fact.fact_id)
