"""Faults users of coding agents' file tools report, by kind, checked against our tools.

Each test names the kind of fault in a one-line comment and asserts what a user expects,
with an outside oracle where there is one: Python's codecs, git (ignore rules, ``git apply``),
GNU grep (context windows), bash (brace expansion).
"""

from __future__ import annotations

import codecs
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.file_support import call, tools
from workspace_tools import ErrorCode
from workspace_tools.adapters.anthropic_text_editor import text_editor_tool

PATCH = "*** Begin Patch\n*** Update File: {path}\n{body}*** End Patch"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "w"
    path.mkdir()
    return path


def _patch(root: Path, path: str, body: str) -> object:
    return call(tools(root)["apply_patch"], patch=PATCH.format(path=path, body=body))


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
    return done.stdout


# Encoding: a UTF-8 BOM (and CRLF) dropped when a file is written whole.
def test_write_file_keeps_a_utf8_bom_and_crlf(root: Path) -> None:
    (root / "a.cs").write_bytes(codecs.BOM_UTF8 + "sécurisé\r\n".encode())
    t = tools(root)
    call(t["read_file"], path="a.cs")
    result = call(t["write_file"], path="a.cs", content="sécurisé\nmodifié\n")
    assert result.error is None, result.error
    assert (root / "a.cs").read_bytes() == codecs.BOM_UTF8 + "sécurisé\r\nmodifié\r\n".encode()


# Encoding: a legacy single-byte file (cp1252) re-encoded as UTF-8, or its bytes turned into
# U+FFFD, by an edit somewhere else in the file.
@pytest.mark.parametrize("tool", ["edit_file", "apply_patch", "text_editor"])
def test_legacy_bytes_outside_the_edit_are_kept(root: Path, tool: str) -> None:
    before = "line1\nTrade™ mark: configuração\n".encode("cp1252")
    (root / "a.prw").write_bytes(before)
    if tool == "edit_file":
        result = call(tools(root)["edit_file"], path="a.prw", old_text="line1", new_text="LINE1")
    elif tool == "apply_patch":
        result = _patch(root, "a.prw", "@@\n-line1\n+LINE1\n")
    else:
        editor = text_editor_tool(root)
        result = call(editor, command="str_replace", path="a.prw", old_str="line1", new_str="LINE1")
    assert result.error is None, result.error
    assert (root / "a.prw").read_bytes() == before.replace(b"line1", b"LINE1")


# Encoding: a UTF-16 file (Windows tools write them) unsearchable, shown garbled, or saved
# back as UTF-8 after an edit.
def test_utf16_file_is_searched_read_and_edited_in_utf16(root: Path) -> None:
    (root / "u.txt").write_bytes("abcd\r\nneedle here\r\n".encode("utf-16"))
    t = tools(root)
    assert call(t["grep"], pattern="needle").content == "u.txt:2:needle here"
    assert call(t["read_file"], path="u.txt").content == "     1\tabcd\n     2\tneedle here"
    result = call(t["edit_file"], path="u.txt", old_text="needle", new_text="pin")
    assert result.error is None, result.error
    assert (root / "u.txt").read_bytes() == "abcd\r\npin here\r\n".encode("utf-16")


# File modes: the executable bit (or a private mode) lost when a file is replaced atomically.
@pytest.mark.parametrize("mode", [0o755, 0o750, 0o600])
def test_every_writing_tool_keeps_the_file_mode(root: Path, mode: int) -> None:
    script = root / "run.sh"
    script.write_text("#!/bin/sh\necho 1\n")
    script.chmod(mode)
    t = tools(root)
    call(t["read_file"], path="run.sh")
    steps = [
        call(t["write_file"], path="run.sh", content="#!/bin/sh\necho 2\n"),
        call(t["edit_file"], path="run.sh", old_text="echo 2", new_text="echo 3"),
        _patch(root, "run.sh", "@@\n-echo 3\n+echo 4\n"),
        call(
            text_editor_tool(root), command="str_replace", path="run.sh", old_str="4", new_str="5"
        ),
    ]
    assert [step.error for step in steps] == [None] * 4
    assert script.read_text() == "#!/bin/sh\necho 5\n"
    assert oct(script.stat().st_mode & 0o7777) == oct(mode)


