"""Anthropic's text editor tool (``text_editor_20250728``, name ``str_replace_based_edit_tool``)
executed on this package's engine.

Claude is trained on this tool's schema: it is declared by type and name only
(:func:`anthropic_text_editor_definition`), never with an input schema. Its calls are run by
:func:`text_editor_tool`, a normal tool of this package under the same name, so a call goes
through the one pipeline (policy, confirmation, steps, sandbox, MCP) and its result becomes
a ``tool_result`` block with :func:`~workspace_tools.adapters.anthropic.anthropic_tool_result`.

Commands, their documented result texts and what this executor does beyond them:

- ``view``: a file as it now is (changed outside or not; it then counts as seen), as
  ``cat -n`` prints it (line numbers right-aligned in 6 columns, a tab, the line),
  optionally ``view_range [start, end]`` (1-based, ``end`` -1 for the last line);
  a directory as its entries two levels deep, hidden ones left out, directories ending in
  ``/``. ``max_characters`` (version 20250728) cuts a long view with a note.
- ``create``: writes ``file_text`` to a new file; an existing file is refused (no silent
  overwrite), parent directories are made.
- ``str_replace``: ``old_str`` must match exactly one place; the edit_file engine matches
  (exact, then unique whitespace-, line-ending- and quote-tolerant fallbacks, named in the
  result), keeps tabs, encoding, BOM and line endings, and writes atomically.
- ``insert``: the text (``new_str``, or ``insert_text`` as some clients send it) goes after
  line ``insert_line`` (0: at the top), in the file's line-ending style.
- ``undo_edit`` (versions 20250124 and 20241022 only). In a
  :class:`~workspace_tools.ToolSession` with ``checkpoints`` (or calls run through
  :class:`~workspace_tools.session._undo.CheckpointedCalls`), it puts the file back as it
  was before the last step that changed it, whichever tool made that step (``run_command``
  included), through the session's checkpoints (``session.restore(step, paths=[path])``):
  content and mode, a file that step created is removed, one it deleted comes back, and
  called again it goes one change further back. It runs in this process even in a
  sandboxed session (the checkpoints live here), and its step lists what it restored in
  ``changed_files``. A file changed since by something other than the session's steps is
  not overwritten: ``Error: <path> was changed since this session's last step that
  changed it (by someone else); undo_edit left it as it is. ...`` (``STALE_FILE``).
  Without checkpoints, it puts back the file as it was before this tool's last change to
  it, from a history the tool keeps in memory: lost with the process, none at all for a
  tool run in a sandbox child, and a file the tool created is not deleted; a file whose
  bytes are not those the tool's last change left is refused there too (``STALE_FILE``).

Paths are relative to the workspace root, or absolute inside it; outside is refused.
Failures are :class:`~workspace_tools.ToolError` whose message is the documented text
(``Error: File not found``, ``Error: No match found for replacement. Please check your text
and try again.``, ``Error: Found N matches for replacement text. Please provide more context
to make a unique match.``, ``Error: Permission denied. Cannot write to file.``), followed on
the next lines by what this package knows more (the nearest lines, the matching lines).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import os
import re
import stat
import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field, field_validator
from pydantic_core import PydanticCustomError

from workspace_tools._errors import ErrorCode, ToolError, shown_number
from workspace_tools._output import ToolPresentation, tool_output
from workspace_tools._tool import Tool, ToolContext, path_argument, tool
from workspace_tools.adapters._common import QUOTED_SPANS
from workspace_tools.session._checkpoints import RestoreResult
from workspace_tools.session._undo import RestorePath, undoing_tool
from workspace_tools.text._decode import UTF8, TextFormat, convert_newlines, decode_text
from workspace_tools.text._diff import TextDiff, split_lines, unified_diff
from workspace_tools.text._match import replace_text
from workspace_tools.text._spans import Span
from workspace_tools.text._window_edit import Replacement
from workspace_tools.workspace import ResolvedPath, Workspace, as_workspace
from workspace_tools.workspace._byte_edit import edit_bytes
from workspace_tools.workspace._files import open_dir, os_error, read_bytes, stat_below
from workspace_tools.workspace._near_miss import near_miss, suggested
from workspace_tools.workspace._textfile import (
    CurrentText,
    ReadFile,
    load_text,
    save_change,
    text_diff,
)

T = TypeVar("T")

VERSIONS: dict[str, str] = {
    "20250728": "str_replace_based_edit_tool",
    "20250429": "str_replace_based_edit_tool",
    "20250124": "str_replace_editor",
    "20241022": "str_replace_editor",
}
"""Each text editor version and the tool name it is declared with."""

_UNDO_VERSIONS = ("20250124", "20241022")
_SNIPPET_CLIPPED = (
    "<response clipped><NOTE>Only part of this file is shown, to save context. View a "
    "range of it with view_range, after finding the lines with a search.</NOTE>"
)

Command = Literal["view", "create", "str_replace", "insert", "undo_edit"]


class TextEditorArgs(BaseModel):
    """The text editor's input, as Claude sends it (one model for every command)."""

    command: Command = Field(description="view, create, str_replace, insert or undo_edit")
    path: str = Field(description="File or directory path (relative, or absolute inside)")
    view_range: list[int] | None = Field(None, description="[start, end] lines for view")
    file_text: str | None = Field(None, description="Content for create")
    old_str: str | None = Field(None, description="Text to replace for str_replace")
    new_str: str | None = Field(None, description="Replacement, or text to insert")
    insert_line: int | None = Field(None, description="Insert after this line (0: top)")
    insert_text: str | None = Field(None, description="Text to insert (as new_str)")


