"""One text file under change: load it checked (size, binary, staleness), save it atomically.

Callers hold the file's lock (:meth:`FileStates.lock`) around load, change and save, so that
concurrent calls on one file run one after another and none loses another's update.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools.text._decode import (
    UTF8,
    TextFormat,
    decode_text,
    dominant_newline,
    encode_text,
)
from workspace_tools.text._diff import TextDiff, unified_diff
from workspace_tools.text._editorconfig import new_file_newline
from workspace_tools.workspace._files import CommitGuard, atomic_write, read_bytes
from workspace_tools.workspace._paths import ResolvedPath
from workspace_tools.workspace._workspace import Workspace


@dataclass(frozen=True)
class CurrentText:
    """A file's state before a change.

    Attributes:
        text: its text (``None`` when the file does not exist).
        format: the encoding to write back in (UTF-8 without BOM for a new file).
        newline: the newline style every written line gets: the file's dominant one, or
            for a file without line breaks the one a new file would get.
    """

    text: str | None
    format: TextFormat
    newline: str


def load_text(workspace: Workspace, resolved: ResolvedPath) -> CurrentText:
    """Read ``resolved`` for a change.

    Raises:
        ToolError: ``FILE_TOO_LARGE`` over ``max_file_bytes``, ``BINARY_FILE``,
            ``STALE_FILE`` when it changed since last read or written, and the errors of
            :func:`~._files.open_read`.
    """
    data = read_bytes(workspace.root, resolved.real, resolved.rel)
    if data is None:
        return CurrentText(None, UTF8, new_file_newline(workspace.root, resolved.real))
    limit = workspace.options.max_file_bytes
    if len(data) > limit:
        raise ToolError(
            f"{resolved.rel} is {len(data):,} bytes, over the {limit:,}-byte limit for "
            "rewriting a file; change it with run_command instead",
            ErrorCode.FILE_TOO_LARGE,
        )
    decoded = decode_text(data)
    workspace.file_states.check_fresh(resolved.real, data, resolved.rel)
    newline = dominant_newline(decoded.text) or new_file_newline(workspace.root, resolved.real)
    return CurrentText(decoded.text, decoded.format, newline)


def save_text(
    workspace: Workspace,
    resolved: ResolvedPath,
    text: str,
    fmt: TextFormat,
    *,
    guard: CommitGuard = nullcontext,
) -> int:
    """Write ``text`` in ``fmt`` atomically and remember it as seen; return bytes written.

    ``guard`` is entered around the commit (see :func:`~._files.atomic_write`): a tool
    passes its context's :meth:`~workspace_tools.ToolContext.committing`, so that nothing
    lands once its call timed out. The workspace's ``write_read_only_files`` option decides
    on files without any write permission bit.

    Raises:
        ToolError: ``ENCODING_ERROR`` when ``fmt`` cannot hold ``text``, ``FILE_TOO_LARGE``
            over ``max_file_bytes``, and the errors of :func:`~._files.atomic_write`.
    """
    data = encode_text(text, fmt)
    limit = workspace.options.max_file_bytes
    if len(data) > limit:
        raise ToolError(
            f"The new content of {resolved.rel} is {len(data):,} bytes, over the "
            f"{limit:,}-byte limit; write less",
            ErrorCode.FILE_TOO_LARGE,
        )
    atomic_write(
        workspace.root,
        resolved.real,
        resolved.rel,
        data,
        write_read_only=workspace.options.write_read_only_files,
        guard=guard,
    )
    workspace.file_states.record(resolved.real, data)
    return len(data)


def text_diff(old: str | None, new: str, fmt: TextFormat, path: str) -> TextDiff:
    """The unified diff of a change. A UTF-8 BOM is kept in the diff as U+FEFF, so the diff
    encoded in the file's encoding (``utf-8`` or ``latin-1``) applies to the file's bytes;
    a UTF-16/32 file's diff is of its text (git treats such files as binary)."""
    bom = "\ufeff" if fmt.bom and fmt.codec == "utf-8" else ""
    return unified_diff(None if old is None else bom + old, bom + new, path)
