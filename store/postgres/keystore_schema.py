"""The server key store's schema (`<ledger schema>_keys`): its tables, the triggers that keep
its entries, keys and marks as the SQLite key store's triggers do, the change counter, and its
creation at the first open (store.postgres.keystore)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from store.errors import LedgerTooNew, NotALedger, StoreError

APPLICATION = "custody-app key store"
KEYSTORE_VERSION = 2
_REFUSED = "integrity_constraint_violation"

# Entries are written once; only the word index key ('index', and a rotation's intent
# 'index_next') may be replaced, and only 'index_next' deleted; an epoch rotation (issue 34)
# replaces the wrapping of the wrapped entries, the marks' MAC key and the epoch record. An
# INSERT ... ON CONFLICT DO UPDATE is an UPDATE here, so no entry is replaced that way either.
META_GUARD = f"""CREATE OR REPLACE FUNCTION keystore_meta_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.name IN ('index', 'index_next', 'check', 'forget', 'pepper',
                                         'signing', 'mark_key', 'epoch')
       AND NEW.name = OLD.name THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'DELETE' AND OLD.name = 'index_next' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'custody: key store entries are written once' USING ERRCODE = '{_REFUSED}';
END $$"""
# A key is destroyed once (wrapped nulled, destroyed_at set), or re-wrapped while live (an
# epoch rotation); its row is never deleted, and a destroyed key never comes back.
KEYS_GUARD = f"""CREATE OR REPLACE FUNCTION subject_keys_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'custody: a subject key is destroyed, never deleted'
            USING ERRCODE = '{_REFUSED}';
    END IF;
    IF OLD.destroyed_at IS NULL AND NEW.subject_ref = OLD.subject_ref
       AND NEW.generation = OLD.generation AND NEW.created_at = OLD.created_at
       AND ((NEW.destroyed_at IS NOT NULL AND NEW.wrapped IS NULL)
            OR (NEW.destroyed_at IS NULL AND OLD.wrapped IS NOT NULL
                AND NEW.wrapped IS NOT NULL)) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'custody: a key can only be destroyed, once, or re-wrapped'
        USING ERRCODE = '{_REFUSED}';
END $$"""
# Each version's steps from the one before (a key store of version 1 is upgraded at open).
UPGRADES: dict[int, tuple[str, ...]] = {2: (META_GUARD, KEYS_GUARD)}

DDL: tuple[str, ...] = (
    """CREATE TABLE schema_version(
    version     integer NOT NULL,
    application text NOT NULL)""",
    # Bumped by every statement that writes a key store table (data_version): another
    # connection's commit shows as a new number.
    """CREATE TABLE keystore_changes(
    one boolean PRIMARY KEY CHECK (one),
    n   bigint NOT NULL)""",
    """CREATE TABLE keystore_meta(
    name  text COLLATE "C" PRIMARY KEY,
    value bytea NOT NULL)""",
    # One data key per subject and generation, wrapped under the master key. Destroying a key
    # nulls `wrapped` and sets `destroyed_at`; the row stays as its tombstone, immutable after.
    """CREATE TABLE subject_keys(
    subject_ref  text COLLATE "C" NOT NULL,
    generation   bigint NOT NULL,
    wrapped      bytea,
    created_at   text COLLATE "C" NOT NULL,
    destroyed_at text COLLATE "C",
    PRIMARY KEY(subject_ref, generation))""",
    # The ledger's high-water marks, each with its MAC (DESIGN 14); written once.
    """CREATE TABLE ledger_marks(
    n        bigint PRIMARY KEY,
    seq      bigint NOT NULL,
    head     text NOT NULL,
    at       text NOT NULL,
    accepted integer NOT NULL DEFAULT 0,
    mac      text)""",
    # Entries are written once; only the word index key ('index', and a rotation's intent
    # 'index_next') may be replaced, and only 'index_next' deleted. An INSERT ... ON CONFLICT
    # DO UPDATE is an UPDATE here, so no entry is replaced that way either.
    META_GUARD,
    """CREATE TRIGGER keystore_meta_write_once BEFORE UPDATE OR DELETE ON keystore_meta
    FOR EACH ROW EXECUTE FUNCTION keystore_meta_guard()""",
    KEYS_GUARD,
    """CREATE TRIGGER subject_keys_destroy_only BEFORE UPDATE OR DELETE ON subject_keys
    FOR EACH ROW EXECUTE FUNCTION subject_keys_guard()""",
    f"""CREATE FUNCTION keystore_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'custody: %', TG_ARGV[0] USING ERRCODE = '{_REFUSED}';
