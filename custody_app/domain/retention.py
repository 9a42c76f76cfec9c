"""Retention windows: which policy window governs a space, and the cutoff it gives."""

from __future__ import annotations

from datetime import datetime
from fnmatch import fnmatchcase

from custody_app.domain.timeutil import format_time, parse_duration


def _specificity(pattern: str) -> tuple[int, int]:
    """Exact names beat patterns; among patterns, more literal characters win."""
    wild = sum(pattern.count(c) for c in "*?[")
    return (1 if wild == 0 else 0, len(pattern) - wild)


def window_for(space: str, windows: dict[str, str]) -> tuple[str, str] | None:
    """(pattern, duration) of the most specific window matching `space`, or None."""
    matching = [p for p in windows if fnmatchcase(space, p)]
    if not matching:
        return None
    best = max(matching, key=lambda p: (_specificity(p), p))
    return best, windows[best]


def cutoff_for(now: datetime, duration: str) -> str:
    return format_time(now - parse_duration(duration))
