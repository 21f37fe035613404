"""read_file: numbered lines of a text file, or an image."""

from __future__ import annotations

from pydantic import BaseModel, Field, create_model

from workspace_tools._errors import ErrorCode, ToolError, shown_number
from workspace_tools._output import ToolPresentation, image_part, tool_content, tool_output
from workspace_tools._tool import Tool, ToolContext, path_argument, tool
from workspace_tools.text._decode import image_media_type, newline_name
from workspace_tools.text._lines import LineSlice, read_lines
from workspace_tools.workspace import Workspace
from workspace_tools.workspace._files import open_read
from workspace_tools.workspace._fingerprint import file_fingerprint
from workspace_tools.workspace._line_index import MIN_INDEXED_BYTES, IndexedFile
from workspace_tools.workspace._near_miss import not_found_hint
from workspace_tools.workspace._state import KEPT_FILE_BYTES, PendingDigest

DEFAULT_LIMIT = 2000

#: Most characters of numbered lines one call returns: the lines after are left to the next
#: call (the closing note says from which offset), so that the note survives the default
#: 50,000-character limit on what the model reads.
MAX_TEXT_CHARS = 40_000

#: The note after lines cut at ``max_chars``: how the model sees the rest of such a line.
LONG_LINE_NOTE = (
    '[A line marked "line cut" goes on past its first {max_chars:,} characters. To see '
    "the rest, grep for text in it: grep shows the part of a line around each match, "
    "wherever it lies.]"
)

DESCRIPTION = """\
Read a file in the workspace. Text comes back as numbered lines ("cat -n" style: the line
number, a tab, the line), so you can quote exact text in edit_file: leave out the number and
the tab. Read a file before you edit or overwrite it.

- Reads up to `limit` lines (default {read_limit}) from line `offset` (1-based), and at
  most about 40,000 characters. A note at the end says when more lines follow and which
  offset continues; read large files in parts.
- Lines longer than {max_line_length} characters are cut, with a marker; grep shows the
  part of such a line around each match.
- PNG, JPEG, GIF and WebP images come back as images. Other binary files are refused.
- Paths are relative to the workspace root; paths outside it are refused."""


class ReadFileArgs(BaseModel):
    """Read a text file as numbered lines (or an image as image content)."""

    path: str = Field(description="File path, relative to the workspace root")
    offset: int = Field(1, ge=1, description="1-based line number to start at")
    limit: int = Field(DEFAULT_LIMIT, ge=1, description="Maximum number of lines to read")


class ReadFileDetails(BaseModel):
    """What the application learns about a read.

    ``start_line``/``end_line`` are the 1-based lines shown (0 when none), ``truncated`` says
    more lines follow, ``encoding`` and ``newline`` (``lf``/``crlf``, ``None`` without line
    breaks) describe the file; for an image they are ``None`` and ``media_type`` is set.
    """

    path: str
    start_line: int
    end_line: int
    total_lines: int
    truncated: bool
    size_bytes: int
    encoding: str | None
    newline: str | None
    media_type: str | None = None


def _arguments_model(workspace: Workspace) -> type[ReadFileArgs]:
    limit = workspace.options.read_limit
    if limit == DEFAULT_LIMIT:
        return ReadFileArgs
    # The schema a model sees shows the workspace's real default.
    return create_model(
        "ReadFileArgs",
        __base__=ReadFileArgs,
        limit=(int, Field(limit, ge=1, description="Maximum number of lines to read")),
    )


def _render(lines: LineSlice, offset: int, max_chars: int) -> tuple[str, int]:
    """The numbered lines that fit in :data:`MAX_TEXT_CHARS` (at least one) and the closing
    note; returns the text and how many lines it shows."""
    out = []
    size = 0
    any_cut = False
    for number, (line, cut) in enumerate(zip(lines.lines, lines.cut, strict=True), start=offset):
        marker = f" [... line cut at {max_chars} characters]" if cut else ""
        rendered = f"{number:6}\t{line}{marker}"
        size += len(rendered) + 1
        if out and size > MAX_TEXT_CHARS:
            break
        out.append(rendered)
        any_cut = any_cut or cut
    shown = len(out)
    end = offset + shown - 1
    if end < lines.total_lines:
        out.append(
            f"\n[Lines {offset}-{end} of {lines.total_lines} shown. "
            f"Use offset={end + 1} to read on.]"
        )
    if any_cut:
        # Said once, not on every cut line: a minified file's lines would repeat it.
        out.append(f"\n{LONG_LINE_NOTE.format(max_chars=max_chars)}")
    return "\n".join(out), shown


def execute(args: ReadFileArgs, context: ToolContext) -> object:
    """Run a ``read_file`` call on ``context.workspace``."""
    workspace = context.need_workspace()
    try:
        return _read(workspace, args)
    except ToolError as exc:
        if exc.code is not ErrorCode.NOT_FOUND:
            raise
        hint = not_found_hint(str(workspace.root), args.path)
        raise ToolError(exc.message + hint, exc.code) from None


