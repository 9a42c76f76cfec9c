"""Hand edits of a ledger behind the application's back, on either backend, for the contract
suite's tamper tests: plain SQL through a plain connection (sqlite3 on a file, psycopg on a
server), no custody-app code. `unguarded=True` is what an owner of the tables can do beyond a
plain edit: on a file, the triggers dropped for the edit and put back after it (the file keeps
its schema); on a server, `session_replication_role = replica` (no trigger fires).

Statements are written once, in the SQL both backends share, with `?` placeholders."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from store.address import LedgerAddress

Statement = str | tuple[str, Sequence[Any]]


class Refused(Exception):
    """The database refused a statement (a trigger or a constraint), on either backend."""


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
    """Run `statements` on the ledger at `address`, all in one transaction; `Refused` (and
    nothing changed) when the database refuses one."""
    if is_server(address):
        import psycopg

        with _server_connection(str(address)) as conn:
            try:
                with conn.transaction():
                    if unguarded:
                        conn.execute("SET LOCAL session_replication_role = replica")
                    for statement in statements:
                        conn.execute(*_server_form(statement))
            except psycopg.DatabaseError as exc:
                raise Refused(str(exc)) from exc
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
        try:
            for statement in statements:
                sql, args = split(statement)
                con.execute(sql, tuple(args))
        except sqlite3.IntegrityError as exc:
            con.execute("ROLLBACK")
            raise Refused(str(exc)) from exc
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


class Rows:
    """What one statement of a `session` returned."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows = rows

    def fetchone(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows


class Session:
    """A plain connection's statements, each committed on its own (so a refused one leaves the
    session usable, as a hand-written psql or sqlite3 session is)."""

    def __init__(self, address: Path | str, conn: Any) -> None:
        self.server = is_server(address)
        self.conn = conn

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Rows:
        if self.server:
            import psycopg

            try:
                cur = self.conn.execute(*_server_form((sql, args)))
            except psycopg.DatabaseError as exc:
                raise Refused(str(exc)) from exc
            rows = cur.fetchall() if cur.description else []
            return Rows([tuple(bytes(v) if isinstance(v, memoryview) else v for v in r)
                         for r in rows])
        try:
            return Rows([tuple(r) for r in self.conn.execute(sql, tuple(args)).fetchall()])
        except sqlite3.IntegrityError as exc:
            raise Refused(str(exc)) from exc


@contextmanager
def session(address: Path | str, *, unguarded: bool = False) -> Iterator[Session]:
    """A plain connection to the ledger at `address` (autocommit); `unguarded` as for `edit`,
    the triggers put back (on a file) when the session ends."""
    if is_server(address):
        conn = _server_connection(str(address))
        try:
            if unguarded:
                conn.execute("SET session_replication_role = replica")
            yield Session(address, conn)
        finally:
            conn.close()
        return
    con = sqlite3.connect(address, isolation_level=None)
    triggers: list[str] = []
    try:
        if unguarded:
            for name, sql in con.execute("SELECT name, sql FROM sqlite_master "
                                         "WHERE type = 'trigger' ORDER BY name").fetchall():
                con.execute(f'DROP TRIGGER "{name}"')
                triggers.append(sql)
        yield Session(address, con)
    finally:
        for sql in triggers:
            con.execute(sql)
        con.close()


def stored(address: Path | str) -> Any:
    """Everything stored, to compare before and after a refused operation: a file ledger's
    bytes, its WAL's and its key store's (each empty when absent); every row of a server
    ledger's schemas (its key store's too)."""
    if is_server(address):
        from tests import pgserver

        return pgserver.dump(str(address))
    return tuple(Path(f"{address}{s}").read_bytes() if Path(f"{address}{s}").exists() else b""
                 for s in ("", "-wal", ".keys", ".keys-wal"))


def as_another_host(address: Path | str) -> None:
    """Forget this host's record of how far a server ledger had come (core.host_mark), as a
    host that never opened it: a hand edit at the head this host saw is refused at its open
    (`ledger_forked`) before verify could name it; another host's verify names it."""
    if not is_server(address):
        return
    from custody_app.core.host_mark import host_mark_file

    seen = host_mark_file(str(address))
    if seen is not None:
        seen.unlink(missing_ok=True)
