"""Whole tables out of and into a SQLite ledger or key store, for `custody-app copy`: a table's
columns, its rows in primary-key order a batch at a time (never the whole table in memory), and
rows loaded as they are (no trigger or rule is bypassed: an event still goes through the
append-only triggers). Which tables, and in which order, is the caller's decision."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any

import apsw

from store.errors import StoreError, StoreIntegrityError

# Rows a batch holds (read from the source, loaded into the destination in one transaction).
BATCH = 5000
COLUMNS = "SELECT name, pk FROM pragma_table_info(?) ORDER BY cid"


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def columns(conn: apsw.Connection, table: str) -> list[str]:
    """The table's column names in their declared order; StoreError `copy_unknown_table` for a
    table this file does not have."""
    rows = conn.execute(COLUMNS, (table,)).fetchall()
    if not rows:
        raise StoreError(f"the table {table!r} is not there to copy", "copy_unknown_table")
    return [str(r[0]) for r in rows]


def _checked(conn: apsw.Connection, table: str, wanted: Sequence[str]) -> list[str]:
    """`wanted` when it names exactly the table's columns (in any order), else a StoreError
    `copy_schema_mismatch` naming the difference (a column dropped silently would lose data)."""
    have = columns(conn, table)
    if sorted(have) != sorted(wanted):
        raise StoreError(f"the table {table} has the columns {', '.join(have)}, not "
                         f"{', '.join(wanted)}: the two ledgers' schemas differ",
                         "copy_schema_mismatch")
    return list(wanted)


def _readable(have: Sequence[str], table: str, wanted: Sequence[str]) -> None:
    if not wanted or set(wanted) - set(have):
        raise StoreError(f"the table {table} has the columns {', '.join(have)}, not all of "
                         f"{', '.join(wanted)}", "copy_schema_mismatch")


def read_rows(conn: apsw.Connection, table: str, wanted: Sequence[str],
              batch: int = BATCH) -> Iterator[list[tuple[Any, ...]]]:
    """The table's rows (the `wanted` columns, in that order) in primary-key order, `batch`
    rows at a time."""
    names = list(wanted)
    _readable(columns(conn, table), table, names)
    keys = [str(r[0]) for r in sorted(conn.execute(COLUMNS, (table,)), key=lambda r: int(r[1]))
            if int(r[1])]
    order = ", ".join(_quoted(k) for k in (keys or names[:1]))
    cursor = conn.execute(f"SELECT {', '.join(map(_quoted, names))} FROM {_quoted(table)} "
                          f"ORDER BY {order}")
    while chunk := [tuple(row) for row in islice(cursor, batch)]:
        yield chunk


def _value(value: Any) -> Any:
    """A value as SQLite binds it (a server hands bytea up as bytes or a memoryview)."""
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    if isinstance(value, bool):
        return int(value)
    return value


def load_rows(conn: apsw.Connection, table: str, wanted: Sequence[str],
              rows: Iterable[Sequence[Any]]) -> int:
    """Insert `rows` (values of the `wanted` columns) inside the caller's transaction; returns
    how many. A row a trigger or constraint refuses is a StoreIntegrityError."""
    names = _checked(conn, table, wanted)
    marks = ", ".join("?" for _ in names)
    statement = (f"INSERT INTO {_quoted(table)} ({', '.join(map(_quoted, names))}) "
                 f"VALUES ({marks})")
    values = [tuple(_value(v) for v in row) for row in rows]
    if not values:
        return 0
    try:
        conn.executemany(statement, values)
    except apsw.ConstraintError as exc:
        raise StoreIntegrityError(f"the table {table} refused a copied row: {exc}") from exc
    return len(values)
