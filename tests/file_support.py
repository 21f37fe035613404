"""Oracles shared by the file tool tests: ``git apply`` for diffs, ``unidiff`` for counts."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from unidiff import PatchSet

from workspace_tools import Workspace, invoke_tool_sync, workspace_tools

# The codec a diff must be encoded in to apply to a file of each encoding label.
DIFF_CODECS = {"utf-8": "utf-8", "utf-8-bom": "utf-8", "latin-1": "latin-1"}


def tools(workspace: Workspace | Path, **options: Any) -> dict[str, Any]:
    """The seven tools by name."""
    return {t.name: t for t in workspace_tools(workspace, **options)}


def call(tool: Any, **arguments: Any) -> Any:
    """One call through invoke_tool_sync."""
    return invoke_tool_sync(tool, arguments)


def assert_diff_reproduces(
    scratch: Path, rel: str, old: bytes | None, new: bytes, details: Any
) -> None:
    """``details.diff`` applied by ``git apply`` to ``old`` gives exactly ``new``, and its
    additions/deletions are what unidiff counts."""
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    target = scratch / rel
    if old is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(old)
    patch = details.diff.encode(DIFF_CODECS[details.encoding])
    if patch:
        subprocess.run(
            ["git", "apply", "--whitespace=nowarn", "-"],
            input=patch,
            cwd=scratch,
            check=True,
            capture_output=True,
        )
    assert target.read_bytes() == new
    patch_set = PatchSet(details.diff)
    assert (details.additions, details.deletions) == (
        sum(f.added for f in patch_set),
        sum(f.removed for f in patch_set),
    )
