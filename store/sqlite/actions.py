"""SQL over the actions index: one row per recorded action, searched by tool, actor, session,
subject (peppered hash) and transaction time, newest first, one page at a time."""

from __future__ import annotations

import apsw

ADD = ("INSERT INTO actions(seq, tool, actor, session, subject_ref, tx_at) "
       "VALUES (?, ?, ?, ?, ?, ?)")
# Each filter is `?N IS NULL OR column = ?N`, so one statement serves every combination; the
# leading filter is spelled out again and its index named, so SQLite walks that index in seq
# order and stops at the page's end instead of scanning every action.
_WHERE = """
WHERE (?1 IS NULL OR tool = ?1) AND (?2 IS NULL OR actor = ?2) AND (?3 IS NULL OR session = ?3)
  AND (?4 IS NULL OR subject_ref = ?4) AND (?5 IS NULL OR tx_at >= ?5)
  AND (?6 IS NULL OR tx_at < ?6) AND seq < ?7"""
SEARCH = {
    "tool": "SELECT seq FROM actions INDEXED BY actions_by_tool" + _WHERE + " AND tool = ?1",
    "actor": "SELECT seq FROM actions INDEXED BY actions_by_actor" + _WHERE + " AND actor = ?2",
    "session": "SELECT seq FROM actions INDEXED BY actions_by_session" + _WHERE
               + " AND session = ?3",
    "subject": "SELECT seq FROM actions INDEXED BY actions_by_subject" + _WHERE
               + " AND subject_ref = ?4",
    # A bounded window reads just its rows by time (then sorts that window by seq).
    "window": "SELECT seq FROM actions INDEXED BY actions_by_time" + _WHERE
              + " AND tx_at < ?6 AND tx_at >= coalesce(?5, '')",
    "any": "SELECT seq FROM actions" + _WHERE,
}
ORDER = " ORDER BY seq DESC LIMIT ?8"
ALL = "SELECT seq, tool, actor, session, subject_ref, tx_at FROM actions ORDER BY seq"
CLEAR = "DELETE FROM actions"

ActionIndexRow = tuple[int, str, str, str, "str | None", str]


class ActionStore:
    """The actions index beside the events, written in the event's own transaction."""

    def __init__(self, conn: apsw.Connection) -> None:
        self._conn = conn

    def record(self, row: ActionIndexRow) -> None:
        self._conn.execute(ADD, row)

    def search(self, *, tool: str | None, actor: str | None, session: str | None,
               subject_ref: str | None, since: str | None, until: str | None,
               before_seq: int | None, limit: int) -> list[int]:
        """Seqs of matching actions, newest first, below `before_seq` (the page cursor)."""
        shape = ("tool" if tool else "session" if session else "subject" if subject_ref
                 else "actor" if actor else "window" if until else "any")
        args = (tool, actor, session, subject_ref, since, until,
                before_seq if before_seq is not None else 2**62, limit)
        return [int(r[0]) for r in self._conn.execute(SEARCH[shape] + ORDER, args)]

    def dump(self) -> list[tuple[object, ...]]:
        return [tuple(r) for r in self._conn.execute(ALL)]

    def replace_all(self, rows: list[tuple[object, ...]]) -> None:
        """Swap the index for a rebuilt one (inside the caller's write transaction)."""
        self._conn.execute(CLEAR)
        self._conn.executemany(ADD, rows)
