"""What verify proves of sealed free text: each event's sealed text opens and matches its
commitment; an erased one only with a forget or expire of its fact; no stray rows; and the
bodies the schema upgrade rewrote are exactly those its `seal_text` event vouches for. The
event_texts rows are read in one ordered scan merged with the walk over the events by seq."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from custody_app.core.texts import UNDECRYPTED, UNREAD, text_problem
from custody_app.domain.sealed_text import BODY_KEY, Texts, UpgradeDigest, is_upgraded
from custody_app.keys.crypto import Ciphers
from store.rows import EventRow, TextRow

if TYPE_CHECKING:
    from custody_app.core.ledger_core import LedgerCore


# A value or text stored under a key generation the key store no longer holds:
# (seq, fact id, subject ref, the event's tx_at).
Keyless = tuple[int, str | None, str, str]


def unerased_keys(keyless: list[Keyless], erasures: dict[int, dict[str, Any]]
                  ) -> tuple[int | None, str | None]:
    """The first stored value or text whose key is gone without an erasure of its subject
    recorded after it: crypto-shredding outside `forget_subject` (a key store edited by hand,
    or a ledger copied from before an erasure) would otherwise read as lawful erasure."""
    erased: dict[str, str] = {}
    for event in erasures.values():
        ref, at = str(event.get("subject_hash")), str(event.get("tx_at"))
        erased[ref] = max(at, erased.get(ref, at))
    for seq, fact_id, ref, tx_at in sorted(keyless):
        if erased.get(ref, "") < tx_at:
            return seq, (f"event {seq} (fact {fact_id}) holds a sealed value or text whose "
                         "key the key store no longer has, but this ledger records no "
                         "erasure of its subject after it: the key store was edited, or the "
                         "ledger is a copy restored from before an erasure (keystore_tampered; "
                         "for a restored copy, forget the fact again to record its erasure)")
    return None, None


class TextAudit:
    """Fed every event in seq order during the chain walk; `finish` checks what is left."""

    def __init__(self, ledger: LedgerCore) -> None:
        self.db = ledger.db
        self.codec = ledger.texts
        # Every sealed blob of the walk opened under a copy of the key store read once.
        self.ciphers = (None if ledger.keys is None
                        else Ciphers(ledger.keys.snapshot_keys(), snapshot=True))
        self.erased_facts: set[str] = set()
        self.erased_texts: dict[int, str] = {}
        self.upgraded = UpgradeDigest()  # the bodies the upgrade rewrote, hashed as they pass
        self.upgrade_seq: int | None = None
        # Rows no event that commits to a sealed text claimed, in seq order.
        self.strays: list[int] = []
        self.keyless: list[Keyless] = []  # texts stored under a key generation now gone
        self._rows: Iterator[tuple[int, TextRow]] | None = None
        self._next: tuple[int, TextRow] | None = None
        # The row and opened text of the event the walk is on: (seq, row, text).
        self._current: tuple[int | None, TextRow | None, Any] = (None, None, UNREAD)

    def _row_at(self, seq: int) -> tuple[TextRow | None, Any]:
        """The event's text row (None if it has none) and its opened text (UNREAD until
        opened). The walk asks in seq order: rows it passes without asking are strays."""
        current = self._current
        if current[0] == seq:
            return current[1], current[2]
        if self._rows is None:  # opened on first use: inside the walk's read transaction
            self._rows = self.db.texts.iter_all()
            self._next = next(self._rows, None)
        after = self._next
        while after is not None and after[0] < seq:
            self.strays.append(after[0])
            after = next(self._rows, None)
        stored = None
        if after is not None and after[0] == seq:
            stored = after[1]
            after = next(self._rows, None)
        self._next = after
        self._current = (seq, stored, UNREAD)
        return stored, UNREAD

    def texts_of(self, row: EventRow) -> Texts | None:
        """The opened free text the chain check rebuilds an upgraded event's old body from
        (kept for `check`, so the event's text is read and decrypted once)."""
        stored, _ = self._row_at(row.seq)
        texts = None if stored is None else self._open(stored)
        self._current = (row.seq, stored, texts)
        return None if texts is UNDECRYPTED else texts

    def _open(self, stored: TextRow) -> Any:
        try:
            return self.codec.open(stored[0], stored[1], stored[2], self.ciphers)
        except Exception:  # a tampered text: check() names it
            return UNDECRYPTED

    def check(self, row: EventRow, body: dict[str, Any]) -> str | None:
        """`body`: the event's body as the chain walk parsed it."""
        kind = row.kind
        if kind == "forget" or kind == "expire":
            if row.fact_id is not None:
                self.erased_facts.add(row.fact_id)
        elif kind == "seal_text":
            return self._check_upgrade(row)
        if BODY_KEY not in body:
            # A row at its seq is a stray: left for the next ask to pass, or already read here
            # (a body holding the upgrade's marker text outside a sealed_text block).
            if self._current[0] == row.seq and self._current[1] is not None:
                self.strays.append(row.seq)
            return None
        if is_upgraded(body):
            if self.upgrade_seq is not None:
                return f"event {row.seq} claims to be sealed by the upgrade at seq " \
                       f"{self.upgrade_seq}, which came before it"
            self.upgraded.add(row.seq, row.body)
        stored, opened = self._row_at(row.seq)
        if stored is not None and stored[2] is not None and self.ciphers is not None:
            if opened is UNREAD:
                opened = self._open(stored)
            if opened is None:  # a stored text whose key is gone
                self.keyless.append((row.seq, row.fact_id, stored[1], row.tx_at))
        problem, erased = text_problem(self.codec, row.seq, row.fact_id, body, stored, opened,
                                       self.ciphers)
        if erased and row.fact_id is not None:
            self.erased_texts[row.seq] = row.fact_id
        return problem

    def _check_upgrade(self, row: EventRow) -> str | None:
        body = json.loads(row.body)
        if self.upgrade_seq is not None:
            return f"event {row.seq} is a second schema upgrade of free text"
        self.upgrade_seq = row.seq
        count = self.upgraded.count
        if body.get("events") != count or body.get("digest") != self.upgraded.hexdigest():
            return (f"the upgrade at seq {row.seq} vouches for {body.get('events')} rewritten "
                    f"event(s), but {count} before it do not match what it "
                    "recorded: an upgraded event was edited")
        return None

    def finish(self) -> tuple[int | None, str | None]:
        for seq, fact_id in self.erased_texts.items():
            if fact_id not in self.erased_facts:
                return seq, (f"event {seq} (fact {fact_id}) has no sealed free text, but no "
                             "forget or expire event erased it")
        if self.upgraded.first is not None and self.upgrade_seq is None:
            seq = self.upgraded.first
            return seq, (f"event {seq} claims to be sealed by a schema upgrade, but no upgrade "
                         "event vouches for it")
        if self._rows is None:  # no event asked: every row is a stray
            self._rows = self.db.texts.iter_all()
            self._next = next(self._rows, None)
        while self._next is not None:
            self.strays.append(self._next[0])
            self._next = next(self._rows, None)
        if self.strays:
            seq = self.strays[0]
            return seq, f"sealed free text row {seq} belongs to no event that commits to it"
        return None, None
