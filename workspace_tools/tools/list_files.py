"""list_files: entries of a directory, optionally recursive, honouring ignore rules."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, Field

from workspace_tools._output import ToolOutput, ToolPresentation, tool_output
from workspace_tools._tool import Tool, ToolContext, tool
from workspace_tools.search._discovery import (
    CompactRepr,
    ignored_hint,
    note,
    resolve_start,
    with_limit_default,
)
from workspace_tools.tools._walk_notes import walk_notes
from workspace_tools.workspace import Workspace
from workspace_tools.workspace._files import DirFds
from workspace_tools.workspace._fingerprint import tree_fingerprint
from workspace_tools.workspace._paths import shown_path
from workspace_tools.workspace._walk import DIRECTORY

DESCRIPTION = """\
List the files and directories in a directory of the workspace, one path per line, sorted. \
Directories end with '/'. Paths are relative to the workspace root.

- Set recursive=true to list everything below the directory; otherwise only its direct \
entries are shown.
- Hidden files are included. Entries matched by .gitignore, .ignore or .git/info/exclude \
rules are skipped (files git tracks are always shown) and counted; set include_ignored=true \
to see them. The .git directory is never listed.
- Symbolic links are listed but never followed.
- Output stops after `limit` entries with a note giving the total. To find files by name, \
glob is usually better; to search contents, use grep."""


class ListFilesArgs(BaseModel):
    """List the entries of a directory."""

    path: str = Field(".", description="Directory to list, relative to the workspace root")
    recursive: bool = Field(False, description="List everything below the directory")
    include_ignored: bool = Field(
        False, description="Also list entries that .gitignore/.ignore rules skip"
    )
    limit: int = Field(1000, ge=1, description="Maximum number of entries to show")


class ListEntry(BaseModel):
    """One listed entry: its path (relative to the root), type and size in bytes (``None``
    for a directory, the link's own size for a symlink)."""

    path: str
    type: Literal["file", "directory", "symlink"]
    size: int | None


class ListFilesDetails(CompactRepr):
    """What ``list_files`` found: ``entries`` cut at the limit, ``count`` of all, whether the
    listing was ``truncated``, and how many entries ignore rules skipped."""

    path: str
    entries: list[ListEntry]
    count: int
    truncated: bool
    ignored: int
    unreadable: list[str] = Field(
        default_factory=list,
        description="directories below the path this process may not read (not listed)",
    )


def execute(args: ListFilesArgs, context: ToolContext) -> ToolOutput:
    """Run a ``list_files`` call on ``context.workspace``."""
    workspace = context.need_workspace()
    walker = workspace.walker
    root = str(workspace.root)
    start = resolve_start(workspace, args.path, need_dir=True)
    limit = args.limit
    walk = walker.walk(
        start.real, start.rel, recursive=args.recursive, include_ignored=args.include_ignored
    )
    shown = walk.entries[:limit]
    with DirFds(root) as dirs:
        entries = [
            ListEntry(path=rel, type=kind, size=_size(dirs, rel, kind)) for rel, kind in shown
        ]
    count = len(walk.entries)
    lines = [shown_path(e.path + "/" if e.type == DIRECTORY else e.path) for e in entries]
    if not lines:
        lines.append("Directory is empty" + ignored_hint(walk.ignored, args.include_ignored))
    elif count > limit:
        lines.append(
            note(
                f"Showing {limit:,} of {count:,} entries; list a subdirectory or raise "
                "limit to see the rest"
            )
        )
    unreadable, notes = walk_notes(walk, "listed")
    lines += notes
    details = ListFilesDetails(
        path=start.shown,
        entries=entries,
        count=count,
        truncated=count > limit,
        ignored=walk.ignored,
        unreadable=unreadable,
    )
    return tool_output("\n".join(lines), details)


def build(workspace: Workspace) -> Tool[ListFilesArgs]:
    """The ``list_files`` tool over ``workspace``."""
    return tool(
        name="list_files",
        description=DESCRIPTION,
        parameters=with_limit_default(ListFilesArgs, workspace.options.list_limit),
        execute=execute,
        stateless=True,
        presentation=lambda a: ToolPresentation(
            label="List files", icon="folder", detail=a.path or "."
        ),
        read_only=True,
        workspace=workspace,
        cache_key=lambda a: tree_fingerprint(workspace, a.path, a.recursive),
    )


def _size(dirs: DirFds, rel: str, kind: str) -> int | None:
    # Stat relative to the directory's fd, reached without following a link: a directory
    # swapped since the walk gives no size rather than an outside file's.
    if kind == DIRECTORY:
        return None
    head, _, name = rel.rpartition("/")
    try:
        return os.stat(name, dir_fd=dirs.get(head), follow_symlinks=False).st_size
    except OSError:
        return None
