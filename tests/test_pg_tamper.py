"""A server ledger edited behind the application's back: by a role that may change its tables
(the derived ones are not append-only) or, with `session_replication_role = replica`, even
bypass the triggers that guard the events. verify names what was changed, rebuild --repair
restores what can be re-derived, and a ledger cut back below its key store's mark is refused."""

from __future__ import annotations

import psycopg
import pytest

from custody_app.domain.errors import LedgerError
from custody_app.ledger.facade import Ledger
from tests.test_verify_derived import build


def edit(url: str, *statements: str, bypass: bool = False) -> None:
    """Run SQL on the ledger's schema through a plain connection (no custody-app code)."""
    head, _, query = url.partition("?")
    with psycopg.connect(head + "?" + query, autocommit=True) as conn:
        conn.execute("SET search_path = custody")
        if bypass:  # what a superuser (or the tables' owner with that right) can do
            conn.execute("SET session_replication_role = replica")
        for statement in statements:
            conn.execute(statement)


@pytest.fixture
def built(pg_url: str) -> tuple[str, dict[str, str]]:
    return pg_url, build(pg_url)  # type: ignore[arg-type]


CASES = {
    "served reads deleted": ("DELETE FROM served_facts", "served_facts"),
    "session events deleted": ("DELETE FROM session_events", "session_events"),
    "session summary deleted": ("DELETE FROM sessions", "sessions"),
    "action index rows deleted": ("DELETE FROM actions", "actions"),
    "action index row edited": ("UPDATE actions SET tool = 'weather'", "actions"),
}


def test_the_untampered_server_ledger_verifies(built: tuple[str, dict[str, str]]) -> None:
    url, ids = built
    with Ledger.open(url, readonly=True) as led:
        assert led.verify().valid and led.verify(deep=True).valid
        assert [s.session for s in led.blast(ids["plan"]).sessions] == ["sess-read"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_verify_names_an_edited_derived_table_and_rebuild_repairs_it(
        built: tuple[str, dict[str, str]], case: str) -> None:
    url, ids = built
    statement, table = CASES[case]
    edit(url, statement)
    with Ledger.open(url) as led:
        report = led.verify()
        assert not report.valid and report.problem is not None and table in report.problem
        fixed = led.rebuild(repair=True)
        assert fixed.repaired
        assert led.verify().valid, led.verify().problem
        assert [s.session for s in led.blast(ids["plan"]).sessions] == ["sess-read"]
        assert [a.ref for a in led.actions().actions] == ["tx-77"]


def test_an_edited_projection_is_named_by_verify(built: tuple[str, dict[str, str]]) -> None:
    url, ids = built
    edit(url, f"UPDATE facts SET predicate = 'tier' WHERE fact_id = '{ids['plan']}'")
    with Ledger.open(url, readonly=True) as led:
        report = led.verify()
    assert not report.valid


def test_an_event_body_edited_with_the_triggers_bypassed_is_named_by_seq(
        built: tuple[str, dict[str, str]]) -> None:
    url, _ = built
    with pytest.raises(psycopg.Error):  # the database itself refuses the edit
        edit(url, "UPDATE events SET body = replace(body, 'agent:support', 'agent:rogue') "
                  "WHERE seq = 2")
    edit(url, "UPDATE events SET body = replace(body, 'agent:support', 'agent:rogue') "
              "WHERE seq = 2", bypass=True)
    with Ledger.open(url, readonly=True) as led:
        report = led.verify()
    assert not report.valid and report.problem is not None
    assert report.first_bad_seq == 2, report


def test_a_ledger_cut_back_below_its_key_stores_mark_is_refused(
        built: tuple[str, dict[str, str]]) -> None:
    """Events deleted from the end with the triggers bypassed, down past the last one that
    changed the key store (a restore of an older copy does the same): the key store's
    authenticated mark is higher than the head, so the open refuses."""
    url, _ = built
    with pytest.raises(psycopg.Error):
        edit(url, "DELETE FROM events WHERE seq >= 3")
    edit(url, "DELETE FROM event_signatures WHERE seq >= 3", "DELETE FROM event_texts WHERE seq >= 3",
         "DELETE FROM events WHERE seq >= 3", bypass=True)
    with pytest.raises(LedgerError) as refused:
        Ledger.open(url)
    assert refused.value.code in ("ledger_rolled_back", "ledger_forked"), refused.value


