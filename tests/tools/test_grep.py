"""grep: matching, output modes, context, limits, binaries, encodings, errors."""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests._fds import OUT_OF_FDS_WORDS, short_of_fds_at
from tests.discovery_helpers import tools
from workspace_tools import ErrorCode, ToolPresentation, invoke_tool_sync
from workspace_tools.search._matcher import Matcher
from workspace_tools.search._reading import FIRST_READ, WHOLE_READ, WINDOW


def shown_lines(text: str) -> list[str]:
    """The lines read_file shows: split at LF, the CR of a CRLF dropped."""
    *ended, last = text.split("\n")
    lines = [line.removesuffix("\r") for line in ended]
    return [*lines, last] if last else lines


def grep(root: Path, **args: object):  # type: ignore[no-untyped-def]
    return invoke_tool_sync(tools(root)["grep"], args)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    (tmp_path / ".github" / "workflows" / "ci.yml").write_text(
        "jobs:\n  test:\n    steps:\n      - uses: actions/checkout@v4\n"
    )
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("import os\n\ndef alpha():\n    return os.sep\n")
    (tmp_path / "src" / "b.py").write_text("def beta():\n    pass\n\n\ndef Alpha():\n    pass\n")
    (tmp_path / "notes.md").write_text("Alpha and beta\n")
    (tmp_path / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0def alpha")
    (tmp_path / ".gitignore").write_text("ignored/\n")
    (tmp_path / "ignored").mkdir()
    (tmp_path / "ignored" / "gen.py").write_text("def alpha_generated():\n")
    return tmp_path


def test_hidden_workflow_files_are_searched(project: Path) -> None:
    result = grep(project, pattern="actions/checkout")
    assert result.model_text() == ".github/workflows/ci.yml:4:      - uses: actions/checkout@v4"
    assert result.presentation == ToolPresentation(
        label="Search files", icon="text-search", detail="actions/checkout"
    )


def test_content_mode_lists_path_line_text_in_path_order(project: Path) -> None:
    result = grep(project, pattern=r"def \w+")
    assert (
        result.model_text()
        == "src/a.py:3:def alpha():\nsrc/b.py:1:def beta():\nsrc/b.py:5:def Alpha():"
    )
    details = result.details
    assert [(m.path, m.line, m.column, m.text) for m in details.matches] == [
        ("src/a.py", 3, 1, "def alpha():"),
        ("src/b.py", 1, 1, "def beta():"),
        ("src/b.py", 5, 1, "def Alpha():"),
    ]
    assert [(f.path, f.count) for f in details.files] == [("src/a.py", 1), ("src/b.py", 2)]
    assert (details.match_count, details.files_matched, details.files_searched) == (3, 2, 5)
    assert (details.binary_skipped, details.ignored, details.truncated) == (1, 1, False)


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("files_with_matches", "src/a.py\nsrc/b.py"),
        ("count", "src/a.py:1\nsrc/b.py:2"),
    ],
)
def test_output_modes(project: Path, mode: str, expected: str) -> None:
    result = grep(project, pattern=r"def \w+", output_mode=mode)
    assert result.model_text() == expected
    assert result.details.match_count == 3


def test_ignore_case(project: Path) -> None:
    result = grep(project, pattern="ALPHA", ignore_case=True, output_mode="count")
    assert result.model_text() == "notes.md:1\nsrc/a.py:1\nsrc/b.py:1"


def test_glob_filter_by_name_and_by_path(project: Path) -> None:
    by_name = grep(project, pattern="alpha", ignore_case=True, glob="*.md")
    assert by_name.model_text() == "notes.md:1:Alpha and beta"
    by_path = grep(project, pattern="def", glob="src/{a,c}.py", output_mode="files_with_matches")
    assert by_path.model_text() == "src/a.py"


def test_context_lines_and_group_separators(tmp_path: Path) -> None:
    lines = [f"line {i}" for i in range(1, 13)]
    lines[2] = "hit one"
    lines[3] = "hit two"
    lines[10] = "hit three"
    (tmp_path / "f.txt").write_text("\n".join(lines) + "\n")
    result = grep(tmp_path, pattern="hit", context=1)
    assert result.model_text() == (
        "f.txt-2-line 2\nf.txt:3:hit one\nf.txt:4:hit two\nf.txt-5-line 5\n--\n"
        "f.txt-10-line 10\nf.txt:11:hit three\nf.txt-12-line 12"
    )


