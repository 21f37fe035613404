"""Paths as models write them, against public reports on peers' file tools."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.file_support import call, tools
from workspace_tools import ErrorCode


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "w"
    (path / "src").mkdir(parents=True)
    (path / "src/App.py").write_text("x = 1\n")
    (path / "README.md").write_text("r\n")
    if (path / "readme.md").exists():
        pytest.skip("the file system ignores case: every case of a name is that file")
    return path


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        ("readme.md", "README.md"),
        ("SRC/app.py", "src/App.py"),
        ("src\\App.py", "src/App.py"),
        ("src/App.py:12", "src/App.py"),
        ("src/App.py:12:5", "src/App.py"),
        ("'src/App.py'", "src/App.py"),
        ("`README.md`", "README.md"),
        ("README.md ", "README.md"),
    ],
)
def test_a_path_not_found_names_the_file_the_model_meant(
    root: Path, given: str, meant: str
) -> None:
    """https://github.com/Lexus2016/hermes-agent-evolution/issues/1587 and
    https://github.com/frontman-ai/frontman/issues/114: a bare "file not found" for a path
    in the wrong case (or quoted, with a :line suffix, with Windows separators) left the
    agent guessing; the error names the existing file, and nothing is read or changed."""
    t = tools(root)
    read = call(t["read_file"], path=given)
    assert read.error_code is ErrorCode.NOT_FOUND
    assert read.error.endswith(f"; did you mean {meant!r}?"), read.error
    edit = call(t["edit_file"], path=given, old_text="x = 1", new_text="x = 2")
    assert edit.error_code is ErrorCode.NOT_FOUND
    assert edit.error.endswith(f"; did you mean {meant!r}?"), edit.error
    assert (root / "src/App.py").read_text() == "x = 1\n"
    again = call(t["read_file"], path=meant)
    assert again.error is None, again.error


def test_no_suggestion_without_a_single_clear_match(root: Path, tmp_path: Path) -> None:
    """https://github.com/Lexus2016/hermes-agent-evolution/issues/1587: a suggestion must
    never be a guess: two names equal but for case, a path outside the root, or nothing
    alike give the plain message."""
    (root / "Notes.txt").write_text("a\n")
    (root / "NOTES.txt").write_text("b\n")
    (tmp_path / "secret.txt").write_text("s\n")
    read_file = tools(root)["read_file"]
    assert call(read_file, path="notes.txt").error == "File not found: notes.txt"
    assert call(read_file, path="nothing.py").error == "File not found: nothing.py"
    outside = call(read_file, path="..\\secret.txt")
    assert outside.error == "File not found: ..\\secret.txt"
    edit = call(tools(root)["edit_file"], path="new.py", old_text="a", new_text="b")
    assert edit.error == "File not found: new.py; use write_file to create a file"


def test_a_directory_not_found_in_discovery_names_the_one_meant(root: Path) -> None:
    """https://github.com/frontman-ai/frontman/issues/114: case on a case-sensitive file
    system."""
    grep = call(tools(root)["grep"], pattern="x", path="Src")
    assert grep.error_code is ErrorCode.NOT_FOUND
    assert grep.error == "Path 'Src' does not exist; did you mean 'src'?"
    listed = call(tools(root)["list_files"], path="srcs")
    assert listed.error == "Path 'srcs' does not exist; did you mean 'src'?"
    listed = call(tools(root)["list_files"], path="lib")
    assert listed.error == "Path 'lib' does not exist; list_files on its parent shows what is there"


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        ("scr/App.py", "src/App.py"),  # two letters swapped
        ("src/Ap.py", "src/App.py"),  # one dropped
        ("src/Appp.py", "src/App.py"),  # one added
        ("src/Apq.py", "src/App.py"),  # one changed
        ("SCR/app.PY", "src/App.py"),  # and the case
        ("READNE.md", "README.md"),
    ],
)
def test_a_path_one_typo_away_names_the_file_the_model_meant(
    root: Path, given: str, meant: str
) -> None:
    """A name one typo from an existing one (a character added, dropped, changed, or two
    swapped, ignoring case) is named, as a case difference is."""
    read = call(tools(root)["read_file"], path=given)
    assert read.error == f"File not found: {given}; did you mean {meant!r}?", read.error


def test_no_typo_suggestion_when_two_names_are_one_typo_away_or_the_name_is_short(
    root: Path,
) -> None:
    (root / "src/Apq.py").write_text("y = 1\n")
    (root / "ab").write_text("a\n")
    read_file = tools(root)["read_file"]
    assert call(read_file, path="src/Apx.py").error == "File not found: src/Apx.py"
    assert call(read_file, path="ac").error == "File not found: ac"
    assert call(read_file, path="src/Main.py").error == "File not found: src/Main.py"


# "café.txt" as macOS writes names (e + U+0301) and as a model types them (one é).
_NFD = "cafe\u0301.txt"
_NFC = "caf\u00e9.txt"


def test_a_name_in_another_unicode_normalization_is_named_as_a_json_string(root: Path) -> None:
    """A file whose name writes its accents as combining characters (NFD, as macOS and
    archives made there do) looks the same in a listing as the name a model types (NFC),
    so a bare "not found" cannot be acted on: the error names the file as a JSON string
    with the combining characters escaped, which as a ``path`` argument names it."""
    (root / _NFD).write_text("nfd\n")
    read = call(tools(root)["read_file"], path=_NFC)
    assert read.error == (
        f'File not found: {_NFC}; did you mean "cafe\\u0301.txt" (a JSON string: the '
        "name is NFD-normalized, its accents separate combining characters)?"
    ), read.error
    sent = json.loads('{"path": "cafe\\u0301.txt"}')
    assert call(tools(root)["read_file"], **sent).content == "     1\tnfd"


def test_an_nfc_name_sent_decomposed_is_named_plainly(root: Path) -> None:
    (root / _NFC).write_text("nfc\n")
    read = call(tools(root)["read_file"], path=_NFD)
    assert read.error == f"File not found: {_NFD}; did you mean {_NFC!r}?", read.error


def _osa_distance(a: str, b: str) -> int:
    """The optimal string alignment distance (Levenshtein with adjacent swaps), by the
    textbook dynamic programme."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(
                d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])
            )
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


