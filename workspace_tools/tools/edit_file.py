"""edit_file: replace literal text in a file."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools._output import ToolPresentation, tool_output
from workspace_tools._tool import Tool, ToolContext, path_argument, tool
from workspace_tools.text._decode import UTF8
from workspace_tools.text._diff import TextDiff
from workspace_tools.text._match import replace_text
from workspace_tools.text._spans import Span, compose
from workspace_tools.text._window_edit import Replacement
from workspace_tools.workspace import Workspace
from workspace_tools.workspace._byte_edit import edit_bytes
from workspace_tools.workspace._near_miss import not_found_hint
from workspace_tools.workspace._paths import ResolvedPath
from workspace_tools.workspace._textfile import (
    ReadFile,
    Saved,
    load_text,
    read_for_change,
    save_change,
)

DESCRIPTION = """\
Replace text in an existing file of the workspace: `old_text` becomes `new_text`.

- Read the file with read_file first and copy `old_text` from it exactly, without the line
  numbers and the tab after them; keep its indentation.
- `old_text` must occur exactly once: include enough surrounding lines to make it unique, or
  set `replace_all` to change every occurrence (e.g. renaming a variable). More than one
  match gives AMBIGUOUS_MATCH with the line numbers; none gives NO_MATCH.
- Both texts are literal: nothing is a regex or a template (`$1`, `\\1`, `$&` stay as typed).
  Line breaks follow the file's style (LF or CRLF; in a file of mixed endings, each
  replaced line keeps its own, as in apply_patch); its encoding is kept.
- When the exact text is absent, a match differing only in line endings, trailing
  whitespace, indentation or typographic quotes is used if it is unique (the result's
  `match` names it). Indentation may differ only by the same shift on every line, never in
  the lines' depths relative to each other; `new_text` is then shifted the same way. Words
  and identifiers must always match exactly.
- Several changes to one file: give `edits`, a list of {old_text, new_text, replace_all}
  applied in order, each to the text the edits before it left (so each `old_text` must be
  unique in that text); if any fails, none is made. Give either `edits` or `old_text`.
