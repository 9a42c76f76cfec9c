"""open_ledger() for a PostgreSQL address: connect, put the ledger's schema on the search_path,
refuse what is not a custody-app ledger (or a newer one), create one when asked.

The address is a libpq URL, `postgresql://USER@HOST:PORT/DB` (or `postgres://`, any libpq
query parameter, e.g. `?host=/run/sock&sslmode=require`). The ledger lives in its own schema of
that database, `custody` unless the URL names another with the query parameter `schema=NAME`
(lower-case letters, digits and `_`; taken out before the URL reaches libpq). Every connection
sets `search_path` to that schema, then `public` (where extensions such as pgvector usually
live), so every statement of the backend names its tables unqualified. One database may hold
several ledgers, one per schema; each has its own advisory lock (`lock_key`)."""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql

from store.address import LedgerAddress
from store.errors import LedgerTooNew, NotALedger, StoreError
from store.postgres.connection import BUSY_TIMEOUT_MS, LedgerFile
from store.postgres.failures import LedgerConnection, LedgerCursor
from store.postgres.schema import APPLICATION, MIGRATIONS, SCHEMA_VERSION

DEFAULT_SCHEMA = "custody"
SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}\Z")
# DESIGN 15: PostgreSQL 15 or later.
MIN_SERVER = 150000
SET_PATH = "SET search_path TO {}, public"
RELATIONS = ("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
             "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f') ORDER BY c.relname")
VERSION_ROWS = "SELECT version, application FROM schema_version"
SERVER_ENCODING = "SELECT current_setting('server_encoding')"
LOCK = "SELECT pg_advisory_xact_lock(%s)"
META_PUT = "INSERT INTO ledger_meta(key, value) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING"


def parse_address(url: str) -> tuple[str, str, str]:
    """(what libpq connects to, the ledger's schema, the address as shown: no password)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [v for k, v in query if k == "schema"]
    schema = schemas[-1] if schemas else DEFAULT_SCHEMA
    if not SCHEMA_NAME.match(schema):
        raise StoreError(f"the ledger address names the schema {schema!r}: a schema name is "
                         "lower-case letters, digits and _", "ledger_unopenable")
    kept = [(k, v) for k, v in query if k != "schema"]
    conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(kept), parts.fragment))
    shown = LedgerAddress(url).display
    return conninfo, schema, shown


def lock_key(schema: str) -> int:
    """The ledger's advisory lock: a signed 64-bit key from its schema's name."""
    digest = hashlib.blake2b(f"custody-ledger:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def connect(url: str) -> tuple[psycopg.Connection[Any], str, str]:
    """A connection with the ledger's schema on its search_path: (conn, schema, shown)."""
    conninfo, schema, shown = parse_address(url)
    try:
        conn = LedgerConnection.connect(conninfo, autocommit=True, cursor_factory=LedgerCursor)
    except psycopg.Error as exc:
        raise StoreError(f"cannot open ledger {shown}: {str(exc).strip()}",
                         "ledger_unopenable") from exc
    try:
        if conn.info.server_version < MIN_SERVER:
            raise StoreError(f"{shown} is PostgreSQL {conn.info.server_version // 10000}; a "
                             "ledger needs PostgreSQL 15 or later", "postgres_too_old")
        conn.execute(sql.SQL(SET_PATH).format(sql.Identifier(schema)))
    except BaseException:
        conn.close()
        raise
    return conn, schema, shown


def open_ledger(url: str, *, readonly: bool = False, immutable: bool = False,
                create: bool = False) -> LedgerFile:
    """Open the ledger at a `postgresql://` address with its schema current. A missing ledger
    is a StoreError `no_ledger` unless `create` (what `init` passes): then its schema, tables
    and version row are made. `readonly` (and `immutable`, which on a server means the same:
    there is no file to keep unchanged) makes every transaction of the session read-only."""
    conn, schema, shown = connect(url)
    try:
        if readonly or immutable:
            conn.execute("SET default_transaction_read_only = on")
        _migrate(conn, schema, shown, create=create and not (readonly or immutable),
                 readonly=readonly or immutable)
    except BaseException:
        conn.close()
        raise
    return LedgerFile(conn, shown, schema=schema, lock_key=lock_key(schema))