# Symlinks: an edit through a link replaced the link by a regular file and left its target
# unchanged (dotfile managers, CLAUDE.md -> AGENTS.md).
def test_every_writing_tool_writes_through_a_symlink_and_keeps_it(root: Path) -> None:
    (root / "canonical").mkdir()
    (root / "canonical" / "AGENTS.md").write_text("enabled = True\n")
    (root / "CLAUDE.md").symlink_to("canonical/AGENTS.md")
    t = tools(root)
    steps = [
        call(t["edit_file"], path="CLAUDE.md", old_text="True", new_text="False"),
        _patch(root, "CLAUDE.md", "@@\n-enabled = False\n+enabled = 0\n"),
        call(text_editor_tool(root), command="insert", path="CLAUDE.md", insert_line=1,
             insert_text="more\n"),
    ]  # fmt: skip
    call(t["read_file"], path="CLAUDE.md")
    steps.append(call(t["write_file"], path="CLAUDE.md", content="enabled = 0\nmore\nlast\n"))
    assert [step.error for step in steps] == [None] * 4
    assert os.readlink(root / "CLAUDE.md") == "canonical/AGENTS.md"
    assert (root / "canonical" / "AGENTS.md").read_text() == "enabled = 0\nmore\nlast\n"


# Symlinks: writing to a dangling link made a regular file in the link's place.
def test_write_file_through_a_dangling_symlink_creates_its_target(root: Path) -> None:
    (root / "link.txt").symlink_to("target.txt")
    result = call(tools(root)["write_file"], path="link.txt", content="new\n")
    assert result.error is None, result.error
    assert os.readlink(root / "link.txt") == "target.txt"
    assert (root / "target.txt").read_text() == "new\n"


# Hard links: an atomic replacement gave the edited name a new inode, so the file's other
# names (outside the workspace, in a package store) silently kept the old content.
@pytest.mark.parametrize("tool", ["edit_file", "write_file", "apply_patch", "text_editor"])
def test_a_write_to_a_hard_linked_file_says_its_other_names_keep_the_old_content(
    root: Path, tool: str
) -> None:
    (root / "a.txt").write_text("x\n")
    os.link(root / "a.txt", root / "b.txt")
    note = (
        "a.txt had 1 other hard link; a.txt is now a file of its own, and its other name "
        "keeps the old content"
    )
    t = tools(root)
    if tool == "edit_file":
        result = call(t["edit_file"], path="a.txt", old_text="x", new_text="y")
        assert result.content["note"] == note
    elif tool == "write_file":
        call(t["read_file"], path="a.txt")
        result = call(t["write_file"], path="a.txt", content="y\n")
        assert result.content["note"] == note
    elif tool == "apply_patch":
        result = _patch(root, "a.txt", "@@\n-x\n+y\n")
        assert result.content == f"Success. Updated the following files:\nM a.txt ({note})"
    else:
        editor = text_editor_tool(root)
        result = call(editor, command="str_replace", path="a.txt", old_str="x", new_str="y")
        assert result.content == f"Successfully replaced text at exactly one location.\n({note})"
    assert result.error is None, result.error
    # The name written changes alone: its other names may be a store shared by other
    # projects, or files outside the root, which a workspace tool must never change.
    assert ((root / "a.txt").read_text(), (root / "b.txt").read_text()) == ("y\n", "x\n")
    # A file with one name gets no note.
    plain = call(t["edit_file"], path="a.txt", old_text="y", new_text="z")
    assert "note" not in plain.content


