"""Proving erasure on disk: a truncating WAL checkpoint, and a byte scan of the files."""

from __future__ import annotations

import mmap
import os
import time
from dataclasses import dataclass

import ahocorasick_rs
import apsw

# Backoff while a reader blocks the checkpoint: about 0.6 s in all, then report it pending.
CHECKPOINT_DELAYS = (0.0, 0.01, 0.02, 0.04, 0.08, 0.16, 0.3)


@dataclass(frozen=True, slots=True)
class CheckpointOutcome:
    complete: bool
    attempts: int
    wal_bytes: int
    detail: str


def wal_path(db_path: str) -> str:
    return f"{db_path}-wal"


def _size(path: str) -> int:
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
            if last == (0, 0, 0) and _size(wal_path(db_path)) == 0:
                return CheckpointOutcome(True, attempt, 0, "checkpoint complete; the WAL is empty")
    finally:
        conn.set_busy_timeout(previous)
    return CheckpointOutcome(
        False, len(delays), _size(wal_path(db_path)),
        f"a reader kept the WAL in use (checkpoint returned {last}); it will be finished at "
        "the next write or open")


# Aho-Corasick gets at most this many leading bytes of each needle; a hit is then checked in
# full. Building the automaton for a long self-overlapping needle ("x" * 3000, padding, rules of
# "-----") is quadratic in its length: seconds for one forget before this cap.
PREFIX_BYTES = 64
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


def _in_windows(view: mmap.mmap, indexed: list[tuple[int, bytes]], prefixes: list[bytes],
                matches: list[tuple[int, int, int]], limit: int) -> dict[int, list[int]]:
    """Every occurrence of every needle, from the leftmost pass's matches: an occurrence
    always starts inside a reported match (the pass reports a match at or before each
    occurrence and skips only what a reported match covers), so only those windows are
    searched again, with an overlapping automaton, each candidate checked in full."""
    by_prefix: dict[bytes, list[int]] = {}
    for i, needle in indexed:
        by_prefix.setdefault(needle[:PREFIX_BYTES], []).append(i)
    needles = dict(indexed)
    overlapping = ahocorasick_rs.BytesAhoCorasick(prefixes)
    reach = max(len(p) for p in prefixes)
    found: dict[int, set[int]] = {}
    for _, start, end in matches:
        window = view[start:end - 1 + reach]
        for k, at, _ in overlapping.find_matches_as_indexes(window, overlapping=True):
            if at >= end - start:
                continue
            for i in by_prefix[prefixes[k]]:
                offsets = found.setdefault(i, set())
                if len(offsets) < limit and view[start + at:start + at + len(needles[i])] == needles[i]:
                    offsets.add(start + at)
    return {i: sorted(o) for i, o in found.items() if o}


# Past this many leftmost matches (a needle that is everywhere) each needle is searched on its
# own instead: memmem per needle costs a pass each, but windows would cost more.
MAX_WINDOWS = 20_000


def find_in_file(path: str, needles: list[bytes], limit: int = MAX_OFFSETS) -> dict[int, list[int]]:
    """Needle index -> file offsets (at most `limit`) of each needle found in the file.

    One leftmost-longest Aho-Corasick pass over the mapped file (no copies; its SIMD prefilter
    runs near memory speed) decides whether anything is there: if no reported match, no needle
    prefix occurs anywhere, since a leftmost search reports some match at or before every
    occurrence. When it reports something, the windows of its matches are searched again for
    every needle (the overlapping ones a non-overlapping pass skips too), or, past
    MAX_WINDOWS matches, each needle on its own (memmem)."""
    indexed = [(i, n) for i, n in enumerate(needles) if n]
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        return {}
    with handle:
        if not indexed or os.fstat(handle.fileno()).st_size == 0:
            return {}
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
            prefixes = list(dict.fromkeys(n[:PREFIX_BYTES] for _, n in indexed))
            automaton = ahocorasick_rs.BytesAhoCorasick(
                prefixes, matchkind=ahocorasick_rs.MATCHKIND_LEFTMOST_LONGEST)
            matches = automaton.find_matches_as_indexes(view)
            if not matches:
                return {}
            if len(matches) <= MAX_WINDOWS:
                return _in_windows(view, indexed, prefixes, matches, limit)
            found: dict[int, list[int]] = {}
            for i, needle in indexed:
                offsets = _occurrences(view, needle, limit)
                if offsets:
                    found[i] = offsets
            return found


def scan_files(paths: list[str], needles: list[bytes]) -> dict[str, list[int]]:
    """For each file, the indexes of the needles found in its bytes (a missing file: none)."""
    return {path: sorted(find_in_file(path, needles, limit=1)) for path in paths}
