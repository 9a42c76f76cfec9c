"""Salience: ACT-R base-level activation over a fact's assert and affirm times, classed
hot, warm or cold by the policy; it breaks ties in recall and is shown by `why`."""

from __future__ import annotations

import math
from datetime import datetime

from custody_app.domain.policy import LoadedPolicy
from custody_app.domain.retention import window_for
from custody_app.domain.timeutil import parse_time
from store import LedgerFile
from store.rows import FactRow


def salience(db: LedgerFile, policy: LoadedPolicy, fact: FactRow, now: datetime) -> float:
    """B = ln(sum of dt^-d) over assert and affirm times (dt in days, at least half a day)."""
    return salience_of(policy, fact.space, [e.tx_at for e in db.events.for_fact(fact.fact_id)
                                            if e.kind in ("assert", "affirm")], now)


def salience_of(policy: LoadedPolicy, space: str, times: list[str], now: datetime) -> float:
    """`salience` from the tx_at of a fact's assert and affirm events, in seq order."""
    pol = policy.policy.recall
    override = window_for(space, {k: str(v) for k, v in pol.decay_by_space.items()})
    decay = float(override[1]) if override else pol.decay
    total = 0.0
    for tx_at in times:
        days = (now - parse_time(tx_at)).total_seconds() / 86400
        total += max(days, 0.5) ** -decay
    return math.log(total) if total > 0 else float("-inf")


def salience_class(policy: LoadedPolicy, value: float) -> str:
    pol = policy.policy.recall
    return "hot" if value >= pol.hot else "cold" if value < pol.cold else "warm"
