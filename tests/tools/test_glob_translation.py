"""The lean glob regex agrees with wcmatch on every path it is used for."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st
from wcmatch import glob as wcglob

from tests.discovery_helpers import tools
from workspace_tools import ErrorCode, invoke_tool_sync
from workspace_tools.search._discovery import (
    GLOB_FLAGS,
    LINEAR_FROM_STARS,
    _simple_glob_regex,
    compile_glob,
)
from workspace_tools.workspace import Workspace

NAMES = [
    *("a", "b", "ab", ".hidden", "x.py", "y.ts", "a.b.py", "src", "-", "sp ace"),
    *("!x.py", "@scope", "a+b", "c#", "50%", "k=v", "x:y", "~a"),
]
PIECES = [
    *("a", "b", "*", "?", "**", "*.py", "{a,b}", "{x,y}.*", ".*", "src", "a*b", "*.{py,ts}"),
    *("!*.py", "!x*", "@*", "*+*", "c#", "*%", "k=*", "*:y", "~*"),
]

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
    for pattern in ["x[12]", "{a}", "a{1..3}", "!(a)", "@(a|b)", "+(a)", "a//b", "src/", "a\\*"]:
        assert _simple_glob_regex(pattern) is None


def test_fallback_pattern_still_matches(tmp_path: Path) -> None:
    (tmp_path / "x1.py").write_text("x")
    (tmp_path / "x3.py").write_text("x")
    result = invoke_tool_sync(tools(tmp_path)["glob"], {"pattern": "x[12].py"})
    assert result.details.matches == ["x1.py"]


STARRY = ["*", "a*", "*b", "a*b*", "*.*", "**", "*?*", "{a*,*b}", "ab*.py"]
# Names whose bytes are not UTF-8 are walked as lone surrogates (surrogateescape).
UNDECODABLE = ["a\udcff", "\udcfe\udcff.py", "b\udc80a"]
NAMES_LONG = [*NAMES, "a\nb", "é*", "ab" * 40, "a" * 70 + "b.py", *UNDECODABLE]


@settings(max_examples=300, deadline=None)
@given(
    pattern=st.lists(st.sampled_from(STARRY), min_size=1, max_size=4).map("/".join),
    candidates=st.lists(
        st.lists(st.sampled_from(NAMES_LONG), min_size=1, max_size=4).map("/".join),
        min_size=1,
        max_size=20,
    ),
)
@example(pattern="*a*/*/**", candidates=["ab/b/a\nb", "a/a\nb/x"])
@example(pattern="*a*/*?*", candidates=["ab/\udcfe\udcff.py", "a\udcff/b\udc80a", "a/a\udcff"])
def test_a_glob_of_many_stars_matches_in_linear_time_as_wcmatch_does(
    pattern: str, candidates: list[str]
) -> None:
    # From LINEAR_FROM_STARS stars on, RE2 runs the lean regex: the same paths match.
    matcher = compile_glob(pattern, Workspace("/"))
    for path in candidates:
        expected = wcglob.globmatch(path, pattern, flags=GLOB_FLAGS)
        assert bool(matcher.match(path)) == expected, (pattern, path, type(matcher))


def test_twenty_stars_over_long_names_end_at_once(tmp_path: Path) -> None:
    # A backtracking match of this takes about 60**20 steps a name, holding the GIL (no
    # timeout could end it): the call would never return.
    for n in range(5):
        (tmp_path / f"{'a' * 60}{n}.txt").write_text("x\n")
    (tmp_path / ("a" * 30 + "x")).write_text("x\n")
    pattern = "*" * 20 + "x"
    result = invoke_tool_sync(tools(tmp_path)["glob"], {"pattern": pattern})
    assert result.details.matches == ["a" * 30 + "x"], result.model_text()
    grep = invoke_tool_sync(tools(tmp_path)["grep"], {"pattern": "x", "glob": pattern})
    assert grep.model_text() == "a" * 30 + "x:1:x"


def test_many_stars_with_syntax_only_a_backtracking_regex_matches_are_refused(
    tmp_path: Path,
) -> None:
    result = invoke_tool_sync(tools(tmp_path)["glob"], {"pattern": "[ab]*_*_*.py"})
    assert result.error_code is ErrorCode.INVALID_ARGUMENTS
    assert result.error == (
        "Glob pattern '[ab]*_*_*.py' has 3 '*' wildcards (besides '**') with syntax that is "
        "matched by backtracking ([...] classes, escapes, nested braces), which could take "
        f"minutes; use at most {LINEAR_FROM_STARS - 1} there, or write the pattern with "
        "names, '*', '?', '**' and {a,b} lists only"
    )
    fewer = invoke_tool_sync(tools(tmp_path)["glob"], {"pattern": "[ab]*_*.py"})
    assert fewer.error is None, fewer.error


def test_a_glob_of_many_stars_over_a_name_that_is_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "ok.py").write_text("x = 1\n")
    with open(bytes(tmp_path) + b"/src/r\xff\xfe.py", "wb") as raw:
        raw.write(b"x = 2\n")
    listed = tools(tmp_path)
    result = invoke_tool_sync(listed["glob"], {"pattern": "*/*?*.py"})
    assert result.error is None, result.error
    assert result.details.matches == ["src/ok.py", "src/r\udcff\udcfe.py"]
    result = invoke_tool_sync(listed["grep"], {"pattern": "x", "glob": "*r*??.py*"})
    assert result.error is None, result.error
    assert [m.path for m in result.details.matches] == ["src/r\udcff\udcfe.py"]
