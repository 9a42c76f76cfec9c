"""Where erased bytes still are, on a server: nowhere this process can look. The SQLite Locator
scans the ledger's files and names the page of each hit; a server ledger's files are the
server's, so the scan finds nothing and the lookups that explain a hit are never reached. What
an erasure certificate on a server checks instead (old row versions read back through
pageinspect, older snapshots) are the store's own places: store.postgres.residue, never a
byte scan (see LedgerFile.scan)."""

from __future__ import annotations

from typing import Any

import psycopg

from store.errors import StoreError
from store.rows import Holder

BLOCK_SIZE = "SELECT current_setting('block_size')::int"


class Locator:
    """The SQLite Locator's surface over a server ledger (no file of its own)."""

    def __init__(self, conn: psycopg.Connection[Any], path: str) -> None:
        self._conn = conn
        self.path = path

    def files(self) -> list[str]:
        return []

    def find(self, needles: list[bytes], plan: object | None = None,
             ) -> dict[str, dict[int, list[int]]]:
        """No file to search: an empty result (not a clean one: there was nothing to scan)."""
        return {}

    def plan(self, needles: list[bytes]) -> None:
        return None

    def page_size(self) -> int:
        row = self._conn.execute(BLOCK_SIZE).fetchone()
        return int(row[0]) if row else 8192

    def holders(self, needles: list[bytes]) -> dict[bytes, list[Holder]]:
        raise StoreError("locating erased bytes in rows is not available on PostgreSQL yet "
                         "(issue 34)", "postgres_unverifiable")

    def page_names(self, pages: set[int]) -> dict[int, str]:
        raise StoreError("a server ledger has no file pages to name", "postgres_unverifiable")
