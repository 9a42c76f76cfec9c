"""Redaction at ingest: mask emails, phones, cards, IBANs, Aadhaar, PAN, GSTIN, IFSC and bank
accounts in JSON values."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from custody_app.domain.bank_detectors import PATTERNS, bank_account, ifsc

DETECTORS: tuple[str, ...] = ("email", "phone", "card", "iban", "aadhaar", "pan", "gstin", "ifsc",
                             "bank_account")
# Overlapping spans of equal length: the more specific identifier names the region.
_PRIORITY: tuple[str, ...] = ("gstin", "iban", "ifsc", "bank_account", "card", "aadhaar", "pan", "phone",
                             "email")
_MASKS: dict[str, str] = {kind: f"[{kind}]" for kind in DETECTORS}

_Span = tuple[int, int, str]
_Detector = Callable[[str], Iterator[tuple[int, int]]]


@dataclass(frozen=True, slots=True)
class Finding:
    """One masked identifier: where it was and what kind, never the matched text itself."""

    path: str  # RFC 6901 pointer into the redacted value; "" for a top-level string
    kind: str  # one of DETECTORS
    start: int  # span in the original string, in code points
    end: int

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "kind": self.kind, "start": self.start, "end": self.end}


# A numeric identifier must be a whole run: not glued to a word, a "+", a decimal or thousands part, or
# another space/hyphen-separated digit group, so that a slice of a longer number never matches alone.
_LEFT = r"(?<![\w+])(?<![0-9][ -])(?<![0-9][.,])"
_RIGHT = r"(?!\w)(?![ -][0-9])(?![.,][0-9])"

_EMAIL = re.compile(
    r"(?<![\w.%+-])[A-Za-z0-9_%+-]+(?:\.[A-Za-z0-9_%+-]+)*"
    r"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}(?![\w-])(?!\.[A-Za-z0-9])"
)
# Dots are not phone separators here: "+1234567.89" is an amount, not a number to call.
_PHONE_INTL = re.compile(r"(?<![\w+])\+[1-9](?:[ -]?(?:[0-9]|\([0-9]{1,4}\))){6,18}" + _RIGHT)
_PHONE_IN = re.compile(_LEFT + r"(?:(?:\+|00)91[ -]?|0)?[6-9][0-9]{4}[ -]?[0-9]{5}" + _RIGHT)
_CARD = re.compile(
    _LEFT + r"(?:[0-9]{13,19}"
    r"|[0-9]{4}(?P<s>[ -])[0-9]{4}(?P=s)[0-9]{4}(?P=s)(?:[0-9]{4}(?P=s)[0-9]{1,3}|[0-9]{1,4})"
    r"|[0-9]{4}(?P<t>[ -])[0-9]{6}(?P=t)[0-9]{4,5})" + _RIGHT
)
_AADHAAR = re.compile(_LEFT + r"[2-9](?:[0-9]{11}|[0-9]{3}(?P<s>[ -])[0-9]{4}(?P=s)[0-9]{4})" + _RIGHT)
_IBAN_COMPACT = re.compile(r"(?<!\w)[A-Za-z]{2}[0-9]{2}[A-Za-z0-9]{11,30}(?!\w)")
_IBAN_GROUPED = re.compile(r"(?<!\w)[A-Za-z]{2}[0-9]{2}(?: [A-Za-z0-9]{4}){2,7}(?: [A-Za-z0-9]{1,3})?(?!\w)")
_PAN_BODY = r"[A-Z]{3}[PCHFATBLJG][A-Z][0-9]{4}[A-Z]"
_PAN = re.compile(r"(?<!\w)" + _PAN_BODY + r"(?!\w)")
_GSTIN = re.compile(r"(?<!\w)(?:0[1-9]|[12][0-9]|3[0-8]|97|99)" + _PAN_BODY + r"[1-9A-Z]Z[0-9A-Z](?!\w)")

_B36 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_VERHOEFF_D = tuple(tuple(map(int, row)) for row in (
    "0123456789", "1234067895", "2340178956", "3401289567", "4012395678", "5987604321",
    "6598710432", "7659821043", "8765932104", "9876543210"))
_VERHOEFF_P = tuple(tuple(map(int, row)) for row in (
    "0123456789", "1576283094", "5803796142", "8916043527", "9453126870", "4286573901",
    "2793806415", "7046913258"))


def _digits(s: str) -> str:
    return "".join(ch for ch in s if "0" <= ch <= "9")


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def _verhoeff_ok(digits: str) -> bool:
    c = 0
    for i, ch in enumerate(reversed(digits)):
        c = _VERHOEFF_D[c][_VERHOEFF_P[i % 8][int(ch)]]
    return c == 0


def _iban_ok(compact: str) -> bool:
    # ISO 13616 never issues check digits 00, 01 or 99. Mixed case is refused so that a word after a
    # grouped IBAN ("... 7034 from") is not read as one more group.
    if not 15 <= len(compact) <= 34 or not 2 <= int(compact[2:4]) <= 98:
        return False
    if not (compact.isupper() or compact.islower()):
        return False
    s = compact.upper()
    return int("".join(str(_B36.index(ch)) for ch in s[4:] + s[:4])) % 97 == 1


def _gstin_ok(s: str) -> bool:
    total = 0
    for i, ch in enumerate(s[:14]):
        product = _B36.index(ch) * (2 if i % 2 else 1)
        total += product // 36 + product % 36
    return _B36[(36 - total % 36) % 36] == s[14]


def _matches(pattern: re.Pattern[str], check: Callable[[str], bool]) -> _Detector:
    def detect(text: str) -> Iterator[tuple[int, int]]:
        for m in pattern.finditer(text):
            if check(m.group()):
                yield m.span()

    return detect


def _phone(text: str) -> Iterator[tuple[int, int]]:
    for m in _PHONE_INTL.finditer(text):
        # E.164 allows at most 15 digits; below 8 it is more likely a score or an offset than a phone.
        if 8 <= len(_digits(m.group())) <= 15 and m.group().count("(") <= 1:
            yield m.span()
    for m in _PHONE_IN.finditer(text):
        yield m.span()


def _iban(text: str) -> Iterator[tuple[int, int]]:
    for m in _IBAN_COMPACT.finditer(text):
        if _iban_ok(m.group()):
            yield m.span()
    pos = 0
    while (g := _IBAN_GROUPED.search(text, pos)) is not None:
        # The group pattern may swallow the short words that follow an IBAN: keep the longest valid prefix.
        groups = g.group().split(" ")
        for n in range(len(groups), 2, -1):
            if _iban_ok("".join(groups[:n])):
                end = g.start() + len(" ".join(groups[:n]))
                yield g.start(), end
                pos = end
                break
        else:
            pos = g.start() + 1


_DETECT: dict[str, _Detector] = {
    "email": _matches(_EMAIL, lambda s: True),
    "phone": _phone,
    # Leading 0/1 excluded: no issuer uses 0, and 1 would claim every 13-digit epoch-millisecond timestamp.
    "card": _matches(_CARD, lambda s: s[0] not in "01" and _luhn_ok(_digits(s))),
    "iban": _iban,
    "aadhaar": _matches(_AADHAAR, lambda s: _verhoeff_ok(_digits(s))),
    "pan": _matches(_PAN, lambda s: True),
    "gstin": _matches(_GSTIN, _gstin_ok),
    "ifsc": ifsc,
    "bank_account": bank_account,
}


# Every detector yields only spans of matches of these patterns (a check may then refuse one):
# where none of a detector's patterns matches anywhere in a text, it finds nothing there.
_PATTERNS: dict[str, tuple[re.Pattern[str], ...]] = {
    "email": (_EMAIL,), "phone": (_PHONE_INTL, _PHONE_IN), "card": (_CARD,),
    "iban": (_IBAN_COMPACT, _IBAN_GROUPED), "aadhaar": (_AADHAAR,), "pan": (_PAN,),
    "gstin": (_GSTIN,), **PATTERNS}
# One search a detector: its patterns as one alternation (a match of any is a match of this),
# compiled with their flags: patterns whose flags differ would need one search each.
if any(len({p.flags for p in pats}) > 1 for pats in _PATTERNS.values()):
    raise RuntimeError("a detector's patterns differ in their flags: search them one by one")
_GATES: dict[str, re.Pattern[str]] = {
    kind: pats[0] if len(pats) == 1 else re.compile(
        "|".join(f"(?:{p.pattern})" for p in pats), pats[0].flags)
    for kind, pats in _PATTERNS.items()}
# Detector lists already checked (a policy's tuple, checked once rather than on every string).
_CHECKED: dict[tuple[str, ...], tuple[str, ...]] = {}


def _checked(detectors: Sequence[str]) -> tuple[str, ...]:
    if type(detectors) is tuple:
        try:
            known = _CHECKED.get(detectors)
        except TypeError:  # an unhashable member: refused below, as ever
            known = None
        if known is not None:
            return known
    kinds = _check(detectors)
    if type(detectors) is tuple and len(_CHECKED) < 64:
        _CHECKED[detectors] = kinds
    return kinds


def _check(detectors: Sequence[str]) -> tuple[str, ...]:
    if isinstance(detectors, str):
        raise TypeError("detectors must be a sequence of detector names, not a single string")
    unknown = sorted({d for d in detectors if d not in _DETECT}, key=str)
    if unknown:
        raise ValueError(f"unknown detector(s) {unknown}; known: {', '.join(DETECTORS)}")
    return tuple(dict.fromkeys(detectors))


def _resolve(candidates: list[_Span]) -> list[_Span]:
    """One span per overlapping region: longest first, then by _PRIORITY; returned sorted by start."""
    chosen: list[_Span] = []
    starts: list[int] = []
    for span in sorted(set(candidates), key=lambda c: (c[0] - c[1], _PRIORITY.index(c[2]), c[0])):
        i = bisect.bisect_left(starts, span[0])
        if (i > 0 and chosen[i - 1][1] > span[0]) or (i < len(chosen) and chosen[i][0] < span[1]):
            continue
        starts.insert(i, span[0])
        chosen.insert(i, span)
    return chosen


def _mask(text: str, spans: list[_Span]) -> str:
    parts: list[str] = []
    last = 0
    for start, end, kind in spans:
        parts += (text[last:start], _MASKS[kind])
        last = end
    parts.append(text[last:])
    return "".join(parts)


def _to_original(start: int, end: int, spans: list[_Span]) -> tuple[int, int]:
    """Map a span of the masked text back to the original, given the (sorted) spans already masked."""
    shift = 0
    for s, e, kind in spans:
        masked_start = s + shift
        if end <= masked_start:
            break
        if start < masked_start + len(_MASKS[kind]):
            # Unreachable: no detector consumes "[" or "]", so a new match never crosses a mask.
            raise RuntimeError("redaction: a new finding overlaps an earlier mask")
        shift += len(_MASKS[kind]) - (e - s)
    return start - shift, end - shift


_NEEDED = re.compile(r"[0-9@]")
# The fewest ASCII digits a text must hold for each detector to find anything there (what its
# pattern and check require: a card 13, an Aadhaar 12, a bank account 9, a phone 8 after its
# check, a GSTIN 6, a PAN 4, an IBAN 2, an IFSC its "0"); an e-mail needs an "@" instead.
_FEWEST_DIGITS: dict[str, int] = {"email": 0, "phone": 8, "card": 13, "iban": 2, "aadhaar": 12,
                                  "pan": 4, "gstin": 6, "ifsc": 1, "bank_account": 9}
_NO_DIGITS = str.maketrans("", "", "0123456789")


def _possible(text: str, kinds: tuple[str, ...]) -> list[str]:
    """The detectors that can find something in `text`: skipping the others finds the same.
    (A detector with too few digits, or none of whose patterns matches, finds nothing; most
    texts with digits hold no identifier, and one search in C is far cheaper than running
    the detector's generator and resolving its empty result.)"""
    digits = len(text) - len(text.translate(_NO_DIGITS))
    at = "@" in text
    return [k for k in kinds if (at if k == "email" else digits >= _FEWEST_DIGITS[k])
            and _GATES[k].search(text) is not None]


def _redact_text(text: str, kinds: tuple[str, ...]) -> tuple[str, list[_Span]]:
    spans: list[_Span] = []
    # Every detector needs an ASCII digit or an "@": without one there is nothing to find.
    if _NEEDED.search(text) is None:
        return text, spans
    current = text
    # Masking can free a neighbour that a boundary rule had blocked ("... 32 9876543210" after an IBAN);
    # repeating until nothing new is found is what makes redact() idempotent.
    while True:
        possible = _possible(current, kinds)
        if not possible:
            return current, spans
        found = _resolve([(s, e, kind) for kind in possible for s, e in _DETECT[kind](current)])
        if not found:
            return current, spans
        spans = sorted(spans + [(*_to_original(s, e, spans), kind) for s, e, kind in found])
        current = _mask(text, spans)


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _walk(value: Any, path: str, kinds: tuple[str, ...], out: list[Finding]) -> Any:
    if isinstance(value, str):
        masked, spans = _redact_text(value, kinds)
        out.extend(Finding(path, kind, s, e) for s, e, kind in spans)
        return masked
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, list | tuple):
        return type(value)(_walk(item, f"{path}/{i}", kinds, out) for i, item in enumerate(value))
    if isinstance(value, dict):
        return _walk_dict(value, path, kinds, out)
    raise TypeError(f"redact() takes JSON values; found {type(value).__name__} at {path!r}")