def test_multiline_pattern_spans_lines(tmp_path: Path) -> None:
    (tmp_path / "f.py").write_text("class A:\n    pass\nclass B:\n    x = 1\n")
    single = grep(tmp_path, pattern=r"A:\n\s+pass")
    assert single.model_text() == "No matches"
    multi = grep(tmp_path, pattern=r"A:\n\s+pass", multiline=True)
    assert multi.model_text() == "f.py:1:class A:\nf.py:2:    pass"
    assert multi.details.match_count == 1
    dot = grep(tmp_path, pattern=r"class B:.\s+x", multiline=True, output_mode="count")
    assert dot.model_text() == "f.py:1"


def test_match_never_spans_lines_without_multiline(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("foo\nbar\nfoo bar\n")
    result = grep(tmp_path, pattern=r"foo\s+bar")
    assert result.model_text() == "f.txt:3:foo bar"


def test_limit_cuts_output_and_counts_everything(tmp_path: Path) -> None:
    for i in range(3):
        (tmp_path / f"f{i}.txt").write_text("hit\n" * 4)
    result = grep(tmp_path, pattern="hit", limit=5)
    assert result.model_text().splitlines() == [
        "f0.txt:1:hit",
        "f0.txt:2:hit",
        "f0.txt:3:hit",
        "f0.txt:4:hit",
        "f1.txt:1:hit",
        "[Showing 5 of 12 matching lines in 3 files; narrow the pattern, path or glob, or "
        "raise limit, to see the rest]",
    ]
    details = result.details
    assert (len(details.matches), details.match_count, details.truncated) == (5, 12, True)
    assert (len(details.files), details.files_matched) == (3, 3)
    files = grep(tmp_path, pattern="hit", limit=2, output_mode="files_with_matches")
    assert files.model_text().splitlines() == [
        "f0.txt",
        "f1.txt",
        "[Showing 2 of 3 files with matches (12 matching lines); narrow the pattern, path "
        "or glob, or raise limit, to see the rest]",
    ]
    assert [f.path for f in files.details.files] == ["f0.txt", "f1.txt"]


def test_no_matches(project: Path) -> None:
    result = grep(project, pattern="zzz_absent")
    assert result.model_text() == "No matches"
    assert result.details.match_count == 0


def test_a_search_of_binary_files_alone_says_they_were_not_searched(tmp_path: Path) -> None:
    # "No matches" alone would tell the model the text is absent from a file that holds it
    # (ripgrep: "binary file matches"); among text files they are only counted, as rg
    # skips them silently.
    (tmp_path / "bin.dat").write_bytes(b"foo\x00bar\nfoo\n")
    (tmp_path / "a.txt").write_text("bar\n")
    named = grep(tmp_path, pattern="foo", path="bin.dat")
    assert named.model_text() == (
        "No matches\n[1 binary file was skipped, not searched (a NUL byte in the first 8,192 "
        "bytes); the pattern may occur in it: run_command can search binary files (e.g. "
        "grep -c)]"
    )
    assert (named.details.binary_skipped, named.details.files_searched) == (1, 0)
    among_text = grep(tmp_path, pattern="foo")
    assert among_text.model_text() == "No matches"
    assert (among_text.details.binary_skipped, among_text.details.files_searched) == (1, 1)


def test_large_generated_file_and_binaries(tmp_path: Path) -> None:
    line = b"generated value = 123456789 abcdefghijklmnopqrstuvwxyz 0123456789 ABCDEFGH\n"
    (tmp_path / "big.txt").write_bytes(line * (50 * 1024 * 1024 // len(line)))
    for i in range(3):
        (tmp_path / f"blob{i}.bin").write_bytes(b"generated\0" * 1000)
    result = grep(tmp_path, pattern="generated", limit=3)
    details = result.details
    assert details.binary_skipped == 3
    assert details.match_count == 50 * 1024 * 1024 // len(line)
    assert len(details.matches) == 3
    assert result.model_text().splitlines()[-1] == (
        f"[Showing 3 of {details.match_count:,} matching lines in 1 files; narrow the "
        "pattern, path or glob, or raise limit, to see the rest]"
    )


def test_ignored_file_named_explicitly_is_searched(project: Path) -> None:
    assert grep(project, pattern="generated").model_text() == "No matches"
    result = grep(project, pattern="generated", path="ignored/gen.py")
    assert result.model_text() == "ignored/gen.py:1:def alpha_generated():"
    assert grep(project, pattern="generated", include_ignored=True).details.match_count == 1


def test_linked_file_searched_only_when_named(tmp_path: Path) -> None:
    (tmp_path / "real.txt").write_text("needle\n")
    os.symlink("real.txt", tmp_path / "link.txt")
    assert grep(tmp_path, pattern="needle", output_mode="files_with_matches").model_text() == (
        "real.txt"
    )
    assert grep(tmp_path, pattern="needle", path="link.txt").model_text() == "link.txt:1:needle"


def test_link_out_of_root_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("needle\n")
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(outside, root / "out")
    os.symlink(outside / "secret.txt", root / "secret.txt")
    assert grep(root, pattern="needle").model_text() == "No matches"
    named = grep(root, pattern="needle", path="secret.txt")
    assert named.error_code == ErrorCode.OUTSIDE_WORKSPACE


def test_invalid_regex_names_its_position(tmp_path: Path) -> None:
    result = grep(tmp_path, pattern="foo(bar")
    assert result.error_code == ErrorCode.INVALID_ARGUMENTS
    assert result.error is not None
    assert result.error.startswith(
        "Invalid regular expression at position 3: missing ), unterminated subpattern."
    )


@pytest.mark.parametrize(
    "path, code", [("missing", ErrorCode.NOT_FOUND), ("../x", ErrorCode.OUTSIDE_WORKSPACE)]
)
def test_bad_paths(tmp_path: Path, path: str, code: ErrorCode) -> None:
    assert grep(tmp_path, pattern="x", path=path).error_code == code


@pytest.mark.parametrize(
    "data, pattern, expected",
    [
        ("naïve café\n".encode(), "café", "f:1:naïve café"),
        ("\ufeffbom line\n".encode(), "bom", "f:1:bom line"),
        ("utf16 line\n".encode("utf-16"), "utf16", "f:1:utf16 line"),
        (b"latin \xe9t\xe9\n", "été", "f:1:latin été"),
        (b"crlf line\r\nnext\r\n", "line$", "f:1:crlf line"),
        (b"crlf line\r\nnext\r\n", "line", "f:1:crlf line"),
        (b"sep\x1cx\n", r"sep\sx", "f:1:sep\x1cx"),
    ],
    ids=["utf8", "utf8-bom", "utf16", "latin1", "crlf-dollar", "crlf", "str-whitespace"],
)
def test_encodings(tmp_path: Path, data: bytes, pattern: str, expected: str) -> None:
    (tmp_path / "f").write_bytes(data)
    assert grep(tmp_path, pattern=pattern).model_text() == expected


def test_column_counts_characters(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("ééé needle\n")
    assert grep(tmp_path, pattern="needle").details.matches[0].column == 5


PIECES = [
    *["a", "b", "ab", ".", r"\w", r"\s", r"\S", r"\d", "[ab]", "[^a]", "x", "^", "$"],
    *[r"\b", " ", "(a|b)", "[^\\n]", "(?=a)", "é"],
]


@settings(max_examples=150, deadline=None)
@given(
    pieces=st.lists(st.sampled_from(PIECES), min_size=1, max_size=4),
    quantifier=st.sampled_from(["", "+", "*", "?"]),
    text=st.text(alphabet="ab x1\n\t\x1cé", max_size=60),
    ignore_case=st.booleans(),
)
def test_matches_are_the_lines_a_line_by_line_search_finds(
    pieces: list[str], quantifier: str, text: str, ignore_case: bool
) -> None:
    pattern = (
        "".join(pieces) + quantifier if pieces[-1] not in ("^", "$", r"\b") else "".join(pieces)
    )
    matcher = Matcher(pattern, ignore_case=ignore_case)
    found = matcher.find(text.encode(), 10_000, 0)
    got = [] if found is None else [(line, column, text) for line, column, text, _ in found.lines]
    rx = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    expected = [
        (number, m.start() + 1, line)
        for number, line in enumerate(shown_lines(text), 1)
        if (m := rx.search(line)) is not None
    ]
    assert got == expected
    # Past the kept lines the rest are only counted, by another route.
    for keep in (0, 1):
        counted = matcher.find(text.encode(), keep, 0)
        assert (0 if counted is None else counted.count) == len(expected)


def test_file_over_a_window_is_searched_whole_with_context_across_windows(
    tmp_path: Path,
) -> None:
    # 64-byte lines: a window boundary falls between lines `per` and `per + 1`.
    per = WINDOW // 64
    count = 3 * per
    body = "".join(f"{i:08d} {'x' * 54}\n" for i in range(1, count + 1))
    (tmp_path / "big.txt").write_text(body)
    result = grep(tmp_path, pattern=f"^({per:08d}|{per + 1:08d}) ", context=2)
    assert result.model_text() == "\n".join(
        f"big.txt{sep}{i}{sep}{i:08d} {'x' * 54}"
        for i, sep in zip(range(per - 2, per + 4), "--::--", strict=True)
    )
    assert grep(tmp_path, pattern="0 x").details.match_count == count // 10


def test_line_longer_than_a_window(tmp_path: Path) -> None:
    long_line = "y" * (WINDOW * 2 + 5)
    (tmp_path / "f.txt").write_text(f"a\n{long_line}needle\nb needle\n")
    result = grep(tmp_path, pattern="needle", output_mode="count")
    assert result.model_text() == "f.txt:2"
    assert [m.line for m in grep(tmp_path, pattern="needle").details.matches] == [2, 3]


@settings(max_examples=80, deadline=None)
@given(
    lines=st.lists(st.text(alphabet="ab \u00e9", max_size=30), max_size=40),
    final_newline=st.booleans(),
    pattern=st.sampled_from(["a", "b+", "^a", "a$", "", "é", r"\bab"]),
    keep=st.integers(0, 5),
    context=st.integers(0, 3),
)
def test_windowed_search_equals_whole_file_search(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[str],
    final_newline: bool,
    pattern: str,
    keep: int,
    context: int,
) -> None:
    from workspace_tools.search import _reading

    data = ("\n".join(lines) + ("\n" if final_newline and lines else "")).encode()
    path = tmp_path_factory.mktemp("w") / "f"
    path.write_bytes(data)
    matcher = Matcher(pattern)
    whole = matcher.find(data, keep, context)
    saved = _reading.WINDOW
    _reading.WINDOW = 16
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            windowed = matcher.find_in_file(fd, data[:1], keep, context)
        finally:
            os.close(fd)
    finally:
        _reading.WINDOW = saved
    assert windowed == whole


def _sized_file(size: int, kind: str) -> bytes:
    """About ``size`` bytes of lines with ``needle`` on the first and last line."""
    filler = {"utf-8": "caf\u00e9 " * 6 + "\n", "utf-16": "w\u00e9 needle\n"}.get(
        kind, "x" * 49 + "\n"
    )
    head, tail = "needle first\n", "last needle\n"
    encoding = "utf-16-le" if kind == "utf-16" else "utf-8"
    width = 2 if kind == "utf-16" else 1
    lines = [head]
    used = len(head) + len(tail)
    while used + len(filler.encode(encoding)) // width < size // width:
        lines.append(filler)
        used += len(filler.encode(encoding)) // width
    lines.append("y" * (size // width - used) + tail)
    data = "".join(lines).encode(encoding)
    if kind == "utf-16":
        return b"\xff\xfe" + data[: (size - 2) // 2 * 2]
    if kind == "binary":
        return data[:100] + b"\0" + data[101:]
    if kind == "late NUL":  # beyond the 8 KiB probe: still text
        return data[:9000] + b"\0" + data[9001:]
    return data


@pytest.mark.parametrize(
    "size",
    [FIRST_READ - 1, FIRST_READ, FIRST_READ + 1, WHOLE_READ - 1, WHOLE_READ, WHOLE_READ + 1],
)
@pytest.mark.parametrize("kind", ["ascii", "utf-8", "utf-16", "binary", "late NUL"])
def test_files_around_the_read_sizes_give_the_line_by_line_matches(
    tmp_path: Path, size: int, kind: str
) -> None:
    data = _sized_file(size, kind)
    (tmp_path / "f.txt").write_bytes(data)
    result = grep(tmp_path, pattern="needle", limit=100_000)
    text = data.decode("utf-16" if kind == "utf-16" else "utf-8")
    expected = [
        (number, line.find("needle") + 1)
        for number, line in enumerate(text.split("\n"), 1)
        if "needle" in line
    ]
    assert result.details.binary_skipped == (kind == "binary")
    assert [(m.line, m.column) for m in result.details.matches] == (
        [] if kind == "binary" else expected
    )


@settings(max_examples=150, deadline=None)
@given(
    literal=st.text(alphabet="ab(.\t", min_size=1, max_size=3),
    data=st.binary(max_size=80).map(lambda b: b.replace(b"\0", b"a"))
    | st.text(alphabet="ab(.\t\r\n\u00e9", max_size=80).map(str.encode),
    keep=st.integers(0, 3),
)
def test_literal_patterns_match_the_lines_a_line_by_line_search_finds(
    literal: str, data: bytes, keep: int
) -> None:
    # Plain literals are searched without the regex engine; the results must not change.
    pattern = re.escape(literal)
    found = Matcher(pattern).find(data, keep, 0)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    expected = [
        (number, line.find(literal) + 1, line)
        for number, line in enumerate(shown_lines(text), 1)
        if literal in line
    ]
    assert (0 if found is None else found.count) == len(expected)
    got = [] if found is None else [(line, column, text) for line, column, text, _ in found.lines]
    assert got == expected[:keep]


@pytest.mark.parametrize("number", [errno.EMFILE, errno.ENFILE])
def test_a_file_the_process_has_no_fd_left_for_is_an_error_not_a_silent_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, number: int
) -> None:
    # Out of file descriptors says nothing of the file: skipping it as if it were gone would
    # answer with fewer matches than the tree holds and no word of it.
    for name in ("a.txt", "b.txt", "c.txt"):
        (tmp_path / name).write_text("needle\n")
    grep_tool = tools(tmp_path)["grep"]
    short_of_fds_at(monkeypatch, "b.txt", number)
    result = invoke_tool_sync(grep_tool, {"pattern": "needle"})
    expected = f"Cannot open b.txt: {OUT_OF_FDS_WORDS[number]}"
    assert (result.error_code, result.error) == (ErrorCode.TOOL_ERROR, expected), (
        result.model_text()
    )


@pytest.mark.skipif(shutil.which("rg") is None, reason="the oracle is ripgrep")
@pytest.mark.parametrize("glob", ["!*.py", "!sub/**", "!*.md", "*.md", "!x*"])
def test_a_glob_filter_leaves_out_what_a_leading_bang_names_as_ripgrep_does(
    tmp_path: Path, glob: str
) -> None:
    for rel in ("a.py", "notes.md", "sub/b.py", "sub/c.md", "sub/deep/x.txt", "x.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("import this\n")
    rg = subprocess.run(
        ["rg", "--files-with-matches", "--sort", "path", "--glob", glob, "import"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    arguments = {"pattern": "import", "glob": glob, "output_mode": "files_with_matches"}
    result = invoke_tool_sync(tools(tmp_path)["grep"], arguments)
    expected = rg.stdout.split()
    assert expected and rg.returncode == 0, rg
    assert [f.path for f in result.details.files] == expected, result.model_text()


def test_a_glob_filter_of_a_bang_alone_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("import this\n")
    result = invoke_tool_sync(tools(tmp_path)["grep"], {"pattern": "import", "glob": "!"})
    assert (result.error_code, result.error) == (
        ErrorCode.INVALID_ARGUMENTS,
        "The glob filter '!' names no files to leave out: give a pattern after it "
        "('!*.min.js'), or no glob to search every file",
    )


MULTILINE_TEXT = (
    "x = 1\n    if a and self.b and self.c:\n        pass\nself\n\nfoo\nbar self  \n"
    "class A:\n    x\n"
)


@pytest.mark.skipif(shutil.which("rg") is None, reason="the oracle is ripgrep")
@pytest.mark.parametrize(
    "pattern", ["self", r"\w+", r"self\.b.*\n.*pass", r"c:\n\s+pass\nself", r"\n", r"\s+\n", "x"]
)
def test_multiline_lines_are_the_lines_ripgrep_shows(tmp_path: Path, pattern: str) -> None:
    # Each line once, with its own text, however many matches start on it (a match that
    # starts after an earlier one on the same line used to be shown from that point on).
    (tmp_path / "a.py").write_text(MULTILINE_TEXT)
    rg = subprocess.run(
        ["rg", "-U", "--multiline-dotall", "-n", "--no-heading", "--no-filename", pattern],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert rg.returncode == 0, rg
    expected = [tuple(line.split(":", 1)) for line in rg.stdout.splitlines()]
    grep = tools(tmp_path)["grep"]
    result = invoke_tool_sync(grep, {"pattern": pattern, "multiline": True})
    got = [
        (str(match.line + offset), text)
        for match in result.details.matches
        for offset, text in enumerate(match.text.split("\n"))
    ]
    assert got == expected, result.model_text()
    counted = invoke_tool_sync(grep, {"pattern": pattern, "multiline": True, "limit": 1})
    assert counted.details.match_count == len(result.details.matches), counted.model_text()
