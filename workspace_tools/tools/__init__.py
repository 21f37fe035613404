"""The workspace tools; :func:`workspace_tools` builds them over one workspace.
:func:`shell_tools` builds the persistent shell and the background process tools over a
:class:`ShellSession`, which owns what they start."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from sandbox import Sandbox
from workspace_tools._tool import Tool
from workspace_tools.tools import (
    apply_patch,
    edit_file,
    glob,
    grep,
    list_files,
    processes,
    read_file,
    run_command,
    shell,
    write_file,
)
from workspace_tools.tools._shell_session import ShellSession
from workspace_tools.workspace import Workspace, as_workspace

TOOL_NAMES = (
    "read_file",
    "write_file",
    "edit_file",
    "list_files",
    "glob",
    "grep",
    "run_command",
    "apply_patch",
)

SHELL_TOOL_NAMES = (
    "shell",
    "start_process",
    "read_process_output",
    "write_process_stdin",
    "stop_process",
    "list_processes",
)


def workspace_tools(
    root_or_workspace: Workspace | str | os.PathLike[str],
    *,
    sandbox: Sandbox | None = None,
    **options: Any,
) -> list[Tool[Any]]:
    """The tools, in the order of ``TOOL_NAMES``, confined to one workspace.

    Args:
        root_or_workspace: a :class:`Workspace` or its root directory.
        sandbox: run every call in this sandbox, with writes confined to the workspace
            root (and a private temp dir) where a layer can confine them. Calls in a
            sandbox report no progress updates.
        **options: :class:`WorkspaceOptions` fields, when a root is given.

    Raises:
        NotADirectoryError: the root does not exist.
        SandboxUnavailable: the sandbox requires a protection no layer here can give.
    """
    workspace = as_workspace(root_or_workspace, **options)
    if sandbox is None:
        modules = (
            *(read_file, write_file, edit_file, list_files, glob, grep, run_command),
            apply_patch,
        )
        return [module.build(workspace) for module in modules]
    box = sandbox.confined_to(str(workspace.root))
    file_tools = (read_file, write_file, edit_file, list_files, glob, grep)
    tools = [
        # Tool.sandbox: the call pipeline runs their execute in a child of box.
        *(dataclasses.replace(module.build(workspace), sandbox=box) for module in file_tools),
        run_command.build(workspace, sandbox=box),
        dataclasses.replace(apply_patch.build(workspace), sandbox=box),
    ]
    start_ahead(box, tools)
    return tools


def start_ahead(box: Sandbox, tools: Sequence[Tool[Any]]) -> None:
    """Tools bound to ``box``: a call is sure to come, so its spawn server and one warm
    worker of calls start now, in the background (:meth:`Sandbox.start_calls_ahead`),
    holding what the calls of ``tools`` name (each one's ``execute``, argument model,
    workspace and runner, as the call pipeline sends them): the first call need not wait
    for them. Returns at once; a call reports its own errors."""
    samples = tuple(
        (
            t.execute,
            (t.parameters.model_construct(),),
            {"workspace": t.workspace, "runner": t.runner},
        )
        for t in tools
    )
    box.start_calls_ahead(*samples, reuse_process=any(t.stateless for t in tools))


def shell_tools(session: ShellSession) -> list[Tool[Any]]:
    """The tools of ``SHELL_TOOL_NAMES`` over ``session``: ``shell`` (its persistent shell)
    and the five background process tools. They run in this process (never in a sandbox
    child: the shell and the processes they hold live here), and what they start runs in
    the session's sandbox; closing the session ends it all."""
    return [shell.build(session), *processes.build(session)]