def _read(workspace: Workspace, args: ReadFileArgs) -> object:
    options = workspace.options
    line_indexes = workspace.line_indexes
    file_states = workspace.file_states
    resolved = workspace.resolve(args.path)
    rel = resolved.rel
    with open_read(workspace.root, resolved.real, rel) as (handle, info):
        head = handle.read(16)
        media_type = image_media_type(head)
        if media_type is not None:
            # Read at most one byte over the limit: the file may grow meanwhile.
            data = b""
            if info.st_size <= options.max_image_bytes:
                data = head + handle.read(options.max_image_bytes + 1 - len(head))
            if info.st_size > options.max_image_bytes or len(data) > options.max_image_bytes:
                size = max(info.st_size, len(data))
                raise ToolError(
                    f"{rel} is a {size:,}-byte image, over the "
                    f"{options.max_image_bytes:,}-byte limit for images",
                    ErrorCode.FILE_TOO_LARGE,
                )
            details = ReadFileDetails(
                path=rel, start_line=0, end_line=0, total_lines=0, truncated=False,
                size_bytes=len(data), encoding=None, newline=None, media_type=media_type,
            )  # fmt: skip
            content = tool_content(
                f"Image {rel} ({media_type}, {len(data):,} bytes)",
                image_part(data, media_type),
            )
            return tool_output(content, details)
        handle.seek(0)
        # A file edits take is read whole, as an edit decodes it; one of some size is
        # indexed too, so that its later windows read only their lines.
        whole = info.st_size <= options.max_file_bytes
        kept = line_indexes.get(info)
        if (
            kept is not None
            and kept.counts is not None
            and not file_states.still_kept(resolved.real, kept.counts)
        ):
            kept = None  # the record its whole read made was let go: read whole again
        lines = read_lines(
            handle,
            args.offset,
            args.limit,
            options.max_line_length,
            whole=whole and kept is None,
            name=rel,
            known=None if kept is None else kept.index,
            index=info.st_size >= MIN_INDEXED_BYTES,
        )
    digest: PendingDigest | None = None
    counts = None
    if lines.content is not None:
        if len(lines.content) > KEPT_FILE_BYTES:
            # As record() hashes a content this large; kept with the index for the
            # windows read from it, which see only their lines.
            digest = PendingDigest(lines.content)
            file_states.record_digest(resolved.real, digest, lines.line_counts)
        else:
            file_states.record(resolved.real, lines.content, lines.line_counts)
            counts = lines.line_counts
    elif kept is not None and kept.digest is not None:
        # The content last read here whole, unchanged since (its stat identity).
        file_states.record_digest(resolved.real, kept.digest)
    elif kept is None or kept.counts is None:
        file_states.forget(resolved.real)
    # Else the record of the content last read here whole is still the file's.
    if kept is None and lines.line_index is not None:
        line_indexes.put(info, IndexedFile(lines.line_index, digest, counts))
    if args.offset > max(lines.total_lines, 1):
        raise ToolError(
            f"offset {shown_number(args.offset)} is past the end of {rel}, which has "
            f"{lines.total_lines} line{'' if lines.total_lines == 1 else 's'}",
            ErrorCode.INVALID_ARGUMENTS,
        )
    text, shown = _render(lines, args.offset, options.max_line_length) if lines.lines else ("", 0)
    end = args.offset + shown - 1
    details = ReadFileDetails(
        path=rel,
        start_line=args.offset if lines.lines else 0,
        end_line=end if lines.lines else 0,
        total_lines=lines.total_lines,
        truncated=end < lines.total_lines,
        size_bytes=info.st_size,
        encoding=lines.format.label,
        newline=newline_name(lines.newline),
    )
    breaks = sum(line.count("\r") for line in lines.lines) if lines.newline is None else 0
    if breaks:
        # No LF, but CRs (classic Mac OS): lines end at LF here, as in git and grep, so the
        # model is told why it sees one line, and that edits keep the CRs.
        details.newline = "cr"
        text += (
            f"\n\n(note: {rel} uses CR line endings (classic Mac OS), which are not line "
            f"breaks here: its {breaks:,} CR{'' if breaks == 1 else 's'} show as carriage "
            "return characters inside line 1. edit_file and write_file keep CR endings: line "
            "breaks you write are saved as CRs)"
        )
    return tool_output(text or f"[{rel} is empty]", details)


def build(workspace: Workspace) -> Tool[ReadFileArgs]:
    """The ``read_file`` tool over ``workspace``."""
    options = workspace.options
    return tool(
        name="read_file",
        description=DESCRIPTION.format(
            read_limit=options.read_limit, max_line_length=options.max_line_length
        ),
        parameters=_arguments_model(workspace),
        execute=execute,
        stateless=True,
        presentation=lambda a: ToolPresentation(label="Read file", icon="file-text", detail=a.path),
        read_only=True,
        workspace=workspace,
        paths=path_argument,
        cache_key=lambda a: file_fingerprint(workspace, a.path),
    )
