"""The result errors of calls that failed outside the tool's own words: an ``OSError`` that
left the call, and a sandbox that failed or could not give a protection."""

from __future__ import annotations

import os

from pydantic import BaseModel

from sandbox import SandboxError, SandboxUnavailable
from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools.workspace import Workspace
from workspace_tools.workspace._files import OUT_OF_FDS, OUT_OF_FDS_WORDS, os_error
from workspace_tools.workspace._near_miss import not_found_hint


def call_os_error(
    exc: OSError, tool_name: str, args: BaseModel, workspace: Workspace | None = None
) -> ToolError:
    """The result error for an ``OSError`` that left a call of ``tool_name``: the code and
    words of :func:`os_error` for the file the error names, else for the call's ``path``
    argument; an error that names neither says which tool failed. An ``OSError`` without an
    errno (``TimeoutError("upstream did not answer")``) keeps its own message, as any
    exception does.

    With the tool's ``workspace``, a file the error names by its absolute path under the
    root is named as results name paths, relative to the root (a custom tool's ``open`` of
    ``resolve(path).real`` never shows the model the host's directories), and a missing one
    gets the path the model most likely meant (``; did you mean 'README.md'?``).

    Out of file descriptors, the call failed for want of them, not for a file: the words
    say so with or without a file, and a host path outside the root that the call's
    ``path`` did not name (one the sandbox opened for itself, a module imported on the way)
    is not shown."""
    if exc.errno is None:
        return ToolError(str(exc) or type(exc).__name__, ErrorCode.TOOL_ERROR)
    path = getattr(args, "path", None)
    subject = exc.filename if exc.filename is not None else path
    if isinstance(subject, bytes):
        subject = os.fsdecode(subject)
    if exc.errno in OUT_OF_FDS and _host_path(subject, path, workspace):
        subject = None
    if isinstance(subject, str):
        if workspace is None:
            return os_error(exc, subject)
        root = str(workspace.root)
        # Only a path placed under the root is named from it: a relative one the tool
        # opened itself is relative to the process's directory, not the root.
        placed = subject == path
        if _under(subject, root):
            subject, placed = workspace.rel(subject), True
        error = os_error(exc, subject)
        if error.code is ErrorCode.NOT_FOUND and placed and not os.path.isabs(subject):
            hint = not_found_hint(root, subject)
            if hint:
                return ToolError(error.message + hint, error.code, details=error.details)
        return error
    error = os_error(exc, tool_name)
    words = OUT_OF_FDS_WORDS.get(exc.errno) or exc.strerror or str(exc)
    return ToolError(f"{tool_name} failed: {words}", error.code)


def _under(subject: str, root: str) -> bool:
    """Whether the absolute path ``subject`` is ``root`` or below it (lexically)."""
    return os.path.isabs(subject) and (
        subject == root or subject.startswith(root.rstrip(os.sep) + os.sep)
    )


def _host_path(subject: object, path: object, workspace: Workspace | None) -> bool:
    """Whether ``subject`` is an absolute path neither the call's ``path`` nor under the
    workspace's root: a file the tool, the sandbox or an import opened for itself."""
    return (
        isinstance(subject, str)
        and os.path.isabs(subject)
        and subject != path
        and (workspace is None or not _under(subject, str(workspace.root)))
    )


def sandbox_tool_error(exc: SandboxError | SandboxUnavailable) -> ToolError:
    """The result error for a sandbox failure: ``SANDBOX_ERROR`` for a crashed child (the
    message names the signal), ``SANDBOX_UNAVAILABLE`` for a protection nobody can give."""
    if isinstance(exc, SandboxUnavailable):
        return ToolError(str(exc), ErrorCode.SANDBOX_UNAVAILABLE)
    return ToolError(str(exc), ErrorCode.SANDBOX_ERROR)
