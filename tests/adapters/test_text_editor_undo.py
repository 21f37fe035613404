"""The older text editors' ``undo_edit`` served from a session's checkpoints: the host's
bytes and modes back, one path at a time, whichever tool changed it, in a sandboxed session
too; tool_result blocks valid against the anthropic SDK's types."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anthropic.types import ToolResultBlockParam

from sandbox import Sandbox
from tests.adapters._sdk import sdk_valid
from workspace_tools import ErrorCode, ToolResult, ToolSession, invoke_tool_sync, workspace_tools
from workspace_tools.adapters import anthropic_text_editor
from workspace_tools.adapters.anthropic import anthropic_tool_result
from workspace_tools.adapters.anthropic_text_editor import text_editor_tool
from workspace_tools.session._checkpoints import Checkpoints
from workspace_tools.session._undo import CheckpointedCalls
from workspace_tools.workspace import Workspace

LATIN1_CRLF = b"caf\xe9 = 1\r\nname = 'x'\r\nend\r\n"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "w"
    path.mkdir()
    (path / "u.txt").write_bytes(LATIN1_CRLF)
    (path / "other.txt").write_bytes(b"other\n")
    return path


def block(result: ToolResult) -> dict[str, Any]:
    made = anthropic_tool_result(result)
    assert sdk_valid(ToolResultBlockParam, made), made
    return made


def session_for(root: Path, version: str = "20250124", **options: Any) -> ToolSession:
    workspace = Workspace(root)
    editor = text_editor_tool(workspace, version=version)
    return ToolSession(
        [*workspace_tools(workspace), editor], workspace=workspace, checkpoints=True, **options
    )


def edit(session: ToolSession, old: str, new: str, path: str = "u.txt") -> None:
    arguments = {"command": "str_replace", "path": path, "old_str": old, "new_str": new}
    result = session.call_sync("str_replace_editor", arguments)
    assert result.error is None, result.error


def undo_edit(session: ToolSession, path: str = "u.txt") -> ToolResult:
    return session.call_sync(
        "str_replace_editor", {"command": "undo_edit", "path": path}, call_id="toolu_undo"
    )


@pytest.mark.parametrize("version", ["20250124", "20241022"])
def test_undo_edit_steps_back_through_the_checkpoints_byte_for_byte(
    root: Path, version: str
) -> None:
    with session_for(root, version) as session:
        edit(session, "name = 'x'", "name = 'y'")
        after_first = (root / "u.txt").read_bytes()
        assert after_first == b"caf\xe9 = 1\r\nname = 'y'\r\nend\r\n"
        inserted = session.call_sync(
            "str_replace_editor",
            {"command": "insert", "path": "u.txt", "insert_line": 3, "new_str": "more"},
        )
        assert inserted.error is None, inserted.error

        first = undo_edit(session)
        assert block(first) == {
            "type": "tool_result",
            "tool_use_id": "toolu_undo",
            "content": "Last edit to u.txt undone successfully.",
        }
        assert (root / "u.txt").read_bytes() == after_first
        assert first.details["diff"] == (
            "diff --git a/u.txt b/u.txt\n--- a/u.txt\n+++ b/u.txt\n"
            "@@ -1,4 +1,3 @@\n caf\xe9 = 1\r\n name = 'y'\r\n end\r\n-more\r\n"
        )
        assert first.details["encoding"] == "latin-1"
        # git applies the diff (in the file's encoding) to the file as it was.
        scratch = root.parent / "git"
        scratch.mkdir()
        (scratch / "u.txt").write_bytes(after_first + b"more\r\n")
        subprocess.run(
            ["git", "apply", "--whitespace=nowarn", "-"],
            input=first.details["diff"].encode("latin-1"),
            cwd=scratch,
            check=True,
        )
        assert (scratch / "u.txt").read_bytes() == after_first
        assert (first.details["additions"], first.details["deletions"]) == (0, 1)
        assert first.details["changed_files"] == [
            {"path": "u.txt", "change": "changed", "type": "file", "restorable": True}
        ]
        recorded = [row.model_dump() for row in session.steps[-1].changed_files or []]
        assert recorded == first.details["changed_files"]

        assert undo_edit(session).error is None
        assert (root / "u.txt").read_bytes() == LATIN1_CRLF
        none_left = undo_edit(session)
        assert block(none_left) == {
            "type": "tool_result",
            "tool_use_id": "toolu_undo",
            "content": "Error: No edit history found for u.txt.",
            "is_error": True,
        }
        assert none_left.error_code is ErrorCode.NOT_FOUND
        # The restored file counts as read: the editor edits it again without staleness.
        edit(session, "end", "END")
        assert (root / "u.txt").read_bytes() == LATIN1_CRLF.replace(b"end", b"END")


def test_undo_edit_undoes_whichever_tool_changed_the_path_and_only_that_path(
    root: Path,
) -> None:
    os.chmod(root / "u.txt", 0o644)
    with session_for(root) as session:
        command = "printf 'run\\n' >> u.txt && chmod 755 u.txt && printf 'x\\n' > other.txt"
        ran = session.call_sync("run_command", {"command": command})
        assert ran.error is None, ran.error
        undone = undo_edit(session)
        assert undone.error is None, undone.error
        assert (root / "u.txt").read_bytes() == LATIN1_CRLF
        assert stat.S_IMODE((root / "u.txt").stat().st_mode) == 0o644
        assert "old mode 100755\nnew mode 100644\n" in undone.details["diff"]
        # The same step's change to other.txt stays, and the session's undo still has it.
        assert (root / "other.txt").read_bytes() == b"x\n"
        assert session.undo().applied
        assert (root / "other.txt").read_bytes() == b"other\n"


def test_undo_edit_of_a_created_file_removes_it(root: Path) -> None:
    with session_for(root) as session:
        made = session.call_sync(
            "str_replace_editor", {"command": "create", "path": "new/n.py", "file_text": "n\n"}
        )
        assert made.error is None, made.error
        undone = undo_edit(session, "new/n.py")
        assert undone.content == "Last edit to new/n.py undone successfully."
        assert not (root / "new" / "n.py").exists()
        assert undone.details["changed_files"] == [
            {"path": "new/n.py", "change": "deleted", "type": "file", "restorable": True}
        ]


def test_undo_edit_refuses_a_file_changed_since_by_someone_else(root: Path) -> None:
    with session_for(root) as session:
        edit(session, "end", "END")
        (root / "u.txt").write_bytes(b"theirs\n")
        refused = undo_edit(session)
        assert block(refused)["is_error"] is True
        assert refused.error_code is ErrorCode.STALE_FILE
        assert refused.error == (
            "Error: u.txt was changed since this session's last step that changed it (by "
            "someone else); undo_edit left it as it is. View it and make the change you "
            "want with str_replace."
        )
        assert (root / "u.txt").read_bytes() == b"theirs\n"


def test_undo_edit_of_a_directory_is_refused(root: Path) -> None:
    with session_for(root) as session:
        ran = session.call_sync("run_command", {"command": "mkdir d && printf x > d/f"})
        assert ran.error is None, ran.error
        refused = undo_edit(session, "d")
        assert refused.error_code is ErrorCode.IS_A_DIRECTORY
        assert (
            refused.error == "Error: d is a directory; undo_edit undoes the last change to a file."
        )
        assert (root / "d" / "f").read_bytes() == b"x"


@pytest.fixture
def box(root: Path) -> Iterator[Sandbox]:
    sandbox = Sandbox()
    try:
        yield sandbox.confined_to(str(root))
    finally:
        sandbox.close()


def test_in_a_sandboxed_session_undo_edit_restores_what_a_child_wrote(
    root: Path, box: Sandbox
) -> None:
    # Without checkpoints, the edit runs in a child whose history is lost with it.
    workspace = Workspace(root)
    plain = ToolSession(
        [text_editor_tool(workspace, version="20250124")], workspace=workspace, sandbox=box
    )
    edit(plain, "end", "END")
    assert undo_edit(plain).error == "Error: No edit history found for u.txt."
    assert (root / "u.txt").read_bytes() == LATIN1_CRLF.replace(b"end", b"END")
    (root / "u.txt").write_bytes(LATIN1_CRLF)

    with session_for(root, sandbox=box) as session:
        edit(session, "end", "END")
        assert (root / "u.txt").read_bytes() == LATIN1_CRLF.replace(b"end", b"END")
        undone = undo_edit(session)
        assert block(undone)["content"] == "Last edit to u.txt undone successfully."
        assert (root / "u.txt").read_bytes() == LATIN1_CRLF
        # The child's next edit sees the restored file as read (not stale).
        edit(session, "name", "NAME")
        assert (root / "u.txt").read_bytes() == LATIN1_CRLF.replace(b"name", b"NAME")


def test_without_checkpoints_undo_edit_uses_the_tool_s_own_history(root: Path) -> None:
    workspace = Workspace(root)
    session = ToolSession([text_editor_tool(workspace, version="20250124")], workspace=workspace)
    assert session.checkpoints is None
    edit(session, "end", "END")
    assert undo_edit(session).content == "Last edit to u.txt undone successfully."
    assert (root / "u.txt").read_bytes() == LATIN1_CRLF


def test_the_tool_s_own_history_keeps_its_byte_budget_letting_the_oldest_go(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Room for the contents before two changes of u.txt (34 bytes each) and 5 bytes more:
    # other.txt's change (6 bytes before) lets the first change of u.txt go.
    monkeypatch.setattr(anthropic_text_editor, "HISTORY_BYTES", 2 * len(LATIN1_CRLF) + 5)
    tool = text_editor_tool(root, version="20250124")

    def call(arguments: dict[str, Any]) -> ToolResult:
        return invoke_tool_sync(tool, arguments)

    for old, new in (("end", "END"), ("name", "NAME")):
        call({"command": "str_replace", "path": "u.txt", "old_str": old, "new_str": new})
    call({"command": "str_replace", "path": "other.txt", "old_str": "other", "new_str": "x"})
    assert call({"command": "undo_edit", "path": "other.txt"}).content == (
        "Last edit to other.txt undone successfully."
    )
    assert call({"command": "undo_edit", "path": "u.txt"}).content == (
        "Last edit to u.txt undone successfully."
    )
    assert (root / "u.txt").read_bytes() == LATIN1_CRLF.replace(b"end", b"END")
    gone = call({"command": "undo_edit", "path": "u.txt"})
    assert (gone.error_code, gone.error) == (
        ErrorCode.NOT_FOUND,
        "Error: No edit history found for u.txt.",
    )


def test_an_mcp_server_s_checkpointed_calls_serve_undo_edit_too(root: Path, tmp_path: Path) -> None:
    workspace = Workspace(root)
    editor = text_editor_tool(workspace, version="20250124")
    checkpoints = Checkpoints(workspace, directory=tmp_path / "store")
    calls = CheckpointedCalls(checkpoints)

    async def call(arguments: dict[str, Any]) -> ToolResult:
        return await calls(editor, arguments, "toolu_1", None)

    changed = anyio.run(
        call, {"command": "str_replace", "path": "u.txt", "old_str": "end", "new_str": "END"}
    )
    assert changed.error is None, changed.error
    undone = anyio.run(call, {"command": "undo_edit", "path": "u.txt"})
    assert undone.error is None, undone.error
    assert (root / "u.txt").read_bytes() == LATIN1_CRLF
    assert undone.details["changed_files"] == [
        {"path": "u.txt", "change": "changed", "type": "file", "restorable": True}
    ]
    assert checkpoints.last_step() is None


def test_a_session_of_the_editor_alone_takes_its_workspace_for_checkpoints(root: Path) -> None:
    """As a reader writes it: no workspace= given, the editor's own workspace is the session's,
    so undo_edit goes through checkpoints and puts the bytes back."""
    with ToolSession([text_editor_tool(root, version="20250124")], checkpoints=True) as session:
        edit(session, "name = 'x'", "name = 'y'")
        undone = undo_edit(session)
        assert block(undone)["content"] == "Last edit to u.txt undone successfully."
        assert session.steps[-1].changed_files is not None, session.steps[-1]
    assert (root / "u.txt").read_bytes() == LATIN1_CRLF
