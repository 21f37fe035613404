"""Search internals whose edge cases the tool-level tests reach only with huge files."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workspace_tools.search._pattern import line_counter, required_literal
from workspace_tools.search._re2 import literal_finder
from workspace_tools.search._reading import file_contains


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(max_size=60),
    needle=st.sampled_from([b"a", b"ab", b"abc", b"xyzw", b"sea"]),
    buffer_size=st.integers(1, 9),
    at=st.integers(0, 60),
)
def test_file_contains_finds_needles_across_buffer_refills(
    tmp_path_factory: pytest.TempPathFactory,
    data: bytes,
    needle: bytes,
    buffer_size: int,
    at: int,
) -> None:
    data = data[:at] + (needle if at % 2 else b"") + data[at:]
    path: Path = tmp_path_factory.mktemp("c") / "f"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        found = file_contains(fd, literal_finder(needle), len(needle), bytearray(buffer_size))
        assert found == (needle in data)
    finally:
        os.close(fd)


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary(max_size=80),
    # RE2 (two bytes or more) and bytes.find (one byte).
    needle=st.sampled_from([b"T", b"TypeVar", b"zip(", b"a\\x00b", b"(?:.*)", b"rest", b"e"])
    | st.binary(min_size=1, max_size=4).filter(lambda b: b.isascii() and b"\n" not in b),
    start=st.integers(0, 90),
    end=st.integers(0, 90),
    bytearray_buffer=st.booleans(),
)
def test_literal_finder_finds_what_bytes_find_finds(
    data: bytes, needle: bytes, start: int, end: int, bytearray_buffer: bool
) -> None:
    data = data[: start + 3] + needle + data[start + 3 :]
    start, end = sorted((min(start, len(data)), min(end, len(data))))
    buffer = bytearray(data) if bytearray_buffer else data
    assert literal_finder(needle)(buffer, start, end) == data.find(needle, start, end)


@pytest.mark.parametrize(
    "pattern, expected",
    [
        ("NotImplementedError", b"NotImplementedError"),
        (r"def \w+\(self", b"(self"),
        ("foo|bar", None),
        ("(?i)foo", None),
        ("a(bcd)+e", b"bcd"),
        ("x(?:yz)?w", b"x"),
        ("é", None),
    ],
)
def test_required_literal(pattern: str, expected: bytes | None) -> None:
    assert required_literal(pattern, 0) == expected


@pytest.mark.parametrize(
    "pattern, counts",
    [
        (r"def \w+", True),
        (r"a\sb", False),
        (r"a\Sb", True),
        ("[^x]", False),
        ("foo(?=bar)", False),
        (r"(a)\1", False),
        ("(?s).", False),
        (".", True),
        ("(?i)x", False),
    ],
)
def test_line_counter_only_for_patterns_that_stay_in_a_line(pattern: str, counts: bool) -> None:
    assert (line_counter(re.compile(pattern, re.MULTILINE)) is not None) == counts
