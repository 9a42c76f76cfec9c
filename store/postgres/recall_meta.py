"""The recall indexes' bookkeeping in ledger_meta on PostgreSQL: the vector table's version token,
the k-means cells' centroids and re-clustering state, a failed re-clustering's error (the twin
of `store.sqlite.recall_meta`)."""

from __future__ import annotations

import os
from typing import Any

from store.postgres.failures import later, queues
from store.rows import VectorSeal

CELLS_ALL = "SELECT cell, centroid FROM recall_cells ORDER BY cell"
CELLS_INSERT = "INSERT INTO recall_cells(cell, centroid) VALUES (%s, %s)"
CELLS_DROP_BELOW = "DELETE FROM recall_cells WHERE cell < %s"
META_GET = "SELECT value FROM ledger_meta WHERE key = %s"
META_PUT = ("INSERT INTO ledger_meta(key, value) VALUES (%s, %s) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value")
META_DELETE = "DELETE FROM ledger_meta WHERE key = %s"

# A random token replaced by every change to the vector table's vectors, statuses or filters, in
# the change's transaction (random, not a counter: a rolled-back change and a later one never
# leave the same token).
VEC_VERSION = "recall_vec_version"
MAINTENANCE_ERROR = "recall_maintenance_error"
# Replace a meta value and give the one before (the CTE reads the row as it was).
BUMP = ("WITH old AS (SELECT value FROM ledger_meta WHERE key = %s) "
        "INSERT INTO ledger_meta(key, value) VALUES (%s, %s) "
        "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value "
        "RETURNING (SELECT value FROM old)")


# ledger_meta: how the vectors and centroids are stored ("sealed"; absent: in the clear, as
# every index built before vectors were sealed), written when the index is (re)created.
VEC_FORM = "recall_vec_form"


class RecallMeta:
    """The part of `RecallStore` kept in ledger_meta and recall_cells."""

    _conn: Any
    _seal: VectorSeal | None

    def _centroid_in(self, cell: int, centroid: bytes) -> bytes:
        return centroid if self._seal is None else self._seal.seal_centroid(cell, centroid)

    def _centroid_out(self, cell: int, blob: bytes) -> bytes:
        return blob if self._seal is None else self._seal.open_centroid(cell, blob)

    def _meta(self, key: str) -> str | None:
        row = self._conn.execute(META_GET, (key,)).fetchone()
        return None if row is None else str(row[0])

    def _put(self, key: str, value: str) -> None:
        self._conn.execute(META_PUT, (key, value))

    def vec_version(self) -> str:
        return self._meta(VEC_VERSION) or ""

    def maintenance_error(self) -> str | None:
        return self._meta(MAINTENANCE_ERROR)

    def note_maintenance_error(self, text: str | None) -> None:
        """Record why background index maintenance failed (None: clear it; it succeeded)."""
        if text is None:
            self._conn.execute(META_DELETE, (MAINTENANCE_ERROR,))
        else:
            self._put(MAINTENANCE_ERROR, text)

    def _bump(self) -> tuple[str, str]:
        """A new version token for the vector table: (the token before, the new one), in one
        statement (the write path's round trips count on a server)."""
        new = os.urandom(8).hex()
        if queues(self._conn):
            # Inside a write transaction the token before is the transaction's read cache's
            # (ledger_meta as the lock found it, with this transaction's own writes), and the
            # new one goes with the next statement.
            before = self._meta(VEC_VERSION)
            later(self._conn, META_PUT, (VEC_VERSION, new))
            return before or "", new
        row = self._conn.execute(BUMP, (VEC_VERSION, VEC_VERSION, new)).fetchone()
        return (str(row[0]) if row and row[0] is not None else ""), new

    def _new_cells(self, clustered_on: int) -> None:
        """Record that the cells changed (readers reload their centroids) and how many vectors
        they were clustered on (0: not clustered)."""
        self._put("recall_cells_version", str(int(self.cells_version()) + 1))
        self._put("recall_cells_n", str(clustered_on))
        self._put("recall_cells_moving", "0")

    def moving_below(self) -> int:
        """While cells are re-clustered off the write path: cells below this id are the old
        ones, still being emptied (0: no re-clustering under way)."""
        return int(self._meta("recall_cells_moving") or 0)

    def begin_moving(self, base: int, centroids: list[bytes]) -> None:
        """Add new cells (ids from `base`) beside the old ones; writers use only the new ones
        from now on, searches read every cell until the old ones are empty."""
        if centroids:
            with self._conn.cursor() as cur:
                cur.executemany(CELLS_INSERT, [(base + i, self._centroid_in(base + i, c))
                                               for i, c in enumerate(centroids)])
        self._put("recall_cells_moving", str(int(base)))
        self._put("recall_cells_version", str(int(self.cells_version()) + 1))

    def end_moving(self, clustered_on: int) -> None:
        """The old cells are empty: drop their centroids."""
        self._conn.execute(CELLS_DROP_BELOW, (self.moving_below(),))
        self._put("recall_cells_moving", "0")
        self._new_cells(clustered_on)

    def clustered_on(self) -> int:
        return int(self._meta("recall_cells_n") or 0)

    def cells(self) -> list[tuple[int, bytes]]:
        """The k-means centroids the vectors are partitioned by (none: one cell, exact search)."""
        return [(int(c), self._centroid_out(int(c), bytes(b)))
                for c, b in self._conn.execute(CELLS_ALL).fetchall()]

    def cells_version(self) -> str:
        return self._meta("recall_cells_version") or "0"
