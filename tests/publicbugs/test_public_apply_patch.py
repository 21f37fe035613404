"""apply_patch against public reports on peers' patch and edit tools."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.file_support import call, tools
from workspace_tools import ErrorCode


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "w"
    path.mkdir()
    return path


def patch(*operations: str) -> str:
    return "*** Begin Patch\n" + "".join(operations) + "*** End Patch\n"


def test_space_indented_patch_adds_tab_indented_lines_to_a_tab_file(root: Path) -> None:
    """https://github.com/anthropics/claude-code/issues/26996: a model writes the spaces
    its reader shows where a Go file has tabs; the lines it adds must not come out as
    spaces in a gofmt'd (or Makefile) file."""
    (root / "g.go").write_bytes(b"func f() {\n\tif x {\n\t\treturn 1\n\t}\n}\n")
    body = patch(
        "*** Update File: g.go\n@@\n func f() {\n     if x {\n-        return 1\n"
        "+        y := 2\n+        return y\n     }\n"
    )
    result = call(tools(root)["apply_patch"], patch=body)
    assert result.error is None, result.error
    assert (root / "g.go").read_bytes() == (
        b"func f() {\n\tif x {\n\t\ty := 2\n\t\treturn y\n\t}\n}\n"
    )


def test_makefile_recipe_keeps_its_tab(root: Path) -> None:
    """https://github.com/anthropics/claude-code/issues/26996: a recipe line indented with
    spaces is a make error ("missing separator")."""
    (root / "Makefile").write_bytes(b"all:\n\techo a\n\techo b\n")
    body = patch("*** Update File: Makefile\n@@\n     echo a\n-    echo b\n+    echo c\n")
    result = call(tools(root)["apply_patch"], patch=body)
    assert result.error is None, result.error
    assert (root / "Makefile").read_bytes() == b"all:\n\techo a\n\techo c\n"


def test_patch_written_at_the_wrong_depth_lands_at_the_files_depth(root: Path) -> None:
    """https://github.com/anthropics/claude-code/issues/26996 (the same kind: indentation
    the model got wrong while the structure is right): the added lines take the file's
    base indentation, so the Python stays valid."""
    source = "class A:\n    def f(self):\n        return 1\n"
    (root / "a.py").write_text(source)
    body = patch(
        "*** Update File: a.py\n@@\n def f(self):\n-    return 1\n+    x = 2\n+\n+    return x\n"
    )
    result = call(tools(root)["apply_patch"], patch=body)
    assert result.error is None, result.error
    new = (root / "a.py").read_text()
    assert new == "class A:\n    def f(self):\n        x = 2\n\n        return x\n"
    compile(new, "a.py", "exec")


def test_mixed_indentation_is_not_guessed(root: Path) -> None:
    """https://github.com/anthropics/claude-code/issues/26996: where the paired lines do
    not agree on one tab width, added lines are written as given, never re-guessed."""
    (root / "m.c").write_bytes(b"int f() {\n\tint a;\n    int b;\n}\n")
    body = patch("*** Update File: m.c\n@@\n   int a;\n-  int b;\n+  int c;\n")
    result = call(tools(root)["apply_patch"], patch=body)
    assert result.error is None, result.error
    assert (root / "m.c").read_bytes() == b"int f() {\n\tint a;\n  int c;\n}\n"


def test_out_of_order_chunks_change_nothing(root: Path) -> None:
    """https://github.com/vybestack/llxprt-code/issues/3597: chunks out of line order must
    never duplicate text; the patch is refused and the file is untouched."""
    original = "".join(f"line{i}\n" for i in range(1, 21))
    (root / "o.txt").write_text(original)
    body = patch(
        "*** Update File: o.txt\n@@\n line15\n-line16\n+LINE16\n line17\n"
        "@@\n line2\n-line3\n+LINE3\n line4\n"
    )
    result = call(tools(root)["apply_patch"], patch=body)
    assert result.error_code is ErrorCode.NO_MATCH, result.error
    assert "give the chunks of a file in the order of its lines" in result.error
    assert (root / "o.txt").read_text() == original


def test_a_failing_file_leaves_the_other_files_untouched(root: Path) -> None:
    """https://github.com/tao12345666333/ankaloop/pull/48: a patch whose second file does
    not apply must not leave the first one changed."""
    (root / "b.py").write_text("x = 1\n")
    (root / "a.py").write_text("y = 1\n")
    body = patch(
        "*** Update File: b.py\n@@\n-x = 1\n+x = 2\n",
        "*** Update File: a.py\n@@\n-not here\n+y = 2\n",
    )
    result = call(tools(root)["apply_patch"], patch=body)
    assert result.error_code is ErrorCode.NO_MATCH, result.error
    assert (root / "b.py").read_text() == "x = 1\n"
    assert (root / "a.py").read_text() == "y = 1\n"


def test_cjk_text_crlf_file_and_lf_patch(root: Path) -> None:
    """https://github.com/openai/codex/issues/9580 (multi-byte characters near a cut) and
    https://github.com/openai/codex/issues/21164 (CRLF files get LF lines)."""
    (root / "v.css").write_bytes("/* 阴影 */\r\n--sm-shadow-1: 0;\r\n".encode())
    body = patch(
        "*** Update File: v.css\n@@\n /* 阴影 */\n---sm-shadow-1: 0;\n+--sm-shadow-1: 1;\n"
    )
    result = call(tools(root)["apply_patch"], patch=body)
    assert result.error is None, result.error
    assert (root / "v.css").read_bytes() == "/* 阴影 */\r\n--sm-shadow-1: 1;\r\n".encode()


def test_deleting_a_symlink_never_deletes_its_target(root: Path) -> None:
    """https://github.com/oryx-labs/oryxos/pull/146 (an agent's delete_file followed a
    link) and https://github.com/atom/tree-view/issues/233: deleting a link removed the
    file it points to. apply_patch works on a link's target, so it refuses to delete or
    move a link and changes nothing; updating through the link still edits the target."""
    (root / "real.md").write_text("hello\n")
    (root / "CLAUDE.md").symlink_to("real.md")
    apply = tools(root)["apply_patch"]
    for body in (
        patch("*** Delete File: CLAUDE.md\n"),
        patch("*** Update File: CLAUDE.md\n*** Move to: OTHER.md\n@@\n-hello\n+moved\n"),
    ):
        result = call(apply, patch=body)
        assert result.error_code is ErrorCode.INVALID_ARGUMENTS, result.error
        assert result.error.startswith(
            ("Delete File: CLAUDE.md is a symbolic link (to real.md)", "Update File: CLAUDE.md")
        ), result.error
        assert (root / "CLAUDE.md").is_symlink()
        assert (root / "real.md").read_text() == "hello\n"
        assert not (root / "OTHER.md").exists()
    result = call(apply, patch=patch("*** Update File: CLAUDE.md\n@@\n-hello\n+bye\n"))
    assert result.error is None, result.error
    assert (root / "CLAUDE.md").is_symlink()
    assert (root / "real.md").read_text() == "bye\n"
    result = call(apply, patch=patch("*** Delete File: real.md\n"))
    assert result.error is None, result.error
    assert not (root / "real.md").exists()
