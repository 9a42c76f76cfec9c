"""Every row of the vector index read a chunk at a time from sqlite-vec's own shadow tables.

Reading `SELECT ... FROM recall_vec` makes a Python bytes, str and tuple per row: ~13 us of CPU
a row here, 11 s for the in-process copy of 1M vectors, and in a background load that time is
spent holding the GIL against the recalls it serves meanwhile. sqlite-vec 0.1 keeps a table's
rows in chunks of `chunk_size` slots: `<t>_chunks` (a validity bitmap and the slots' rowids),
`<t>_vector_chunks00` (the slots' float32 vectors, one blob) and one `<t>_metadatachunksNN`
blob per metadata column, in the order the table declares them (here: status as text, 16 bytes
a slot, a 4-byte length and the first 12 bytes; space_code and subject_code as int64). Reading
those blobs gives numpy blocks with no per-row Python object. A table whose shadow tables do not
look like that (another sqlite-vec) is read row by row as before. A status longer than its 12
inline bytes (none the store writes) reads as empty: no search asks for it. Only reads: the vec0
table stays the one place vectors are written.
"""

from __future__ import annotations

from collections.abc import Iterator

import apsw
import numpy as np

from store.rows import VecBlock, blocks_of

TABLE = "recall_vec"
# One statement, each shadow blob found through its table's index. Their `rowid` column is a
# column of no type (not the rowid): compared with the integer chunk_id it cannot use its index
# (a join scanned every shadow table per chunk); `+` drops the chunk_id's affinity so it can.
CHUNK_ROWS = ("SELECT c.validity, c.rowids, "
              f"(SELECT vectors FROM {TABLE}_vector_chunks00 WHERE rowid = +c.chunk_id), "
              + ", ".join(f"(SELECT data FROM {TABLE}_metadatachunks0{i} WHERE rowid = +c.chunk_id)"
                          for i in range(3))
              + f" FROM {TABLE}_chunks AS c ORDER BY c.chunk_id")
SHADOWS = ("SELECT count(*) FROM sqlite_schema WHERE name IN "
           f"('{TABLE}_chunks', '{TABLE}_vector_chunks00', '{TABLE}_metadatachunks00', "
           f"'{TABLE}_metadatachunks01', '{TABLE}_metadatachunks02')")
VERSION = f"SELECT value FROM {TABLE}_info WHERE key = 'CREATE_VERSION_MAJOR'"
TEXT_SLOT = 16  # sqlite-vec's text metadata slot: int32 length, then up to 12 bytes inline
INLINE = 12


def _known_layout(conn: apsw.Connection) -> bool:
    try:
        major = conn.execute(VERSION).fetchone()
        shadows = conn.execute(SHADOWS).fetchone()
    except apsw.SQLError:
        return False
    return major is not None and int(major[0]) == 0 and shadows is not None and shadows[0] == 5


def _block(row: tuple[bytes, bytes, bytes, bytes, bytes, bytes], dimensions: int) -> VecBlock:
    validity, rowids, vectors, status, space, subject = row
    seqs = np.frombuffer(rowids, dtype=np.int64)
    slots = len(seqs)
    valid = np.unpackbits(np.frombuffer(validity, dtype=np.uint8),
                          bitorder="little")[:slots].astype(bool)
    text = np.frombuffer(status, dtype=np.uint8).reshape(slots, TEXT_SLOT)[valid]
    lengths = text[:, :4].copy().view("<i4").ravel()
    # Bytes past a value's length are zero in its slot, so the 12 inline bytes read as 'S12'
    # give the value itself.
    names = np.where(lengths <= INLINE, text[:, 4:].copy().view(f"S{INLINE}").ravel(), b"")
    block = np.frombuffer(vectors, dtype=np.float32).reshape(slots, dimensions)[valid]
    return (seqs[valid], block, names, np.frombuffer(space, dtype=np.int64)[valid],
            np.frombuffer(subject, dtype=np.int64)[valid])


class VecChunks:
    """The bulk read of the vector index (a mixin of the SQLite RecallStore)."""

    _conn: apsw.Connection

    def iter_vector_blocks(self, dimensions: int) -> Iterator[VecBlock]:
        """Every row of the vector index, as numpy blocks of (fact seqs, float32 vectors,
        statuses as bytes, space codes, subject codes), in the caller's snapshot (a read
        transaction: the chunks are read by one statement, the fallback by one more)."""
        if not _known_layout(self._conn):
            yield from blocks_of(self.iter_vectors(), dimensions)  # type: ignore[attr-defined]
            return
        for row in self._conn.execute(CHUNK_ROWS):
            block = _block(row, dimensions)
            if len(block[0]):
                yield block
