"""Hand edits of a ledger behind the application's back, on either backend, for the contract
suite's tamper tests: plain SQL through a plain connection (sqlite3 on a file, psycopg on a
server), no custody-app code. `unguarded=True` is what an owner of the tables can do beyond a
plain edit: on a file, the triggers dropped for the edit and put back after it (the file keeps
its schema); on a server, `session_replication_role = replica` (no trigger fires).

Statements are written once, in the SQL both backends share, with `?` placeholders."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from store.address import LedgerAddress

Statement = str | tuple[str, Sequence[Any]]


def split(statement: Statement) -> tuple[str, Sequence[Any]]:
    return (statement, ()) if isinstance(statement, str) else statement


def _server_form(statement: Statement) -> tuple[str, Sequence[Any] | None]:
    """psycopg's placeholders for the shared `?` (the statements carry no literal `?`)."""
    sql, args = split(statement)
    return (sql.replace("?", "%s"), args) if args else (sql, None)


def _server_connection(url: str) -> Any:
    import psycopg

    schema = LedgerAddress(url).schema
    head, _, query = url.partition("?")
    kept = "&".join(p for p in query.split("&") if p and not p.startswith("schema="))
    conn = psycopg.connect(head + (f"?{kept}" if kept else ""), autocommit=True)
    conn.execute(f'SET search_path = "{schema}", "{schema}_keys"')
    return conn


def is_server(address: Path | str) -> bool:
    return LedgerAddress(str(address)).server


def edit(address: Path | str, *statements: Statement, unguarded: bool = False) -> None:
    """Run `statements` on the ledger at `address`, all in one transaction."""
    if is_server(address):
        with _server_connection(str(address)) as conn, conn.transaction():
            if unguarded:
                conn.execute("SET LOCAL session_replication_role = replica")
            for statement in statements:
                conn.execute(*_server_form(statement))
        return
    con = sqlite3.connect(address, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        triggers: list[str] = []
        if unguarded:
            rows = con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' "
                               "ORDER BY name").fetchall()
            for name, sql in rows:
                con.execute(f'DROP TRIGGER "{name}"')
                triggers.append(sql)
        for statement in statements:
            sql, args = split(statement)
            con.execute(sql, tuple(args))
        for sql in triggers:
            con.execute(sql)
        con.execute("COMMIT")
    finally:
        con.close()


def query(address: Path | str, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """The rows of one read on the ledger at `address` (blobs as bytes on both backends)."""
    if is_server(address):
        with _server_connection(str(address)) as conn:
            rows = conn.execute(*_server_form((sql, args))).fetchall()
        return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in rows]
    con = sqlite3.connect(address)
    try:
        return [tuple(r) for r in con.execute(sql, tuple(args)).fetchall()]
    finally:
        con.close()