class CurrentTextEditorArgs(TextEditorArgs):
    """The input of the versions without ``undo_edit`` (20250728, 20250429): an invalid
    command is answered with the four commands they have, never one they lack."""

    command: Literal["view", "create", "str_replace", "insert"] = Field(  # type: ignore[assignment]
        description="view, create, str_replace or insert"
    )

    @field_validator("command", mode="before")
    @classmethod
    def _no_undo_edit(cls, value: object) -> object:
        if value == "undo_edit":
            raise PydanticCustomError(
                "no_undo_edit",
                "the undo_edit command does not exist in this version of the text editor; "
                "make the reverse edit with str_replace instead",
            )
        return value


class TextEditorDetails(BaseModel):
    """For the application: the path and, for a change, its unified diff and counts;
    ``match`` is how ``old_str`` matched (``exact`` or the fallback used); ``note`` says when
    the file had other hard links, which keep the old content (the model reads it too)."""

    command: str
    path: str
    diff: str = ""
    additions: int = 0
    deletions: int = 0
    match: str | None = None
    encoding: str | None = None
    note: str | None = None


def anthropic_text_editor_definition(
    version: str = "20250728", *, max_characters: int | None = None
) -> dict[str, Any]:
    """The tool entry of a Messages request: ``{"type": "text_editor_<version>", "name":
    ...}`` (the SDK's ``ToolTextEditor<version>Param``), with ``max_characters`` for the
    version that has it.

    Raises:
        ValueError: an unknown version, or ``max_characters`` for one without it.
    """
    if version not in VERSIONS:
        raise ValueError(f"unknown text editor version {version!r}; known: {', '.join(VERSIONS)}")
    definition: dict[str, Any] = {"type": f"text_editor_{version}", "name": VERSIONS[version]}
    if max_characters is not None:
        if version != "20250728":
            raise ValueError("max_characters exists only in text_editor_20250728")
        definition["max_characters"] = max_characters
    return definition


_LABELS = {
    "view": ("View", "file-text"),
    "create": ("Create file", "file-plus"),
    "str_replace": ("Edit file", "file-pen"),
    "insert": ("Insert text", "file-pen"),
    "undo_edit": ("Undo edit", "undo"),
}


