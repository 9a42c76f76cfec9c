"""Read-only inspection of a ledger on a PostgreSQL server for `custody-app doctor`: the server's
version, pgvector, the schema's version, the append-only triggers (present and enabled), what
the connecting role may do to the ledger's tables (an owner or a superuser may drop or alter
them, or switch their triggers off), the erasures still pending (and the transactions holding
them back) and whether an erasure certificate may read raw pages. Plain data; the doctor
prints it. Writes nothing."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import psycopg

from store.errors import NotALedger, StoreError
from store.postgres import residue
from store.postgres.opening import connect
from store.postgres.pages import inspection_barrier
from store.postgres.schema import APPLICATION, SCHEMA_VERSION, TOMBSTONE_TRIGGERS, migration_1
from store.postgres.subjects import DDL as SUBJECTS_DDL
from store.postgres.subjects import MODE_META as SUBJECT_MODE
from store.postgres.subjects import SEALED

VECTOR = ("SELECT default_version, installed_version FROM pg_available_extensions "
          "WHERE name = 'vector'")
VECTOR_SCHEMA = ("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n "
                 "ON n.oid = e.extnamespace WHERE e.extname = 'vector'")
HAS_VERSION_TABLE = ("SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                     "WHERE n.nspname = %s AND c.relname = 'schema_version'")
VERSION = "SELECT version, application FROM schema_version"
# tgenabled: O fires (origin and local), A always, R only on a replica, D never.
TRIGGERS = ("SELECT t.tgname, c.relname, t.tgenabled FROM pg_trigger t "
            "JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND NOT t.tgisinternal ORDER BY t.tgname")
TABLES = ("SELECT c.relname, pg_has_role(c.relowner, 'USAGE') FROM pg_class c "
          "JOIN pg_namespace n ON n.oid = c.relnamespace "
          "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') ORDER BY c.relname")
# A schema not made yet: whether the role may make one (CREATE on the database).
ROLE = ("SELECT current_user, r.rolsuper, CASE WHEN n.oid IS NULL "
        "THEN has_database_privilege(current_database(), 'CREATE') "
        "ELSE has_schema_privilege(n.oid, 'CREATE') END "
        "FROM pg_roles r LEFT JOIN pg_namespace n ON n.nspname = %s "
        "WHERE r.rolname = current_user")
PRIVILEGE = "SELECT has_table_privilege(%s, %s)"
# The newest assert whose subject is not erased (the doctor matches the key store against it).
LAST_SUBJECT = ("SELECT seq, subject, body FROM events WHERE kind = 'assert' "
                "AND subject IS NOT NULL ORDER BY seq DESC LIMIT 1")
HAS_SUBJECTS = ("SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relname = 'subjects'")
SEALED_SUBJECT = "SELECT sealed FROM subjects WHERE subject_ref = %s"
PENDING = "SELECT fact_id, since FROM pending_scrubs ORDER BY since, fact_id"
META = "SELECT value FROM ledger_meta WHERE key = %s"
# What store.sqlite.health.IDENTIFIERS reads, on a server. A sealed ledger's subject column
# holds each subject's keyed ref (hex) or `erased:<ref16>`, never the id: not read then.
_OUTSIDE_ASCII = "~ '[^ -~]'"  # the columns are COLLATE "C": the range is by code point
_LIVE = "count(*) FILTER (WHERE status IN ('active', 'quarantined'))"
SUBJECT_IDENTIFIERS = (f"SELECT 'subject', subject, count(*), {_LIVE} FROM facts "
                       f"WHERE subject {_OUTSIDE_ASCII} GROUP BY subject")
IDENTIFIERS = (
    *(f"SELECT '{name}', {column}, count(*), {_LIVE} FROM facts "
      f"WHERE {column} {_OUTSIDE_ASCII} GROUP BY {column}"
      for name, column in (("predicate", "predicate"), ("space", "space"), ("writer", "actor"))),
    f"SELECT 'actor', actor, count(*), 0 FROM events WHERE actor {_OUTSIDE_ASCII} GROUP BY actor",
    f"SELECT 'session', session, count(*), 0 FROM session_events "
    f"WHERE session {_OUTSIDE_ASCII} GROUP BY session",
)
_NAMED = re.compile(r"CREATE TRIGGER (\w+) BEFORE [A-Z ]+? ON (\w+)")
FIRES = ("O", "A")


@dataclass(frozen=True, slots=True)
class RoleRights:
    """What the connecting role may do to the ledger's tables."""

    role: str
    superuser: bool  # may do anything, triggers off included (session_replication_role)
    owned_tables: list[str]  # owner (or member of the owner): may DROP, ALTER, DISABLE TRIGGER
    may_create_in_schema: bool
    # Privileges on events the triggers still refuse (a least-privilege writer has none of them).
    events_update: bool
    events_delete: bool
    events_truncate: bool

    @property
    def may_bypass_triggers(self) -> bool:
        return self.superuser or bool(self.owned_tables)


