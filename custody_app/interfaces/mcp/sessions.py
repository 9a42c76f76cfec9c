"""The HTTP server's own sessions (issue 32). A session id is issued by the server at initialize
(the SDK's transport id, a random UUID: 122 random bits), bound there to a fresh ledger run; a request
naming an id the server did not issue, or one that expired, is refused (HTTP 404, as the MCP
streamable HTTP transport says), never given a run of its own, never joined to another's.
A session idle (no request in flight) for longer than the idle limit expires, so the table
shrinks; DELETE ends one at once."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_IDLE_SECONDS = 1800.0


@dataclass(frozen=True)
class AgentRun:
    """One connection's session: its id and when it began (its unit of work: a run that began
    before a subject's key was destroyed cannot write for that subject again)."""

    session: str
    started: str


class HttpSessions:
    """Issued session ids -> their ledger runs, with the moment each was last used."""

    def __init__(self, new_run: Callable[[], AgentRun], idle_seconds: float = DEFAULT_IDLE_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not idle_seconds > 0:
            raise ValueError("the session idle limit must be a positive number of seconds")
        self.new_run = new_run
        self.idle_seconds = idle_seconds
        self.clock = clock
        self._runs: dict[str, AgentRun] = {}
        self._last: dict[str, float] = {}
        self._busy: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._runs)

    def issue(self, session_id: str) -> None:
        """A session the server (the SDK's transport) just issued at initialize."""
        if session_id not in self._runs:
            self._runs[session_id] = self.new_run()
            self._last[session_id] = self.clock()

    def known(self, session_id: str) -> bool:
        """Whether the server issued this id and it has not expired or ended."""
        self.expire()
        return session_id in self._runs

    def run(self, session_id: str) -> AgentRun | None:
        return self._runs.get(session_id)

    def begin(self, session_id: str) -> None:
        """A request of the session is in flight: it does not expire meanwhile."""
        self._busy[session_id] += 1
        self._last[session_id] = self.clock()

    def finish(self, session_id: str) -> None:
        self._busy[session_id] -= 1
        if self._busy[session_id] <= 0:
            del self._busy[session_id]
        if session_id in self._runs:
            self._last[session_id] = self.clock()

    def end(self, session_id: str) -> None:
        """The client ended the session (DELETE): its id is refused from now on."""
        self._runs.pop(session_id, None)
        self._last.pop(session_id, None)

    def expire(self) -> list[str]:
        """Forget every session idle for longer than the limit; the ids forgotten."""
        now = self.clock()
        gone = [s for s, last in self._last.items()
                if not self._busy[s] and now - last > self.idle_seconds]
        for session_id in gone:
            self.end(session_id)
        return gone
