"""Rollback detection a database restore cannot undo (issue 34). A server ledger's key store
lives in the same database, so restoring an older dump restores its older marks with it, and
core.rollback's check passes. Each host therefore keeps its own copy of the newest head it
has seen, outside the database: `ledger.seen` in the server ledger's local folder
(store.address.LedgerAddress.host_mark_file), MAC'd under a key derived from the master key
and bound to the ledger's genesis. It is raised after every write of this host that moved the
head, and at every read-write open that passed the checks (the newest head this host has
read; a read-only open only checks: it writes no file). An open
whose head is behind it is refused (`ledger_rolled_back`), one whose event at its seq has
another hash (`ledger_forked`), naming both heads; `CUSTODY_ACCEPT_ROLLBACK=<its seq>` on a
read-write open accepts the loss, as for the key store's marks. A file whose MAC fails, or
that another ledger wrote, is never the bar (doctor names it)."""

from __future__ import annotations

import fcntl
import hmac
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from custody_app.core.rollback import ACCEPT_ENV, computed_hash, genesis_of
from custody_app.domain.errors import LedgerError
from custody_app.keys.keyring import KeyRing
from store import LedgerFile
from store.address import address_of

Head = tuple[int, str, str]
MacOf = Callable[[str, int, str, str], str]  # (genesis, seq, head, at) -> MAC


@dataclass(frozen=True)
class HostMark:
    """The newest head of the ledger this host has seen: (seq, hash, tx_at), for `genesis`."""

    genesis: str
    seq: int
    head: str
    at: str
    mac: str


def host_mark_file(address: str) -> Path | None:
    return address_of(address).host_mark_file()


def read(path: Path, keys: KeyRing | MacOf) -> tuple[HostMark | None, str | None]:
    """(the file's mark when it is trusted, else None; why it is not, when it exists).
    `keys`: the key ring, or the MAC function itself (doctor's, from the master key)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        mark = HostMark(str(data["ledger"]), int(data["seq"]), str(data["head"]),
                        str(data["at"]), str(data["mac"]))
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"{path} cannot be read as a host mark ({exc})"
    mac_of = keys.host_mark_mac if isinstance(keys, KeyRing) else keys
    expected = mac_of(mark.genesis, mark.seq, mark.head, mark.at)
    if not hmac.compare_digest(expected, mark.mac):
        return None, (f"{path} fails its MAC under this ledger's master key: it was edited, or "
                      "written under another master key")
    return mark, None


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One process of this host at a time reads, compares and replaces the file."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write(path: Path, mark: HostMark) -> None:
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump({"ledger": mark.genesis, "seq": mark.seq, "head": mark.head, "at": mark.at,
                   "mac": mark.mac}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def raise_to(address: str, keys: KeyRing, genesis: str | None, head: Head | None, *,
             accepted: bool = False) -> None:
    """Record `head` as the newest this host has seen, unless the file already holds a newer
    one of this ledger (`accepted`: replace it whatever it holds)."""
    path = host_mark_file(address)
    if path is None or head is None or genesis is None:
        return
    try:
        with _locked(path):
            if not accepted:
                mark, _ = read(path, keys)
                if mark is not None and mark.genesis == genesis and mark.seq >= head[0]:
                    return
            _write(path, HostMark(genesis, head[0], head[1], head[2],
                                  keys.host_mark_mac(genesis, head[0], head[1], head[2])))
    except OSError:
        # A host whose data folder cannot be written (a read-only home) still works on the
        # ledger; it only cannot remember how far it had come. doctor says so.
        return


def check(db: LedgerFile, keys: KeyRing, address: str, *, readonly: bool) -> None:
    """Refuse a ledger behind (or forked from) the newest head this host has seen; then, on a
    read-write open, raise this host's mark to the ledger's head (a read-only open writes no
    file at all, DESIGN 13: it only checks)."""
    path = host_mark_file(address)
    if path is None:
        return
    genesis = genesis_of(db)
    head = db.events.head()
    mark, _why = read(path, keys)
    accepted = False
    if mark is not None and genesis is not None and mark.genesis == genesis:
        accepted = _compare(db, mark, head, path, address, readonly=readonly)
    if not readonly:
        raise_to(address, keys, genesis, head, accepted=accepted)


def _compare(db: LedgerFile, mark: HostMark, head: Head | None, path: Path, address: str, *,
             readonly: bool) -> bool:
    """Refuse a head behind or forked from `mark`; True when the loss is accepted."""
    shown = address_of(address).display
    have = head[0] if head else 0
    ends = f"event {have} ({head[1][:12]}...)" if head else "no event"
    if have >= mark.seq:
        at_mark = db.events.get(mark.seq)
        computed = None if at_mark is None else computed_hash(at_mark, legacy=True)
        if computed == mark.head:
            return False
        found = "no event" if computed is None else f"the hash {computed[:12]}..."
        raise LedgerError(
            "ledger_forked",
            f"{shown} holds at event {mark.seq} {found}, but this host saw it there with the "
            f"head {mark.head[:12]}... at {mark.at} ({path}): the database was restored from "
            "an older copy and written to since, and could serve values erased since. Restore "
            "the database from its newest backup", ledger_seq=have, host_seq=mark.seq,
            host_mark=str(path))
    if not readonly and os.environ.get(ACCEPT_ENV) == str(mark.seq):
        return True  # the caller replaces the mark with the ledger's head
    raise LedgerError(
        "ledger_rolled_back",
        f"{shown} ends at {ends}, but this host saw it reach event {mark.seq} "
        f"({mark.head[:12]}...) at {mark.at} ({path}): the database (and the key store in it) "
        "was restored from an older copy, and could serve values erased since. Restore the "
        "database from its newest backup, or accept the loss of what came after by opening it "
        f"read-write once with {ACCEPT_ENV}={mark.seq}", ledger_seq=have, host_seq=mark.seq,
        host_mark=str(path))