# Line endings: one line's edit rewrote every line of a mixed LF/CRLF file to one style, or
# the lines it replaced to the file's main style, unlike apply_patch.
@pytest.mark.parametrize(
    ("before", "old", "new", "after"),
    [
        (b"a\r\nb\nc", "c", "C", b"a\r\nb\nC"),
        (b"l1\r\nl2\r\nl3\r\nl4\nl5\n", "l4\nl5\n", "L4\nX\nL5\n",
         b"l1\r\nl2\r\nl3\r\nL4\nX\nL5\r\n"),
        (b"l1\nl2\nl3\nl4\r\nl5\r\n", "l4\nl5\n", "L4\nX\nL5\n", b"l1\nl2\nl3\nL4\r\nX\r\nL5\n"),
        (b"alpha\nbeta\r\ngamma\n", "alpha\nbeta", "ALPHA\nBETA", b"ALPHA\nBETA\r\ngamma\n"),
    ],
    ids=["untouched_lines", "lf_region_of_crlf_file", "crlf_region_of_lf_file", "lf_lines"],
)  # fmt: skip
def test_mixed_line_endings_edit_keeps_each_lines_ending_as_apply_patch_does(
    root: Path, before: bytes, old: str, new: str, after: bytes
) -> None:
    (root / "m.txt").write_bytes(before)
    result = call(tools(root)["edit_file"], path="m.txt", old_text=old, new_text=new)
    assert result.error is None, result.error
    assert (root / "m.txt").read_bytes() == after
    (root / "m.txt").write_bytes(before)
    removed = "".join(f"-{line}\n" for line in old.removesuffix("\n").split("\n"))
    added = "".join(f"+{line}\n" for line in new.removesuffix("\n").split("\n"))
    patched = _patch(root, "m.txt", "@@\n" + removed + added)
    assert patched.error is None, patched.error
    assert (root / "m.txt").read_bytes() == after


# Line endings: a patch with LF lines applied to a CRLF file left its context and new lines
# with bare LFs (a half-converted file).
def test_apply_patch_on_a_crlf_file_writes_crlf_everywhere(root: Path) -> None:
    (root / "c.bat").write_bytes(b"foo\r\nbar\r\nbaz\r\n")
    result = _patch(root, "c.bat", "@@\n foo\n-bar\n+qux\n+quux\n")
    assert result.error is None, result.error
    assert (root / "c.bat").read_bytes() == b"foo\r\nqux\r\nquux\r\nbaz\r\n"


# Line endings: a new_text ending in a newline added a blank line in a CRLF file.
def test_edit_in_a_crlf_file_adds_no_blank_line(root: Path) -> None:
    (root / "c.txt").write_bytes(b"a\r\nb\r\nc\r\n")
    result = call(tools(root)["edit_file"], path="c.txt", old_text="b\n", new_text="B\n")
    assert result.error is None, result.error
    assert (root / "c.txt").read_bytes() == b"a\r\nB\r\nc\r\n"


# Trailing newline: a write tool that adds a final newline the content lacks, or drops one.
@pytest.mark.parametrize("content", ["a\nb", "a\nb\n", "a\nb\n\n", ""])
def test_write_file_writes_the_final_newline_state_it_is_given(root: Path, content: str) -> None:
    result = call(tools(root)["write_file"], path="n.txt", content=content)
    assert result.error is None, result.error
    assert (root / "n.txt").read_bytes() == content.encode()


# Trailing newline: apply_patch joined a line added after an unterminated last line onto it,
# or forced a final newline onto a file whose last line it did not touch.
@pytest.mark.parametrize(
    ("before", "body", "after"),
    [
        (b"hello\nworld", "@@\n world\n+tail\n", b"hello\nworld\ntail"),
        (b"line1\nline2\nline3", "@@\n-line1\n+LINE1\n", b"LINE1\nline2\nline3"),
    ],
    ids=["append_after_unterminated", "untouched_last_line"],
)
def test_apply_patch_keeps_the_final_newline_state(
    root: Path, before: bytes, body: str, after: bytes
) -> None:
    (root / "e.txt").write_bytes(before)
    result = _patch(root, "e.txt", body)
    assert result.error is None, result.error
    assert (root / "e.txt").read_bytes() == after


