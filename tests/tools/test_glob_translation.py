"""The lean glob regex agrees with wcmatch on every path it is used for."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from wcmatch import glob as wcglob

from tests.discovery_helpers import tools
from workspace_tools.search._discovery import GLOB_FLAGS, _simple_glob_regex

NAMES = ["a", "b", "ab", ".hidden", "x.py", "y.ts", "a.b.py", "src", "-", "sp ace"]
PIECES = ["a", "b", "*", "?", "**", "*.py", "{a,b}", "{x,y}.*", ".*", "src", "a*b", "*.{py,ts}"]

paths = st.lists(st.sampled_from(NAMES), min_size=1, max_size=4).map("/".join)
patterns = st.lists(st.sampled_from(PIECES), min_size=1, max_size=4).map("/".join)


@settings(max_examples=300, deadline=None)
@given(pattern=patterns, candidates=st.lists(paths, min_size=1, max_size=20))
def test_lean_glob_regex_agrees_with_wcmatch(pattern: str, candidates: list[str]) -> None:

    source = _simple_glob_regex(pattern)
    assert source is not None
    lean = re.compile(source, re.DOTALL)
    for path in candidates:
        expected = wcglob.globmatch(path, pattern, flags=GLOB_FLAGS)
        assert bool(lean.match(path)) == expected, (pattern, path)


def test_other_shapes_fall_back_to_wcmatch() -> None:
    for pattern in ["x[12]", "{a}", "a{1..3}", "!(a)", "a//b", "src/", "a\\*"]:
        assert _simple_glob_regex(pattern) is None


def test_fallback_pattern_still_matches(tmp_path: Path) -> None:
    (tmp_path / "x1.py").write_text("x")
    (tmp_path / "x3.py").write_text("x")
    from workspace_tools import invoke_tool_sync

    result = invoke_tool_sync(tools(tmp_path)["glob"], {"pattern": "x[12].py"})
    assert result.details.matches == ["x1.py"]
