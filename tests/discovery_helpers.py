"""Helpers for the discovery tests: git as the oracle, the three tools' file sets."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from workspace_tools import Tool, invoke_tool_sync, workspace_tools

BIG = 1_000_000


def git(root: Path, *args: str) -> bytes:
    """Run git in ``root`` with the environment the tools see (so that both read the same
    global configuration and excludes file)."""
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True).stdout


def git_listed(root: Path) -> set[str]:
    """``git ls-files --cached --others --exclude-standard``: the oracle's file set."""
    out = git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    return {os.fsdecode(p) for p in out.split(b"\0") if p}


def tools(root: Path) -> dict[str, Tool[Any]]:
    return {t.name: t for t in workspace_tools(root)}


def call(tool: Tool[Any], **args: Any) -> Any:
    result = invoke_tool_sync(tool, args)
    assert result.error is None, result.error
    return result


def discovered(root: Path) -> tuple[set[str], set[str], set[str]]:
    """File sets of list_files(recursive), glob('**/*') and a match-everything grep."""
    t = tools(root)
    listed = call(t["list_files"], recursive=True, limit=BIG).details
    globbed = call(t["glob"], pattern="**/*", limit=BIG).details
    grepped = call(t["grep"], pattern="^", output_mode="files_with_matches", limit=BIG).details
    return (
        {e.path for e in listed.entries if e.type != "directory"},
        set(globbed.matches),
        {f.path for f in grepped.files},
    )
