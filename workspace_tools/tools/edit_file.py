"""edit_file: replace literal text in a file."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools._output import ToolPresentation, tool_output
from workspace_tools._tool import Tool, ToolContext, tool
from workspace_tools.text._match import replace_text
from workspace_tools.tools._file_state import file_tool_state
from workspace_tools.workspace import Workspace
from workspace_tools.workspace._textfile import load_text, save_text, text_diff

DESCRIPTION = """\
Replace text in an existing file of the workspace: `old_text` becomes `new_text`.

- Read the file with read_file first and copy `old_text` from it exactly, without the line
  numbers and the tab after them; keep its indentation.
- `old_text` must occur exactly once: include enough surrounding lines to make it unique, or
  set `replace_all` to change every occurrence (e.g. renaming a variable). More than one
  match gives AMBIGUOUS_MATCH with the line numbers; none gives NO_MATCH.
- Both texts are literal: nothing is a regex or a template (`$1`, `\\1`, `$&` stay as typed).
  Line breaks follow the file's style (LF or CRLF); its encoding is kept.
- When the exact text is absent, a match differing only in line endings, trailing
  whitespace, indentation or typographic quotes is used if it is unique (the result's
  `match` names it). Indentation may differ only by the same shift on every line, never in
  the lines' depths relative to each other; `new_text` is then shifted the same way. Words
  and identifiers must always match exactly.
- If the file changed on disk since you last read or wrote it, the edit is refused
  (STALE_FILE): read it again. To create a file, use write_file."""

MatchKind = Literal["exact", "line_endings", "trailing_whitespace", "indentation", "quotes"]


class EditFileArgs(BaseModel):
    """Replace literal text in a file."""

    path: str = Field(description="File path, relative to the workspace root")
    old_text: str = Field(
        min_length=1,
        description="Exact text to replace, copied from the file; must match once unless "
        "replace_all",
    )
    new_text: str = Field(description="Replacement text, written literally")
    replace_all: bool = Field(False, description="Replace every occurrence of old_text")


class EditFileContent(BaseModel):
    """What the model reads: the path, how many places changed, and how ``old_text``
    matched (``exact``, or the fallback used, so the model knows its text was not literal)."""

    path: str
    replacements: int
    match: MatchKind


class EditFileDetails(BaseModel):
    """For the application: the unified diff, its counts, and how ``old_text`` matched
    (``exact`` or the fallback used); ``encoding`` is the one to encode ``diff`` in."""

    path: str
    diff: str
    additions: int
    deletions: int
    replacements: int
    match: MatchKind
    encoding: str


def build(workspace: Workspace) -> Tool[EditFileArgs]:
    """The ``edit_file`` tool over ``workspace``."""

    def execute(args: EditFileArgs, context: ToolContext) -> object:
        if args.old_text == args.new_text:
            raise ToolError(
                "old_text and new_text are the same, so the edit would change nothing",
                ErrorCode.INVALID_ARGUMENTS,
            )
        resolved = workspace.resolve(args.path)
        with workspace.file_states.lock(resolved.real):
            current = load_text(workspace, resolved)
            if current.text is None:
                raise ToolError(
                    f"File not found: {resolved.rel}; use write_file to create a file",
                    ErrorCode.NOT_FOUND,
                )
            edit = replace_text(
                current.text,
                args.old_text,
                args.new_text,
                replace_all=args.replace_all,
                newline=current.newline,
                path=resolved.rel,
            )
            save_text(workspace, resolved, edit.text, current.format, guard=context.committing)
        diff = text_diff(current.text, edit.text, current.format, resolved.rel)
        details = EditFileDetails(
            path=resolved.rel,
            diff=diff.diff,
            additions=diff.additions,
            deletions=diff.deletions,
            replacements=edit.replacements,
            match=edit.match,  # type: ignore[arg-type]
            encoding=current.format.label,
        )
        content = EditFileContent(
            path=resolved.rel,
            replacements=edit.replacements,
            match=edit.match,  # type: ignore[arg-type]
        )
        return tool_output(content.model_dump(), details)

    return tool(
        name="edit_file",
        description=DESCRIPTION,
        parameters=EditFileArgs,
        execute=execute,
        presentation=lambda a: ToolPresentation(label="Edit file", icon="file-pen", detail=a.path),
        output_schema=EditFileContent,
        state=file_tool_state(workspace, locks_file=True),
    )