def ledger_exists(url: str) -> bool:
    """Whether the schema the address names holds a custody-app ledger (an empty schema or
    another application's tables: no). A server that cannot be reached (or refuses the role)
    raises its StoreError: that is not a missing ledger, and `init` would not help."""
    conn, schema, shown = connect(url)  # an unreachable server is its own error, not "missing"
    try:
        return _state(conn, schema, shown) is not None
    except StoreError:
        return False
    finally:
        conn.close()


def _state(conn: psycopg.Connection[Any], schema: str, shown: str) -> int | None:
    """The ledger schema's version (None: no ledger there yet); refuses another
    application's schema."""
    relations = [str(r[0]) for r in conn.execute(RELATIONS, (schema,))]
    if not relations:
        return None
    if "schema_version" not in relations:
        raise NotALedger(f"the schema {schema} of {shown} holds tables of another application "
                         f"({', '.join(relations[:5])}), not a custody-app ledger")
    rows = conn.execute(VERSION_ROWS).fetchall()
    if len(rows) != 1 or rows[0][1] != APPLICATION:
        names = sorted({str(r[1]) for r in rows}) or ["no version row"]
        raise NotALedger(f"the schema {schema} of {shown} belongs to another application "
                         f"({', '.join(names)}), not to {APPLICATION}")
    version = int(rows[0][0])
    if version > SCHEMA_VERSION:
        raise LedgerTooNew(f"{shown} has schema version {version}; this custody-app reads up "
                           f"to {SCHEMA_VERSION}: upgrade custody-app")
    return version


def _migrate(conn: psycopg.Connection[Any], schema: str, shown: str, *, create: bool,
             readonly: bool) -> None:
    version = _state(conn, schema, shown)
    if version == SCHEMA_VERSION:
        return
    if version is None and not create:
        raise StoreError(f"there is no ledger at {shown} (schema {schema}): create it with "
                         f"`custody-app init --ledger {shown}`", "no_ledger")
    if readonly:
        raise StoreError(f"{shown} needs a schema upgrade and was opened read-only",
                         "ledger_unopenable")
    encoding = conn.execute(SERVER_ENCODING).fetchone()
    if encoding is None or str(encoding[0]).upper() not in ("UTF8", "UTF-8"):
        raise StoreError(f"the database of {shown} has the encoding {encoding and encoding[0]}: "
                         "a ledger needs a UTF8 database", "ledger_unopenable")
    conn.execute(f"BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = "
                 f"'{BUSY_TIMEOUT_MS}ms'")
    try:
        conn.execute(LOCK, (lock_key(schema),))
        # Re-read under the lock: another process may have made or upgraded it meanwhile.
        version = _state(conn, schema, shown)
        if version is None:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        start = version or 0
        for step in range(start, SCHEMA_VERSION):
            MIGRATIONS[step](conn)
        if version is None:
            conn.execute("INSERT INTO schema_version(version, application) VALUES (%s, %s)",
                         (SCHEMA_VERSION, APPLICATION))
            # The ledger's stable id (a tool receipt's `audience`), and no plaintext free text
            # to seal in a ledger made with none (store.sqlite.schema V5).
            conn.execute(META_PUT, ("ledger_id", os.urandom(16).hex()))
            conn.execute(META_PUT, ("free_text_sealed", "at creation"))
        else:
            conn.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION,))
        conn.execute("COMMIT")
    except BaseException:
        try:
            conn.execute("ROLLBACK")
        except StoreError:
            pass  # the connection is gone: the first failure is the one to report
        raise
