"""SQL over the policies table (PostgreSQL): each policy's canonical text, stored once by hash."""

from __future__ import annotations

from typing import Any

import psycopg

# Written here (PolicyStore.put); browse.py's policy history reads it too.
DDL: tuple[str, ...] = (
    """CREATE TABLE policies(
    hash      text COLLATE "C" PRIMARY KEY,
    canonical text COLLATE "C" NOT NULL,
    source    text COLLATE "C" NOT NULL,
    path      text COLLATE "C"
)""",
)

PUT = ("INSERT INTO policies(hash, canonical, source, path) VALUES (%s, %s, %s, %s) "
       "ON CONFLICT DO NOTHING")
GET = "SELECT hash, canonical, source, path FROM policies WHERE hash = %s"
ALL = "SELECT hash, canonical, source, path FROM policies ORDER BY hash"


class PolicyStore:
    """Policy texts keyed by hash; never rewritten once stored."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def put(self, policy_hash: str, canonical: str, source: str, path: str | None) -> None:
        self._conn.execute(PUT, (policy_hash, canonical, source, path))

    def get(self, policy_hash: str) -> tuple[str, str, str | None] | None:
        """(canonical, source, path) for a hash, or None."""
        row = self._conn.execute(GET, (policy_hash,)).fetchone()
        return None if row is None else (str(row[1]), str(row[2]), row[3])

    def all(self) -> list[tuple[str, str, str, str | None]]:
        """(hash, canonical, source, path) of every stored policy text."""
        return [(str(h), str(c), str(s), p) for h, c, s, p in self._conn.execute(ALL)]
