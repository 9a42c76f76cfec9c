"""What `doctor` learns about a ledger on a real PostgreSQL server (store.postgres.health): the
server and pgvector versions, the schema version, the append-only triggers (a dropped or
disabled one is named), and the connecting role's rights (an owner may bypass the triggers; a
least-privilege writer may not)."""

from __future__ import annotations

import os
from typing import Any

import psycopg
import pytest

from store import open_ledger, server_health
from store.errors import NotALedger
from store.postgres.health import expected_triggers, inspect_server
from store.postgres.schema import SCHEMA_VERSION


def admin(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


def as_role(url: str, role: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{role}@{rest.split('@', 1)[1]}"


def test_a_fresh_ledger_reports_its_versions_and_triggers(pg_url: str) -> None:
    open_ledger(pg_url, create=True).close()
    health = inspect_server(pg_url)
    assert server_health(pg_url) == health  # the port's face, for the doctor
    assert health.schema == "custody" and health.schema_version == SCHEMA_VERSION
    assert health.server_version.split(".")[0].isdigit()
    assert int(health.server_version.split(".")[0]) >= 15
    assert health.pgvector_available  # the test server ships pgvector
    assert health.trigger_problems == []
    expected = expected_triggers(set())
    assert {"events_chain", "events_append_only_update", "events_append_only_delete",
            "events_no_truncate", "event_signatures_no_update"} <= set(expected)
    assert set(expected) <= set(health.triggers)
    # The test role made the ledger: it owns every table, and is told so.
    assert health.rights.superuser and health.rights.may_bypass_triggers
    assert "events" in health.rights.owned_tables
    assert any("may drop or alter" in n for n in health.notes)


def test_a_dropped_or_disabled_trigger_is_named(pg_url: str) -> None:
    open_ledger(pg_url, create=True).close()
    with admin(pg_url) as conn:
        conn.execute("ALTER TABLE custody.events DISABLE TRIGGER events_chain")
        conn.execute("DROP TRIGGER events_append_only_delete ON custody.events")
        conn.execute("ALTER TABLE custody.event_signatures ENABLE REPLICA TRIGGER "
                     "event_signatures_no_update")
    problems = inspect_server(pg_url).trigger_problems
    assert sorted(problems) == [
        "trigger event_signatures_no_update on event_signatures is set to fire only on a replica",
        "trigger events_append_only_delete on events is missing",
        "trigger events_chain on events is disabled",
    ]


def test_a_least_privilege_role_may_not_bypass_the_triggers(pg_url: str) -> None:
    open_ledger(pg_url, create=True).close()
    role = f"custody_writer_{os.getpid()}"  # roles are the whole server's
    with admin(pg_url) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        try:
            conn.execute(f"GRANT USAGE ON SCHEMA custody TO {role}")
            conn.execute(f"GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA custody TO {role}")
            health = inspect_server(as_role(pg_url, role))
            rights = health.rights
            assert rights.role == role
            assert (rights.superuser, rights.owned_tables, rights.may_create_in_schema) == (
                False, [], False)
            assert (rights.events_update, rights.events_delete, rights.events_truncate) == (
                False, False, False)
            assert not rights.may_bypass_triggers and health.notes == []
            # The same role may open and read the ledger.
            db = open_ledger(as_role(pg_url, role))
            assert db.events.count() == 0
            db.close()
        finally:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_another_applications_schema_is_refused(pg_url: str) -> None:
    with admin(pg_url) as conn:
        conn.execute("CREATE SCHEMA custody")
        conn.execute("CREATE TABLE custody.schema_version(version int, application text)")
        conn.execute("INSERT INTO custody.schema_version VALUES (3, 'billing')")
    with pytest.raises(NotALedger):
        inspect_server(pg_url)
