"""An assert reports its fact as the projection wrote it (issue 35: no read of its own row),
and reads it back when anything was written after it in the same operation (a corroboration
closing it as a duplicate): the status it reports is always the stored one."""

from __future__ import annotations

from typing import Any

import pytest

from custody_app.core.ledger_core import SYSTEM_ACTOR
from custody_app.ledger import writes
from tests.conftest import CAUSE


def test_the_reported_status_is_the_stored_one(make_env: Any) -> None:
    env = make_env()
    for provenance in ("claimed", "attested"):
        result = env.ledger.assert_fact("acct:1", "plan", provenance, actor="agent:a",
                                        cause=CAUSE, provenance=provenance)
        assert result.status == env.status(result.fact_id)


def test_a_write_after_the_assert_in_its_operation_is_read_back(
        make_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    env = make_env()

    def closes_it(ledger: Any, fact: Any, value_text: str) -> list[str]:
        # As a corroboration closes the new copy as a duplicate; answering [] on purpose, so
        # only the moved head tells the assert that its row changed.
        ledger.append("reject", SYSTEM_ACTOR, ledger.tx_at(), {"reason": "duplicate"},
                      fact_id=fact.fact_id)
        return []

    monkeypatch.setattr(writes, "corroborate", closes_it)
    result = env.ledger.assert_fact("acct:1", "plan", "pro", actor="agent:a", cause=CAUSE,
                                    provenance="claimed")
    assert result.status == env.status(result.fact_id) != "quarantined"
