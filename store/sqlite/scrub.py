"""Proving erasure on disk: a truncating WAL checkpoint, and a byte scan of the files."""

from __future__ import annotations

import mmap
import os
import time
from io import RawIOBase

import ahocorasick_rs
import apsw

from store.rows import CheckpointOutcome
from store.sqlite.blocks import in_ranges, windows
from store.sqlite.scan_many import ManyPlan, find_many, plan_for

# Backoff while a reader blocks the checkpoint: about 0.6 s in all, then report it pending.
CHECKPOINT_DELAYS = (0.0, 0.01, 0.02, 0.04, 0.08, 0.16, 0.3)


def wal_path(db_path: str) -> str:
    return f"{db_path}-wal"


def file_size(path: str) -> int:
    """Bytes in the file at `path` (0 when it does not exist)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def checkpoint_truncate(conn: apsw.Connection, db_path: str,
                        delays: tuple[float, ...] = CHECKPOINT_DELAYS) -> CheckpointOutcome:
    """PRAGMA wal_checkpoint(TRUNCATE), retried with backoff; complete only at (0, 0, 0) and an
    empty -wal file. (Connection.wal_checkpoint raises instead of reporting, so the PRAGMA.)"""
    last = (1, -1, -1)
    # This loop is the wait: with the connection's busy timeout in force, each blocked attempt
    # would itself wait out the whole timeout (5 s) before reporting busy.
    previous = int(conn.pragma("busy_timeout"))
    conn.set_busy_timeout(0)
    try:
        for attempt, delay in enumerate(delays, start=1):
            if delay:
                time.sleep(delay)
            try:
                row = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            except apsw.BusyError:
                continue
            if row is not None:
                last = (int(row[0]), int(row[1]), int(row[2]))
            if last == (0, 0, 0) and file_size(wal_path(db_path)) == 0:
                return CheckpointOutcome(True, attempt, 0, "checkpoint complete; the WAL is empty")
    finally:
        conn.set_busy_timeout(previous)
    return CheckpointOutcome(
        False, len(delays), file_size(wal_path(db_path)),
        f"a reader kept the WAL in use (checkpoint returned {last}); it will be finished at "
        "the next write or open")


# Aho-Corasick gets at most this many bytes of each needle (a fragment); a hit is then checked in
# full. Building the automaton for a long self-overlapping needle ("x" * 3000, padding, rules of
# "-----") is quadratic in its length: seconds for one forget before this cap.
FRAGMENT_BYTES = 64
# Offsets kept per needle and file: enough to locate every copy in a normal ledger, bounded so a
# needle that is everywhere (a common word) cannot make the proof unbounded.
MAX_OFFSETS = 64


def _occurrences(view: mmap.mmap, needle: bytes, limit: int) -> list[int]:
    out: list[int] = []
    at = view.find(needle)
    while at >= 0 and len(out) < limit:
        out.append(at)
        at = view.find(needle, at + 1)
    return out


def _weight(byte: int) -> int:
    """How common a byte is in a ledger file (a guess that needs no pass over it): zero bytes
    fill pages, JSON punctuation and lowercase text fill bodies; high bytes are ciphertext."""
    if byte == 0:
        return 100
    if byte in b'"{}:, ' or 97 <= byte <= 122:
        return 30
    if 48 <= byte <= 57 or byte in b"_-.":
        return 20
    return 5 if byte < 128 else 1


# Each byte's _weight, as a bytes.translate table: a needle's weights in one C call.
_WEIGHTS = bytes(_weight(b) for b in range(256))
# Start offsets of the rarest bytes tried per needle: a sweep builds ~4 needles per fact, and
# weighing every start of a long needle in Python cost 1 ms each (8 of 10 s of a 2,000-fact
# sweep's scan).
_STARTS_TRIED = 16


def fragment_of(needle: bytes) -> tuple[int, bytes]:
    """(offset, the FRAGMENT_BYTES of the needle from there) whose first bytes are the rarest:
    the automaton's SIMD prefilter keys on a pattern's first bytes, and a needle starting with
    '{"' or zero bytes would make it stop at every JSON body or empty page. Candidates are the
    first starts at a byte of the rarest class present; any fragment is correct (a hit is
    checked in full), this only picks a fast one."""
    size = min(len(needle), FRAGMENT_BYTES)
    last = min(len(needle) - size, 256)
    weights = needle[:last + 3].translate(_WEIGHTS)
    rarest = bytes([min(weights[:last + 1])])
    starts: list[int] = []
    at = weights.find(rarest, 0, last + 1)
    while at >= 0 and len(starts) < _STARTS_TRIED:
        starts.append(at)
        at = weights.find(rarest, at + 1, last + 1)
    best = min(starts, key=lambda j: sum(weights[j:j + 3]))
    return best, needle[best:best + size]


def _in_windows(view: mmap.mmap, indexed: list[tuple[int, bytes]], pieces: dict[bytes, list[
        tuple[int, int]]], matches: list[tuple[int, int, int]], limit: int) -> dict[int, list[int]]:
    """Every occurrence of every needle, from the leftmost pass's matches: a needle's fragment
    always starts inside a reported match (the pass reports a match at or before each
    occurrence and skips only what a reported match covers), so only those windows are
    searched again, with an overlapping automaton, each candidate checked in full."""
    needles = dict(indexed)
    fragments = list(pieces)
    overlapping = ahocorasick_rs.BytesAhoCorasick(fragments)
    reach = max(len(f) for f in fragments)
    found: dict[int, set[int]] = {}
    for _, start, end in matches:
        window = view[start:end - 1 + reach]
        for k, at, _ in overlapping.find_matches_as_indexes(window, overlapping=True):
            if at >= end - start:
                continue
            for i, shift in pieces[fragments[k]]:
                begin = start + at - shift
                offsets = found.setdefault(i, set())
                if (begin >= 0 and len(offsets) < limit
                        and view[begin:begin + len(needles[i])] == needles[i]):
                    offsets.add(begin)
    return {i: sorted(o) for i, o in found.items() if o}


# A forget's few needles (up to twice this many; more go to `store.scan_many`). They are
# searched in ONE pass by one leftmost automaton over all their fragments (its packed SIMD
# prefilter): on a 38 MB ledger, 12 forgets' needle sets (5-8 fragments) took 17-49 ms in one
# pass against 50-100 ms in one pass per fragment (memchr on a rare byte is slow when that
# byte is common in vector or ciphertext pages), and the plain read of the file 10-38 ms,
# same run, load 8 (session 5). One pass per fragment was the rule before.
SINGLE_PASSES = 6


# The file is read in blocks of this size into one reused buffer (readinto: no mapping faults,
# no new bytes objects); each block is searched while it is still in the CPU cache (512 KiB:
# a forget's 5 passes over a 358 MB ledger took 120-138 ms of CPU, 139-164 ms at 2 MiB).
BLOCK_BYTES = 1 << 19


def _leftmost(handle: RawIOBase, fragments: list[bytes]) -> list[tuple[int, int, int]]:
    """Matches (fragment, start, end in the file) of a leftmost-longest search: every
    occurrence of every fragment starts inside one of them. One automaton for all the
    fragments, one pass (in ranges at once for a large file: `store.blocks`). Each block is
    searched with the last FRAGMENT_BYTES - 1 bytes of the one before, so a fragment across a
    block boundary is found whole."""
    kind = ahocorasick_rs.MATCHKIND_LEFTMOST_LONGEST
    automaton = ahocorasick_rs.BytesAhoCorasick(fragments, matchkind=kind)
    overlap = max(len(f) for f in fragments) - 1
    fd = handle.fileno()

    def search(lo: int, hi: int | None) -> list[tuple[int, int, int]]:
        # Every match, those wholly in the carried bytes too: a leftmost search started at
        # another offset can segment the same bytes differently (with several fragments), so
        # the block before may have covered an occurrence there with another match. Every
        # occurrence lies wholly inside some block's window, and inside one of its matches.
        return [(i, base + s, base + e)
                for window, base, _ in windows(fd, lo, hi, BLOCK_BYTES, overlap)
                for i, s, e in automaton.find_matches_as_indexes(window)]

    out = [m for part in in_ranges(fd, BLOCK_BYTES, search) for m in part]
    return sorted(out, key=lambda m: m[1])


# Past this many leftmost matches (a needle that is everywhere) each needle is searched on its
# own instead: memmem per needle costs a pass each, but windows would cost more.
MAX_WINDOWS = 20_000


def _pieces(indexed: list[tuple[int, bytes]]) -> dict[bytes, list[tuple[int, int]]]:
    """Each needle's fragment -> (needle index, the fragment's offset in it) of its needles."""
    pieces: dict[bytes, list[tuple[int, int]]] = {}
    for i, needle in indexed:
        shift, fragment = fragment_of(needle)
        pieces.setdefault(fragment, []).append((i, shift))
    return pieces


def _core(indexed: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """The needles that hold no shorter one (a forget's value JSON holds its strings), for
    a few needles only (the test is quadratic)."""
    if len(indexed) > SINGLE_PASSES * 2:
        return indexed
    return [(i, n) for i, n in indexed
            if not any(len(m) < len(n) and m in n for _, m in indexed)]


# Past this many distinct needles (a sweep: ~4-6 per fact) the file is searched once, block by
# block, by overlapping automata over a short fragment of each (`store.scan_many`).
MANY_NEEDLES = SINGLE_PASSES * 2


def distinct_needles(needles: list[bytes]) -> list[bytes]:
    """The needles a scan searches for: each non-empty one once, in first-seen order."""
    return list(dict.fromkeys(n for n in needles if n))


def plan_many(path: str, needles: list[bytes]) -> ManyPlan | None:
    """The many-needle search of `find_in_file` for these needles, prepared ahead from a
    sample of the file at `path`; None when they are too few for it or the file is missing.
    The sample only makes the search faster or slower, so a file that changes afterwards (the
    checkpoint that follows) is still searched exactly."""
    distinct = distinct_needles(needles)
    if len(distinct) <= MANY_NEEDLES:
        return None
    try:
        handle = open(path, "rb", buffering=0)
    except FileNotFoundError:
        return None
    with handle:
        return plan_for(handle, distinct)


def find_in_file(path: str, needles: list[bytes], limit: int = MAX_OFFSETS,
                 plan: ManyPlan | None = None) -> dict[int, list[int]]:
    """Needle index -> file offsets (at most `limit`) of each needle found in the file.

    A leftmost-longest Aho-Corasick search of the file, block by block in one reused buffer,
    for one rare-led fragment of each needle decides whether anything is there: with no
    reported match no fragment, so no needle, occurs anywhere, since a leftmost search reports
    some match at or before every occurrence. When it reports
    something, the windows of its matches are searched again for every fragment (the
    overlapping ones a non-overlapping pass skips too), or, past MAX_WINDOWS matches, each
    needle on its own (memmem). Past MANY_NEEDLES distinct needles (a sweep), one overlapping
    pass over the file instead (`store.scan_many`; `plan`: its automata, prepared ahead by
    `plan_many`). Equal needles are searched once."""
    indexed = [(i, n) for i, n in enumerate(needles) if n]
    try:
        handle = open(path, "rb", buffering=0)
    except FileNotFoundError:
        return {}
    with handle:
        if not indexed or os.fstat(handle.fileno()).st_size == 0:
            return {}
        distinct = distinct_needles(needles)
        if len(distinct) > MANY_NEEDLES:
            where = {n: k for k, n in enumerate(distinct)}
            by_needle = find_many(handle, distinct, limit, plan)
            return {i: by_needle[where[n]] for i, n in indexed if where[n] in by_needle}
        pieces = _pieces(indexed)
        core = _core(indexed)
        if len(core) < len(indexed):
            # A needle that holds another can only be there if that one is: one pass fewer.
            if not _leftmost(handle, list(_pieces(core))):
                return {}
            handle.seek(0)
        matches = _leftmost(handle, list(pieces))
        if not matches:
            return {}
        # Something is there (rare: a shared or leaking string): map the file to locate it all.
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
            if len(matches) <= MAX_WINDOWS:
                return _in_windows(view, indexed, pieces, matches, limit)
            found: dict[int, list[int]] = {}
            for i, needle in indexed:
                offsets = _occurrences(view, needle, limit)
                if offsets:
                    found[i] = offsets
            return found


def scan_files(paths: list[str], needles: list[bytes]) -> dict[str, list[int]]:
    """For each file, the indexes of the needles found in its bytes (a missing file: none)."""
    return {path: sorted(find_in_file(path, needles, limit=1)) for path in paths}
