"""Reads a write transaction answers without a round trip (issue 33, "few round trips").

Inside a write transaction this process holds the ledger's advisory lock: no other writer
changes the ledger until it commits, so a read of the head, the last recorded policy, a
`ledger_meta` entry or a subject's last tombstone gives the same rows until this transaction
itself writes the table it reads. The transaction's first round trip (BEGIN, the lock) also
reads the head, the last policy and all of `ledger_meta` (`PRIME`); later reads of those, and
of the other statements of `CACHED`, are answered from here until a statement of this
transaction writes their table. Only the exact statements of `CACHED` are ever answered here;
every other statement goes to the server. A write whose tables cannot be told, a rollback to a
savepoint, and the transaction's end forget everything."""

from __future__ import annotations

import re
from typing import Any

from store.postgres.erasure import LAST_TOMBSTONE
from store.postgres.events import HEAD, LAST_POLICY
from store.postgres.projection import ACTIVE_OF_KEY, FACT_BY_ID
from store.rows import UNPRIMED_META

META_GET = "SELECT value FROM ledger_meta WHERE key = %s"
META_ALL = ("SELECT key, value FROM ledger_meta WHERE "
            f"left(key, {len(UNPRIMED_META)}) <> '{UNPRIMED_META}'")
# A statement answered from here -> the table whose writes make its answer stale.
CACHED = {HEAD: "events", LAST_POLICY: "events", META_GET: "ledger_meta",
          LAST_TOMBSTONE: "tombstones", FACT_BY_ID: "facts", ACTIVE_OF_KEY: "facts"}
# A write of one ledger_meta entry whose value is then known: (key, value) bound in that order
# (texts.SET_META, recall_meta.META_PUT and their twins), so a read of it needs no round trip.
_META_UPSERT = re.compile(r"INSERT INTO ledger_meta\(key, value\) VALUES \(%s, %s\) "
                          r"ON CONFLICT ?\(key\) DO UPDATE SET value = (?i:excluded)\.value\Z")
# The statements the transaction's first round trip runs after the lock, in this order.
PRIME = (HEAD, LAST_POLICY, META_ALL)
_WRITES = re.compile(r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|TRUNCATE(?:\s+TABLE)?|"
                     r"MERGE\s+INTO|COPY)\s+(?:ONLY\s+)?([a-z_][a-z0-9_]*)", re.IGNORECASE)
_NO_WRITE = ("SELECT", "SAVEPOINT", "RELEASE", "SET ", "SHOW")
Rows = list[tuple[Any, ...]]


class ReadCache:
    """The answers of one write transaction's cacheable reads (see the module's docstring)."""

    def __init__(self) -> None:
        self.active = False
        self.hits = 0
        self._rows: dict[tuple[str, tuple[Any, ...]], Rows] = {}
        # Every ledger_meta entry as the transaction began (a key missing here has no entry);
        # a key this transaction wrote since is None: read it from the server. None for the
        # whole: not known.
        self._meta: dict[str, Rows | None] | None = None

    def start(self, head: Rows, policy: Rows, meta: Rows) -> None:
        """A write transaction began (under the lock) with these answers to `PRIME`."""
        self.active = True
        self._rows = {(HEAD, ()): head, (LAST_POLICY, ()): policy}
        self._meta = {str(k): [(v,)] for k, v in meta}

    def stop(self) -> None:
        self.active = False
        self.forget()

    def forget(self) -> None:
        self._rows.clear()
        self._meta = None

    def get(self, query: str, params: Any) -> Rows | None:
        if not self.active or query not in CACHED:
            return None
        key = _key(params)
        if key is None:
            return None
        found = self._rows.get((query, key))
        if found is None and query == META_GET and self._meta is not None and not str(
                key[0]).startswith(UNPRIMED_META):  # not primed: asked of the server
            found = self._meta.get(str(key[0]), [])
        if found is not None:
            self.hits += 1
        return found

    def cacheable(self, query: str) -> bool:
        return query in CACHED

    def put(self, query: str, params: Any, rows: Rows) -> None:
        key = _key(params)
        if self.active and query in CACHED and key is not None:
            self._rows[(query, key)] = list(rows)

    def wrote(self, query: str, params: Any) -> None:
        """A statement not answered here ran: forget what it may have changed."""
        if not self.active:
            return
        head = query.lstrip()[:10].upper()
        tables = {t.lower() for t in _WRITES.findall(query)}
        if not tables:
            if not head.startswith(_NO_WRITE):
                self.forget()  # a write of tables not told (or a rollback): forget all
            return
        for table in tables:
            for entry in [e for e in self._rows if CACHED[e[0]] == table]:
                del self._rows[entry]
        if "ledger_meta" in tables and self._meta is not None:
            keys = [p for p in (params or ()) if isinstance(p, str)]
            if not keys:
                self._meta = None
                return
            if (_META_UPSERT.match(query) and isinstance(params, (tuple, list))
                    and len(params) == 2 and isinstance(params[1], str)):
                self._meta[str(params[0])] = [(params[1],)]
                return
            for k in keys:
                self._meta[k] = None


def _key(params: Any) -> tuple[Any, ...] | None:
    if params is None:
        return ()
    if isinstance(params, (tuple, list)):
        try:
            hash(tuple(params))
        except TypeError:
            return None
        return tuple(params)
    return None
