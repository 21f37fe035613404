"""A sandboxed listing ignores what git and an unsandboxed listing ignore, the user's global
excludes file included: found through ``XDG_CONFIG_HOME`` (git's default place for it) or
``core.excludesFile`` in the config ``GIT_CONFIG_GLOBAL`` names, which the sandbox's
environment keeps (before, it dropped both, and the sandboxed tools listed every file
that file hides)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox import Sandbox
from tests.discovery_helpers import git, git_listed
from workspace_tools import invoke_tool_sync, workspace_tools


@pytest.mark.parametrize("layers", [False, True], ids=["portable", "layers"])
@pytest.mark.parametrize("named_by", ["XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL"])
def test_the_global_excludes_file_applies_in_the_sandbox_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layers: bool, named_by: str
) -> None:
    config = tmp_path / "config"
    (config / "git").mkdir(parents=True)
    (config / "git" / "ignore").write_text("*.log\n")
    if named_by == "XDG_CONFIG_HOME":
        monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
        monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    else:
        (config / "global.gitconfig").write_text(
            f"[core]\n\texcludesFile = {config / 'git' / 'ignore'}\n"
        )
        monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config / "global.gitconfig"))
        monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    root = tmp_path / "ws"
    root.mkdir()
    git(root, "init", "-q")
    for name in ("a.log", "b.txt", "c.py"):
        (root / name).write_text(name)
    listed_by_git = sorted(git_listed(root))
    box = Sandbox(layers=layers)
    try:
        listed = {}
        for where, sandbox in (("in process", None), ("sandboxed", box)):
            tools = {t.name: t for t in workspace_tools(root, sandbox=sandbox)}
            result = invoke_tool_sync(tools["list_files"], {})
            listed[where] = result.model_text().splitlines()
    finally:
        box.close()
    assert (
        listed
        == {"in process": listed_by_git, "sandboxed": listed_by_git}
        == {
            "in process": ["b.txt", "c.py"],
            "sandboxed": ["b.txt", "c.py"],
        }
    )
