"""Files whose lines end in lone CRs (classic Mac OS). Lines end at LF, as in git and grep,
so read_file shows such a file as one line, and says why; edits and writes are exact and
keep its CRs, inserted breaks included."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.file_support import call, tools

MAC = b"line one\rline two\rline three\r"
NOTE = (
    "(note: mac.txt uses CR line endings (classic Mac OS), which are not line breaks here: "
    "its {n} show as carriage return characters inside line 1. edit_file and write_file "
    "keep CR endings: line breaks you write are saved as CRs)"
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "mac.txt").write_bytes(MAC)
    return tmp_path


def test_read_file_says_the_file_uses_cr_endings(root: Path) -> None:
    result = call(tools(root)["read_file"], path="mac.txt")
    assert result.content == "     1\tline one\rline two\rline three\r\n\n" + NOTE.format(n="3 CRs")
    assert (result.details.newline, result.details.total_lines) == ("cr", 1)


def test_lf_and_crlf_files_get_no_note(root: Path) -> None:
    (root / "unix.txt").write_bytes(b"a\rb\nc\n")  # a CR inside an LF file is a character
    result = call(tools(root)["read_file"], path="unix.txt")
    assert result.content == "     1\ta\rb\n     2\tc"
    assert result.details.newline == "lf"


@pytest.mark.parametrize(
    "old, new, expected",
    [
        ("line two", "line 2", b"line one\rline 2\rline three\r"),
        # Breaks written as LF in new_text land as CRs.
        ("line two", "line 2\nline 2b", b"line one\rline 2\rline 2b\rline three\r"),
        # old_text copied with CRs matches exactly; with LFs it matches the CR breaks.
        ("one\rline two", "one\rtwo", b"line one\rtwo\rline three\r"),
        ("one\nline two", "one\ntwo", b"line one\rtwo\rline three\r"),
    ],
)
def test_edit_file_on_a_cr_file_is_exact(root: Path, old: str, new: str, expected: bytes) -> None:
    workspace_tools = tools(root)
    call(workspace_tools["read_file"], path="mac.txt")
    result = call(workspace_tools["edit_file"], path="mac.txt", old_text=old, new_text=new)
    assert result.error is None, result.error
    assert (root / "mac.txt").read_bytes() == expected


def test_write_file_keeps_cr_endings(root: Path) -> None:
    workspace_tools = tools(root)
    call(workspace_tools["read_file"], path="mac.txt")
    result = call(workspace_tools["write_file"], path="mac.txt", content="a\nb\r\nc\n")
    assert result.error is None, result.error
    assert (root / "mac.txt").read_bytes() == b"a\rb\rc\r"


def test_apply_patch_on_a_cr_file_is_exact(root: Path) -> None:
    body = (
        "*** Begin Patch\n*** Update File: mac.txt\n@@\n"
        "-line one\rline two\rline three\r\n+line one\rline 2\rline three\r\n*** End Patch\n"
    )
    result = call(tools(root)["apply_patch"], patch=body)
    assert result.error is None, result.error
    assert (root / "mac.txt").read_bytes() == b"line one\rline 2\rline three\r"


def test_one_cr_is_named_in_the_singular(root: Path) -> None:
    (root / "mac.txt").write_bytes(b"only\r")
    result = call(tools(root)["read_file"], path="mac.txt")
    assert result.content == "     1\tonly\r\n\n" + NOTE.format(n="1 CR")