def text_editor_tool(
    root_or_workspace: Workspace | str | os.PathLike[str],
    *,
    version: str = "20250728",
    max_characters: int | None = None,
) -> Tool[TextEditorArgs]:
    """The executor of the text editor ``version``, named as that version is declared.

    Args:
        root_or_workspace: the workspace (or its root) the paths are confined to.
        version: ``20250728`` (default), ``20250429``, ``20250124`` or ``20241022``.
        max_characters: cut ``view`` results to this many characters (as declared).

    The versions with ``undo_edit`` give an :class:`~workspace_tools.session._undo.UndoingTool`:
    in a session with checkpoints its ``undo_edit`` restores from them (see the module's
    text); elsewhere from the tool's own history in memory.

    Raises:
        ValueError: an unknown version.
    """
    name = anthropic_text_editor_definition(version)["name"]
    workspace = as_workspace(root_or_workspace)
    history = _History()

    def execute(args: TextEditorArgs, context: ToolContext) -> object:
        # The workspace the call runs on: in a sandbox child, the copy holding the hashes
        # of the file it names (ToolContext.workspace).
        working = context.workspace or workspace
        try:
            return run(working, args, context)
        except ToolError as exc:
            worded = _in_editor_terms(exc.message, _named(working, args.path))
            if worded == exc.message:
                raise
            raise ToolError(worded, exc.code, details=exc.details) from exc

    def run(working: Workspace, args: TextEditorArgs, context: ToolContext) -> object:
        resolved = working.resolve(args.path)
        if args.command == "view":
            return _view(working, resolved, args, max_characters)
        if resolved.directory_form:  # as open("new/", "w") fails: never a file
            raise ToolError(
                f"Error: The path {args.path} names a directory; {args.command} needs the path "
                "of a file.",
                ErrorCode.INVALID_ARGUMENTS,
            )
        with working.file_states.lock(resolved.real):
            before = read_bytes(
                working.root, resolved.real, resolved.rel, limit=working.options.max_file_bytes
            )
            if args.command == "undo_edit":
                return _undo(working, resolved, args.path, history, context)
            if args.command == "create":
                output = _create(working, resolved, args, context)
            elif args.command == "str_replace":
                output = _str_replace(working, resolved, args, context, before)
            else:
                output = _insert(working, resolved, args, context)
            if version in _UNDO_VERSIONS:  # what undo_edit needs; later versions lack it
                after = read_bytes(
                    working.root, resolved.real, resolved.rel, limit=working.options.max_file_bytes
                )
                with history.lock:
                    history.add(str(resolved.real), before, after)
            return output

    def present(args: TextEditorArgs) -> ToolPresentation:
        label, icon = _LABELS.get(args.command, ("Text editor", "file-pen"))
        return ToolPresentation(label=label, icon=icon, detail=args.path)

    def undo(args: TextEditorArgs, context: ToolContext, restore: RestorePath) -> object:
        resolved = workspace.resolve(args.path)
        with workspace.file_states.lock(resolved.real):
            return _undo_checkpointed(workspace, resolved, args.path, restore, context)

    editor = tool(
        name=name,
        description=f"Anthropic's text editor (text_editor_{version}) over the workspace.",
        parameters=TextEditorArgs if version in _UNDO_VERSIONS else CurrentTextEditorArgs,
        execute=execute,
        presentation=present,
        workspace=workspace,
        paths=path_argument,
        locks_paths=True,
    )
    if version not in _UNDO_VERSIONS:
        return editor
    return undoing_tool(editor, undoes=lambda args: args.command == "undo_edit", undo=undo)


#: Bytes of earlier contents ``undo_edit``'s history keeps, over all files: past it the
#: oldest changes are let go (a model inserting line by line into a 20 MB file would
#: otherwise hold 20 MB a change, 1 GB after 25).
HISTORY_BYTES = 64 << 20


