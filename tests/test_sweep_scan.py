"""A sweep's byte scan (issue 15): past MANY_NEEDLES distinct strings the file is searched once,
block by block, for a short fragment of each; it must find exactly what a plain search finds."""

from __future__ import annotations

from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from store.sqlite import blocks, scan_many, scrub
from store.sqlite.scrub import find_in_file, scan_files

_bytes = st.lists(st.sampled_from([b"{", b'"', b"a", b"Q", b"7", b"\x00", b"\xf3", b"CV1\x00", b" ",
                                   b"_", b"-"]),
                  min_size=1, max_size=60).map(b"".join)


@settings(derandomize=True, max_examples=250, deadline=None)
@given(st.binary(max_size=3000),
       st.lists(_bytes | st.binary(min_size=1, max_size=40), min_size=scrub.MANY_NEEDLES + 1,
                max_size=60, unique=True),
       st.integers(min_value=0, max_value=5),
       st.sampled_from([1, 7, 64, 500, scan_many.MANY_BLOCK_BYTES]),
       st.sampled_from([1, 2, 3, 7]))
def test_many_needles_are_found_wherever_a_plain_search_finds_them(
        tmp_path_factory, data: bytes, needles: list[bytes], repeat: int, block: int,
        threads: int) -> None:
    """Equal needles, needles sharing a head (as values' JSON do), needles inside others,
    overlapping copies, blocks shorter than a fragment or a needle (a match across a block
    boundary, a needle that starts in an earlier block), and the file searched in ranges by
    several threads (a needle across two ranges): every offset a plain search finds, in
    order, and no other."""
    needles = needles + needles[:repeat] + [b'{"confidence":0.' + n for n in needles[:repeat]]
    path = tmp_path_factory.mktemp("many") / "blob.bin"
    planted = data + b"".join(needles[::3]) + data[:40] + b"".join(needles[1::5]) * 2
    path.write_bytes(planted)
    assert len(set(needles)) > scrub.MANY_NEEDLES
    with (patch.object(scan_many, "MANY_BLOCK_BYTES", block),
          patch.object(blocks, "SPLIT_MIN_BYTES", 0),
          patch.object(blocks, "THREADS", threads)):
        found = find_in_file(str(path), needles)
        assert scan_files([str(path)], needles)[str(path)] == sorted(
            i for i, n in enumerate(needles) if n in planted)
        distinct = scrub.distinct_needles(needles)
        with open(path, "rb", buffering=0) as handle:
            single = scan_many.find_many(handle, distinct, scrub.MAX_OFFSETS, threads=1)
            split = scan_many.find_many(handle, distinct, scrub.MAX_OFFSETS)
        assert list(split.items()) == list(single.items())  # the same answer, in its order
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

    def spy(handle, distinct, limit, plan=None):  # type: ignore[no-untyped-def]
        calls.append(len(distinct))
        return original(handle, distinct, limit, plan)

    monkeypatch.setattr(scrub, "find_many", spy)
    many = find_in_file(str(path), needles)
    assert calls == [40]
    monkeypatch.setattr(scrub, "MANY_NEEDLES", 10_000)
    blockwise = find_in_file(str(path), needles)
    assert calls == [40] and many == blockwise and sorted(many) == [0, 3, 7, 14, 21, 28, 35]


_word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=8, max_size=20).map(
    str.encode)


@settings(derandomize=True, max_examples=150, deadline=None)
@given(st.lists(_word, min_size=scrub.MANY_NEEDLES + 1, max_size=80, unique=True),
       st.binary(max_size=2000), st.sampled_from([5, 64, scan_many.MANY_BLOCK_BYTES]))
def test_needles_no_space_leads_are_led_by_bytes_picked_from_the_file_and_all_found(
        tmp_path_factory, needles: list[bytes], noise: bytes, block: int) -> None:
    """Short strings like "owner-6572" (no space, '_' or '-' with 8 bytes after it): led by
    bytes picked from a sample of the file, in at most OTHER_AUTOMATA more passes (no pass
    that reads every byte); every offset a plain search finds, and no other."""
    text = b" ".join(needles[::2]) + noise + b"".join(needles[1::3]) + needles[0][:-1]
    path = tmp_path_factory.mktemp("led") / "blob.bin"
    path.write_bytes(text)
    distinct = list(dict.fromkeys(needles))
    with open(path, "rb", buffering=0) as handle:
        counts = scan_many._sample_counts(handle)
        assert handle.tell() == 0  # the sample moved nothing
    plan = scan_many._plan(distinct, counts)
    placed = sorted(i for pieces, _ in plan for frs in pieces.values() for i, _ in frs)
    assert placed == list(range(len(distinct)))  # each needle in exactly one automaton
    for pieces, _ in plan:  # every fragment is its needles' bytes at the offset it records
        for fragment, frs in pieces.items():
            assert all(distinct[i][at:at + len(fragment)] == fragment for i, at in frs)
    if not any(kind == scan_many.ahocorasick_rs.Implementation.DFA for _, kind in plan):
        assert len(plan) <= 1 + scan_many.OTHER_AUTOMATA
    rest = [n for n in distinct if scan_many._many_fragment(n, {}) is None]
    assert all(b < 0x80 for b in scan_many._leads(rest, counts) or [])
    with patch.object(scan_many, "MANY_BLOCK_BYTES", block):
        found = find_in_file(str(path), needles)
    for i, needle in enumerate(needles):
        every = [o for o in range(len(text)) if text.startswith(needle, o)]
        assert found.get(i, []) == every[:scrub.MAX_OFFSETS], (i, needle)