@dataclass(frozen=True, slots=True)
class ServerHealth:
    """What `doctor` reports for a server ledger."""

    address: str
    schema: str
    server_version: str
    pgvector_available: str | None  # the version the server could install, None: not there
    pgvector_installed: str | None
    pgvector_schema: str | None
    schema_version: int | None
    triggers: dict[str, tuple[str, str]]  # name -> (table, tgenabled)
    trigger_problems: list[str]
    rights: RoleRights
    notes: list[str] = field(default_factory=list)
    # The newest schema version this code reads and writes.
    supported_version: int = SCHEMA_VERSION
    # (seq, subject, hashed body) of the newest assert with a subject not erased, if any.
    last_subject: tuple[int, str, str] | None = None
    # Its id sealed (store.postgres.subjects) when the ledger stores the ref in its place.
    last_subject_sealed: bytes | None = None
    # Erased facts whose certificate is still pending (fact_id, since), and the transactions
    # older than their erasure that hold it back (named, store.postgres.residue).
    pending_erasures: list[tuple[str, str]] = field(default_factory=list)
    erasure_snapshots: list[str] = field(default_factory=list)
    # Why an erasure certificate cannot read the old row versions back (None: it can).
    page_inspection: str | None = None
    # (field, identifier, rows, live facts) of the identifiers holding a character outside
    # printable ASCII (store.sqlite.health.Inspection.identifiers); subjects only when the
    # ledger stores their ids in the clear (`subjects_sealed` false: made before issue 34 and
    # not opened for writing since).
    identifiers: list[tuple[str, str, int, int]] = field(default_factory=list)
    subjects_sealed: bool = True


def expected_triggers(tables: set[str]) -> dict[str, str]:
    """The append-only and chain triggers a ledger's schema has (name -> table), taken from
    the DDL itself; the tombstone triggers when the schema has its tombstones table."""
    statements = (list(migration_1()) + (list(TOMBSTONE_TRIGGERS) if "tombstones" in tables else [])
                  + (list(SUBJECTS_DDL) if "subjects" in tables else []))
    return {m.group(1): m.group(2) for s in statements if (m := _NAMED.search(s))}


