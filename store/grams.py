"""A search for many needles at once (a sweep's tens of thousands) at numpy speed: the file is
mapped, read as 8-byte words at every 8th offset (4-byte words at every 4th for needles under
15 bytes), each word looked up in a hash table of the needles' grams, the survivors checked."""

from __future__ import annotations

import mmap
from collections import defaultdict
from itertools import accumulate

import numpy as np

# Words are read at every STRIDE-th offset: a needle of at least STRIDE + width - 1 bytes has
# a word of `width` bytes at such an offset at one of its offsets o..o+STRIDE-1, so those
# STRIDE grams of each needle are looked up. 8-byte words for needles of LONG bytes or more
# (two views, at byte 0 and byte 4 of each 8), 4-byte ones for shorter (the proof's needles
# are 8 bytes or more).
STRIDE = 4
LONG = 8 + STRIDE - 1
TABLE_BITS = 24
_MUL = np.uint64(0x9E3779B97F4A7C15)
_SHIFT = np.uint64(64 - TABLE_BITS)
# Words looked up per numpy call: temporaries stay a few MB.
CHUNK_WORDS = 1 << 18
# Window starts weighed per needle, and of those the rarest few compared by how many other
# needles already use their grams (a gram shared by many needles costs a check of each).
_STARTS = 12
_CLOSE = 3

Grams = dict[int, list[tuple[int, int]]]


def _windows(needle: bytes, width: int, weights: bytes) -> list[int]:
    """The starts of the needle's `STRIDE + width - 1` bytes of rarest bytes, best first (a
    gram of zero bytes or JSON punctuation would match all over the file)."""
    span = STRIDE + width - 1
    last = min(len(needle) - span, _STARTS)
    if last <= 0:
        return [0]
    sums = [0, *accumulate(needle[:last + span].translate(weights))]
    return sorted(range(last + 1), key=lambda o: sums[o + span] - sums[o])[:_CLOSE]


def _grams(indexed: list[tuple[int, bytes]], width: int, weights: bytes
           ) -> tuple[Grams, np.ndarray, np.ndarray]:
    """gram value -> [(needle index, offset in the needle)], the hash table, the sorted grams."""
    at: Grams = defaultdict(list)
    for i, needle in indexed:
        keys = {o: [int.from_bytes(needle[d:d + width], "little") for d in range(o, o + STRIDE)]
                for o in _windows(needle, width, weights)}
        best = min(keys, key=lambda o: sum(len(at.get(g, ())) for g in keys[o]))
        for d, gram in enumerate(keys[best], start=best):
            at[gram].append((i, d))
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
            cand = chunk[maybe]
            at = np.searchsorted(values, cand)
            at[at == len(values)] = 0
            out.append(maybe[values[at] == cand] + start)
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def _search(view: mmap.mmap, size: int, indexed: list[tuple[int, bytes]], width: int,
            found: dict[int, set[int]], limit: int, weights: bytes) -> None:
    if not indexed:
        return
    at, table, values = _grams(indexed, width, weights)
    needles = dict(indexed)
    dtype = "<u8" if width == 8 else "<u4"
    for shift in range(0, width, STRIDE):
        words = np.frombuffer(view, dtype=dtype, count=(size - shift) // width, offset=shift)
        # Within one view offsets come in file order but for the STRIDE before each word:
        # `limit + STRIDE` kept per view hold its first `limit`, so the union holds the first.
        kept: dict[int, int] = {}
        for k in _hits(words, table, values).tolist():
            pos = k * width + shift
            for i, d in at[int(words[k])]:
                begin = pos - d
                needle = needles[i]
                if (begin >= 0 and kept.get(i, 0) < limit + STRIDE
                        and view[begin:begin + len(needle)] == needle):
                    offsets = found.setdefault(i, set())
                    if begin not in offsets:
                        offsets.add(begin)
                        kept[i] = kept.get(i, 0) + 1
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