# Tabs: an editor expanded every tab of the file on write (a Makefile's recipes break), or
# showed tabs as spaces so old text copied from a read never matched.
def test_tabs_are_shown_and_kept_as_tabs(root: Path) -> None:
    before = "all:\n\techo a\n\techo b\n"
    (root / "Makefile").write_text(before)
    t = tools(root)
    assert call(t["read_file"], path="Makefile").content == (
        "     1\tall:\n     2\t\techo a\n     3\t\techo b"
    )
    assert (
        call(t["edit_file"], path="Makefile", old_text="\techo a", new_text="\techo A").error
        is None
    )
    editor = text_editor_tool(root)
    assert (
        call(editor, command="insert", path="Makefile", insert_line=0, insert_text="# x").error
        is None
    )
    assert (root / "Makefile").read_text() == "# x\nall:\n\techo A\n\techo b\n"


# Indentation: a replacement written flush-left (as the model copied old text without the
# block's indentation) landed at column 0 after its first line.
def test_flush_left_edit_of_an_indented_block_keeps_the_block_indented(root: Path) -> None:
    (root / "f.js").write_text("function foo() {\n    line1\n    line2\n}\n")
    result = call(tools(root)["edit_file"], path="f.js", old_text="line1\nline2",
                  new_text="lineA\nlineB")  # fmt: skip
    assert result.error is None, result.error
    assert result.details.match == "indentation"
    assert (root / "f.js").read_text() == "function foo() {\n    lineA\n    lineB\n}\n"


# Replacement text: `$&`, `$'`, `` $` ``, `$$`, `\1` in new_text expanded as a replacement
# pattern (JavaScript's String.replace), pasting other parts of the file into it.
@pytest.mark.parametrize("replace_all", [False, True])
def test_dollar_and_backslash_sequences_in_new_text_are_written_literally(
    root: Path, replace_all: bool
) -> None:
    new = "color=$'\\033[31m' $$ $& $` $1 \\1 \\g<0>"
    (root / "d.sh").write_text("A old B\n")
    result = call(tools(root)["edit_file"], path="d.sh", old_text="old", new_text=new,
                  replace_all=replace_all)  # fmt: skip
    assert result.error is None, result.error
    assert (root / "d.sh").read_text() == f"A {new} B\n"
    (root / "d.sh").write_text("A old B\n")
    editor = text_editor_tool(root)
    assert (
        call(editor, command="str_replace", path="d.sh", old_str="old", new_str=new).error is None
    )
    assert (root / "d.sh").read_text() == f"A {new} B\n"


# Empty search text: an empty old_str matched everywhere (or inserted text) instead of
# being refused.
def test_empty_old_text_is_refused_and_changes_nothing(root: Path) -> None:
    (root / "a.txt").write_text("alpha\n")
    editor = text_editor_tool(root)
    result = call(editor, command="str_replace", path="a.txt", old_str="", new_str="X")
    assert result.error_code is ErrorCode.INVALID_ARGUMENTS
    edit = call(tools(root)["edit_file"], path="a.txt", old_text="", new_text="X")
    assert edit.error_code is ErrorCode.INVALID_ARGUMENTS
    assert (root / "a.txt").read_text() == "alpha\n"


class _CountedText(str):
    """A file's text that tallies the characters ``count`` scans."""

    scanned = 0

    def count(self, sub: str, start: int | None = None, end: int | None = None) -> int:  # type: ignore[override]
        begin, stop, _ = slice(start, end).indices(len(self))
        _CountedText.scanned += max(0, stop - begin)
        return super().count(sub, start, end)


# Large files: an old_text found in thousands of places (`}` in a 1 MB file) took time in
# places times file size to report its line numbers (seconds to hours of CPU).
def test_ambiguous_match_lines_are_found_in_one_pass() -> None:
    from workspace_tools import ToolError
    from workspace_tools.text._match import replace_text

    text = _CountedText("function f() {\n  return 1;\n}\n" * 4000)
    _CountedText.scanned = 0
    with pytest.raises(ToolError) as caught:
        replace_text(text, "}", "};", replace_all=False, newline="\n", path="f.js")
    assert caught.value.code is ErrorCode.AMBIGUOUS_MATCH
    assert caught.value.details == {"lines": list(range(3, 12001, 3))}
    assert caught.value.message.startswith(
        "old_text matches 4000 times in f.js (lines 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33, "
    )
    assert _CountedText.scanned <= len(text)