def test_the_bench_sweeps_strings_are_led_and_found_without_a_full_byte_pass(tmp_path) -> None:
    """The strings of the erasure bench's sweep ("owner-6572", "seats-260"): picked leads
    cover them all, so no DFA over fragments that start with any byte is built."""
    names = ("owner", "region", "seats", "locale", "risk", "renewal", "sentiment", "notes")
    needles = [f"{name}-{n}".encode() for name in names for n in range(100, 400, 7)]
    text = b"\x00\x3d\xbd" * 4000 + b" ".join(needles[::5]) + bytes(range(256)) * 20
    path = tmp_path / "blob.bin"
    path.write_bytes(text)
    with open(path, "rb", buffering=0) as handle:
        counts = scan_many._sample_counts(handle)
    plan = scan_many._plan(needles, counts)
    assert 1 <= len(plan) <= scan_many.OTHER_AUTOMATA  # no led needles: the picked ones only
    for pieces, kind in plan:
        assert kind == scan_many.ahocorasick_rs.Implementation.ContiguousNFA
        assert len({f[0] for f in pieces}) <= scan_many.LEADS_PER_AUTOMATON
    found = find_in_file(str(path), needles)
    assert sorted(found) == list(range(0, len(needles), 5))


def test_a_plan_built_ahead_answers_what_a_plan_built_at_the_scan_answers(tmp_path) -> None:
    """The proof builds the search before its checkpoint, from a sample of the file as it was
    then: a plan from another file's bytes, or one for other needles (ignored), changes no
    answer."""
    names = ("owner", "region", "seats", "risk")
    needles = [f"{name}-{n}".encode() for name in names for n in range(100, 300, 3)]
    needles += [f"note about {n} things".encode() for n in range(30)]
    text = b"\x00" * 3000 + b"|".join(needles[::4]) + b"owner-10" + needles[-1]
    path, other = tmp_path / "blob.bin", tmp_path / "other.bin"
    path.write_bytes(text)
    other.write_bytes(bytes(range(256)) * 64 + b"wwwwgggg" * 500)
    fresh = find_in_file(str(path), needles)
    assert sorted(fresh) == sorted(set(range(0, len(needles), 4)) | {len(needles) - 1})
    ahead = scrub.plan_many(str(other), needles)
    assert ahead is not None
    assert find_in_file(str(path), needles, plan=ahead) == fresh
    wrong = scrub.plan_many(str(path), needles[1:])
    assert wrong is not None and find_in_file(str(path), needles, plan=wrong) == fresh
    assert scrub.plan_many(str(path), needles[:scrub.MANY_NEEDLES]) is None  # too few
    assert scrub.plan_many(str(tmp_path / "absent.db"), needles) is None


def test_only_ascii_bytes_lead_the_other_needles(tmp_path) -> None:
    """A high byte (0xE6 starts CJK in UTF-8) would be the rarest lead here, but the automaton
    takes it for common and keys its search on other bytes of the fragments, which can be
    common in the file: the picked leads are ASCII, and every needle is still found."""
    needles = [b"Q" + bytes([0xE6, 0x80 + n]) + bytes([0xF4]) * 9 for n in range(20)]
    text = b"Q" * 4000 + b"\x00" * 4000 + b"|".join(needles[::3])
    path = tmp_path / "blob.bin"
    path.write_bytes(text)
    with open(path, "rb", buffering=0) as handle:
        counts = scan_many._sample_counts(handle)
    assert counts[0xE6] < counts[ord("Q")]  # the high byte is the rarer one here
    assert scan_many._leads(needles, counts) == [ord("Q")]
    found = find_in_file(str(path), needles)
    assert sorted(found) == list(range(0, 20, 3))


def test_a_file_searched_in_ranges_keeps_the_first_offsets_up_to_the_limit(tmp_path) -> None:
    """Copies in every range: the limit keeps the first ones in file order, as one pass does."""
    needles = [f"needle {n:03d} of a split scan".encode() for n in range(40)]
    text = (b"\x00" * 50 + needles[5]) * 60 + b"".join(needles[::9])
    path = tmp_path / "blob.bin"
    path.write_bytes(text)
    every = [o for o in range(len(text)) if text.startswith(needles[5], o)]
    with patch.object(scan_many, "MANY_BLOCK_BYTES", 64), open(path, "rb", buffering=0) as handle:
        for threads in (1, 2, 3, 16):
            found = scan_many.find_many(handle, needles, 7, threads=threads)
            assert found[5] == every[:7], threads
            assert sorted(found) == [0, 5, 9, 18, 27, 36]
