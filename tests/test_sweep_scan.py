"""A sweep's byte scan (issue 15): past MANY_NEEDLES distinct strings the file is searched once,
block by block, for a short fragment of each; it must find exactly what a plain search finds."""

from __future__ import annotations

from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from store import scan_many, scrub
from store.scrub import find_in_file, scan_files

_bytes = st.lists(st.sampled_from([b"{", b'"', b"a", b"Q", b"7", b"\x00", b"\xf3", b"CV1\x00", b" ",
                                   b"_", b"-"]),
                  min_size=1, max_size=60).map(b"".join)


@settings(derandomize=True, max_examples=250, deadline=None)
@given(st.binary(max_size=3000),
       st.lists(_bytes | st.binary(min_size=1, max_size=40), min_size=scrub.MANY_NEEDLES + 1,
                max_size=60, unique=True),
       st.integers(min_value=0, max_value=5),
       st.sampled_from([1, 7, 64, 500, scan_many.MANY_BLOCK_BYTES]))
def test_many_needles_are_found_wherever_a_plain_search_finds_them(
        tmp_path_factory, data: bytes, needles: list[bytes], repeat: int, block: int) -> None:
    """Equal needles, needles sharing a head (as values' JSON do), needles inside others,
    overlapping copies, and blocks shorter than a fragment or a needle (a match across a
    block boundary, a needle that starts in an earlier block): every offset a plain search
    finds, in order, and no other."""
    needles = needles + needles[:repeat] + [b'{"confidence":0.' + n for n in needles[:repeat]]
    path = tmp_path_factory.mktemp("many") / "blob.bin"
    planted = data + b"".join(needles[::3]) + data[:40] + b"".join(needles[1::5]) * 2
    path.write_bytes(planted)
    assert len(set(needles)) > scrub.MANY_NEEDLES
    with patch.object(scan_many, "MANY_BLOCK_BYTES", block):
        found = find_in_file(str(path), needles)
        assert scan_files([str(path)], needles)[str(path)] == sorted(
            i for i, n in enumerate(needles) if n in planted)
    for i, needle in enumerate(needles):
        every = [o for o in range(len(planted)) if planted.startswith(needle, o)]
        assert found.get(i, []) == every[:scrub.MAX_OFFSETS], (i, needle)


def test_the_many_needle_search_is_the_one_a_sweep_takes(tmp_path, monkeypatch) -> None:
    """The counter-test: with the many-needle pass disabled, the same answer comes from the
    blockwise leftmost search, so the two paths are compared on the same input."""
    needles = [f"needle-{n:03d}-of-the-sweep".encode() for n in range(40)]
    planted = b"\x00" * 5000 + b"".join(needles[::7]) + b"{}" * 300 + needles[3]
    path = tmp_path / "blob.bin"
    path.write_bytes(planted)
    calls: list[int] = []
    original = scan_many.find_many

    def spy(handle, distinct, limit):  # type: ignore[no-untyped-def]
        calls.append(len(distinct))
        return original(handle, distinct, limit)

    monkeypatch.setattr(scrub, "find_many", spy)
    many = find_in_file(str(path), needles)
    assert calls == [40]
    monkeypatch.setattr(scrub, "MANY_NEEDLES", 10_000)
    blockwise = find_in_file(str(path), needles)
    assert calls == [40] and many == blockwise and sorted(many) == [0, 3, 7, 14, 21, 28, 35]
