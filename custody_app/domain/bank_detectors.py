"""Indian bank identifiers for redaction: IFSC branch codes and account numbers after a cue.

Neither has a checksum, so both are gated by context: an IFSC needs an "IFSC" cue before it or
the bank code of a known bank; an account number needs an account cue ("A/c", "acct",
"account no.") right before it. An order number, an amount or a timestamp is left alone."""

from __future__ import annotations

import re
from collections.abc import Iterator

# Bank codes (the first four letters of an IFSC) of the banks most Indian records name.
KNOWN_BANKS = frozenset((
    "SBIN HDFC ICIC UTIB PUNB BARB CNRB UBIN KKBK IDIB IOBA BKID MAHB YESB INDB IDFB FDRL CBIN "
    "UCBA PSIB KARB SIBL CIUB TMBL KVBL DBSS HSBC SCBL CITI AUBL RATN ESFB BDBL JAKA DLXB NKGS "
    "SVCB COSB ABHY APGB KVGB").split())

_IFSC = re.compile(r"(?<![A-Za-z0-9])([A-Z]{4})0([A-Z0-9]{6})(?![A-Za-z0-9])")
_IFSC_CUE = re.compile(r"(?i)\b(?:ifsc|ifs\s+code|branch\s+code|rtgs|neft)\b[^A-Za-z0-9]{0,12}$")
# The cue, then optional "no"/"number"/"#" and punctuation, then the number (9 to 18 digits,
# optionally in groups of at least three separated by one space or hyphen).
_ACCOUNT = re.compile(
    r"(?i)(?<![A-Za-z])(?:a/c|acct|account|acc|bank\s+account)\.?"
    r"(?:\s*(?:no|num|number)\b\.?|\s*#)?\s*[:.\-]?\s*"
    r"(?P<n>(?<![0-9])[0-9]{3,}(?:[ -][0-9]{3,}){0,5})(?![0-9])(?![.,][0-9])")
_ACCOUNT_DIGITS = (9, 18)
# Each detector's spans are spans of its pattern's matches: where no pattern matches, it finds
# nothing (redaction skips it there).
PATTERNS: dict[str, tuple[re.Pattern[str], ...]] = {"ifsc": (_IFSC,), "bank_account": (_ACCOUNT,)}
_CUE_WINDOW = 24


def ifsc(text: str) -> Iterator[tuple[int, int]]:
    """IFSC codes: 4 letters, a zero, 6 letters or digits; a known bank or an IFSC cue."""
    for m in _IFSC.finditer(text):
        branch = m.group(2)
        cued = _IFSC_CUE.search(text[max(0, m.start() - _CUE_WINDOW):m.start()]) is not None
        if cued or (m.group(1) in KNOWN_BANKS and any(c.isdigit() for c in branch)):
            yield m.span()


def bank_account(text: str) -> Iterator[tuple[int, int]]:
    """An account number right after an account cue, 9 to 18 digits in all."""
    for m in _ACCOUNT.finditer(text):
        digits = sum(c.isdigit() for c in m.group("n"))
        if _ACCOUNT_DIGITS[0] <= digits <= _ACCOUNT_DIGITS[1]:
            yield m.span("n")