# Invisible characters: old text typed with a plain space never matched a no-break space
# (or a decomposed accent), and the error did not say why.
@pytest.mark.parametrize(
    ("content", "old", "shown"),
    [
        ("World War\u00a0II\n", "World War II", "\\u00a0"),
        ("cafe\u0301 menu\n", "caf\u00e9 menu", "\\u0301"),
    ],
    ids=["no_break_space", "decomposed_accent"],
)  # fmt: skip
def test_invisible_differences_are_named_in_no_match(
    root: Path, content: str, old: str, shown: str
) -> None:
    (root / "n.txt").write_text(content)
    result = call(tools(root)["edit_file"], path="n.txt", old_text=old, new_text="x")
    assert result.error_code is ErrorCode.NO_MATCH
    assert shown in result.error
    assert (root / "n.txt").read_text() == content


# Read-only files: an editor replaced a file marked read-only (chmod 444) and reported
# success.
def test_read_only_file_is_refused_by_every_writing_tool(root: Path) -> None:
    locked = root / "locked.txt"
    locked.write_text("original\n")
    locked.chmod(0o444)
    t = tools(root)
    call(t["read_file"], path="locked.txt")
    steps = [
        call(t["edit_file"], path="locked.txt", old_text="original", new_text="changed"),
        call(t["write_file"], path="locked.txt", content="changed\n"),
        _patch(root, "locked.txt", "@@\n-original\n+changed\n"),
        call(text_editor_tool(root), command="str_replace", path="locked.txt",
             old_str="original", new_str="changed"),
    ]  # fmt: skip
    assert [step.error_code for step in steps] == [ErrorCode.PERMISSION_DENIED] * 4
    assert locked.read_text() == "original\n"


# Read-only files: a patch deleted or moved away a file marked read-only, which it may
# not update.
@pytest.mark.parametrize(
    ("body", "verb"),
    [
        ("*** Delete File: keep.txt\n*** Delete File: locked.txt\n", "delete"),
        ("*** Update File: locked.txt\n*** Move to: moved.txt\n@@\n-original\n+x\n", "move"),
    ],
)
def test_apply_patch_does_not_delete_or_move_a_read_only_file(
    root: Path, body: str, verb: str
) -> None:
    (root / "keep.txt").write_text("a\n")
    (root / "locked.txt").write_text("original\n")
    (root / "locked.txt").chmod(0o444)
    result = call(tools(root)["apply_patch"], patch=f"*** Begin Patch\n{body}*** End Patch")
    assert result.error_code is ErrorCode.PERMISSION_DENIED
    assert result.error == (
        f"Permission denied: locked.txt is read-only (mode 0444); a patch does not {verb} a "
        "read-only file\nNo file was changed: correct this part and send the whole patch again."
    )
    assert sorted(p.name for p in root.iterdir()) == ["keep.txt", "locked.txt"]
    assert (root / "locked.txt").read_text() == "original\n"
    # The workspace's option to write read-only files lifts it, as for an update.
    opted = call(tools(root, write_read_only_files=True)["apply_patch"],
                 patch=f"*** Begin Patch\n{body}*** End Patch")  # fmt: skip
    assert opted.error is None, opted.error


# Binary detection: a text file with a NUL byte past the first 8 KiB (a log, a dump) was
# refused or had its NUL dropped by an edit.
def test_nul_past_the_sniffed_head_is_text_and_kept(root: Path) -> None:
    before = b"a\n" * 5000 + b"\x00tail\n"
    (root / "big.log").write_bytes(before)
    result = call(tools(root)["edit_file"], path="big.log", old_text="tail", new_text="TAIL")
    assert result.error is None, result.error
    assert (root / "big.log").read_bytes() == before.replace(b"tail", b"TAIL")


