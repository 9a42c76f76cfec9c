"""Times in and out: ISO 8601 with a zone in, UTC `...000000Z` out, and the ledger's clocks."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Protocol

from custody_app.domain.errors import LedgerError

FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def format_time(moment: datetime) -> str:
    """UTC with microseconds and `Z`, so stored times sort as strings (the year always four
    digits: strftime's %Y drops the padding before year 1000 on some platforms)."""
    m = moment.astimezone(UTC)
    return (f"{m.year:04d}-{m.month:02d}-{m.day:02d}T{m.hour:02d}:{m.minute:02d}:"
            f"{m.second:02d}.{m.microsecond:06d}Z")


def parse_time(text: str, field: str = "time") -> datetime:
    """Parse ISO 8601 that carries `Z` or an offset; a naive time is refused (`invalid_time`)."""
    if not isinstance(text, str):
        raise LedgerError("invalid_time", f"{field} must be an ISO 8601 string, got {text!r}")
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise LedgerError(
            "invalid_time", f"{field} {text!r} is not an ISO 8601 time"
        ) from None
    if moment.tzinfo is None:
        raise LedgerError(
            "invalid_time", f"{field} {text!r} has no time zone; add Z or an offset"
        )
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise LedgerError("invalid_time", f"{field} {text!r} is out of range in UTC") from None


def normalise(text: str, field: str = "time") -> str:
    """`text` as the ledger stores times (`invalid_time` naming `field` when it is not one)."""
    if isinstance(text, str):
        try:
            return _normalised(text)
        except LedgerError:
            pass  # parsed again below, for the message that names the field
    return format_time(parse_time(text, field))


@lru_cache(maxsize=1024)
def _normalised(text: str) -> str:
    # A group of events shares one transaction time: a sweep's 20,000 expire events validate
    # the same two times 40,000 times (a tenth of its event validation).
    return format_time(parse_time(text))


class Clock(Protocol):
    """Where transaction time comes from."""

    def now(self) -> datetime: ...


class WallClock:
    """The system clock, in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """Wall time until first set; afterwards the set instant (for replays and tests)."""

    def __init__(self, start: datetime | None = None) -> None:
        self._at = start

    @property
    def is_set(self) -> bool:
        return self._at is not None

    def set(self, moment: datetime) -> None:
        self._at = moment

    def now(self) -> datetime:
        return self._at if self._at is not None else datetime.now(UTC)


_DURATION = re.compile(
    r"^P(?:(?P<years>\d+)Y)?(?:(?P<months>\d+)M)?(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+)S)?)?$"
)


MAX_DURATION_DAYS = 36_600  # a century: any retention window longer than that is a typo


def parse_duration(text: str) -> timedelta:
    """ISO 8601 duration (`P90D`, `P1Y`, `PT12H`); a year counts 365 days and a month 30."""
    match = _DURATION.match(text) if isinstance(text, str) else None
    if match is None or text in ("P", "PT") or text.endswith("T"):
        raise ValueError(f"{text!r} is not an ISO 8601 duration such as P90D")
    n = {k: int(v) if v else 0 for k, v in match.groupdict().items()}
    days = n["years"] * 365 + n["months"] * 30 + n["weeks"] * 7 + n["days"]
    seconds = n["hours"] * 3600 + n["minutes"] * 60 + n["seconds"]
    # Bounded before timedelta sees it (which overflows), and so that now minus it stays a
    # date: a sweep's cutoff is computed from it.
    if days * 86400 + seconds > MAX_DURATION_DAYS * 86400:
        raise ValueError(f"{text!r} is longer than {MAX_DURATION_DAYS} days")
    return timedelta(days=days, seconds=seconds)
