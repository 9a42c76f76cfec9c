"""The byte scan of a sweep: tens of thousands of needles found in one pass over a file, by
overlapping automata over a short fragment of each, every candidate compared in full."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Container
from io import RawIOBase

import ahocorasick_rs

# The fragment of each needle in that search: short keeps the automaton small.
MANY_FRAGMENT_BYTES = 16
# An automaton over tens of thousands of fragments costs what its start state costs: ~3.5 ms
# per MB of ledger when the fragments start with any byte, ~0.4 ms when they start with few
# bytes (the search then skips to them) that rarely begin a match in the file. A space, else
# '_' or '-', is common in free text and rare in the rest of a ledger (canonical JSON has no
# spaces; ciphertext holds each byte 1/256 of the time): a fragment starts at one with at
# least MIN_LED bytes after it, or at the head a quarter or more of the long needles share
# (sealed values all start with their magic). Measured on a 336 MB ledger after a 20k-fact
# sweep (119k needles): 42 ms per 100 MB for those (74k fragments, 3 start bytes).
# Spaces tried per needle for a fragment no other needle has.
LED_TRIES = 4
MIN_LED = 8
COMMON_HEAD_BYTES = 4
COMMON_HEAD_SHARE = 4
# The other needles (12.5k short strings there, 140 kB) go to a DFA, 2x the speed of the NFA
# (190 ms per 100 MB, 5 MB for those); past this many bytes of fragments, to an NFA, so the
# memory stays bounded (a DFA of 119k 16-byte fragments held ~600 MB).
MAX_DFA_BYTES = 256_000
# Its blocks: larger than a forget's (its automata, not the copy, are the cost), fewer calls.
MANY_BLOCK_BYTES = 1 << 22
Pieces = dict[bytes, list[tuple[int, int]]]


def _many_fragment(needle: bytes, taken: Container[bytes]) -> tuple[int, bytes] | None:
    """(offset, fragment) of a needle for the led automaton: from its first space, else its
    first '_' or '-' (one no other needle has, if it can: values' JSON share words), with at
    least MIN_LED bytes from there; None when there is none."""
    bound = len(needle) - MIN_LED + 1
    at = needle.find(b" ", 0, bound)
    if at < 0:
        under, dash = needle.find(b"_", 0, bound), needle.find(b"-", 0, bound)
        at = min(under, dash) if under >= 0 and dash >= 0 else max(under, dash)
        if at < 0:
            return None
        return at, needle[at:at + MANY_FRAGMENT_BYTES]
    first = at
    for _ in range(LED_TRIES):
        fragment = needle[at:at + MANY_FRAGMENT_BYTES]
        if fragment not in taken:
            return at, fragment
        at = needle.find(b" ", at + 1, bound)
        if at < 0:
            break
    return first, needle[first:first + MANY_FRAGMENT_BYTES]


def _automata(distinct: list[bytes]) -> list[tuple[ahocorasick_rs.BytesAhoCorasick, Pieces]]:
    """The led fragments' NFA and the others' DFA, each with its fragment -> (needle index,
    the fragment's offset in it); each needle is in exactly one of them. A head that many
    needles share (the magic of sealed values) leads too: few start bytes, and the rest of
    the fragment tells them apart."""
    heads = Counter(n[:COMMON_HEAD_BYTES] for n in distinct if len(n) >= MANY_FRAGMENT_BYTES)
    top = heads.most_common(1)
    # One head only (more would add start bytes that are common in the file, like letters).
    common = {top[0][0]} if top and top[0][1] * COMMON_HEAD_SHARE >= sum(heads.values()) else set()
    led: Pieces = {}
    other: Pieces = {}
    for i, needle in enumerate(distinct):
        if needle[:COMMON_HEAD_BYTES] in common:
            picked: tuple[int, bytes] | None = 0, needle[:MANY_FRAGMENT_BYTES]
        else:
            picked = _many_fragment(needle, led)
        if picked is not None:
            led.setdefault(picked[1], []).append((i, picked[0]))
        else:
            other.setdefault(needle[:MANY_FRAGMENT_BYTES], []).append((i, 0))
    impl = ahocorasick_rs.Implementation
    out = []
    for pieces, kind in ((led, impl.ContiguousNFA),
                         (other, impl.DFA if sum(map(len, other)) <= MAX_DFA_BYTES
                          else impl.ContiguousNFA)):
        if pieces:
            out.append((ahocorasick_rs.BytesAhoCorasick(list(pieces), implementation=kind), pieces))
    return out


def find_many(handle: RawIOBase, distinct: list[bytes], limit: int) -> dict[int, list[int]]:
    """Distinct needle index -> offsets: overlapping passes over the file for every needle's
    fragment (every occurrence of a fragment is reported, none hidden by another), block by
    block in one reused buffer (not a mapping: another connection may truncate the WAL under
    it), each candidate compared in full in place, or read with pread past the block."""
    automata = [(a, pieces, list(pieces)) for a, pieces in _automata(distinct)]
    overlap = MANY_FRAGMENT_BYTES - 1
    buf = bytearray(MANY_BLOCK_BYTES + overlap)
    view = memoryview(buf)
    found: dict[int, list[int]] = {}
    keep, base = 0, 0  # bytes carried over; file offset of buf[0]
    while n := handle.readinto(view[keep:keep + MANY_BLOCK_BYTES]):
        size = keep + n
        for automaton, pieces, fragments in automata:
            for k, start, end in automaton.find_matches_as_indexes(view[:size], overlapping=True):
                if end <= keep:
                    continue  # wholly in the carried bytes: reported with the block before
                for i, shift in pieces[fragments[k]]:
                    begin = start - shift
                    needle = distinct[i]
                    offsets = found.setdefault(i, [])
                    if len(offsets) >= limit or base + begin < 0:
                        continue
                    if begin >= 0 and begin + len(needle) <= size:
                        there = view[begin:begin + len(needle)] == needle
                    else:
                        there = os.pread(handle.fileno(), len(needle), base + begin) == needle
                    if there:
                        offsets.append(base + begin)
        carry = min(overlap, size)
        buf[:carry] = buf[size - carry:size]
        base += size - carry
        keep = carry
    view.release()
    # A fragment's matches come in file order and each needle has one fragment, so each
    # needle's offsets are sorted and distinct.
    return {i: o for i, o in found.items() if o}
