"""The byte scan of a sweep: tens of thousands of needles found in one pass over a file, by
overlapping automata over a short fragment of each, every candidate compared in full."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Container
from dataclasses import dataclass
from io import RawIOBase

import ahocorasick_rs
import numpy as np

from store.sqlite.blocks import in_ranges, windows

# The fragment of each needle in that search: short keeps the automaton small (119k needles of
# a 20k-fact sweep: built in 0.68-0.73 s at 12 bytes, 0.93-1.17 s at 16, the search as fast).
# Twelve still tells sealed values apart (8 random bytes after their 4-byte head).
MANY_FRAGMENT_BYTES = 12
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
# The other needles (12.5k short strings there, 140 kB, like "owner-6572") start with any
# byte: an automaton over them reads every byte of the file (a DFA, 190 ms per 100 MB). So
# they are led too, when it can be done for all of them, by bytes picked for them from a
# sample of the file: bytes that each of those needles holds at least MIN_OTHER_LED bytes
# before its end, the most needles per occurrence in the sample first, at most
# LEADS_PER_AUTOMATON per automaton (the search skips to up to three bytes) and
# OTHER_AUTOMATA automata (each is one more pass over the file). Measured on an 869 MB ledger
# after a 20k-fact sweep: the DFA pass over those took 1.85 s, the two led passes 0.39 s.
MIN_OTHER_LED = 6
LEADS_PER_AUTOMATON = 3
OTHER_AUTOMATA = 2
# The sample: this many pieces of the file, evenly spaced.
SAMPLE_PIECES = 32
SAMPLE_PIECE_BYTES = 1 << 15
# Needles none of those bytes can lead go to a DFA, 2x the speed of the NFA (5 MB for those);
# past this many bytes of fragments, to an NFA, so the memory stays bounded (a DFA of 119k
# 16-byte fragments held ~600 MB).
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


def _sample_counts(handle: RawIOBase) -> list[int]:
    """How often each byte value occurs in evenly spaced pieces of the file (read with pread:
    the handle's position does not move)."""
    fd = handle.fileno()
    size = os.fstat(fd).st_size
    step = max(SAMPLE_PIECE_BYTES, size // SAMPLE_PIECES)
    counts = np.zeros(256, dtype=np.int64)
    for at in range(0, size, step):
        piece = os.pread(fd, SAMPLE_PIECE_BYTES, at)
        counts += np.bincount(np.frombuffer(piece, dtype=np.uint8), minlength=256)
    return [int(c) for c in counts]


def _leads(needles: list[bytes], counts: list[int]) -> list[int] | None:
    """ASCII bytes that lead every one of `needles` (each holds one of them at least
    MIN_OTHER_LED bytes before its end), picked greedily, the most needles per occurrence in
    the file first; None when LEADS_PER_AUTOMATON * OTHER_AUTOMATA bytes cannot lead them all."""
    places = [set(n[:len(n) - MIN_OTHER_LED + 1]) for n in needles]
    if not all(places):
        return None
    left = list(range(len(needles)))
    picked: list[int] = []
    while left:
        if len(picked) == LEADS_PER_AUTOMATON * OTHER_AUTOMATA:
            return None
        # ASCII bytes only: given fragments that start with a byte it takes for common (0xE6
        # leads CJK in UTF-8), the automaton keys its search on other bytes of them, which can
        # be common in this file (28 needles at 1M: 2.2 s for the pass of the four that 0xE6
        # and 0xF4 led, 0.1 s led by 0x10 and 'H').
        held = Counter(b for i in left for b in places[i] if b < 0x80)
        if not held:
            return None
        best = max(held, key=lambda b: (held[b] / (counts[b] + 1), -b))
        picked.append(best)
        left = [i for i in left if best not in places[i]]
    return picked


def _led_by(needle: bytes, picked: list[int], taken: Container[bytes]) -> tuple[int, bytes]:
    """(offset, fragment) of a needle at its first place of the earliest picked byte it holds
    there (a later place of it if that fragment is another needle's, within LED_TRIES)."""
    bound = len(needle) - MIN_OTHER_LED + 1
    for lead in picked:
        at = needle.find(lead, 0, bound)
        if at < 0:
            continue
        first = at
        for _ in range(LED_TRIES):
            fragment = needle[at:at + MANY_FRAGMENT_BYTES]
            if fragment not in taken:
                return at, fragment
            at = needle.find(lead, at + 1, bound)
            if at < 0:
                break
        return first, needle[first:first + MANY_FRAGMENT_BYTES]
    raise AssertionError("a needle none of the picked bytes leads")  # _leads saw to it


def _plan(distinct: list[bytes], counts: list[int] | None,
          ) -> list[tuple[Pieces, ahocorasick_rs.Implementation]]:
    """The led fragments' NFA, the others' (led by bytes picked for them from `counts`, a
    sample of the file) or else their DFA, each with its fragment -> (needle index, the
    fragment's offset in it); each needle is in exactly one of them. A head that many
    needles share (the magic of sealed values) leads too: few start bytes, and the rest of
    the fragment tells them apart."""
    heads = Counter(n[:COMMON_HEAD_BYTES] for n in distinct if len(n) >= MANY_FRAGMENT_BYTES)
    top = heads.most_common(1)
    # One head only (more would add start bytes that are common in the file, like letters).
    common = {top[0][0]} if top and top[0][1] * COMMON_HEAD_SHARE >= sum(heads.values()) else set()
    led: Pieces = {}
    rest: list[int] = []
    for i, needle in enumerate(distinct):
        if needle[:COMMON_HEAD_BYTES] in common:
            picked: tuple[int, bytes] | None = 0, needle[:MANY_FRAGMENT_BYTES]
        else:
            picked = _many_fragment(needle, led)
        if picked is not None:
            led.setdefault(picked[1], []).append((i, picked[0]))
        else:
            rest.append(i)
    impl = ahocorasick_rs.Implementation
    groups: list[tuple[Pieces, ahocorasick_rs.Implementation]] = [(led, impl.ContiguousNFA)]
    leads = _leads([distinct[i] for i in rest], counts) if rest and counts else None
    if leads is not None:
        by_lead: dict[int, Pieces] = {}
        for i in rest:
            at, fragment = _led_by(distinct[i], leads, led)
            bucket = by_lead.setdefault(fragment[0], {})
            bucket.setdefault(fragment, []).append((i, at))
        used = [b for b in leads if b in by_lead]
        for k in range(0, len(used), LEADS_PER_AUTOMATON):
            pieces: Pieces = {}
            for b in used[k:k + LEADS_PER_AUTOMATON]:
                pieces.update(by_lead[b])
            groups.append((pieces, impl.ContiguousNFA))
    else:
        other: Pieces = {}
        for i in rest:
            other.setdefault(distinct[i][:MANY_FRAGMENT_BYTES], []).append((i, 0))
        groups.append((other, impl.DFA if sum(map(len, other)) <= MAX_DFA_BYTES
                       else impl.ContiguousNFA))
    return [(pieces, kind) for pieces, kind in groups if pieces]


Automata = list[tuple[ahocorasick_rs.BytesAhoCorasick, Pieces]]


def _automata(distinct: list[bytes], counts: list[int] | None = None) -> Automata:
    return [(ahocorasick_rs.BytesAhoCorasick(list(pieces), implementation=kind), pieces)
            for pieces, kind in _plan(distinct, counts)]


@dataclass(frozen=True)
class ManyPlan:
    """The automata for `distinct`, built ahead (a sweep builds them while a checkpoint of its
    WAL runs in the background): the bytes picked to lead come from a sample of the file
    taken then, which only makes the search faster or slower, never its answer different."""

    distinct: list[bytes]
    automata: Automata


def plan_for(handle: RawIOBase, distinct: list[bytes]) -> ManyPlan:
    return ManyPlan(distinct, _automata(distinct, _sample_counts(handle)))


def find_many(handle: RawIOBase, distinct: list[bytes], limit: int,
              plan: ManyPlan | None = None, threads: int | None = None) -> dict[int, list[int]]:
    """Distinct needle index -> offsets: overlapping passes over the file for every needle's
    fragment (every occurrence of a fragment is reported, none hidden by another), block by
    block in one reused buffer (not a mapping: another connection may truncate the WAL under
    it), each candidate compared in full in place, or read with pread past the block. `plan`:
    automata built ahead for these very needles (else built here). A large file is searched
    in `threads` ranges at once (the automata release the GIL), each block the same bytes a
    single pass reads, so the answer is the single pass's, in its order."""
    if plan is None or plan.distinct != distinct:
        plan = plan_for(handle, distinct)
    fd = handle.fileno()
    parts = in_ranges(fd, MANY_BLOCK_BYTES,
                      lambda lo, hi: _find_range(fd, lo, hi, plan, limit), threads)
    found: dict[int, list[int]] = {}
    for part in parts:  # in file order: a later range only adds offsets past an earlier one's
        for i, offsets in part.items():
            kept = found.setdefault(i, [])
            kept += offsets[:limit - len(kept)]
    # A fragment's matches come in file order and each needle has one fragment, so each
    # needle's offsets are sorted and distinct.
    return {i: o for i, o in found.items() if o}


def _find_range(fd: int, lo: int, hi: int | None, plan: ManyPlan,
                limit: int) -> dict[int, list[int]]:
    """The single pass's blocks from file offset `lo` (a block boundary) to `hi` (None: the
    end of the file), with the bytes before `lo` a block carries over: the needles whose
    fragment ends in them."""
    distinct = plan.distinct
    automata = [(a, pieces, list(pieces)) for a, pieces in plan.automata]
    found: dict[int, list[int]] = {}
    for window, base, keep in windows(fd, lo, hi, MANY_BLOCK_BYTES, MANY_FRAGMENT_BYTES - 1):
        size = len(window)
        for automaton, pieces, fragments in automata:
            for k, start, end in automaton.find_matches_as_indexes(window, overlapping=True):
                if end <= keep:
                    continue  # wholly in the carried bytes: reported with the block before
                for i, shift in pieces[fragments[k]]:
                    begin = start - shift
                    needle = distinct[i]
                    offsets = found.setdefault(i, [])
                    if len(offsets) >= limit or base + begin < 0:
                        continue
                    if begin >= 0 and begin + len(needle) <= size:
                        there = window[begin:begin + len(needle)] == needle
                    else:
                        there = os.pread(fd, len(needle), base + begin) == needle
                    if there:
                        offsets.append(base + begin)
    return found
