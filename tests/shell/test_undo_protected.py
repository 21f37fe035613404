"""An undo runs outside the sandbox: it never puts back under its own name a protected path
(one tools on the host run, `.envrc`) that a sandboxed persistent shell wrote. The shell
holds such a file under its own name until it ends, so checkpoints between can hold it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import Sandbox
from sandbox.layers import HOST_EXEC_PROTECTION
from workspace_tools import ShellSession, ToolSession, Workspace, shell_tools, workspace_tools


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Sandbox]:
    sandbox = Sandbox(best_effort=True)
    try:
        if HOST_EXEC_PROTECTION not in sandbox.confined_to(str(tmp_path)).capabilities:
            pytest.skip("no layer here keeps host exec paths read-only")
        yield sandbox
    finally:
        sandbox.close()


def test_undo_of_a_sandboxed_shells_removal_leaves_a_protected_path_out(
    tmp_path: Path, box: Sandbox
) -> None:
    # The session is given the tools only (sandboxed file tools, and the shell tools of
    # a sandboxed shell session): what their sandboxes protect is what the undo leaves.
    root = tmp_path / "work"
    root.mkdir()
    (root / "a.txt").write_bytes(b"a\n")
    workspace = Workspace(root)
    with ShellSession(workspace, sandbox=box) as shells:
        tools = [*workspace_tools(workspace, sandbox=box), *shell_tools(shells)]
        with ToolSession(tools, checkpoints=True) as session:
            wrote = session.call_sync("shell", {"command": "echo 'echo planted' > .envrc"})
            removed = session.call_sync("shell", {"command": "rm .envrc && echo x > a.txt"})
            undone = session.undo()

    assert (wrote.error, removed.error) == (None, None)
    assert undone.applied
    assert [(f.change, f.path) for f in undone.files] == [("changed", "a.txt")]
    assert undone.protected == [".envrc"]
    assert sorted(p.name for p in root.iterdir()) == ["a.txt"]
    assert (root / "a.txt").read_bytes() == b"a\n"
