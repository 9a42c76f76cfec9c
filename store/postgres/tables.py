"""Whole tables out of and into a PostgreSQL ledger or key store, for `custody-app copy` (the
twin of `store.sqlite.tables`): a table's columns, its rows in primary-key order a batch at a time
through a server-side cursor, and rows loaded by one COPY (row triggers still fire: an event
still meets the chain trigger). Values are converted to the column's type here (a SQLite file may
hold bytes in a text column, or text in a blob one), so the layers above hand rows over as
they came."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any

import psycopg
from psycopg import sql

from store.errors import StoreError
from store.postgres.bulk import BATCH as BATCH
from store.postgres.bulk import copy_rows, lazy_rows

COLUMNS = ("SELECT column_name, data_type FROM information_schema.columns "
           "WHERE table_schema = current_schema() AND table_name = %s ORDER BY ordinal_position")
PRIMARY_KEY = ("SELECT a.attname FROM pg_index i JOIN pg_attribute a "
               "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
               "WHERE i.indisprimary AND i.indrelid = "
               "(quote_ident(current_schema()) || '.' || quote_ident(%s))::regclass "
               "ORDER BY array_position(i.indkey::int2[], a.attnum)")


def column_types(conn: psycopg.Connection[Any], table: str) -> dict[str, str]:
    """{column: its type} in declared order; StoreError `copy_unknown_table` for a table the
    schema does not have."""
    rows = conn.execute(COLUMNS, (table,)).fetchall()
    if not rows:
        raise StoreError(f"the table {table!r} is not there to copy", "copy_unknown_table")
    return {str(name): str(kind) for name, kind in rows}


def _checked(conn: psycopg.Connection[Any], table: str, wanted: Sequence[str]) -> dict[str, str]:
    have = column_types(conn, table)
    if sorted(have) != sorted(wanted):
        raise StoreError(f"the table {table} has the columns {', '.join(have)}, not "
                         f"{', '.join(wanted)}: the two ledgers' schemas differ",
                         "copy_schema_mismatch")
    return have


def _readable(have: Sequence[str], table: str, wanted: Sequence[str]) -> None:
    if not wanted or set(wanted) - set(have):
        raise StoreError(f"the table {table} has the columns {', '.join(have)}, not all of "
                         f"{', '.join(wanted)}", "copy_schema_mismatch")


def read_rows(conn: psycopg.Connection[Any], table: str, wanted: Sequence[str],
              batch: int = BATCH) -> Iterator[list[tuple[Any, ...]]]:
    """The table's rows (the `wanted` columns, in that order) in primary-key order, `batch`
    rows at a time, never all held here."""
    _readable(list(column_types(conn, table)), table, wanted)
    keys = [str(r[0]) for r in conn.execute(PRIMARY_KEY, (table,))] or list(wanted[:1])
    query = sql.SQL("SELECT {} FROM {} ORDER BY {}").format(
        sql.SQL(", ").join(map(sql.Identifier, wanted)), sql.Identifier(table),
        sql.SQL(", ").join(map(sql.Identifier, keys))).as_string(conn)
    rows = lazy_rows(conn, query)
    while chunk := [tuple(_read(v) for v in row) for row in islice(rows, batch)]:
        yield chunk


def _read(value: Any) -> Any:
    return bytes(value) if isinstance(value, memoryview) else value


def _as(kind: str, value: Any, table: str, column: str) -> Any:
    """`value` as the column's type takes it."""
    if value is None:
        return None
    if kind == "bytea":
        return value.encode("utf-8") if isinstance(value, str) else bytes(value)
    if kind in ("text", "character varying"):
        if isinstance(value, bytes | bytearray | memoryview):
            try:
                return bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                raise StoreError(f"{table}.{column} holds bytes that are not UTF-8 text; the "
                                 "server's text column cannot take them", "copy_bad_value") from None
        return str(value)
    if kind in ("bigint", "integer", "smallint"):
        return int(value)
    if kind == "boolean":
        return bool(value)
    return value


def load_rows(conn: psycopg.Connection[Any], table: str, wanted: Sequence[str],
              rows: Iterable[Sequence[Any]]) -> int:
    """Insert `rows` (values of the `wanted` columns) by one COPY inside the caller's
    transaction; returns how many. A row a trigger or constraint refuses is a
    StoreIntegrityError (the whole COPY is refused)."""
    types = _checked(conn, table, wanted)
    kinds = [types[c] for c in wanted]
    converted = [tuple(_as(k, v, table, c) for k, v, c in zip(kinds, row, wanted, strict=True))
                 for row in rows]
    if not converted:
        return 0
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, wanted))).as_string(conn)
    copy_rows(conn, statement, converted)
    return len(converted)