END $$""",
    """CREATE TRIGGER ledger_marks_write_once BEFORE UPDATE OR DELETE ON ledger_marks
    FOR EACH ROW EXECUTE FUNCTION keystore_refuse('a ledger mark is written once')""",
    # TRUNCATE removes rows without row triggers: refused on every table.
    """CREATE TRIGGER keystore_meta_no_truncate BEFORE TRUNCATE ON keystore_meta
    FOR EACH STATEMENT EXECUTE FUNCTION keystore_refuse('key store entries are written once')""",
    """CREATE TRIGGER subject_keys_no_truncate BEFORE TRUNCATE ON subject_keys
    FOR EACH STATEMENT EXECUTE FUNCTION
    keystore_refuse('a subject key is destroyed, never deleted')""",
    """CREATE TRIGGER ledger_marks_no_truncate BEFORE TRUNCATE ON ledger_marks
    FOR EACH STATEMENT EXECUTE FUNCTION keystore_refuse('a ledger mark is written once')""",
    # The change counter; its function keeps the key store's schema whoever's session runs it.
    """CREATE FUNCTION keystore_bump() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE keystore_changes SET n = n + 1;
    RETURN NULL;
END $$""",
    """CREATE TRIGGER keystore_meta_changed AFTER INSERT OR UPDATE OR DELETE ON keystore_meta
    FOR EACH STATEMENT EXECUTE FUNCTION keystore_bump()""",
    """CREATE TRIGGER subject_keys_changed AFTER INSERT OR UPDATE OR DELETE ON subject_keys
    FOR EACH STATEMENT EXECUTE FUNCTION keystore_bump()""",
    """CREATE TRIGGER ledger_marks_changed AFTER INSERT OR UPDATE OR DELETE ON ledger_marks
    FOR EACH STATEMENT EXECUTE FUNCTION keystore_bump()""",
)
# What a new key store holds (the SQLite ladder's last step records marks_legacy_upto; a new
# store has no MAC-less mark).
SEED: tuple[tuple[str, tuple[object, ...]], ...] = (
    ("INSERT INTO schema_version(version, application) VALUES (%s, %s)",
     (KEYSTORE_VERSION, APPLICATION)),
    ("INSERT INTO keystore_changes(one, n) VALUES (TRUE, 0)", ()),
    ("INSERT INTO keystore_meta(name, value) VALUES ('marks_legacy_upto', %s)", (b"0",)),
)

HAS_SCHEMA = "SELECT 1 FROM pg_namespace WHERE nspname = %s"
HAS_RELATIONS = ("SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                 "WHERE n.nspname = %s LIMIT 1")
HAS_VERSION = "SELECT to_regclass(%s) IS NOT NULL"


def ensure(conn: psycopg.Connection[Any], keys: str, where: str, *, create: bool = True) -> None:
    """The key store's schema as this code writes it (inside the opening transaction); a
    missing one is made, or with `create=False` refused (`keystore_missing`)."""
    exists = conn.execute(HAS_SCHEMA, (keys,)).fetchone() is not None
    version_table = f"{sql.Identifier(keys).as_string(conn)}.schema_version"
    if exists and conn.execute(HAS_VERSION, (version_table,)).fetchone() == (True,):
        row = conn.execute(sql.SQL("SELECT version, application FROM {}.schema_version")
                           .format(sql.Identifier(keys))).fetchone()
        if row is None or row[1] != APPLICATION:
            raise NotALedger(f"{where} holds tables but not a custody-app key store")
        if int(row[0]) > KEYSTORE_VERSION:
            raise LedgerTooNew(f"{where} was written by a newer custody-app")
        if int(row[0]) < KEYSTORE_VERSION and create:  # doctor's read-only open: as it is
            conn.execute(sql.SQL("SET LOCAL search_path = {}").format(sql.Identifier(keys)))
            for version in range(int(row[0]) + 1, KEYSTORE_VERSION + 1):
                for statement in UPGRADES[version]:
                    conn.execute(statement)
            conn.execute("UPDATE schema_version SET version = %s", (KEYSTORE_VERSION,))
        return
    if exists and conn.execute(HAS_RELATIONS, (keys,)).fetchone() is not None:
        raise NotALedger(f"{where} holds tables but not a custody-app key store")
    if not create:
        raise StoreError(f"the key store {where} does not exist", "keystore_missing")
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(keys)))
    conn.execute(sql.SQL("SET LOCAL search_path = {}").format(sql.Identifier(keys)))
    for statement in DDL:
        conn.execute(statement)
    for statement, params in SEED:
        conn.execute(statement, params)
