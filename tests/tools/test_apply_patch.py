"""apply_patch as a tool: overwrite rules, what the model and the application see, staleness,
confinement, and the parser's messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox import Sandbox
from tests.file_support import assert_diff_reproduces, call, tools
from workspace_tools import ErrorCode, ToolPresentation
from workspace_tools.text import _patch_apply
from workspace_tools.text._diff import unified_diff
from workspace_tools.text._patch_parse import PatchSyntaxError, parse_patch


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "w"
    path.mkdir()
    return path


def patch(*operations: str) -> str:
    return "*** Begin Patch\n" + "".join(operations) + "*** End Patch\n"


def test_allow_overwrite_lets_add_and_move_replace_files(root: Path) -> None:
    (root / "a.txt").write_text("old a\n")
    (root / "src.txt").write_text("moving\n")
    (root / "dst.txt").write_text("in the way\n")
    body = patch(
        "*** Add File: a.txt\n+new a\n",
        "*** Update File: src.txt\n*** Move to: dst.txt\n@@\n-moving\n+moved\n",
    )
    result = call(tools(root)["apply_patch"], patch=body, allow_overwrite=True)
    assert result.error is None, result.error
    assert (root / "a.txt").read_bytes() == b"new a\n"
    assert (root / "dst.txt").read_bytes() == b"moved\n"
    assert not (root / "src.txt").exists()
    assert result.content == "Success. Updated the following files:\nM a.txt\nR src.txt -> dst.txt"


def test_the_model_reads_which_files_changed_and_any_loose_match(root: Path) -> None:
    (root / "q.txt").write_text("say \u201chi\u201d\nend\n")
    (root / "gone.txt").write_text("x\n")
    body = patch(
        '*** Update File: q.txt\n@@\n say "hi"\n-end\n+END\n',
        "*** Delete File: gone.txt\n",
        "*** Add File: new.txt\n+n\n",
    )
    result = call(tools(root)["apply_patch"], patch=body)
    assert result.content == (
        "Success. Updated the following files:\n"
        "M q.txt (matched with unicode punctuation ignored)\n"
        "D gone.txt\n"
        "A new.txt"
    )
    files = result.details.files
    assert [(f.path, f.action, f.match, f.additions, f.deletions) for f in files] == [
        ("q.txt", "update", "unicode_punctuation", 1, 1),
        ("gone.txt", "delete", "exact", 0, 1),
        ("new.txt", "add", "exact", 1, 0),
    ]
    assert (result.details.additions, result.details.deletions) == (2, 2)
    assert files[1].diff == (
        "diff --git a/gone.txt b/gone.txt\ndeleted file mode 100644\n"
        "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
    )


def test_presentation_names_every_path(root: Path) -> None:
    tool = tools(root)["apply_patch"]
    body = patch("*** Update File: a.py\n*** Move to: b.py\n", "*** Delete File: c.py\n")
    args = tool.parameters.model_validate({"patch": body})
    assert tool.present(args) == ToolPresentation(
        label="Apply patch", icon="file-diff", detail="a.py, b.py, c.py"
    )
    bad = tool.parameters.model_validate({"patch": "nonsense"})
    assert tool.present(bad) == ToolPresentation(label="Apply patch", icon="file-diff")


def test_a_file_changed_on_disk_since_it_was_read_is_refused_whole(root: Path) -> None:
    (root / "a.txt").write_text("one\n")
    (root / "b.txt").write_text("two\n")
    named = tools(root)
    call(named["read_file"], path="a.txt")
    (root / "a.txt").write_text("one, changed elsewhere\n")
    body = patch(
        "*** Update File: b.txt\n@@\n-two\n+2\n",
        "*** Update File: a.txt\n@@\n-one, changed elsewhere\n+1\n",
    )
    result = call(named["apply_patch"], patch=body)
    assert result.error_code == ErrorCode.STALE_FILE
    assert (root / "b.txt").read_bytes() == b"two\n"


def test_a_path_outside_the_workspace_is_refused_before_anything_changes(root: Path) -> None:
    (root / "in.txt").write_text("in\n")
    body = patch("*** Delete File: in.txt\n", "*** Add File: ../out.txt\n+x\n")
    result = call(tools(root)["apply_patch"], patch=body)
    assert result.error_code == ErrorCode.OUTSIDE_WORKSPACE
    assert (root / "in.txt").exists()
    assert not (root.parent / "out.txt").exists()


def test_an_absolute_path_inside_the_root_is_accepted(root: Path) -> None:
    body = patch(f"*** Add File: {root / 'abs.txt'}\n+x\n")
    result = call(tools(root)["apply_patch"], patch=body)
    assert result.error is None, result.error
    assert result.details.files[0].path == "abs.txt"


def test_ambiguity_is_checked_at_the_level_that_matches(root: Path) -> None:
    (root / "t.py").write_text("if a:  \n    go()\nif a:\t\n    go()\n")
    body = patch("*** Update File: t.py\n@@\n if a:\n-    go()\n+    stop()\n")
    result = call(tools(root)["apply_patch"], patch=body)
    assert result.error_code == ErrorCode.AMBIGUOUS_MATCH
    assert result.error.startswith(
        "t.py: chunk 1 (patch line 4) matches 2 places when trailing whitespace is ignored, "
        "starting at lines 1, 3;"
    )
    assert result.details == {"lines": [1, 3]}


def test_a_failure_names_the_first_differing_line_and_the_nearest_lines(root: Path) -> None:
    (root / "m.py").write_text("def f():\n    x = 1\n    y = 2\n    return x + y\n")
    body = patch("*** Update File: m.py\n@@\n def f():\n     x = 1\n-    y = 3\n+    y = 4\n")
    result = call(tools(root)["apply_patch"], patch=body)
    assert result.error_code == ErrorCode.NO_MATCH
    assert result.error == (
        "m.py: chunk 1 (patch line 4): its expected lines (the ' ' and '-' lines) are not in "
        "the file. Its line 3, '    y = 3', differs from the file's line 3, '    y = 2'. The "
        "nearest lines in the file are 1-3:\n"
        "     1\tdef f():\n     2\t    x = 1\n     3\t    y = 2\n"
        "No file was changed: correct this part and send the whole patch again."
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "@@\n-two\n-four\n",
            "f.txt: chunk 1 (patch line 4): its expected lines (the ' ' and '-' lines) are not "
            "in the file. Its line 2, 'four', differs from the file's line 3, 'three'. The "
            "nearest lines in the file are 2-3:\n     2\ttwo\n     3\tthree",
        ),
        (
            "@@\n-zzz\n",
            "f.txt: chunk 1 (patch line 4): its expected lines (the ' ' and '-' lines) are not "
            "in the file. None of its lines is in the file: read the file again and copy its "
            "lines exactly",
        ),
    ],
)
def test_a_chunk_that_only_removes_lines_not_in_the_file_is_no_match(
    root: Path, body: str, message: str
) -> None:
    # Such a chunk leaves no lines whose presence would mean "already applied".
    (root / "f.txt").write_bytes(b"one\ntwo\nthree\n")
    result = call(tools(root)["apply_patch"], patch=patch("*** Update File: f.txt\n" + body))
    assert (result.error_code, result.error) == (
        ErrorCode.NO_MATCH,
        message + "\nNo file was changed: correct this part and send the whole patch again.",
    )
    assert (root / "f.txt").read_bytes() == b"one\ntwo\nthree\n"


def test_a_chunk_line_that_is_part_of_a_long_line_says_patches_take_whole_lines(
    root: Path,
) -> None:
    # Minified code: the chunk's line is a fragment of the file's one long line, which no
    # read shows whole, so "copy its lines exactly" cannot be followed.
    text = ";".join(f"var a{i}=function(x){{return x+{i}}}" for i in range(500))
    (root / "m.js").write_text(text)
    body = patch("*** Update File: m.js\n@@\n-var a3=function(x){return x+3}\n+var a3=0\n")
    result = call(tools(root)["apply_patch"], patch=body)
    assert (result.error_code, result.error) == (
        ErrorCode.NO_MATCH,
        "m.js: chunk 1 (patch line 4): its expected lines (the ' ' and '-' lines) are not in "
        "the file. Its line 1, 'var a3=function(x){return x+3}', is part of the file's "
        "line 1 (17,279 characters long), and a patch's lines are whole lines of the file: "
        "change a part of a long line with edit_file where it is offered\n"
        "No file was changed: correct this part and send the whole patch again.",
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "invalid patch: the first line of the patch must be '*** Begin Patch'"),
        (
            "*** Begin Patch\n*** Update File: a\n@@\n-x\n+y\n",
            "invalid patch: the last line of the patch must be '*** End Patch', not '+y'",
        ),
        (
            "```diff\n*** Begin Patch\n*** Add File: a\n+x\n*** End Patch\n```\n",
            "invalid patch: the first line of the patch must be '*** Begin Patch', not '```diff'",
        ),
        (
            "*** Begin Patch\n*** Add File: a\n+x\n*** End Patch\nDone: a added.\n",
            "invalid patch: the last line of the patch must be '*** End Patch', not "
            "'Done: a added.'",
        ),
        (
            "*** Begin Patch\\n*** Add File: a.txt\\n+" + "x" * 100 + "\\n*** End Patch",
            "invalid patch: the first line of the patch must be '*** Begin Patch', not "
            "'*** Begin Patch\\n*** Add File: a.txt\\n+" + "x" * 41 + "… (154 characters)'",
        ),
        (
            "*** Begin Patch\n*** Update File: a\n@@\n-x\n?y\n*** End Patch\n",
            "invalid patch: line 5 of the update of 'a', '?y', starts with none of ' ' "
            "(context), '-' (removed), '+' (added) or '@@' (anchor)",
        ),
        (
            "*** Begin Patch\n*** Update File: a\n@@ f\n*** End Patch\n",
            "invalid patch: the chunk of 'a' at line 3 has no lines; after its @@ line give "
            "the context (' '), removed ('-') and added ('+') lines",
        ),
        (
            "*** Begin Patch\n*** Add File: \n+x\n*** End Patch\n",
            "invalid patch: line 2 names no path after '*** Add File: '",
        ),
        # Invisible characters in a quoted line are shown escaped (a tab is kept).
        (
            "\ufeff*** Begin Patch\n*** Add File: a\n+x\n*** End Patch\n",
            "invalid patch: the first line of the patch must be '*** Begin Patch', not "
            "'\\ufeff*** Begin Patch'",
        ),
        (
            "*** Begin Patch\n*** Update File: a\n@@\n-x\n\u200b+\ty\x1b\n*** End Patch\n",
            "invalid patch: line 5 of the update of 'a', '\\u200b+\ty\\x1b', starts with none "
            "of ' ' (context), '-' (removed), '+' (added) or '@@' (anchor)",
        ),
    ],
)
def test_parse_errors_say_what_is_wrong_and_where(text: str, message: str) -> None:
    with pytest.raises(PatchSyntaxError) as caught:
        parse_patch(text)
    assert caught.value.message == message


def test_parser_reads_stacked_anchors_end_of_file_and_empty_context_lines() -> None:
    [op] = parse_patch(
        "*** Begin Patch\n*** Update File: a.py\n@@ class A:\n@@     def f(self):\n"
        " x\n\n-y\n+z\n*** End of File\n*** End Patch"
    )
    [chunk] = op.chunks
    assert chunk.anchors == ("class A:", "    def f(self):")  # indentation kept, as Codex
    assert chunk.lines == ((" ", "x"), (" ", ""), ("-", "y"), ("+", "z"))
    assert (chunk.end_of_file, chunk.line, chunk.old, chunk.new) == (
        True,
        3,
        ["x", "", "y"],
        ["x", "", "z"],
    )


def test_a_patch_runs_in_a_sandbox_child_and_its_writes_count_as_seen(root: Path) -> None:
    box = Sandbox()
    try:
        named = tools(root, sandbox=box)
        assert named["apply_patch"].sandbox is not None
        body = patch("*** Add File: a.txt\n+one\n", "*** Add File: b/c.txt\n+two\n")
        result = call(named["apply_patch"], patch=body)
        assert result.error is None, result.error
        assert (root / "a.txt").read_bytes() == b"one\n"
        assert (root / "b/c.txt").read_bytes() == b"two\n"
        # The child's writes were handed back: a later change on disk is seen as stale.
        (root / "a.txt").write_text("changed elsewhere\n")
        stale = call(named["apply_patch"], patch=patch("*** Delete File: a.txt\n"))
        assert stale.error_code == ErrorCode.STALE_FILE, stale.error
    finally:
        box.close()


def test_lines_decided_by_the_block_and_an_anchor_above_need_no_split_of_the_file() -> None:
    # A file without CRs is searched as text: the block an @@ line opens and an @@ line
    # found above the previous chunk are read from the text too, never from its lines.
    text = "".join(
        f"def {name}(self):\n    if x:\n        y = 1\n    return y\n\n" for name in "fgh"
    )
    patch = parse_patch(
        "*** Begin Patch\n*** Update File: m.py\n@@ def g(self):\n     if x:\n-        y = 1\n"
        "+        y = 2\n@@ def g(self):\n-    return y\n+    return -y\n*** End Patch\n"
    )
    seen: list[_patch_apply._Lines] = []

    class Watched(_patch_apply._Lines):
        def __init__(self, text: str) -> None:
            super().__init__(text)
            seen.append(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_patch_apply, "_Lines", Watched)
        result = _patch_apply.apply_chunks(text, patch[0].chunks, newline="\n", path="m.py")
    assert result.text == text.replace(
        "def g(self):\n    if x:\n        y = 1\n    return y\n",
        "def g(self):\n    if x:\n        y = 2\n    return -y\n",
    )
    assert [lines._raw for lines in seen] == [None]


@pytest.mark.parametrize(
    ("old", "body", "new"),
    [
        # Deleting the first of ten blank lines: as a diff sees it, the last one goes.
        (
            "a\n" + "\n" * 10 + "b\n",
            "@@\n a\n-\n \n",
            "a\n" + "\n" * 9 + "b\n",
        ),
        # The first chunk's change slides into the second chunk's context: one hunk.
        (
            "a\n" + "\n" * 8 + "b\nc\nd\ne\nf\n",
            "@@\n a\n-\n \n@@\n e\n-f\n+F\n",
            "a\n" + "\n" * 7 + "b\nc\nd\ne\nF\n",
        ),
        # A run of repeated lines to the end of a file without a final newline.
        ("x\n" + "y\n" * 9 + "y", "@@\n x\n-y\n y\n", "x\n" + "y\n" * 8 + "y"),
    ],
)
def test_a_change_sliding_across_repeated_lines_keeps_the_context_git_apply_needs(
    root: Path, old: str, body: str, new: str
) -> None:
    (root / "f.txt").write_text(old)
    result = call(tools(root)["apply_patch"], patch=patch("*** Update File: f.txt\n" + body))
    assert result.error is None, result.error
    assert (root / "f.txt").read_text() == new
    entry = result.details.files[0]
    assert_diff_reproduces(root.parent / "scratch", "f.txt", old.encode(), new.encode(), entry)
    # The whole file's diff: its change where the run of lines ends, the lines after it.
    assert entry.diff == unified_diff(old, new, "f.txt").diff


def test_a_missing_line_in_a_file_too_long_to_search_for_similar_lines_says_to_grep(
    root: Path,
) -> None:
    (root / "f.txt").write_text("".join(f"value_{n} = {n}\n" for n in range(20_001)))
    body = patch("*** Update File: f.txt\n@@\n-valeu_7 = 7\n+value_7 = 8\n")
    result = call(tools(root)["apply_patch"], patch=body)
    assert result.error_code is ErrorCode.NO_MATCH
    assert result.error == (
        "f.txt: chunk 1 (patch line 4): its expected lines (the ' ' and '-' lines) are not in "
        "the file. The file has 20,001 lines, too many to look for the most similar one: grep "
        "for a distinctive part of the line to find where it is\nNo file was changed: correct "
        "this part and send the whole patch again."
    )
