"""Authenticated high-water marks (DESIGN 14): each mark row of the key store carries a MAC under
a key derived from the master key, over its number and fields. The trusted mark is the newest
row whose MAC holds; a row that fails it (a lower mark inserted by hand, say) is reported and
never trusted, so it cannot lower the bar. Rows written before marks had a MAC stay trusted up
to the number the key store recorded when it was upgraded."""

from __future__ import annotations

import hmac
from collections.abc import Iterator

from custody_app.keys import crypto
from store import KeyStoreFile
from store.rows import MarkRow


def mark_key(master: bytes) -> bytes:
    """The MAC key of the marks: derived from the master key, never stored."""
    return bytes.fromhex(crypto.keyed_digest(master, "custody", "ledger marks"))


def host_mark_key(mark_key: bytes) -> bytes:
    """The MAC key of a host's own copy of the high-water mark (custody_app.core.host_mark):
    derived from the marks' key (which an epoch rotation keeps), apart from it."""
    return bytes.fromhex(crypto.keyed_digest(mark_key, "custody", "host marks"))


def certificate_key(mark_key: bytes) -> bytes:
    """The MAC key of the certificates kept for the next epoch rotation
    (custody_app.erasure.epoch_certs): derived from the marks' key, which a rotation keeps, so
    one stored under an epoch still verifies under the next."""
    return bytes.fromhex(crypto.keyed_digest(mark_key, "custody", "epoch certificates"))


def host_mark_mac(key: bytes, genesis: str, seq: int, head: str, at: str) -> str:
    return crypto.keyed_digest(key, "host mark", genesis, str(seq), head, at)


def mark_mac(key: bytes, row: MarkRow) -> str:
    n, seq, head, at, accepted, _ = row
    return crypto.keyed_digest(key, "mark", str(n), str(seq), head, at, "1" if accepted else "0")


def _verdicts(store: KeyStoreFile, key: bytes) -> Iterator[tuple[MarkRow, bool]]:
    """Each mark row, newest first, with whether it is trusted."""
    legacy = store.legacy_marks_upto()
    for row in store.marks():
        if row[5] is None:
            yield row, row[0] <= legacy
        else:
            yield row, hmac.compare_digest(row[5], mark_mac(key, row))


def trusted_mark(store: KeyStoreFile, key: bytes) -> tuple[MarkRow | None, list[MarkRow]]:
    """(the newest trusted mark or None, the untrusted rows newer than it)."""
    bad: list[MarkRow] = []
    for row, ok in _verdicts(store, key):
        if ok:
            return row, bad
        bad.append(row)
    return None, bad


def untrusted_marks(store: KeyStoreFile, key: bytes) -> list[MarkRow]:
    """Every mark row whose MAC fails (or is missing where one is due), newest first."""
    return [row for row, ok in _verdicts(store, key) if not ok]


def describe(row: MarkRow) -> str:
    """A mark row named for a report (number, seq and the head's first 12 hex digits)."""
    return f"mark row {row[0]} (seq {row[1]}, head {row[2][:12]}...)"