class _History:
    """Per file, each change the tool made: (its bytes before, or None when the change
    created it; the SHA-256 of its bytes after, or None when it was gone), at most
    :data:`HISTORY_BYTES` of bytes before in all, the oldest changes let go first. It stays
    in the process it was made in: a sandboxed call's child gets an empty one (it pickles
    as such), as what the child adds to it never came back."""

    def __init__(self) -> None:
        self.changes: dict[str, list[tuple[bytes | None, bytes | None]]] = {}
        self.lock = threading.Lock()
        self._order: collections.deque[str] = collections.deque()  # a file per change
        self._held = 0

    def __reduce__(self) -> tuple[type[_History], tuple[()]]:
        return (_History, ())

    def add(self, key: str, before: bytes | None, after: bytes | None) -> None:
        """Record a change of the file ``key`` (call with :attr:`lock` held)."""
        self.changes.setdefault(key, []).append((before, _digest(after)))
        self._order.append(key)
        self._held += len(before or b"")
        while self._held > HISTORY_BYTES and self._order:
            oldest = self.changes[self._order.popleft()]
            dropped, _ = oldest.pop(0)
            self._held -= len(dropped or b"")

    def pop(self, key: str) -> None:
        """Forget the last change of ``key``, undone (call with :attr:`lock` held)."""
        stack = self.changes.get(key)
        if not stack:
            return  # let go meanwhile, past the budget
        dropped, _ = stack.pop()
        self._held -= len(dropped or b"")
        # Its place in the order: the last one naming key.
        for index in range(len(self._order) - 1, -1, -1):
            if self._order[index] == key:
                del self._order[index]
                break


def _digest(data: bytes | None) -> bytes | None:
    return None if data is None else hashlib.sha256(data).digest()


def _named(workspace: Workspace, path: str) -> tuple[str, ...]:
    """``path`` as given and as the workspace names it (relative to the root)."""
    try:
        return (path, workspace.resolve(path).rel)
    except ToolError:
        return (path,)


def _written(write: Callable[[], T]) -> T:
    """Run ``write``; a refused write gets the documented permission text first."""
    try:
        return write()
    except ToolError as exc:
        if exc.code is ErrorCode.PERMISSION_DENIED:
            raise ToolError(
                f"Error: Permission denied. Cannot write to file.\n{exc.message}", exc.code
            ) from exc
        raise


def _view(
    workspace: Workspace, resolved: ResolvedPath, args: TextEditorArgs, limit: int | None
) -> object:
    try:
        mode = stat_below(workspace.root, resolved.real).st_mode
    except FileNotFoundError:
        raise _not_found(workspace, args.path) from None
    except OSError as exc:
        raise os_error(exc, resolved.rel) from exc
    if stat.S_ISDIR(mode):
        if args.view_range is not None:
            raise ToolError(
                "Error: view_range is not allowed when path points to a directory.",
                ErrorCode.INVALID_ARGUMENTS,
            )
        listing = _listing(workspace, resolved)
        text = (
            f"Here's the files and directories up to 2 levels deep in {args.path}, "
            f"excluding hidden items:\n" + "".join(f"{line}\n" for line in listing)
        )
        return tool_output(_clip(text, limit), TextEditorDetails(command="view", path=resolved.rel))
    # The view is the editor's only read: it shows the file as it is now, changed outside
    # or not (load_text's staleness check is for changes), and counts as seen.
    data = read_bytes(
        workspace.root, resolved.real, resolved.rel, limit=workspace.options.max_file_bytes
    )
    if data is None:
        raise _not_found(workspace, args.path)
    current = decode_text(data, resolved.rel)
    workspace.file_states.record(resolved.real, data)
    lines = [line.removesuffix("\n").removesuffix("\r") for line in split_lines(current.text)]
    first, last = 1, len(lines)
    if args.view_range is not None:
        first, last = _view_range(args.view_range, len(lines))
    numbered = "".join(f"{n:6}\t{lines[n - 1]}\n" for n in range(first, last + 1))
    text = f"Here's the result of running `cat -n` on {args.path}:\n{numbered}"
    details = TextEditorDetails(command="view", path=resolved.rel, encoding=current.format.label)
    return tool_output(_clip(text, limit), details)


