"""Proving erasure on disk: a truncating WAL checkpoint, and a byte scan of the files."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
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


def _finder(needles: list[bytes]) -> Callable[[bytes], set[int]]:
    """Which needles occur in a block: a few are searched one by one (memmem), many in a
    single Aho-Corasick pass over their prefixes, so a sweep's thousands of values cost one
    read of the file."""
    if len(needles) <= 2:
        return lambda block: {i for i, n in enumerate(needles) if n in block}
    prefixes = [n[:PREFIX_BYTES] for n in needles]
    automaton = ahocorasick_rs.BytesAhoCorasick(prefixes)

    def find(block: bytes) -> set[int]:
        found: set[int] = set()
        for i, start, _ in automaton.find_matches_as_indexes(block, overlapping=True):
            if i not in found and (len(needles[i]) <= PREFIX_BYTES
                                   or block.startswith(needles[i], start)):
                found.add(i)
        return found

    return find


def scan_files(paths: list[str], needles: list[bytes], chunk: int = 1 << 23) -> dict[str, list[int]]:
    """For each file, the indexes of the needles found in its bytes (a missing file: none)."""
    found: dict[str, list[int]] = {}
    needles = [n for n in needles if n]
    longest = max((len(n) for n in needles), default=0)
    find = _finder(needles) if needles else (lambda block: set())
    for path in paths:
        hits: set[int] = set()
        try:
            with open(path, "rb") as handle:
                tail = b""
                while True:
                    block = handle.read(chunk)
                    if not block:
                        break
                    window = tail + block
                    hits |= find(window)
                    tail = window[-(longest - 1):] if longest > 1 else b""
        except FileNotFoundError:
            pass
        found[path] = sorted(hits)
    return found
