"""A search for many needles at once (a sweep's tens of thousands) at numpy speed: the file is
mapped, read as 8-byte words at every 8th offset (4-byte words at every 4th for needles under
15 bytes), each word looked up in a hash table of the needles' grams, the survivors checked."""

from __future__ import annotations

import mmap
from collections import defaultdict
from itertools import accumulate

import numpy as np

# A needle of at least LONG bytes covers an 8-byte word at a multiple of 8 whatever its start,
# at one of its offsets 0..7: those 8 grams of each needle are looked up. Shorter ones (the
# proof's needles are 8 bytes or more) cover a 4-byte word at a multiple of 4 the same way.
LONG = 15
TABLE_BITS = 24
_MUL = np.uint64(0x9E3779B97F4A7C15)
_SHIFT = np.uint64(64 - TABLE_BITS)
# Words looked up per numpy call: temporaries stay a few MB.
CHUNK_WORDS = 1 << 18


# Window starts tried per needle when choosing its rarest grams.
_STARTS = 32


def _window(needle: bytes, width: int, weights: bytes) -> int:
    """Where the needle's `2 * width - 1` bytes of rarest bytes start (its grams are looked up
    there: a gram of zero bytes or JSON punctuation would match all over the file)."""
    span = 2 * width - 1
    last = min(len(needle) - span, _STARTS)
    if last <= 0:
        return 0
    sums = [0, *accumulate(needle[:last + span].translate(weights))]
    return min(range(last + 1), key=lambda o: sums[o + span] - sums[o])


def _grams(indexed: list[tuple[int, bytes]], width: int, weights: bytes
           ) -> tuple[dict[int, list[tuple[int, int]]], np.ndarray, np.ndarray]:
    """gram value -> [(needle index, offset in the needle)], the hash table, the sorted grams.
    Any `width` consecutive offsets of a needle work: one of them lands on a word boundary."""
    at: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for i, needle in indexed:
        o = _window(needle, width, weights)
        for d in range(o, o + width):
            at[int.from_bytes(needle[d:d + width], "little")].append((i, d))
    values = np.array(sorted(at), dtype=np.uint64)
    table = np.zeros(1 << TABLE_BITS, dtype=np.bool_)
    table[(values * _MUL) >> _SHIFT] = True
    return at, table, values


def _hits(words: np.ndarray, table: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Indexes of the words that are one of `values` (hash table first, then exactly)."""
    out = []
    for start in range(0, len(words), CHUNK_WORDS):
        chunk = words[start:start + CHUNK_WORDS].astype(np.uint64, copy=False)
        maybe = np.flatnonzero(table[(chunk * _MUL) >> _SHIFT])
        if len(maybe):
            sure = maybe[np.isin(chunk[maybe], values, assume_unique=False)]
            out.append(sure + start)
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def _search(view: mmap.mmap, size: int, indexed: list[tuple[int, bytes]], width: int,
            found: dict[int, set[int]], limit: int, weights: bytes) -> None:
    if not indexed:
        return
    at, table, values = _grams(indexed, width, weights)
    dtype = "<u8" if width == 8 else "<u4"
    words = np.frombuffer(view, dtype=dtype, count=size // width)
    needles = dict(indexed)
    for k in _hits(words, table, values).tolist():
        pos = k * width
        gram = int(words[k])
        for i, d in at[gram]:
            begin = pos - d
            offsets = found.setdefault(i, set())
            needle = needles[i]
            # Offsets come in file order but for the width before each word: `limit + width`
            # kept, sorted, give exactly the first `limit`.
            if (begin >= 0 and len(offsets) < limit + width
                    and view[begin:begin + len(needle)] == needle):
                offsets.add(begin)
    del words


def find_many(view: mmap.mmap, indexed: list[tuple[int, bytes]], limit: int, weights: bytes
              ) -> dict[int, list[int]]:
    """Needle index -> the first `limit` offsets of each needle (8 bytes or more) in `view`;
    `weights`: a translate table of how common each byte value is in the file."""
    size = len(view)
    found: dict[int, set[int]] = {}
    _search(view, size, [(i, n) for i, n in indexed if len(n) >= LONG], 8, found, limit,
            weights)
    _search(view, size, [(i, n) for i, n in indexed if len(n) < LONG], 4, found, limit,
            weights)
    return {i: sorted(o)[:limit] for i, o in found.items() if o}