- If the file changed on disk since you last read or wrote it, the edit is refused
  (STALE_FILE): read it again. To create a file, use write_file."""

MatchKind = Literal["exact", "line_endings", "trailing_whitespace", "indentation", "quotes"]


class Edit(BaseModel):
    """One replacement of an edits list."""

    old_text: str = Field(
        min_length=1,
        description="Exact text to replace, as the file reads after the edits before this "
        "one; must match once unless replace_all",
    )
    new_text: str = Field(description="Replacement text, written literally")
    replace_all: bool = Field(False, description="Replace every occurrence of old_text")


class EditFileArgs(BaseModel):
    """Replace literal text in a file: one old_text/new_text, or an edits list."""

    path: str = Field(description="File path, relative to the workspace root")
    old_text: str | None = Field(
        None,
        min_length=1,
        description="Exact text to replace, copied from the file; must match once unless "
        "replace_all (leave out when giving edits)",
    )
    new_text: str | None = Field(
        None, description="Replacement text, written literally (with old_text)"
    )
    replace_all: bool = Field(False, description="Replace every occurrence of old_text")
    edits: list[Edit] | None = Field(
        None,
        min_length=1,
        description="Several replacements applied in order, all or none (instead of "
        "old_text/new_text)",
    )

    def replacements(self) -> list[Edit]:
        """The edits to make, in order: ``edits``, or the one of ``old_text``/``new_text``.

        Raises:
            ToolError: ``INVALID_ARGUMENTS`` when both forms or neither are given, or
                ``new_text`` is missing.
        """
        if self.edits is not None:
            if self.old_text is not None or self.new_text is not None:
                raise ToolError(
                    "Give either edits or old_text/new_text, not both",
                    ErrorCode.INVALID_ARGUMENTS,
                )
            return self.edits
        if self.old_text is None or self.new_text is None:
            raise ToolError(
                "Give old_text and new_text, or an edits list of {old_text, new_text}",
                ErrorCode.INVALID_ARGUMENTS,
            )
        return [Edit(old_text=self.old_text, new_text=self.new_text, replace_all=self.replace_all)]


class EditMatch(BaseModel):
    """How one edit of an ``edits`` list went: places replaced and how it matched."""

    replacements: int
    match: MatchKind


class EditFileContent(BaseModel):
    """What the model reads: the path, how many places changed, and how ``old_text``
    matched (``exact``, or the fallback used, so the model knows its text was not literal).
    For an ``edits`` list: the totals, the first fallback used, and each edit's own in
    ``edits``. ``note`` says when the file had other hard links (they keep the old
    content)."""

    path: str
    replacements: int
    match: MatchKind
    edits: list[EditMatch] | None = None
    note: str | None = None


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
    edits: list[EditMatch] | None = None


def execute(args: EditFileArgs, context: ToolContext) -> object:
    """Run a ``edit_file`` call on ``context.workspace``."""
    workspace = context.need_workspace()
    edits = args.replacements()
    for number, edit in enumerate(edits, 1):
        if edit.old_text == edit.new_text:
            raise ToolError(
                _which(number, edits)
                + "old_text and new_text are the same, so the edit would change nothing",
                ErrorCode.INVALID_ARGUMENTS,
            )
    resolved = workspace.resolve(args.path)
    with workspace.file_states.lock(resolved.real):
        read = read_for_change(workspace, resolved)
        made = edit_bytes(
            workspace,
            resolved,
            read,
            [Replacement(e.old_text, e.new_text, e.replace_all) for e in edits],
            guard=context.committing,
        )
        if made is not None:
            saved, diff, encoding = made.saved, made.diff, UTF8.label
            results = [EditMatch(replacements=r.replacements, match=r.match) for r in made.results]  # type: ignore[arg-type]
        else:
            saved, diff, results, encoding = _edit_text(
                workspace, resolved, read, args.path, edits, context
            )
    listed = results if args.edits is not None else None
    replacements = sum(r.replacements for r in results)
    match = next((r.match for r in results if r.match != "exact"), "exact")
    details = EditFileDetails(
        path=resolved.rel,
        diff=diff.diff,
        additions=diff.additions,
        deletions=diff.deletions,
        replacements=replacements,
        match=match,
        encoding=encoding,
        edits=listed,
    )
    content = EditFileContent(
        path=resolved.rel, replacements=replacements, match=match, edits=listed, note=saved.note
    )
    return tool_output(content.model_dump(exclude_none=True), details)


def build(workspace: Workspace) -> Tool[EditFileArgs]:
    """The ``edit_file`` tool over ``workspace``."""
    return tool(
        name="edit_file",
        description=DESCRIPTION,
        parameters=EditFileArgs,
        execute=execute,
        stateless=True,
        presentation=lambda a: ToolPresentation(label="Edit file", icon="file-pen", detail=a.path),
        output_schema=EditFileContent,
        workspace=workspace,
        paths=path_argument,
        locks_paths=True,
    )


def _edit_text(
    workspace: Workspace,
    resolved: ResolvedPath,
    read: ReadFile,
    asked: str,
    edits: list[Edit],
    context: ToolContext,
) -> tuple[Saved, TextDiff, list[EditMatch], str]:
    """``edits`` made on the decoded text of the file ``read`` holds (``asked``: its path as
    the model wrote it): what was written, the diff, each edit's match, and the encoding's
    label."""
    current = load_text(workspace, resolved, read)
    if current.text is None:
        raise ToolError(
            f"File not found: {resolved.rel}"
            + (not_found_hint(str(workspace.root), asked) or "; use write_file to create a file"),
            ErrorCode.NOT_FOUND,
        )
    text = current.text
    results: list[EditMatch] = []
    # Where the text changed, edit after edit: the diff compares only the lines around.
    spans: list[Span] = []
    for number, edit in enumerate(edits, 1):
        try:
            done = replace_text(
                text,
                edit.old_text,
                edit.new_text,
                replace_all=edit.replace_all,
                newline=current.newline,
                path=resolved.rel,
            )
        except ToolError as exc:
            raise _in_list(exc, number, edits) from exc
        text = done.text
        spans = compose(spans, done.spans)
        results.append(EditMatch(replacements=done.replacements, match=done.match))  # type: ignore[arg-type]
    saved, diff = save_change(
        workspace, resolved, current, text, spans=spans, guard=context.committing
    )
    return saved, diff, results, current.format.label


def _which(number: int, edits: list[Edit]) -> str:
    return f"edits[{number - 1}]: " if len(edits) > 1 else ""


def _in_list(exc: ToolError, number: int, edits: list[Edit]) -> ToolError:
    """``exc`` of the edit ``number`` (1-based) with its place in the list and the fact that
    no edit was made."""
    if len(edits) == 1:
        return exc
    # Past the first edit, "the file" in the engine's words is the text the edits before
    # it left, not the bytes on disk.
    against = "" if number == 1 else ", against the text the edits before it leave"
    message = (
        f"edits[{number - 1}] (edit {number} of {len(edits)}{against}): "
        f"{exc.message.rstrip('.')}. Edits are applied in order; none was made, the file "
        "is unchanged"
    )
    return ToolError(message, exc.code, details=exc.details)
