"""The PostgreSQL schema as a version ladder: migration N takes a ledger schema from version N-1
to N. Migration 1 is gathered from every statement-group module's `DDL` tuple, in `DDL_MODULES`
order (events first), after the two tables this module declares (`schema_version`,
`ledger_meta`). Every statement runs with `search_path` set to the ledger's schema, so names
stay unqualified."""

from __future__ import annotations

import importlib
from typing import Any

import psycopg

from store.postgres.events import EVENTS_ERASE_ONLY, RECEIPTS_INDEX
from store.postgres.subjects import DDL as SUBJECTS_DDL
from store.postgres.subjects import MARK_NEW
from store.postgres.subjects import TRIGGERS as SUBJECTS_TRIGGERS
from store.postgres.texts import TEXTS_ERASE_ONLY

# What `schema_version.application` says in a custody-app ledger's schema.
APPLICATION = "custody-app"

DDL: tuple[str, ...] = (
    # One row: the schema's version and the application that made it.
    """CREATE TABLE schema_version(
    version     integer NOT NULL,
    application text NOT NULL
)""",
    """CREATE TABLE ledger_meta(
    key   text COLLATE "C" PRIMARY KEY,
    value text COLLATE "C" NOT NULL
)""",
)

# The modules whose `DDL` makes up migration 1, in order (the events table first: others
# reference it). A module not delivered yet contributes nothing (see `module_ddl`).
DDL_MODULES: tuple[str, ...] = ("events", "policies", "projection", "texts", "sessions",
                                "actions", "browse", "erasure", "recall")

# Erasure tombstones (the `tombstones` table, declared by store.postgres.erasure) are written
# once and never changed; these triggers are added after the modules' DDL when it made one.
TOMBSTONE_TRIGGERS: tuple[str, ...] = (
    """CREATE TRIGGER tombstones_no_update BEFORE UPDATE ON tombstones
FOR EACH ROW EXECUTE FUNCTION custody_refuse('an erasure tombstone cannot be changed')""",
    """CREATE TRIGGER tombstones_no_delete BEFORE DELETE ON tombstones
FOR EACH ROW EXECUTE FUNCTION custody_refuse('an erasure tombstone cannot be deleted')""",
    """CREATE TRIGGER tombstones_no_truncate BEFORE TRUNCATE ON tombstones
FOR EACH STATEMENT EXECUTE FUNCTION custody_refuse('erasure tombstones cannot be truncated')""",
)
HAS_TABLE = ("SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
             "WHERE n.nspname = current_schema() AND c.relname = %s AND c.relkind IN ('r', 'p')")


def module_ddl(name: str) -> tuple[str, ...]:
    """`store.postgres.<name>.DDL`; () while that module is not written yet (issue 33 is built
    by several people at once: a missing module must not block the others)."""
    try:
        module = importlib.import_module(f"store.postgres.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"store.postgres.{name}":
            return ()
        raise
    return tuple(getattr(module, "DDL", ()))


def migration_1() -> tuple[str, ...]:
    """Every statement of migration 1 but the tombstone triggers, in order."""
    out = list(DDL)
    for name in DDL_MODULES:
        out.extend(module_ddl(name))
    return tuple(out)


def run_migration_1(conn: psycopg.Connection[Any]) -> None:
    for statement in migration_1():
        conn.execute(statement)
    if conn.execute(HAS_TABLE, ("tombstones",)).fetchone() is not None:
        for statement in TOMBSTONE_TRIGGERS:
            conn.execute(statement)


# Migration 2 (issue 34, live refresh): every statement that appends events notifies the
# ledger's channel (store.postgres.changes) with the new head's seq, inside the writer's
# transaction, so a listener on another host hears it only once it commits, and at no
# round trip of the writer's own. A statement trigger with a transition table: one
# notification for a batch or a COPY of any size, not one per row.
NOTIFY_DDL: tuple[str, ...] = (
    """CREATE FUNCTION custody_notify_head() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(left(TG_TABLE_SCHEMA, 55) || '_changes',
                      (SELECT max(seq) FROM appended)::text);
    RETURN NULL;
END $$""",
    """CREATE TRIGGER events_notify AFTER INSERT ON events
REFERENCING NEW TABLE AS appended FOR EACH STATEMENT EXECUTE FUNCTION custody_notify_head()""",
)


def run_migration_2(conn: psycopg.Connection[Any]) -> None:
    for statement in NOTIFY_DDL:
        conn.execute(statement)



def run_migration_reseal(conn: psycopg.Connection[Any]) -> None:
    """Issue 34: the update rules of events and event_texts allow a re-key's re-seal (a sealed
    blob replaced by one of a higher key generation, nothing else changed). A self-contained
    step (migration 3). A ledger made by migration 1 of this code has the rules already:
    replacing them is harmless."""
    conn.execute("CREATE OR REPLACE " + EVENTS_ERASE_ONLY)
    conn.execute("DROP TRIGGER IF EXISTS event_texts_erase_only ON event_texts")
    conn.execute(TEXTS_ERASE_ONLY)


def run_migration_sealed_subjects(conn: psycopg.Connection[Any]) -> None:
    """Issue 34, nothing erasable in the clear: the `subjects` table (each subject's id sealed
    under its data key, store.postgres.subjects), and the events' update rule that lets an
    assert's subject become the ref its hashed body names. A new ledger (nothing written) is
    sealed from the start; one that holds plaintext ids is sealed by its first read-write open
    (the key ring is needed: LedgerFile.seal_subject_ids)."""
    if conn.execute(HAS_TABLE, ("subjects",)).fetchone() is not None:
        # A schema that had this step already (the ladder's order changed): made again.
        for trigger in SUBJECTS_TRIGGERS:
            conn.execute(f"DROP TRIGGER IF EXISTS {trigger} ON subjects")
    for statement in SUBJECTS_DDL:
        conn.execute(statement)
    conn.execute("CREATE OR REPLACE " + EVENTS_ERASE_ONLY)
    conn.execute(MARK_NEW)


def run_migration_spent_receipts(conn: psycopg.Connection[Any]) -> None:
    """A receipt is spent by the first fact it raises (docs/evidence.md): the index of the
    verified asserts citing a receipt, built from the events already there (a ledger made by
    migration 1 of this code has it: IF NOT EXISTS)."""
    conn.execute(RECEIPTS_INDEX)


# Index i holds the step that upgrades version i to i+1 (run inside one transaction).
MIGRATIONS = (run_migration_1, run_migration_2, run_migration_reseal,
              run_migration_sealed_subjects, run_migration_spent_receipts)
SCHEMA_VERSION = len(MIGRATIONS)