# Empty files: reading or inserting into an empty file failed.
def test_empty_file_reads_and_takes_an_insert(root: Path) -> None:
    (root / "e.txt").write_text("")
    assert call(tools(root)["read_file"], path="e.txt").content == "[e.txt is empty]"
    editor = text_editor_tool(root)
    assert (
        call(editor, command="insert", path="e.txt", insert_line=0, insert_text="first").error
        is None
    )
    assert (root / "e.txt").read_bytes() == b"first\n"


# Long lines: a minified file's line cut with no way to see the rest of it.
def test_a_cut_long_line_can_be_seen_through_grep(root: Path) -> None:
    (root / "m.js").write_text("a" * 3000 + "NEEDLE" + "b" * 3000 + "\n")
    t = tools(root)
    read = call(t["read_file"], path="m.js")
    assert read.content.endswith(
        '[A line marked "line cut" goes on past its first 2,000 characters. To see the rest, '
        "grep for text in it: grep shows the part of a line around each match, wherever it "
        "lies.]"
    )
    found = call(t["grep"], pattern="NEEDLE").content
    assert "a" * 900 + "NEEDLE" + "b" * 900 in found


# Search context: overlapping context windows printed the same lines several times.
def test_grep_context_windows_merge_as_gnu_grep_merges_them(root: Path) -> None:
    (root / "f.txt").write_text("aaa\nbbb\naaa\nccc\naaa\nddd\neee\nfff\naaa\n")
    result = call(tools(root)["grep"], pattern="aaa", context=1, path="f.txt")
    gnu = subprocess.run(["grep", "-n", "-C1", "aaa", "f.txt"], cwd=root, capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    # Each line once, in order, ':' after a match's number, '-' after a context line's, and
    # '--' between groups that do not touch: GNU grep's output with the path in front.
    ours = [line if line == "--" else line[len("f.txt:") :] for line in result.content.split("\n")]
    assert ours == gnu.splitlines()


# Regex patterns: special characters in a pattern gave a raw engine error, or a pattern
# starting with '-' was taken for an option.
def test_grep_pattern_errors_say_how_to_escape_and_dashes_are_patterns(root: Path) -> None:
    (root / "t.txt").write_text("1) fail\n--verbose flag\n| {\n")
    t = tools(root)
    bad = call(t["grep"], pattern="1)")
    assert bad.error_code is ErrorCode.INVALID_ARGUMENTS
    assert "escape special characters" in bad.error
    assert call(t["grep"], pattern=r"1\)").content == "t.txt:1:1) fail"
    assert call(t["grep"], pattern="--verbose").content == "t.txt:2:--verbose flag"
    assert call(t["grep"], pattern=r"\| \{").content == "t.txt:3:| {"


# Regex patterns: text typed as it reads (`foo(bar)`, `$scope`, `items[0]`) found nothing
# as a regex, and "No matches" told the model the text was absent.
@pytest.mark.parametrize(
    ("pattern", "escaped"),
    [("foo(bar)", r"foo\(bar\)"), ("$scope", r"\$scope"), ("items[0]", r"items\[0\]")],
)
def test_grep_says_when_a_pattern_that_matches_nothing_occurs_literally(
    root: Path, pattern: str, escaped: str
) -> None:
    (root / "a.js").write_text("foo(bar)\n$scope.x = items[0];\n")
    (root / "b.js").write_text("foo(bar) $scope items[0]\n")
    t = tools(root)
    result = call(t["grep"], pattern=pattern)
    assert result.content == (
        "No matches\n[As a regular expression the pattern matches nothing, but its text "
        "occurs literally 2 times in 2 files; with its regex characters escaped, the pattern "
        f"{escaped} finds it]"
    )
    assert result.details.match_count == 0
    assert call(t["grep"], pattern=escaped).details.match_count == 2
    # Text that is absent either way gets no note.
    assert call(t["grep"], pattern="nothing(here)").content == "No matches"


# Multiline search: a pattern spanning lines found nothing.
def test_grep_multiline_pattern_spans_lines(root: Path) -> None:
    (root / "f.py").write_text("def a():\n    pass\ndef b():\n    return 1\n")
    t = tools(root)
    found = call(t["grep"], pattern=r"def b\(\):\n\s+return", multiline=True)
    assert found.content == "f.py:3:def b():\nf.py:4:    return 1"


# Case and Unicode: ignore_case did not fold non-ASCII letters.
def test_grep_ignore_case_folds_non_ascii_letters(root: Path) -> None:
    (root / "u.txt").write_text("ÉCOLE\nStraße\n")
    result = call(tools(root)["grep"], pattern="école", ignore_case=True)
    assert result.content == "u.txt:1:ÉCOLE"


# Glob braces: `*.{json,xml}` silently matched nothing.
@pytest.mark.parametrize("pattern", ["src/**/*.{json,xml}", "src/{a,b{1,2}}.json"])
def test_glob_braces_match_as_bash_expands_them(root: Path, pattern: str) -> None:
    (root / "src" / "deep").mkdir(parents=True)
    for name in ("a.json", "b1.json", "b2.json", "c.txt", "deep/d.xml", "deep/e.json"):
        (root / "src" / name).write_text("")
    result = call(tools(root)["glob"], pattern=pattern)
    bash = subprocess.run(
        ["bash", "-O", "globstar", "-O", "nullglob", "-c", f"printf '%s\\n' {pattern}"],
        cwd=root, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert result.details.matches == sorted(bash.stdout.split())


# Glob braces in a grep filter: `--glob '*.{ts,tsx}'` found no files.
def test_grep_glob_filter_takes_braces(root: Path) -> None:
    for name in ("a.ts", "b.tsx", "c.js"):
        (root / name).write_text("x\n")
    result = call(tools(root)["grep"], pattern="x", glob="*.{ts,tsx}")
    assert result.content == "a.ts:1:x\nb.tsx:1:x"


# Hidden directories: a glob naming a dot-directory (or `**` over one) found nothing.
@pytest.mark.parametrize(
    "pattern", [".flightops/ARTIFACTS.md", ".flightops/*", "**/ARTIFACTS.md", "**/*.md"]
)
def test_glob_finds_files_in_a_dot_directory(root: Path, pattern: str) -> None:
    (root / ".flightops").mkdir()
    (root / ".flightops" / "ARTIFACTS.md").write_text("x\n")
    result = call(tools(root)["glob"], pattern=pattern)
    assert result.details.matches == [".flightops/ARTIFACTS.md"]


# Literal brackets in names: a glob naming a route directory such as `[id]` (Next.js,
# expo-router) matched nothing, as `[id]` is a character class.
def test_glob_of_a_literal_bracketed_path_finds_it(root: Path) -> None:
    (root / "app" / "[id]").mkdir(parents=True)
    (root / "app" / "[id]" / "index.tsx").write_text("x\n")
    (root / "app" / "(tabs)").mkdir()
    (root / "app" / "(tabs)" / "home.tsx").write_text("x\n")
    t = tools(root)
    result = call(t["glob"], pattern="app/[id]/*.tsx")
    assert result.details.matches == ["app/[id]/index.tsx"]
    assert result.content == (
        "app/[id]/index.tsx\n[No file matches 'app/[id]/*.tsx' with its brackets and braces "
        "read as pattern syntax ([abc] a character class, {a,b} alternatives); these match it "
        "with them taken literally]"
    )
    # A pattern that matches as syntax is never read literally.
    (root / "app" / "i").mkdir()
    (root / "app" / "i" / "other.tsx").write_text("x\n")
    assert call(t["glob"], pattern="app/[id]/*.tsx").content == "app/i/other.tsx"
    assert call(t["glob"], pattern="app/(tabs)/*.tsx").details.matches == ["app/(tabs)/home.tsx"]
    assert call(t["grep"], pattern="x", path="app/[id]").content == "app/[id]/index.tsx:1:x"


# The same in grep's glob filter: `glob="app/[id]/*.tsx"` searched no file, and the model
# read "No matches" as the text being absent.
def test_grep_glob_filter_of_a_literal_bracketed_path_searches_it(root: Path) -> None:
    (root / "app" / "[id]").mkdir(parents=True)
    (root / "app" / "[id]" / "page.tsx").write_text("export default Page\n")
    (root / "app" / "page.tsx").write_text("export default Home\n")
    t = tools(root)
    result = call(t["grep"], pattern="export", glob="app/[id]/*.tsx")
    assert result.content == (
        "app/[id]/page.tsx:1:export default Page\n[No file matches the glob 'app/[id]/*.tsx' "
        "with its brackets and braces read as pattern syntax ([abc] a character class, {a,b} "
        "alternatives); the files it matches with them taken literally were searched]"
    )
    assert result.details.files_searched == 1
    # A glob that matches as syntax is never read literally.
    (root / "app" / "i").mkdir()
    (root / "app" / "i" / "other.tsx").write_text("export default Other\n")
    matched = call(t["grep"], pattern="export", glob="app/[id]/*.tsx")
    assert matched.content == "app/i/other.tsx:1:export default Other"


# Ignore rules: a negated rule (`!foo.txt`) or the "ignore the root's files, keep its
# directories" idiom (`/*` then `!/*/`) judged otherwise than git judges it.
@pytest.mark.parametrize(
    "rules", ["*.txt\n!foo.txt\n", "/*\n!/*/\n!.gitignore\n", "build/\n!build/keep.txt\n"]
)
def test_search_sees_exactly_the_files_git_does_not_ignore(root: Path, rules: str) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    _git(root, "init", "-q")
    (root / ".gitignore").write_text(rules)
    for rel in ("foo.txt", "bar.txt", "README.md", "d/x.md", "build/keep.txt", "build/out.o"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("KAWA\n")
    listed = _git(root, "ls-files", "--others", "--exclude-standard").split()
    result = call(tools(root)["glob"], pattern="**/*")
    assert result.details.matches == sorted(listed)
    grep = call(tools(root)["grep"], pattern="KAWA", output_mode="files_with_matches")
    assert grep.content.split("\n") == sorted(p for p in listed if p != ".gitignore")


# Names with spaces: a patch header or a glob naming a file with spaces failed.
def test_names_with_spaces_work_in_patch_glob_and_grep(root: Path) -> None:
    (root / "my file.txt").write_text("hello\n")
    t = tools(root)
    assert call(t["glob"], pattern="my file.txt").details.matches == ["my file.txt"]
    assert call(t["grep"], pattern="hello", glob="my file.txt").content == "my file.txt:1:hello"
    assert _patch(root, "my file.txt", "@@\n-hello\n+bye\n").error is None
    assert (root / "my file.txt").read_text() == "bye\n"


# Directories as files: writing to a path that is a directory gave a raw EISDIR.
def test_write_and_read_of_a_directory_say_what_it_is(root: Path) -> None:
    (root / "d").mkdir()
    t = tools(root)
    for result in (call(t["write_file"], path="d", content="x"), call(t["read_file"], path="d")):
        assert result.error_code is ErrorCode.IS_A_DIRECTORY
        assert result.error == "d is a directory; use list_files to see its entries"


# Files changed on disk between read and write (a formatter, the user): the write
# silently overwrote the change.
def test_a_file_changed_since_it_was_read_is_not_overwritten(root: Path) -> None:
    (root / "s.txt").write_text("a\n")
    t = tools(root)
    call(t["read_file"], path="s.txt")
    (root / "s.txt").write_text("b\n")
    result = call(t["write_file"], path="s.txt", content="c\n")
    assert result.error_code is ErrorCode.STALE_FILE
    assert (root / "s.txt").read_text() == "b\n"


# Hidden files in listings: `.env`, `.github` invisible to the listing tool.
def test_list_files_shows_hidden_entries(root: Path) -> None:
    (root / ".env.example").write_text("A=1\n")
    (root / ".github").mkdir()
    (root / "src").mkdir()
    result = call(tools(root)["list_files"])
    assert result.content == ".env.example\n.github/\nsrc/"
