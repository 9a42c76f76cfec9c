"""Hearing another host's writes (issue 34, live refresh): every statement that appends events
sends `NOTIFY` on the ledger's channel inside its transaction (the trigger of migration 2,
store.postgres.schema.NOTIFY_DDL), so the server delivers it only when that transaction
commits, with the new head's seq as payload. A `ChangeFeed` is a connection of its own
(autocommit, nothing else runs on it) that LISTENs on that channel."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from store.errors import StoreError
from store.postgres.failures import translated
from store.postgres.opening import parse_address

# A channel name is an identifier (at most 63 bytes): the schema's first 55 characters and
# `_changes`, as the trigger computes it from TG_TABLE_SCHEMA.
SUFFIX = "_changes"


def channel_of(schema: str) -> str:
    """The channel a ledger in `schema` notifies its changes on."""
    return f"{schema[:55]}{SUFFIX}"


class ChangeFeed:
    """A listening connection to one server ledger's change channel."""

    def __init__(self, url: str) -> None:
        conninfo, schema, shown = parse_address(url)
        self.channel = channel_of(schema)
        self.path = shown
        try:
            self.conn: psycopg.Connection[Any] = psycopg.connect(conninfo, autocommit=True)
            self.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        except psycopg.Error as exc:
            if getattr(self, "conn", None) is not None:
                self.conn.close()
            raise StoreError(f"cannot listen for the changes of {shown}: {str(exc).strip()}",
                             "postgres_unreachable") from None

    def fileno(self) -> int:
        """The listening socket (readable when a notification or a disconnection arrives)."""
        return self.conn.fileno()

    @property
    def pid(self) -> int:
        """The server process serving this listener (what an operator would terminate)."""
        return int(self.conn.info.backend_pid)

    def wait(self, timeout: float) -> int | None:
        """The newest head seq another (or this) process committed, notified within `timeout`
        seconds (every notification already arrived is taken, the highest seq answered); None
        when none came. A lost connection is a StoreError `postgres_unreachable`."""
        newest: int | None = None
        try:
            for notice in self.conn.notifies(timeout=timeout, stop_after=1):
                newest = _seq(notice.payload, newest)
            if newest is not None:
                for notice in self.conn.notifies(timeout=0):
                    newest = _seq(notice.payload, newest)
        except psycopg.Error as exc:
            raise translated(exc) from None
        if newest is None and self.conn.closed:
            raise StoreError(f"the connection listening to {self.path} was closed",
                             "postgres_unreachable")
        return newest

    def close(self) -> None:
        self.conn.close()


def _seq(payload: str, newest: int | None) -> int:
    """A notification's seq (a payload that is not one, from a hand-written NOTIFY on the
    channel, still means "look": it counts as seq 0)."""
    seq = int(payload) if payload.isdigit() else 0
    return seq if newest is None else max(seq, newest)


def listen(url: str) -> ChangeFeed:
    return ChangeFeed(url)