def _view_range(view_range: list[int], count: int) -> tuple[int, int]:
    if len(view_range) != 2:
        raise ToolError(
            "Error: Invalid `view_range`. It should be a list of two integers.",
            ErrorCode.INVALID_ARGUMENTS,
        )
    start, end = view_range
    # Numbers of any size are quoted clipped (shown_number): JSON's have no bound.
    given = f"[{shown_number(start)}, {shown_number(end)}]"
    if not 1 <= start <= max(count, 1):
        raise ToolError(
            f"Error: Invalid `view_range`: {given}. Its first element `{shown_number(start)}` "
            f"should be within the range of lines of the file: [1, {count}]",
            ErrorCode.INVALID_ARGUMENTS,
        )
    if end == -1:
        return start, count
    # The reference implementation's two texts (anthropic-quickstarts' edit.py), checked
    # in its order.
    if end > count:
        raise ToolError(
            f"Error: Invalid `view_range`: {given}. Its second element `{shown_number(end)}` "
            f"should be smaller than the number of lines in the file: `{count}`",
            ErrorCode.INVALID_ARGUMENTS,
        )
    if end < start:
        raise ToolError(
            f"Error: Invalid `view_range`: {given}. Its second element `{shown_number(end)}` "
            f"should be larger or equal than its first `{start}`",
            ErrorCode.INVALID_ARGUMENTS,
        )
    return start, end


