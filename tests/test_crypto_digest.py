"""The keyed digest's one-shot form gives the bytes of the part-by-part HMAC it replaced (every
peppered subject ref, value digest and "previously forgotten" digest already stored depends on
them), over hostile parts: empty, NUL, astral characters, lone surrogates refused alike."""

from __future__ import annotations

import hashlib
import hmac
import random
import struct

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from custody_app.keys import crypto


def reference(key: bytes, *parts: str) -> str:
    """The implementation before the one-shot (fa8660f..3e8ceaa)."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        data = part.encode("utf-8")
        mac.update(struct.pack(">I", len(data)) + data)
    return mac.hexdigest()


@seed(20261203)
@settings(max_examples=400, deadline=None, derandomize=True)
@given(key=st.binary(min_size=0, max_size=80),
       parts=st.lists(st.text(st.characters(exclude_categories=("Cs",)), max_size=60),
                      max_size=6))
def test_one_shot_digest_is_the_part_by_part_hmac(key: bytes, parts: list[str]) -> None:
    assert crypto.keyed_digest(key, *parts) == reference(key, *parts)


def test_known_answers_and_boundaries() -> None:
    rng = random.Random(7)
    key = rng.randbytes(32)
    # Length prefixes keep part boundaries apart.
    assert crypto.keyed_digest(key, "ab", "c") != crypto.keyed_digest(key, "a", "bc")
    assert crypto.keyed_digest(key) == reference(key) == hmac.new(key, b"", "sha256").hexdigest()
    long_key = rng.randbytes(200)  # longer than SHA-256's block: hashed first by HMAC
    assert crypto.keyed_digest(long_key, "x" * 10_000, "\x00", "𝔘") == reference(
        long_key, "x" * 10_000, "\x00", "𝔘")


def test_a_lone_surrogate_is_refused_as_before() -> None:
    with pytest.raises(UnicodeEncodeError):
        reference(b"k", "\ud800")
    with pytest.raises(UnicodeEncodeError):
        crypto.keyed_digest(b"k", "\ud800")
