"""write_file: create or overwrite a text file, atomically, keeping encoding and newlines."""

from __future__ import annotations

from pydantic import BaseModel, Field

from workspace_tools._output import ToolPresentation, tool_output
from workspace_tools._tool import Tool, ToolContext, path_argument, tool
from workspace_tools.text._decode import convert_newlines, count_lines
from workspace_tools.workspace import Workspace
from workspace_tools.workspace._textfile import load_text, save_change

DESCRIPTION = """\
Create a file, or replace the whole content of an existing one, in the workspace.

- Use it for new files and complete rewrites; to change part of a file use edit_file, which
  sends less and cannot drop what you did not mean to touch.
- Read an existing file first: if it changed on disk since you last read or wrote it, the
  write is refused (STALE_FILE) and you must read it again.
- `content` is the whole file, written exactly. Missing parent directories are created.
  An existing file keeps its encoding, byte order mark, line-ending style (LF or CRLF) and
  permissions; a new file is UTF-8 with LF line endings unless .editorconfig says otherwise.
- A file you may not write (read-only, another user's) is refused with PERMISSION_DENIED and
  left unchanged; a full disk gives DISK_FULL, also leaving the file as it was.
- Binary files are not overwritten. Paths outside the workspace are refused."""


class WriteFileArgs(BaseModel):
    """Create or overwrite a text file."""

    path: str = Field(description="File path, relative to the workspace root")
    content: str = Field(description="The whole new content of the file")


class WriteFileContent(BaseModel):
    """What the model reads: the path, whether the file is new, its lines and bytes, and a
    ``note`` when the file had other hard links (they keep the old content)."""

    path: str
    created: bool
    lines: int
    bytes: int
    note: str | None = None


class WriteFileDetails(BaseModel):
    """For the application: the unified diff (from ``/dev/null`` for a new file) and its
    ``additions``/``deletions``; ``encoding`` is the one to encode ``diff`` in to apply it."""

    path: str
    created: bool
    diff: str
    additions: int
    deletions: int
    encoding: str


def execute(args: WriteFileArgs, context: ToolContext) -> object:
    """Run a ``write_file`` call on ``context.workspace``."""
    workspace = context.need_workspace()
    resolved = workspace.resolve(args.path)
    resolved.refuse_directory_form()
    with workspace.file_states.lock(resolved.real):
        current = load_text(workspace, resolved)
        text = convert_newlines(args.content, current.newline)
        saved, diff = save_change(workspace, resolved, current, text, guard=context.committing)
    created = current.text is None
    content = WriteFileContent(
        path=resolved.rel,
        created=created,
        lines=count_lines(text),
        bytes=saved.size,
        note=saved.note,
    )
    details = WriteFileDetails(
        path=resolved.rel,
        created=created,
        diff=diff.diff,
        additions=diff.additions,
        deletions=diff.deletions,
        encoding=current.format.label,
    )
    return tool_output(content.model_dump(exclude_none=True), details)


def build(workspace: Workspace) -> Tool[WriteFileArgs]:
    """The ``write_file`` tool over ``workspace``."""
    return tool(
        name="write_file",
        description=DESCRIPTION,
        parameters=WriteFileArgs,
        execute=execute,
        stateless=True,
        presentation=lambda a: ToolPresentation(
            label="Write file", icon="file-plus", detail=a.path
        ),
        output_schema=WriteFileContent,
        workspace=workspace,
        paths=path_argument,
        locks_paths=True,
    )
