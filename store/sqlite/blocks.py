"""A file read block by block for a byte search, each block with the bytes before it that a
match across the boundary needs, and split into ranges of whole blocks searched at once on
several threads (the searches release the GIL): each range's blocks are the very windows one
pass reads, so its results, joined in range order, are that pass's."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

# From this size on a file is searched in THREADS ranges at once (2 threads over 64 MB of
# random bytes, 20k fragments: 1.12 s against 2.41 s in one).
SPLIT_MIN_BYTES = 1 << 26
THREADS = min(2, os.cpu_count() or 1)
T = TypeVar("T")


def windows(fd: int, lo: int, hi: int | None, block: int,
            overlap: int) -> Iterator[tuple[memoryview, int, int]]:
    """(window, file offset of window[0], bytes carried from before) for each block from
    offset `lo` (a block boundary) to `hi` (None: the end of the file, however long it is
    by then); a window is the block after the `overlap` bytes before it. One buffer is reused:
    a window is valid until the next is asked for."""
    buf = bytearray(block + overlap)
    view = memoryview(buf)
    carried = os.pread(fd, min(overlap, lo), lo - min(overlap, lo)) if lo else b""
    keep = len(carried)
    buf[:keep] = carried
    base, at = lo - keep, lo  # file offsets of buf[0] and of the next byte to read
    try:
        while hi is None or at < hi:
            want = block if hi is None else min(block, hi - at)
            n = os.preadv(fd, [view[keep:keep + want]], at)
            if not n:
                return
            at += n
            size = keep + n
            yield view[:size], base, keep
            carry = min(overlap, size)
            buf[:carry] = buf[size - carry:size]
            base += size - carry
            keep = carry
    finally:
        view.release()


def in_ranges(fd: int, block: int, search: Callable[[int, int | None], T],
              threads: int | None = None) -> list[T]:
    """`search(lo, hi)` over ranges of whole blocks of the file, in file order: one range
    below SPLIT_MIN_BYTES (or with `threads` 1), else `threads` (THREADS) of them at once."""
    size = os.fstat(fd).st_size
    if threads is None:
        threads = THREADS if size >= SPLIT_MIN_BYTES else 1
    blocks = -(-size // block)
    starts = sorted({block * (blocks * k // threads) for k in range(max(threads, 1))})
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    if len(bounds) == 1:
        return [search(0, None)]
    with ThreadPoolExecutor(max_workers=len(bounds)) as pool:
        return list(pool.map(lambda b: search(b[0], b[1]), bounds))
