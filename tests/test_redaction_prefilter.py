"""The redaction pre-filter (issue 35) skips a detector only where it cannot find anything: the
fewest digits each one needs. Every text redacts exactly as with all detectors run, and a text
one digit short of a detector's need gets nothing from it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custody_app.domain import redaction
from custody_app.domain.redaction import DETECTORS, redact

# Characters that build identifiers and their near misses: digits dominate, with separators,
# the letters IBANs, PANs, GSTINs and IFSCs use, cues and e-mail parts.
PIECES = st.sampled_from(list("0123456789") * 4 + list(" -+()./:#@") + list("ABCPZGHINSW")
                         + ["A/c no. ", "acct ", "IFSC ", "+91 ", "00", "GB82 ", "ana@ex.com",
                            " WEST ", "ABCPE1234F", "27", "0958", "4111 1111 1111 1111"])
TEXTS = st.lists(PIECES, max_size=40).map("".join)


def _all_detectors(text: str, kinds: tuple[str, ...]) -> list[str]:
    return list(kinds)


@settings(max_examples=1500, derandomize=True, deadline=None)
@given(TEXTS)
def test_the_prefilter_redacts_exactly_as_every_detector_does(text: str) -> None:
    fast = redact({text: [text, {"n": text}]})
    original = redaction._possible
    redaction._possible = _all_detectors  # type: ignore[assignment]
    try:
        slow = redact({text: [text, {"n": text}]})
    finally:
        redaction._possible = original  # type: ignore[assignment]
    assert fast == slow


def test_every_detector_has_its_digit_need() -> None:
    assert set(redaction._FEWEST_DIGITS) == set(DETECTORS)


@pytest.mark.parametrize(("kind", "raw"), [
    ("card", "4111 1111 1111 1111"), ("aadhaar", "2345 6789 0124"),
    ("phone", "+44 20 7946 0958"), ("iban", "GB82 WEST 1234 5698 7654 32"),
    ("pan", "ABCPE1234F"), ("bank_account", "A/c no. 123456789012"),
])
def test_a_detector_still_finds_what_it_found(kind: str, raw: str) -> None:
    _, findings = redact(f"see {raw} here", [kind])
    assert [f.kind for f in findings] == [kind]


def test_every_detector_has_its_patterns() -> None:
    assert set(redaction._PATTERNS) == set(DETECTORS) == set(redaction._GATES)


def test_a_text_with_digits_but_no_pattern_match_runs_no_detector() -> None:
    # Eight digits (a phone's need) in an id: no detector's pattern matches, so none runs.
    assert redaction._possible("mes_7ce418072e8c", DETECTORS) == []
    assert redaction._possible("call +44 20 7946 0958", DETECTORS) == ["phone"]


@settings(max_examples=500, derandomize=True, deadline=None)
@given(st.dictionaries(TEXTS, st.one_of(TEXTS, st.integers(), st.none(),
                                        st.lists(TEXTS, max_size=3)), max_size=6))
def test_masked_keys_and_members_report_as_every_detector_does(value: dict[str, object]) -> None:
    # Keys that mask alike are numbered; findings name the masked member's path (built only
    # where a member needs one).
    fast = redact(value)
    original = redaction._possible
    redaction._possible = _all_detectors  # type: ignore[assignment]
    try:
        slow = redact(value)
    finally:
        redaction._possible = original  # type: ignore[assignment]
    assert fast == slow


def test_a_detector_list_is_checked_every_time() -> None:
    with pytest.raises(ValueError, match="unknown detector"):
        redact("x", ("email", "nope"))
    with pytest.raises(ValueError, match="unknown detector"):
        redact("x", ("email", "nope"))
    with pytest.raises(TypeError):
        redact("x", "email")
    assert redact("a@b.co", ("email",))[0] == "[email]"