def _walk_dict(
    value: dict[Any, Any], path: str, kinds: tuple[str, ...], out: list[Finding]
) -> dict[Any, Any]:
    keyed: list[tuple[Any, Any, list[_Span]]] = []
    masked_keys = False
    for key in value:
        if isinstance(key, str):
            new, spans = _redact_text(key, kinds)
            keyed.append((key, new, spans))
            masked_keys = masked_keys or bool(spans)
        elif key is None or isinstance(key, bool | int | float):
            keyed.append((key, key, []))
        else:
            raise TypeError(f"redact() takes JSON values; found a {type(key).__name__} key at {path!r}")
    # Two keys can mask to the same text; number the later ones rather than let one overwrite another.
    taken = {new for _, new, spans in keyed if not spans} if masked_keys else set()
    result: dict[Any, Any] = {}
    # A member's path is built only where something needs it (a finding, a nested value): most
    # members are strings with nothing to mask, or numbers.
    for key, new, spans in keyed:
        member = None
        if spans:
            base, n = new, 1
            while new in taken:
                n += 1
                new = f"{base}#{n}"
            taken.add(new)
            member = f"{path}/{_escape(str(new))}"
            out.extend(Finding(member, kind, s, e) for s, e, kind in spans)
        item = value[key]
        if isinstance(item, str):
            masked, found = _redact_text(item, kinds)
            if found:
                member = member or f"{path}/{_escape(str(new))}"
                out.extend(Finding(member, kind, s, e) for s, e, kind in found)
            result[new] = masked
        elif item is None or isinstance(item, bool | int | float):
            result[new] = item
        else:
            result[new] = _walk(item, member or f"{path}/{_escape(str(new))}", kinds, out)
    return result


def redact(value: Any, detectors: Sequence[str] = DETECTORS) -> tuple[Any, list[Finding]]:
    """Return a copy of the JSON value with every detected identifier in every string (recursively through
    dicts and lists; dict keys too) replaced by a mask like "[email]" / "[card]" / "[aadhaar]", and the
    findings. Non-string scalars (numbers, bools, null) are never touched. Unknown detector names raise
    ValueError naming them.

    Finding paths point into the returned value, so a member whose key was masked is reported under its
    masked key (the raw key would put the identifier in the path). Findings are sorted by (path, start).
    """
    kinds = _checked(detectors)
    findings: list[Finding] = []
    result = _walk(value, "", kinds, findings)
    findings.sort(key=lambda f: (f.path, f.start))
    return result, findings


def find(text: str, detectors: Sequence[str] = DETECTORS) -> list[Finding]:
    """The findings redact() would report for one string (all with path "")."""
    kinds = _checked(detectors)
    if not isinstance(text, str):
        raise TypeError(f"find() takes a str, not {type(text).__name__}")
    return [Finding("", kind, s, e) for s, e, kind in _redact_text(text, kinds)[1]]
