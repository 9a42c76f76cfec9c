"""Stored strings shown to people: the one escaping function every human-readable output uses,
the identifier check at the door, and JSON text safe to paste into JavaScript."""

from __future__ import annotations

import dataclasses
import json
import re
import unicodedata
from functools import cache
from typing import Any

from pydantic import BaseModel

# C0, DEL and C1 controls (ESC starts every terminal sequence, C1 CSI is one on its own), the
# bidirectional marks, embeddings, overrides and isolates (they reorder what a reviewer reads),
# and the Unicode line and paragraph separators.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def _code(match: re.Match[str]) -> str:
    point = ord(match.group())
    return (f"\\x{point:02x}" if point < 0x100 else f"\\u{point:04x}" if point < 0x10000
            else f"\\U{point:08x}")


def escape_text(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with every control character and bidirectional override written as `\\xNN` or
    `\\uNNNN`, so nothing stored can move the cursor, recolour, retitle or reorder a screen.
    A string without them comes back unchanged. `keep_newlines`: the multi-line form,
    `escape_multiline`."""
    return escape_multiline(text) if keep_newlines else _UNSAFE.sub(_code, text)


class MultilineText(str):
    """Stored text whose line breaks are its own (a policy file, a rendered report): `escaped`
    keeps its line breaks and escapes everything else, where a plain string's break is
    escaped (a newline in a subject must not forge a line)."""


# A line break in stored multi-line text: LF, or CRLF (a file written on Windows). A lone CR is
# not one: it returns the cursor and overwrites the line, so it is escaped like any control.
_LINE_BREAK = re.compile("\r?\n")


def escape_multiline(text: str) -> str:
    """`text` as lines: each line break kept (CRLF as LF), every other control character,
    bidirectional override and Unicode line or paragraph separator escaped as `escape_text`
    does, so the text keeps its shape and still cannot drive the terminal."""
    return "\n".join(escape_text(line) for line in _LINE_BREAK.split(text))


def escape_lines(lines: list[str]) -> str:
    """Lines a report built from stored strings, each escaped whole (a break inside a stored
    string is shown as `\\x0a`, never taken as the end of a line), joined by line breaks."""
    return "\n".join(escape_text(line) for line in lines)


# The default-ignorable code points that are not format characters (Unicode's
# DerivedCoreProperties.txt): the combining grapheme joiner, the Hangul and halfwidth fillers,
# the Khmer inherent vowels, the Mongolian free variation selectors, the variation selectors and
# the ranges Unicode reserves as default-ignorable (U+2065, U+FFF0-U+FFF8, plane 14's).
_IGNORABLE_OUTSIDE_CF = ("\\u034f\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u2065\\u3164"
                         "\\ufe00-\\ufe0f\\uffa0\\ufff0-\\ufff8\\U000e0000-\\U000e0fff")


@cache
def _unsafe_in_identifiers() -> re.Pattern[str]:
    """What `_UNSAFE` matches, and every character shown as nothing: the format characters
    (general category Cf, from this Python's Unicode database: zero-width space, joiners, word
    joiner, soft hyphen, BOM, tags...) and the other default-ignorable code points. Built once,
    on the first identifier that is not ASCII (an ASCII one holds none of them)."""
    ranges: list[tuple[int, int]] = []
    # Planes 0 and 1 hold every format character outside plane 14's tags (all of plane 14's
    # default-ignorable block is in `_IGNORABLE_OUTSIDE_CF`): a sixth of the scan of them all
    # (tests/test_hostile_surfaces.py checks the result against every code point).
    for point in range(0x80, 0x20000):
        if unicodedata.category(chr(point)) == "Cf":
            if ranges and ranges[-1][1] == point - 1:
                ranges[-1] = (ranges[-1][0], point)
            else:
                ranges.append((point, point))
    cf = "".join(f"\\U{first:08x}" if first == last else f"\\U{first:08x}-\\U{last:08x}"
                 for first, last in ranges)
    return re.compile("[" + _UNSAFE.pattern[1:-1] + cf + _IGNORABLE_OUTSIDE_CF + "]")


def _unsafe_match(text: str) -> re.Match[str] | None:
    return _UNSAFE.search(text) if text.isascii() else _unsafe_in_identifiers().search(text)


def unsafe_character(text: str) -> str | None:
    """The first character in `text` an identifier may not hold, escaped, or None: a control
    character or bidirectional override (what `escape_text` escapes), or an invisible one (a
    format character such as U+200B ZERO WIDTH SPACE, or another default-ignorable code point),
    which would make an identifier that looks exactly like another."""
    match = _unsafe_match(text)
    return _code(match) if match else None


def unsafe_kind(text: str) -> tuple[str, str] | None:
    """`unsafe_character(text)` and what it is ("control or bidirectional", or "invisible"),
    or None: for a refusal that names the character."""
    match = _unsafe_match(text)
    if match is None:
        return None
    what = "control or bidirectional" if _UNSAFE.match(match.group()) else "invisible"
    return _code(match), what


def escape_identifier(text: str) -> str:
    """`escape_text(text)` with the invisible characters identifiers may not hold escaped too:
    for a message quoting input refused as (or in place of) an identifier, where a zero-width
    character would otherwise hide. Stored values keep them (an emoji's ZWJ sequence)."""
    return (_UNSAFE if text.isascii() else _unsafe_in_identifiers()).sub(_code, text)


# What `_code` writes for a character: `\xNN`, `\uNNNN` or `\UNNNNNNNN` (hex in either case).
_CODE = re.compile(r"\\(?:x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8}))")


def unescape_identifier(text: str) -> str:
    """The identifier `escape_identifier` shows as `text`: each `\\xNN`, `\\uNNNN` or
    `\\UNNNNNNNN` that stands for a character it escapes is that character again; any other
    backslash stays as written (`acct:1042\\u200b` -> `acct:1042` + U+200B, `caf\\u00e9` as is).
    For a command naming an identifier the ledger holds as `doctor` and text output show it."""
    def back(match: re.Match[str]) -> str:
        point = int(next(group for group in match.groups() if group), 16)
        char = chr(point) if point < 0x110000 else ""
        return char if char and _unsafe_match(char) else match.group()
    return _CODE.sub(back, text)


# What a terminal UI's markup would read as a tag: "[b]", "[/]", "[@click=...]", "[$var]"; a
# backslash before the bracket makes the markup show it as text (Textual's and Rich's rule).
_MARKUP_TAG = re.compile(r"(\\*)(\[[a-zA-Z#/@$][^\[]*?\])")


def escape_markup(text: str) -> str:
    """`text` with every markup-tag-like run shown literally, so a stored "[/]" or "[link=...]"
    can neither break nor restyle a screen that builds markup around it."""
    return _MARKUP_TAG.sub(lambda m: m.group(1) * 2 + "\\" + m.group(2), text)


# The read models' fields whose strings are identifiers (what the door checks with
# `check_identifier` or `check_actor`): human-readable output shows them through
# `escape_identifier`, so one stored before the door refused invisible characters shows as the
# lookalike it is (`agent:support-bot\\u2060`). Every other string (a value, a reason) keeps
# them: an emoji's U+200D ZWJ, a Persian U+200C ZWNJ display as written.
IDENTIFIER_FIELDS = frozenset({"subject", "predicate", "space", "actor", "session", "writer",
                               "retractor", "held_by", "ref", "tool", "action_ref"})
# A fact's value: stored data, never an identifier, whatever its keys are called.
_VALUE = "value"


def escaped(value: Any, *, markup: bool = False, field: str | None = None) -> Any:
    """A copy of a read model (or list, dict, tuple of them) with every string escaped, for
    rendering (with `markup`, also every markup tag, for the terminal app): an identifier
    field's (`IDENTIFIER_FIELDS`, also as a dict's key; `field` names the one `value` is held
    under) with `escape_identifier`, every other with `escape_text`; strings without unsafe
    characters, ids included, are unchanged."""
    if isinstance(value, MultilineText):
        text = escape_multiline(value)
        return MultilineText(escape_markup(text) if markup else text)
    if isinstance(value, str):
        text = escape_identifier(value) if field in IDENTIFIER_FIELDS else escape_text(value)
        return escape_markup(text) if markup else text
    if isinstance(value, BaseModel):
        update = {name: escaped(getattr(value, name), markup=markup, field=name)
                  for name in type(value).model_fields}
        # Extra fields (an event's kind-specific ones: reason, detail) are stored strings too.
        update.update({k: escaped(v, markup=markup, field=k)
                       for k, v in (value.model_extra or {}).items()})
        return value.model_copy(update=update)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: escaped(getattr(value, f.name),
                                                             markup=markup, field=f.name)
                                             for f in dataclasses.fields(value) if f.init})
    if isinstance(value, list):
        return [escaped(v, markup=markup, field=field) for v in value]
    if isinstance(value, tuple):
        return tuple(escaped(v, markup=markup, field=field) for v in value)
    if isinstance(value, dict):
        # An event's cause ({"kind", "ref"}) names its fields by key; inside a value, nothing
        # is an identifier.
        return {escaped(k, markup=markup): escaped(v, markup=markup,
                                                   field=_VALUE if field == _VALUE else k)
                for k, v in value.items()}
    return value


# What json.dumps(ensure_ascii=False) leaves raw of the above: DEL, C1, the bidi characters and
# U+2028/U+2029 (which end a line in JavaScript and in some log viewers).
_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


# json.dumps(obj, ensure_ascii=False) makes an encoder for each call; this one is made once
# (the same output: json.dumps is exactly `JSONEncoder(**its arguments).encode(obj)`).
READABLE = json.JSONEncoder(ensure_ascii=False)


def json_text(obj: Any, *, indent: int | None = None) -> str:
    """JSON with UTF-8 kept readable but every control, bidirectional and line-separator
    character written as `\\uNNNN`: the same data, safe on a terminal and in JavaScript.
    (Such characters only occur inside JSON strings, so the escape is always valid JSON.)"""
    return escape_json(READABLE.encode(obj) if indent is None
                       else json.dumps(obj, indent=indent, ensure_ascii=False))


def escape_json(text: str) -> str:
    """JSON text from any serialiser (the MCP SDK's, a web framework's) with the characters
    `json_text` escapes written as `\\uNNNN`; the value it parses to is unchanged."""
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
