"""The spelling an operator copies from `doctor` (`acct:1042\\u200b`) names the identifier the
ledger holds, and nothing else (domain/spelling.py): hostile strings, a fixed seed. A name the
ledger holds as typed always wins over the character its escapes would stand for, so a subject
an agent wrote with a literal backslash can never be reached by decoding another spelling, and
a spelling that decodes to what the ledger does not hold is left as it was typed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custody_app.domain.errors import LedgerError
from custody_app.domain.escaping import escape_identifier, unescape_identifier, unsafe_kind
from custody_app.domain.spelling import as_held, require_held

# Characters an identifier may not hold, next to ones it may, with backslashes and escape-like
# runs of ASCII, so the literal and the decoded spellings of one text are both exercised.
UNSAFE = ["\u200b", "\u2060", "\ufeff", "\u00ad", "\u202e", "\x1b", "\x85", "\U000e0041",
          "\u200d", "\u034f"]
PIECES = st.one_of(st.sampled_from(UNSAFE + ["\\", "\\u", "\\u200b", "\\x1b", "\\U000e0041",
                                             "\\u00e9", "\\x41", "acct:", "1042", "é", "👨",
                                             "\u0646", " "]),
                   st.text(max_size=3))
texts = st.lists(PIECES, max_size=6).map("".join)


@settings(max_examples=1500, derandomize=True, deadline=None)
@given(texts)
def test_the_shown_spelling_decodes_back_to_the_stored_identifier(stored: str) -> None:
    shown = escape_identifier(stored)
    assert unsafe_kind(shown) is None  # what doctor prints can be typed back
    if "\\" not in stored:
        assert unescape_identifier(shown) == stored


@settings(max_examples=1500, derandomize=True, deadline=None)
@given(texts, st.booleans(), st.booleans(), st.sets(texts, max_size=3))
def test_as_held_names_what_the_ledger_holds_and_prefers_the_spelling_as_typed(
        given_: str, as_typed: bool, as_decoded: bool, others: set[str]) -> None:
    # The ledger holds the spelling as typed, the one it decodes to, both or neither (and others).
    held = others | ({given_} if as_typed else set()) | (
        {unescape_identifier(given_)} if as_decoded else set())
    asked: list[str] = []

    def holds(name: str) -> bool:
        asked.append(name)
        return name in held

    got = as_held(given_, holds)
    decoded = unescape_identifier(given_)
    assert got in (given_, decoded)
    if decoded == given_:
        assert asked == []  # no escape in it: the ledger is not asked
    if given_ in held or decoded not in held:
        assert got == given_
    else:
        assert got == decoded


def test_a_spelling_an_agent_wrote_literally_is_erased_as_written_not_decoded() -> None:
    literal = "acct:1042\\u200b"  # ASCII, accepted at the door: a name of its own
    lookalike = "acct:1042\u200b"
    assert as_held(literal, {literal, lookalike}.__contains__) == literal
    assert as_held(literal, {lookalike}.__contains__) == lookalike


@pytest.mark.parametrize("char", UNSAFE)
def test_require_held_refuses_an_unsafe_name_the_ledger_does_not_hold(char: str) -> None:
    name = f"acct:1042{char}"
    require_held("subject", name, True)
    with pytest.raises(LedgerError) as caught:
        require_held("subject", name, False)
    assert caught.value.code == "bad_request"
    assert escape_identifier(char) in caught.value.message
    assert char not in caught.value.message  # never the raw character
    require_held("subject", "acct:1042", False)  # a clean name is the door's business
