"""The seven workspace tools; :func:`workspace_tools` builds them over one workspace."""

from __future__ import annotations

import os
from typing import Any

from .._tool import Tool
from ..workspace import Workspace, as_workspace
from . import edit_file, glob, grep, list_files, read_file, run_command, write_file

TOOL_NAMES = (
    "read_file",
    "write_file",
    "edit_file",
    "list_files",
    "glob",
    "grep",
    "run_command",
)


def workspace_tools(
    root_or_workspace: Workspace | str | os.PathLike[str], **options: Any
) -> list[Tool[Any]]:
    """The seven tools, in the order of ``TOOL_NAMES``, confined to one workspace.

    Args:
        root_or_workspace: a :class:`Workspace` or its root directory.
        **options: :class:`WorkspaceOptions` fields, when a root is given.

    Raises:
        NotADirectoryError: the root does not exist.
    """
    workspace = as_workspace(root_or_workspace, **options)
    modules = (read_file, write_file, edit_file, list_files, glob, grep, run_command)
    return [module.build(workspace) for module in modules]
