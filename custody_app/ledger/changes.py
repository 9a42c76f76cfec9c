"""Another process's writes, as they commit (issue 34, live refresh across machines): a server
ledger's changes arrive as notifications on a listening connection of their own
(store.listen); a file ledger has none (its files show its changes: watch them). What the
terminal app and the MCP server wait on."""

from __future__ import annotations

from pathlib import Path

from custody_app.domain.errors import LedgerError
from store import listen
from store.address import address_of
from store.errors import StoreError
from store.port import ChangeFeedPort


class LedgerChanges:
    """A listener to one ledger's committed changes; every failure is a LedgerError (a lost
    or refused connection: `postgres_unreachable`)."""

    def __init__(self, feed: ChangeFeedPort) -> None:
        self._feed = feed

    @classmethod
    def open(cls, ledger_path: str | Path) -> LedgerChanges | None:
        """Listen to the ledger's changes; None for a ledger whose own files show them."""
        try:
            feed = listen(str(ledger_path))
        except StoreError as exc:
            raise LedgerError(exc.code, str(exc)) from None
        return None if feed is None else cls(feed)

    @staticmethod
    def available(ledger_path: str | Path) -> bool:
        """Whether the ledger's changes are heard (a server) rather than seen in files."""
        return address_of(str(ledger_path)).server

    def wait(self, timeout: float) -> int | None:
        """The newest head seq committed since the last wait (any process, any host), or None
        when nothing committed within `timeout` seconds."""
        try:
            return self._feed.wait(timeout)
        except StoreError as exc:
            raise LedgerError(exc.code, str(exc)) from None

    @property
    def channel(self) -> str:
        return self._feed.channel

    def close(self) -> None:
        self._feed.close()
