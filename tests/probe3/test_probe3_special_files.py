"""FIFOs, sockets and device nodes a command leaves in the workspace: no tool blocks on one
(a FIFO with no writer, /dev/zero's endless bytes), none lists one as a file, and reading
one names what it is."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import anyio
import pytest

from workspace_tools import ErrorCode, ToolSession, Workspace, invoke_tool, workspace_tools

pytestmark = pytest.mark.anyio

KINDS = {
    "fifo": "a FIFO (named pipe)",
    "sock": "a socket",
    "zero": "a character device",
}


def _make_specials(root: Path) -> dict[str, str]:
    os.mkfifo(root / "fifo")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(root / "sock"))
    made = {"fifo": KINDS["fifo"], "sock": KINDS["sock"]}
    # A device node needs the right to make one (root outside a user namespace).
    if subprocess.run(["mknod", str(root / "zero"), "c", "1", "5"], check=False).returncode == 0:
        made["zero"] = KINDS["zero"]
    return made


async def test_special_files_are_named_never_read_never_listed(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path)
    session = ToolSession(workspace_tools(workspace), workspace=workspace, checkpoints=True)
    with anyio.fail_after(120):
        made = await session.call("run_command", {"command": "echo hi > a.txt"})
        assert made.error is None, made.error
        specials = _make_specials(tmp_path)
        # A session's read is fingerprinted for its cache: that must not open the FIFO.
        for name, kind in specials.items():
            result = await session.call("read_file", {"path": name})
            assert (result.error_code, result.error) == (
                ErrorCode.TOOL_ERROR,
                f"{name} is {kind}, not a regular file",
            )
        listed = await session.call("list_files", {"recursive": True})
        assert listed.model_text() == "a.txt"
        found = await session.call("glob", {"pattern": "**/*"})
        assert found.model_text() == "a.txt"
        grep = await session.call("grep", {"pattern": "."})
        assert grep.model_text() == "a.txt:1:hi"
        command = "echo more >> a.txt; rm fifo; mkfifo fifo2"
        changed = await session.call("run_command", {"command": command})
        assert changed.details is not None
        paths = [(c["path"], c["change"]) for c in changed.details["changed_files"]]
        assert paths == [("a.txt", "changed")], paths
        for name in ("fifo2", *[n for n in specials if n != "fifo"]):
            edited = await session.call(
                "edit_file", {"path": name, "old_text": "a", "new_text": "b"}
            )
            assert edited.error_code == ErrorCode.TOOL_ERROR, edited
            assert edited.error is not None and "not a regular file" in edited.error


async def test_an_editorconfig_fifo_does_not_hold_up_a_new_file(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / ".editorconfig")
    tools = {t.name: t for t in workspace_tools(tmp_path)}
    with anyio.fail_after(60):
        result = await invoke_tool(tools["write_file"], {"path": "new.txt", "content": "a\nb\n"})
    assert result.error is None, result.error
    assert (tmp_path / "new.txt").read_bytes() == b"a\nb\n"


@pytest.mark.parametrize("where", [".git", ".git/commondir"])
async def test_a_fifo_where_git_keeps_a_file_holds_up_no_walk(tmp_path: Path, where: str) -> None:
    if where != ".git":
        (tmp_path / ".git").mkdir()
    os.mkfifo(tmp_path / where)
    (tmp_path / "a.txt").write_text("a\n")
    tools = {t.name: t for t in workspace_tools(tmp_path)}
    with anyio.fail_after(60):
        result = await invoke_tool(tools["list_files"], {})
    assert result.error is None, result.error
    assert result.model_text() == "a.txt"
