"""A thread of its own for index work done off the write path (the re-clustering, the embedding
worker): started once, seen running, told to stop through one event."""

from __future__ import annotations

import threading


class BackgroundThread:
    """What both background workers share: a daemon thread running `_run`, and its stop event."""

    THREAD_NAME = "custody-background"

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _spawn(self) -> None:
        """Start `_run` on a new daemon thread (the caller checked `running`)."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.THREAD_NAME, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        raise NotImplementedError