@given(st.text("abc", max_size=6), st.text("abc", max_size=6))
def test_one_typo_apart_is_an_alignment_distance_of_one(a: str, b: str) -> None:
    from workspace_tools.workspace._near_miss import _one_typo_apart

    assert _one_typo_apart(a, b) == (_osa_distance(a, b) == 1), (a, b)


@pytest.mark.parametrize(
    ("given", "meant"), [("src/app.py", "src/App.py"), ("scr/App.py", "src/App.py")]
)
def test_apply_patch_names_the_file_a_header_most_likely_meant(
    root: Path, given: str, meant: str
) -> None:
    """An ``Update File`` or ``Delete File`` header naming a path in the wrong case or one
    typo away gets the same suggestion as edit_file, and nothing is changed; with no
    suggestion an update is told how to create the file."""
    apply_patch = tools(root)["apply_patch"]
    update = f"*** Begin Patch\n*** Update File: {given}\n@@\n-x = 1\n+x = 2\n*** End Patch\n"
    result = call(apply_patch, patch=update)
    assert result.error_code is ErrorCode.NOT_FOUND
    assert result.error.startswith(
        f"Update File {given}: the file does not exist; did you mean {meant!r}? "
        "Else create it with '*** Add File:'\n"
    ), result.error
    delete = f"*** Begin Patch\n*** Delete File: {given}\n*** End Patch\n"
    result = call(apply_patch, patch=delete)
    assert result.error.startswith(
        f"Delete File {given}: the file does not exist; did you mean {meant!r}?\n"
    ), result.error
    assert (root / "src/App.py").read_bytes() == b"x = 1\n"
    plain = "*** Begin Patch\n*** Update File: new.py\n@@\n-a\n+b\n*** End Patch\n"
    result = call(apply_patch, patch=plain)
    assert result.error.startswith(
        "Update File new.py: the file does not exist; create it with '*** Add File:'\n"
    ), result.error