def _clip(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    return text[:limit] + _SNIPPET_CLIPPED


def _listing(workspace: Workspace, resolved: ResolvedPath) -> list[str]:
    """Entries two levels deep under the directory, hidden ones left out, read by fd
    without following any symlink; paths under the directory's real location (a link to
    it in the root is resolved first, as list_files does)."""
    real = workspace.rel(resolved.real)
    rel = "" if real == "." else real
    out: list[str] = []
    try:
        fd = open_dir(str(workspace.root), rel)
    except OSError as exc:
        raise os_error(exc, resolved.rel) from exc
    try:
        _list_level(fd, rel, 2, out)
    finally:
        os.close(fd)
    return sorted(out)


def _list_level(fd: int, rel: str, depth: int, out: list[str]) -> None:
    with os.scandir(fd) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            path = f"{rel}/{entry.name}" if rel else entry.name
            is_dir = entry.is_dir(follow_symlinks=False)
            out.append(path + ("/" if is_dir else ""))
            if is_dir and depth > 1:
                try:
                    child = os.open(
                        entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd
                    )
                except OSError:
                    continue  # unreadable or swapped meanwhile: listed, not entered
                try:
                    _list_level(child, path, depth - 1, out)
                finally:
                    os.close(child)


def _change(
    workspace: Workspace,
    resolved: ResolvedPath,
    command: str,
    current: CurrentText,
    new: str,
    context: ToolContext,
    *,
    fmt: TextFormat | None = None,
    match: str | None = None,
    spans: Sequence[Span] | None = None,
) -> TextEditorDetails:
    """Save ``new`` over the file's ``current`` text (in ``fmt``, by default the file's)
    and describe the change (see :func:`save_change`)."""
    fmt = fmt or current.format
    guard = context.committing
    saved, diff = _written(
        lambda: save_change(workspace, resolved, current, new, fmt=fmt, spans=spans, guard=guard)
    )
    return TextEditorDetails(
        command=command,
        path=resolved.rel,
        diff=diff.diff,
        additions=diff.additions,
        deletions=diff.deletions,
        match=match,
        encoding=fmt.label,
        note=saved.note,
    )


def _create(
    workspace: Workspace, resolved: ResolvedPath, args: TextEditorArgs, context: ToolContext
) -> object:
    if args.file_text is None:
        raise ToolError(
            "Error: Parameter `file_text` is required for command: create",
            ErrorCode.INVALID_ARGUMENTS,
        )
    current = load_text(workspace, resolved)
    if current.text is not None:
        raise ToolError(
            f"Error: File already exists at: {args.path}. Cannot overwrite files using command "
            "`create`.",
            ErrorCode.ALREADY_EXISTS,
        )
    text = convert_newlines(args.file_text, current.newline)
    details = _change(workspace, resolved, "create", current, text, context)
    return tool_output(f"File created successfully at: {args.path}", details)


def _existing(
    workspace: Workspace, resolved: ResolvedPath, path: str, read: ReadFile | None = None
) -> Any:
    current = load_text(workspace, resolved, read)
    if current.text is None:
        raise _not_found(workspace, path)
    return current


def _not_found(workspace: Workspace, path: str) -> ToolError:
    """The documented ``Error: File not found``, naming the file the model most likely meant
    when there is one (``Did you mean 'src/App.py'?``), as every tool's ``NOT_FOUND`` does."""
    found = near_miss(str(workspace.root), path)
    hint = "" if found is None else f" Did you mean {suggested(found)}?"
    return ToolError(
        f"Error: File not found\nThe path {path} does not exist.{hint}", ErrorCode.NOT_FOUND
    )


#: Our engine's messages name edit_file's arguments and the other tools; the text editor's
#: model knows ``old_str``, ``new_str`` and ``view`` and has no ``replace_all`` or grep.
_EDITOR_TERMS = (
    (", or set replace_all to replace every one", ""),
    (" grep shows the text around a match in a long line.", ""),
    ("Read the file again with read_file", "View the file again"),
    ("read it again with read_file", "view it again"),
    ("use list_files to see its entries", "view it to see its entries"),
    ("from read_file", "from a view"),
    ("read_file", "view"),
    ("list_files", "view"),
    ("old_text", "old_str"),
    ("new_text", "new_str"),
)


def _in_editor_terms(message: str, paths: tuple[str, ...] = ()) -> str:
    """``message`` with our tools' and arguments' names in the editor's terms, except in
    what it quotes: ``paths`` (the file's name as given and as resolved) and the file's
    own text."""
    names = sorted({p for p in paths if p}, key=len, reverse=True)
    kept = "|".join([*map(re.escape, names), QUOTED_SPANS])
    parts = re.split(f"({kept})", message)
    out = []
    for index, part in enumerate(parts):
        if index % 2 == 0:  # between the quoted spans
            for ours, theirs in _EDITOR_TERMS:
                part = part.replace(ours, theirs)
        out.append(part)
    return "".join(out)


def _str_replace(
    workspace: Workspace,
    resolved: ResolvedPath,
    args: TextEditorArgs,
    context: ToolContext,
    data: bytes | None,
) -> object:
    """``str_replace`` on the file whose bytes are ``data`` (``None``: no such file): on
    its bytes when :func:`~workspace_tools.workspace._byte_edit.edit_bytes` can make the
    edit (a UTF-8 file, one exact place), else on its text."""
    if not args.old_str:
        raise ToolError(
            "Error: Parameter `old_str` is required for command: str_replace, and may not be empty",
            ErrorCode.INVALID_ARGUMENTS,
        )
    if data is None:
        raise _not_found(workspace, args.path)
    read = ReadFile(data, workspace.file_states.hash_meanwhile(resolved.real, data))
    made = _written(
        lambda: edit_bytes(
            workspace,
            resolved,
            read,
            [Replacement(args.old_str or "", args.new_str or "")],
            guard=context.committing,
        )
    )
    if made is None:
        details = _str_replace_text(workspace, resolved, args, context, read)
    else:
        details = TextEditorDetails(
            command="str_replace",
            path=resolved.rel,
            diff=made.diff.diff,
            additions=made.diff.additions,
            deletions=made.diff.deletions,
            match=made.results[0].match,
            encoding=UTF8.label,
            note=made.saved.note,
        )
    text = "Successfully replaced text at exactly one location."
    match = details.match or "exact"
    if match != "exact":
        text += f"\n(old_str matched with {match.replace('_', ' ')} differences ignored)"
    return tool_output(_with_note(text, details), details)


def _str_replace_text(
    workspace: Workspace,
    resolved: ResolvedPath,
    args: TextEditorArgs,
    context: ToolContext,
    read: ReadFile,
) -> TextEditorDetails:
    """``str_replace`` made on the decoded text of the file ``read`` holds."""
    current = _existing(workspace, resolved, args.path, read)
    try:
        edit = replace_text(
            current.text,
            args.old_str or "",
            args.new_str or "",
            replace_all=False,
            newline=current.newline,
            path=args.path,
        )
    except ToolError as exc:
        # Put in the editor's terms, as every message, by the tool's execute.
        if exc.code is ErrorCode.AMBIGUOUS_MATCH:
            count = len((exc.details or {}).get("lines", [])) or 2
            raise ToolError(
                f"Error: Found {count} matches for replacement text. Please provide more "
                f"context to make a unique match.\n{exc.message}",
                exc.code,
                details=exc.details,
            ) from exc
        if exc.code is ErrorCode.NO_MATCH:
            raise ToolError(
                "Error: No match found for replacement. Please check your text and try "
                f"again.\n{exc.message}",
                exc.code,
                details=exc.details,
            ) from exc
        raise
    return _change(
        workspace,
        resolved,
        "str_replace",
        current,
        edit.text,
        context,
        match=edit.match,
        spans=edit.spans,
    )


def _insert(
    workspace: Workspace, resolved: ResolvedPath, args: TextEditorArgs, context: ToolContext
) -> object:
    added = args.new_str if args.new_str is not None else args.insert_text
    if added is None or args.insert_line is None:
        raise ToolError(
            "Error: Parameters `insert_line` and `new_str` (or `insert_text`) are required for "
            "command: insert",
            ErrorCode.INVALID_ARGUMENTS,
        )
    current = _existing(workspace, resolved, args.path)
    lines = split_lines(current.text)
    if not 0 <= args.insert_line <= len(lines):
        raise ToolError(
            f"Error: Invalid `insert_line` parameter: {shown_number(args.insert_line)}. It "
            f"should be within the range of lines of the file: [0, {len(lines)}]",
            ErrorCode.INVALID_ARGUMENTS,
        )
    block = convert_newlines(added, current.newline)
    head, tail = lines[: args.insert_line], lines[args.insert_line :]
    kept_tail = sum(map(len, tail))  # the old text's end, the new one's too
    if head and not head[-1].endswith("\n"):
        # After a last line without a break: the break moves to the end of the file's new
        # text, which then ends without one as before.
        head[-1] += current.newline
        block = block.removesuffix(current.newline)
    elif not block.endswith("\n"):
        block += current.newline
    text = "".join(head) + block + "".join(tail)
    details = _change(
        workspace,
        resolved,
        "insert",
        current,
        text,
        context,
        spans=[(len(current.text) - kept_tail,) * 3 + (len(text) - kept_tail,)],
    )
    text = f"Text inserted after line {args.insert_line} of {args.path}."
    return tool_output(_with_note(text, details), details)


def _with_note(text: str, details: TextEditorDetails) -> str:
    return text if details.note is None else f"{text}\n({details.note})"


def _undo(
    workspace: Workspace,
    resolved: ResolvedPath,
    path: str,
    history: _History,
    context: ToolContext,
) -> object:
    """``path`` back as before this tool's last change to it, from ``history``; refused,
    changing nothing, when its bytes are not those that change left (someone else changed
    it since: the undo would silently lose that)."""
    key = str(resolved.real)
    with history.lock:
        stack = history.changes.get(key) or []
        if not stack:
            raise ToolError(f"Error: No edit history found for {path}.", ErrorCode.NOT_FOUND)
        previous, left = stack[-1]
    now = read_bytes(
        workspace.root, resolved.real, resolved.rel, limit=workspace.options.max_file_bytes
    )
    if _digest(now) != left:
        raise ToolError(
            f"Error: {path} was changed since this tool's last edit of it (by someone else); "
            "undo_edit left it as it is. View it and make the change you want with "
            "str_replace.",
            ErrorCode.STALE_FILE,
        )
    if previous is None:
        raise ToolError(
            f"Error: The last edit of {path} created it; undo_edit does not delete files.",
            ErrorCode.INVALID_ARGUMENTS,
        )
    workspace.file_states.record(resolved.real, now)  # checked just now, under the lock
    current = load_text(workspace, resolved)
    decoded = decode_text(previous, resolved.rel)
    details = _change(
        workspace, resolved, "undo_edit", current, decoded.text, context, fmt=decoded.format
    )
    with history.lock:
        history.pop(key)
    return tool_output(f"Last edit to {path} undone successfully.", details)


def _undo_checkpointed(
    workspace: Workspace,
    resolved: ResolvedPath,
    path: str,
    restore: RestorePath,
    context: ToolContext,
) -> object:
    """``undo_edit`` through a session's checkpoints: ``path`` as before the last step that
    changed it; refused, changing nothing, when it was changed since by someone else."""
    is_dir = False
    with contextlib.suppress(OSError):
        is_dir = stat.S_ISDIR(
            stat_below(workspace.root, resolved.real, follow_symlinks=False).st_mode
        )
    if is_dir:
        raise ToolError(
            f"Error: {path} is a directory; undo_edit undoes the last change to a file.",
            ErrorCode.IS_A_DIRECTORY,
        )
    rel = "" if resolved.rel == "." else resolved.rel
    preview = restore(rel, True)
    if preview.step is None:
        raise ToolError(f"Error: No edit history found for {path}.", ErrorCode.NOT_FOUND)
    _check_restorable(preview, path)
    before = _bytes_and_mode(workspace, resolved)
    with context.committing():  # a timed-out undo changes nothing afterwards
        _check_restorable(restore(rel, False), path)
    after = _bytes_and_mode(workspace, resolved)
    diff, encoding = _undo_diff(resolved.rel, before, after)
    if diff is None:  # binary, or created or deleted: the restore's own diff names it
        counts = [line[:1] for line in preview.diff.splitlines() if line[:3] not in ("+++", "---")]
        diff = TextDiff(preview.diff, counts.count("+"), counts.count("-"))
    details = TextEditorDetails(
        command="undo_edit",
        path=resolved.rel,
        diff=diff.diff,
        additions=diff.additions,
        deletions=diff.deletions,
        encoding=encoding,
    )
    return tool_output(f"Last edit to {path} undone successfully.", details)


def _bytes_and_mode(workspace: Workspace, resolved: ResolvedPath) -> tuple[bytes, int] | None:
    data = read_bytes(
        workspace.root, resolved.real, resolved.rel, limit=workspace.options.max_file_bytes
    )
    if data is None:
        return None
    try:
        return data, stat_below(workspace.root, resolved.real, follow_symlinks=False).st_mode
    except OSError as exc:
        raise os_error(exc, resolved.rel) from exc


def _undo_diff(
    rel: str, before: tuple[bytes, int] | None, after: tuple[bytes, int] | None
) -> tuple[TextDiff | None, str | None]:
    """The diff of a text file's content, decoded as the editor decodes it (latin-1 and
    UTF-16 too), with git's mode lines when the mode changed, and the encoding it is in;
    ``(None, None)`` when the file was created, deleted or is binary."""
    if before is None or after is None:
        return None, None
    try:
        old, new = decode_text(before[0]), decode_text(after[0])
    except ToolError:
        return None, None
    diff = text_diff(old.text, new.text, new.format, rel)
    old_mode, new_mode = (0o100755 if m & 0o111 else 0o100644 for m in (before[1], after[1]))
    if old_mode == new_mode:
        return diff, new.format.label
    first, _, rest = diff.diff.partition("\n")
    first = first or unified_diff(None, "", rel).diff.partition("\n")[0]
    text = f"{first}\nold mode {old_mode:06o}\nnew mode {new_mode:06o}\n{rest}"
    return TextDiff(text, diff.additions, diff.deletions), new.format.label


def _check_restorable(result: RestoreResult, path: str) -> None:
    if result.conflicts and not result.applied:
        raise ToolError(
            f"Error: {path} was changed since this session's last step that changed it (by "
            "someone else); undo_edit left it as it is. View it and make the change you want "
            "with str_replace.",
            ErrorCode.STALE_FILE,
        )
    if result.not_restorable:
        raise ToolError(
            f"Error: Cannot undo the last change to {path}: its content before it was never "
            "stored (ignored by the ignore rules, or over the size limit); undo_edit left it "
            "as it is.",
            ErrorCode.TOOL_ERROR,
        )