def server_version(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SELECT current_setting('server_version')").fetchone()
    return str(row[0]) if row else ""


def pgvector(conn: psycopg.Connection[Any]) -> tuple[str | None, str | None, str | None]:
    """(version the server can install, version installed in this database, its schema)."""
    row = conn.execute(VECTOR).fetchone()
    where = conn.execute(VECTOR_SCHEMA).fetchone()
    available = None if row is None else str(row[0])
    installed = None if row is None or row[1] is None else str(row[1])
    return available, installed, None if where is None else str(where[0])


def schema_version(conn: psycopg.Connection[Any], schema: str) -> int | None:
    """The ledger schema's version (None: no version table); refuses another application's."""
    if conn.execute(HAS_VERSION_TABLE, (schema,)).fetchone() is None:
        return None
    rows = conn.execute(VERSION).fetchall()
    if len(rows) != 1 or rows[0][1] != APPLICATION:
        raise NotALedger(f"the schema {schema} belongs to another application")
    return int(rows[0][0])


def triggers(conn: psycopg.Connection[Any], schema: str) -> dict[str, tuple[str, str]]:
    return {str(n): (str(t), str(e)) for n, t, e in conn.execute(TRIGGERS, (schema,))}


def trigger_problems(conn: psycopg.Connection[Any], schema: str) -> list[str]:
    """Each expected trigger that is missing, on another table, or does not fire."""
    tables = {str(r[0]) for r in conn.execute(TABLES, (schema,))}
    have = triggers(conn, schema)
    problems = []
    for name, table in expected_triggers(tables).items():
        if name not in have:
            problems.append(f"trigger {name} on {table} is missing")
        elif have[name][0] != table:
            problems.append(f"trigger {name} is on {have[name][0]}, not {table}")
        elif have[name][1] not in FIRES:
            state = "disabled" if have[name][1] == "D" else "set to fire only on a replica"
            problems.append(f"trigger {name} on {table} is {state}")
    return problems


def role_rights(conn: psycopg.Connection[Any], schema: str) -> RoleRights:
    row = conn.execute(ROLE, (schema,)).fetchone()
    if row is None:
        raise StoreError("the connecting role is not in pg_roles", "postgres_error")
    owned = [str(t) for t, mine in conn.execute(TABLES, (schema,)) if mine]
    events = f"{_quoted(schema)}.events"
    privileges = []
    for privilege in ("UPDATE", "DELETE", "TRUNCATE"):
        try:
            got = conn.execute(PRIVILEGE, (events, privilege)).fetchone()
        except StoreError:  # no events table: nothing to write to
            got = (False,)
        privileges.append(bool(got and got[0]))
    return RoleRights(str(row[0]), bool(row[1]), owned, bool(row[2]), *privileges)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def report(conn: psycopg.Connection[Any], schema: str, address: str) -> ServerHealth:
    available, installed, where = pgvector(conn)
    version = schema_version(conn, schema)
    rights = role_rights(conn, schema)
    notes = []
    if available is None:
        notes.append("pgvector is not available on this server: vector recall cannot use it")
    if rights.may_bypass_triggers:
        notes.append(f"the role {rights.role} "
                     + ("is a superuser" if rights.superuser else
                        f"owns {', '.join(rights.owned_tables)}")
                     + ": it may drop or alter the ledger's tables and switch their triggers "
                       "off; run agents and reviewers as a role that only reads and inserts")
    sample = conn.execute(LAST_SUBJECT).fetchone() if version is not None else None
    sealed = None
    if sample is not None and conn.execute(HAS_SUBJECTS).fetchone() is not None:
        row = conn.execute(SEALED_SUBJECT, (sample[1],)).fetchone()
        sealed = None if row is None or row[0] is None else bytes(row[0])
    pending = [(str(f), str(t)) for f, t in conn.execute(PENDING)] if version is not None else []
    ids_sealed = _subjects_sealed(conn) if version is not None else True
    identifiers = [] if version is None else [
        (str(f), str(v), int(n), int(live))
        for sql in ((() if ids_sealed else (SUBJECT_IDENTIFIERS,)) + IDENTIFIERS)
        for f, v, n, live in conn.execute(sql)]
    held = residue.old_snapshots(conn, residue.horizon(conn, _horizon(conn))) if pending else []
    return ServerHealth(address, schema, server_version(conn), available, installed, where,
                        version, triggers(conn, schema),
                        trigger_problems(conn, schema) if version is not None else [],
                        rights, notes, last_subject=None if sample is None else
                        (int(sample[0]), str(sample[1]), str(sample[2])),
                        last_subject_sealed=sealed,
                        pending_erasures=pending, erasure_snapshots=held,
                        page_inspection=inspection_barrier(conn)[1],
                        identifiers=identifiers, subjects_sealed=ids_sealed)


def _subjects_sealed(conn: psycopg.Connection[Any]) -> bool:
    """Whether the subject columns hold refs (store.postgres.subjects), not the ids."""
    row = conn.execute(META, (SUBJECT_MODE,)).fetchone()
    return row is not None and str(row[0]) == SEALED


def _horizon(conn: psycopg.Connection[Any]) -> str | None:
    row = conn.execute(META, (residue.HORIZON,)).fetchone()
    return None if row is None else str(row[0])


def inspect_server(url: str) -> ServerHealth:
    """Connect read-only to the ledger at `url` (no migration, nothing written) and report."""
    conn, schema, shown = connect(url)
    try:
        conn.execute("SET default_transaction_read_only = on")
        return report(conn, schema, shown)
    finally:
        conn.close()
