"""apply_patch: add, delete, update and move files with one patch, all or nothing."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from functools import partial
from typing import Literal

from pydantic import BaseModel, Field

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools._output import ToolPresentation, tool_output
from workspace_tools._tool import Tool, ToolContext, tool
from workspace_tools.text._decode import UTF8, TextFormat, convert_newlines, encode_text
from workspace_tools.text._diff import TextDiff, unified_diff
from workspace_tools.text._patch_apply import LEVEL_NAMES, PatchedText, apply_chunks
from workspace_tools.text._patch_diff import spans_diff
from workspace_tools.text._patch_parse import FileOp, PatchSyntaxError, parse_patch
from workspace_tools.workspace import ResolvedPath, Workspace
from workspace_tools.workspace._files import (
    MadeDirs,
    atomic_write,
    missing_parents,
    open_parent,
    os_error,
    other_links_note,
    read_bytes,
    remove_made,
)
from workspace_tools.workspace._near_miss import not_found_hint
from workspace_tools.workspace._textfile import BatchWrite, load_text, text_diff

DESCRIPTION = """\
Change files with one patch in this format (paths relative to the workspace root):

*** Begin Patch
*** Add File: docs/notes.md
+first line of the new file
+second line
*** Update File: src/app.py
*** Move to: src/main.py          (optional: rename the file too)
@@ def greet(name):
     first = 1
-    return "hi " + name
+    return f"hello {name}"
     print(first)
*** Delete File: old/unused.py
*** End Patch

- In an update, lines starting with ' ' are context, '-' removed, '+' added. Give about 3
  lines of context above and below each change, copied exactly from the file. An `@@ text`
  line names a line the change comes after (a function or class); stack several `@@` lines
  to narrow it. `*** End of File` after a chunk anchors it at the end of the file.
- Each chunk must match exactly one place (after the previous chunk). A match that needs
  whitespace or typographic punctuation ignored is used only when unique, and the result
  says so. Line endings, encoding and the final newline of each file are kept.
- All or nothing: if any part fails, no file is changed; fix the part the error names and
  send the whole patch again. Adding or moving onto an existing file is refused unless
  `allow_overwrite` is set. A read-only file (no write permission) is not updated, moved
  or deleted."""

Action = Literal["add", "update", "delete", "move"]


class ApplyPatchArgs(BaseModel):
    """Apply a patch in the '*** Begin Patch' format."""

    patch: str = Field(
        min_length=1,
        description="The patch text, from '*** Begin Patch' to '*** End Patch'",
    )
    allow_overwrite: bool = Field(
        False, description="Let Add File and Move to replace a file that already exists"
    )


class FilePatch(BaseModel):
    """One file's change: its action, path (``move_to`` for a move), unified diff (each
    accepted by ``git apply`` from the root), counts, the loosest match level its chunks
    needed, the encoding to encode ``diff`` in, and a ``note`` when an updated file had
    other hard links (they keep the old content)."""

    path: str
    action: Action
    move_to: str | None = None
    diff: str
    additions: int
    deletions: int
    match: str
    encoding: str
    note: str | None = None


class ApplyPatchDetails(BaseModel):
    """For the application: one entry per changed file, and the total counts."""

    files: list[FilePatch]
    additions: int
    deletions: int


@dataclass
class _State:
    """A path as the plan sees it: what is on disk, and what the patch leaves there.

    ``owner`` is an existing file's ``(uid, gid)``, which a rollback gives back. A binary
    file can only be deleted: ``data`` holds its bytes (to put back), its ``original`` and
    ``text`` are ``""`` until deleted, and ``binary`` is the error any other operation on
    it raises."""

    resolved: ResolvedPath
    original: str | None
    fmt: TextFormat
    newline: str
    text: str | None
    mode: int
    data: bytes | None = None
    owner: tuple[int, int] | None = None
    links: int = 1
    binary: ToolError | None = None
    # The one update of this path, whose line ranges make its diff fast; None when there
    # was none or anything else happened to the path too.
    patched: PatchedText | None = None
    touched: bool = False


@dataclass
class _Change:
    """One operation's effect, for the result: its action and paths."""

    action: Action
    rel: str
    move_to: str | None = None
    match: str = "exact"


class _Parses:
    """The operations of a patch text, parsed once for a call's presentation and its
    execution: the last text parsed (the same string object) is not parsed again."""

    def __init__(self) -> None:
        self._last: tuple[str, list[FileOp] | PatchSyntaxError] | None = None

    def __call__(self, patch: str) -> list[FileOp]:
        """The operations of ``patch``.

        Raises:
            PatchSyntaxError: as :func:`~workspace_tools.text._patch_parse.parse_patch`.
        """
        last = self._last
        if last is None or last[0] is not patch:
            try:
                outcome: list[FileOp] | PatchSyntaxError = parse_patch(patch)
            except PatchSyntaxError as exc:
                outcome = exc
            last = self._last = (patch, outcome)
        if isinstance(last[1], PatchSyntaxError):
            raise last[1]
        return last[1]


def _present(
    args: ApplyPatchArgs, parse: Callable[[str], list[FileOp]] = parse_patch
) -> ToolPresentation:
    # Also called with placeholder arguments (``patch`` None) for the static presentation.
    try:
        ops = parse(args.patch) if isinstance(args.patch, str) else []
    except PatchSyntaxError:
        ops = []
    if not ops:
        return ToolPresentation(label="Apply patch", icon="file-diff")
    paths = dict.fromkeys(p for op in ops for p in (op.path, op.move_to) if p is not None)
    return ToolPresentation(label="Apply patch", icon="file-diff", detail=", ".join(paths))


#: Under this key a workspace keeps apply_patch's last parse (:meth:`Workspace.kept`), shared
#: by the call's presentation, its named paths and its execution.
PARSES_KEY = "apply_patch.parses"


def execute(args: ApplyPatchArgs, context: ToolContext) -> object:
    """Run an ``apply_patch`` call on ``context.workspace``."""
    workspace = context.need_workspace()
    parse = workspace.kept(PARSES_KEY, _Parses)
    try:
        ops = parse(args.patch)
    except PatchSyntaxError as exc:
        raise ToolError(exc.message, ErrorCode.INVALID_ARGUMENTS) from None
    return apply_operations(workspace, ops, context, allow_overwrite=args.allow_overwrite)


def build(workspace: Workspace) -> Tool[ApplyPatchArgs]:
    """The ``apply_patch`` tool over ``workspace``."""
    parse = workspace.kept(PARSES_KEY, _Parses)
    return tool(
        name="apply_patch",
        description=DESCRIPTION,
        parameters=ApplyPatchArgs,
        execute=execute,
        stateless=True,
        presentation=partial(_present, parse=parse),
        workspace=workspace,
        paths=partial(_named_paths, parse=parse),
        locks_paths=True,
    )


def _named_paths(
    args: ApplyPatchArgs, parse: Callable[[str], list[FileOp]] = parse_patch
) -> list[str]:
    """The paths the patch names (moves' destinations included); none when it does not
    parse (the call reports that)."""
    try:
        ops = parse(args.patch)
    except PatchSyntaxError:
        return []
    return [p for op in ops for p in (op.path, op.move_to) if p is not None]


def apply_operations(
    workspace: Workspace, ops: list[FileOp], context: ToolContext, *, allow_overwrite: bool
) -> object:
    """Plan ``ops`` in memory, then write every changed file, restoring all on a failure.

    Returns the tool's output: a summary text for the model and :class:`ApplyPatchDetails`.

    Raises:
        ToolError: the first failure of the plan (``NOT_FOUND``, ``ALREADY_EXISTS``,
            ``NO_MATCH``, ``AMBIGUOUS_MATCH``, ``STALE_FILE``, ``BINARY_FILE``, ...) or of
            the writes; either way no file is left changed, and the message says so.
    """
    resolved = {}
    for op in ops:
        if op.kind == "delete" or op.move_to is not None:
            _refuse_link(workspace, op)
        for path in (op.path, op.move_to):
            if path is not None and path not in resolved:
                resolved[path] = workspace.resolve(path)
                resolved[path].refuse_directory_form()  # every path of a patch is a file's
    reals = sorted({str(r.real): r for r in resolved.values()}.items())
    with ExitStack() as locks:
        for _, path in reals:
            locks.enter_context(workspace.file_states.lock(path.real))
        try:
            states, changes = _plan(workspace, ops, resolved, allow_overwrite)
        except ToolError as exc:
            raise _unchanged(exc) from exc
        context.check_cancelled()
        # The result is made while the new contents travel to the disk.
        return _commit(workspace, states, context, partial(_output, states, changes))


def _refuse_link(workspace: Workspace, op: FileOp) -> None:
    """Refuse to delete or move a path that is itself a symbolic link: the file tools work
    on a link's target, so either would remove the target and leave the link dangling,
    where ``rm`` or ``git mv`` act on the link."""
    parent, name = os.path.split(op.path.rstrip("/"))
    try:
        where = workspace.resolve(parent or ".").real / name
        # From the parent's fd, as the file tools reach it: a path past PATH_MAX too.
        with open_parent(workspace.root, where) as (dir_fd, entry):
            mode = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False).st_mode
            target = os.readlink(entry, dir_fd=dir_fd) if stat.S_ISLNK(mode) else None
    except (ToolError, OSError, ValueError):
        return  # resolving the path itself reports what is wrong with it
    if target is not None:
        verb = "Delete File" if op.kind == "delete" else "Update File"
        raise ToolError(
            f"{verb}: {op.path} is a symbolic link (to {target}); apply_patch "
            "changes the file a link points to, so it neither deletes nor moves links: use "
            "run_command (rm, mv) for the link, or name the file it points to",
            ErrorCode.INVALID_ARGUMENTS,
        )


def _unchanged(exc: ToolError) -> ToolError:
    # A chunk already applied needs no correction, and sent again it fails again: the
    # model is told to leave it out, never to send the whole patch again.
    applied = isinstance(exc.details, dict) and exc.details.get("already_applied") is True
    again = (
        "send the patch again without that chunk, if it holds anything else"
        if applied
        else "correct this part and send the whole patch again"
    )
    return ToolError(f"{exc.message}\nNo file was changed: {again}.", exc.code, details=exc.details)


def _load(workspace: Workspace, states: dict[str, _State], path: ResolvedPath) -> _State:
    key = str(path.real)
    if key not in states:
        states[key] = _read(workspace, path)
    return states[key]


def _read(workspace: Workspace, path: ResolvedPath) -> _State:
    try:
        current = load_text(workspace, path)
    except ToolError as exc:
        if exc.code is not ErrorCode.BINARY_FILE:
            raise
        return _read_binary(workspace, path, exc)
    state = _State(path, current.text, current.format, current.newline, current.text, 0o100644)
    if current.text is not None:
        _stat_into(workspace, state)
    return state


def _read_binary(workspace: Workspace, path: ResolvedPath, refusal: ToolError) -> _State:
    """A binary file (within the size limit, as load_text checked first) as bytes: deleting
    it needs no decoding; any other operation raises its ``binary`` error."""
    data = read_bytes(workspace.root, path.real, path.rel, limit=workspace.options.max_file_bytes)
    if data is None:  # deleted since load_text read it
        raise ToolError(f"{path.rel}: the file was deleted meanwhile", ErrorCode.STALE_FILE)
    workspace.file_states.check_fresh(path.real, data, path.rel)
    binary = ToolError(
        f"{refusal.message}; apply_patch can delete a binary file, but not add "
        "over, update or move it",
        refusal.code,
    )
    state = _State(path, "", UTF8, "\n", "", 0o100644, data=data, binary=binary)
    _stat_into(workspace, state)
    return state


def _stat_into(workspace: Workspace, state: _State) -> None:
    """Record the existing file's mode and owner, which a rollback gives back, and its hard
    links (an update gives the name a file of its own: the others keep the old content)."""
    try:
        # By name in its directory's fd: a whole path past PATH_MAX is refused by the kernel.
        with open_parent(workspace.root, state.resolved.real) as (dir_fd, name):
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        raise os_error(exc, state.resolved.rel) from exc
    state.mode, state.owner, state.links = st.st_mode, (st.st_uid, st.st_gid), st.st_nlink


def _refuse_read_only(workspace: Workspace, state: _State, verb: str) -> None:
    """Refuse to ``verb`` (delete or move) a file without any write permission bit, as an
    update of it is refused: a file marked read-only (generated, vendored, frozen by
    someone) is protected from the patch whatever the change, as ``rm`` asks before
    removing one. The workspace's ``write_read_only_files`` option lifts it, as for writes.

    Raises:
        ToolError: ``PERMISSION_DENIED`` naming the file and its mode.
    """
    mode = stat.S_IMODE(state.mode)
    if workspace.options.write_read_only_files or mode & 0o222:
        return
    raise ToolError(
        f"Permission denied: {state.resolved.rel} is read-only (mode {mode:04o}); a patch "
        f"does not {verb} a read-only file",
        ErrorCode.PERMISSION_DENIED,
    )


def _plan(
    workspace: Workspace,
    ops: list[FileOp],
    resolved: dict[str, ResolvedPath],
    allow_overwrite: bool,
) -> tuple[dict[str, _State], list[_Change]]:
    states: dict[str, _State] = {}
    changes: list[_Change] = []
    for op in ops:
        state = _load(workspace, states, resolved[op.path])
        rel = state.resolved.rel
        if state.binary is not None and (op.kind != "delete" or state.text is None):
            raise state.binary
        if op.kind == "add":
            if state.text is not None and not allow_overwrite:
                raise ToolError(
                    f"Add File {rel}: the file already exists; change it with '*** Update "
                    "File:', or set allow_overwrite to replace it",
                    ErrorCode.ALREADY_EXISTS,
                )
            state.text = convert_newlines(op.content, state.newline)
            state.patched, state.touched = None, True
            changes.append(_Change("add", rel))
            continue
        if state.text is None:
            verb = "Delete File" if op.kind == "delete" else "Update File"
            # The file the model most likely meant (a case or one-letter slip), as
            # edit_file names it; else, for an update, how to make a new file.
            hint = not_found_hint(str(workspace.root), op.path)
            if hint:
                hint += " Else create it with '*** Add File:'" if op.kind == "update" else ""
            elif op.kind == "update":
                hint = "; create it with '*** Add File:'"
            raise ToolError(f"{verb} {rel}: the file does not exist{hint}", ErrorCode.NOT_FOUND)
        if op.kind == "delete" or op.move_to is not None:
            _refuse_read_only(workspace, state, "delete" if op.kind == "delete" else "move")
        if op.kind == "delete":
            state.text, state.patched, state.touched = None, None, True
            changes.append(_Change("delete", rel))
            continue
        patched = apply_chunks(state.text, op.chunks, newline=state.newline, path=rel)
        if op.move_to is None:
            state.patched = None if state.touched else patched
            state.touched = True
            state.text = patched.text
            changes.append(_Change("update", rel, match=patched.match))
            continue
        target = _load(workspace, states, resolved[op.move_to])
        if target.binary is not None:
            raise target.binary
        if target is not state:
            if target.text is not None and not allow_overwrite:
                raise ToolError(
                    f"Move to {target.resolved.rel}: a file already exists there; choose "
                    "another path, or set allow_overwrite to replace it",
                    ErrorCode.ALREADY_EXISTS,
                )
            target.fmt, target.mode = state.fmt, state.mode
            state.text, state.patched, state.touched = None, None, True
        target.text, target.patched, target.touched = patched.text, None, True
        changes.append(_Change("move", rel, target.resolved.rel, patched.match))
    return states, changes


def _commit(
    workspace: Workspace,
    states: dict[str, _State],
    context: ToolContext,
    meanwhile: Callable[[], object],
) -> object:
    """Write or delete every path whose content the plan changed, and return what
    ``meanwhile`` returns, called once the new contents are written to their temp files
    and before they are flushed (so that it runs while the disk writes them); on any
    failure, put back what was already done and raise."""
    pending = [(key, s) for key, s in states.items() if s.text != s.original]
    encoded = {}
    limit = workspace.options.max_file_bytes
    for key, state in pending:
        if state.text is None:
            continue
        try:
            data = encode_text(state.text, state.fmt, state.resolved.rel)
        except ToolError as exc:
            raise _unchanged(exc) from exc
        if len(data) > limit:
            raise _unchanged(
                ToolError(
                    f"The new content of {state.resolved.rel} is {len(data):,} bytes, over "
                    f"the {limit:,}-byte limit",
                    ErrorCode.FILE_TOO_LARGE,
                )
            )
        encoded[key] = data
    made = _missing_directories(
        workspace, [s.resolved for _, s in pending if s.original is None and s.text is not None]
    )
    done: list[tuple[str, _State]] = []
    with (
        BatchWrite(
            workspace.root,
            write_read_only=workspace.options.write_read_only_files,
            fsync=workspace.options.fsync,
        ) as batch,
        context.committing(),
    ):
        try:
            # Every new content in its temp file and durable before any file changes;
            # then the renames (a failure there puts back those done); then one flush.
            for key, state in pending:
                if state.text is not None:
                    batch.stage(state.resolved.real, state.resolved.rel, encoded[key])
            value = meanwhile()
            batch.flush()
            for key, state in pending:
                if state.text is None:
                    _delete(workspace, state.resolved)
                    batch.removed(state.resolved.real)
                else:
                    _put(batch, state.resolved)
                done.append((key, state))
        except BaseException as exc:
            batch.close()  # the temp files not renamed go first: their directories may go
            _roll_back(workspace, done, made)
            if isinstance(exc, ToolError):
                raise _unchanged(exc) from exc
            raise
        batch.sync()
    for key, state in pending:
        if state.text is None:
            workspace.file_states.forget(state.resolved.real)
        else:
            workspace.file_states.record(state.resolved.real, encoded[key])
    return value


def _put(batch: BatchWrite, path: ResolvedPath) -> None:
    """Land the staged new content of ``path``: the one step of the commit that changes it."""
    batch.replace(path.real)


def _write(workspace: Workspace, path: ResolvedPath, data: bytes) -> None:
    atomic_write(
        workspace.root,
        path.real,
        path.rel,
        data,
        write_read_only=workspace.options.write_read_only_files,
        fsync=workspace.options.fsync,
        sweeps=workspace.temp_sweeps,
    )


def _delete(workspace: Workspace, path: ResolvedPath) -> None:
    try:
        with open_parent(workspace.root, path.real) as (dir_fd, name):
            os.unlink(name, dir_fd=dir_fd)
    except OSError as exc:
        raise os_error(exc, path.rel) from exc


def _missing_directories(workspace: Workspace, paths: list[ResolvedPath]) -> list[MadeDirs]:
    """The directories writing ``paths`` will make (absent now, below the root), one chain
    a path: a rollback removes them again."""
    made = (missing_parents(workspace.root, path.real) for path in paths)
    return [chain for chain in made if chain is not None]


def _roll_back(workspace: Workspace, done: list[tuple[str, _State]], made: list[MadeDirs]) -> None:
    """Put back the paths in ``done`` as they were (a deleted file with its bytes, mode
    and, where this process may set it, owner and group), then remove the directories
    the writes made (``made``, deepest first) unless something else is in them now; best
    effort, last first."""
    for _, state in reversed(done):
        try:
            if state.original is None:
                _delete(workspace, state.resolved)
                continue
            data = (
                state.data
                if state.data is not None
                else encode_text(state.original, state.fmt, state.resolved.rel)
            )
            _write(workspace, state.resolved, data)
            if state.text is None:
                _reown(workspace, state)
        except (ToolError, OSError):
            continue  # the other files are still put back
    for chain in made:
        # Each chain up to its first directory that is not empty (someone else wrote
        # there, or another chain still holds a file) or gone: that one is left as it is;
        # a directory two chains share goes with the last of them.
        remove_made(workspace.root, chain)


def _reown(workspace: Workspace, state: _State) -> None:
    """Give a re-created file its owner, group and permission bits again (owner first:
    ``chown`` clears set-id bits). An owner this process may not set (not root) stays
    the process's own."""
    with open_parent(workspace.root, state.resolved.real) as (dir_fd, name):
        if state.owner is not None:
            with suppress(PermissionError):
                os.chown(name, *state.owner, dir_fd=dir_fd, follow_symlinks=False)
        os.chmod(name, stat.S_IMODE(state.mode), dir_fd=dir_fd)


def _file_diff(state: _State, old: str | None, new: str | None) -> TextDiff:
    """The diff of one path: creation, update or deletion (``new`` ``None``)."""
    rel = state.resolved.rel
    mode = 0o100755 if state.mode & 0o111 else 0o100644
    if new is not None:
        if old is None:
            bom = "\ufeff" if state.fmt.bom and state.fmt.codec == "utf-8" else ""
            return unified_diff(None, bom + new, rel, mode=mode)
        if state.patched is not None:
            bom = "\ufeff" if state.fmt.bom and state.fmt.codec == "utf-8" else ""
            patched = state.patched
            return spans_diff(patched, rel, bom=bom)
        return text_diff(old, new, state.fmt, rel)
    if state.binary is not None:
        return TextDiff(_binary_deletion(rel, mode, state.data or b""), 0, 0)
    bom = "\ufeff" if state.fmt.bom and state.fmt.codec == "utf-8" else ""
    gone = unified_diff(bom + (old or ""), "", rel)
    first, _, rest = gone.diff.partition("\n")
    header = f"{first or _git_header(rel)}\ndeleted file mode {mode:06o}\n"
    rest = rest.replace(f"+++ b/{rel}\n", "+++ /dev/null\n", 1) if rest else ""
    return TextDiff(header + rest, gone.additions, gone.deletions)


def _binary_deletion(rel: str, mode: int, data: bytes) -> str:
    """A binary file's deletion as git prints it, with the full index line (the blob's
    SHA-1) that ``git apply`` needs to check and delete a binary file."""
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
    header = _git_header(rel)
    return (
        f"{header}\ndeleted file mode {mode:06o}\nindex {blob}..{'0' * 40}\n"
        f"Binary files a/{rel} and /dev/null differ\n"
    )


def _git_header(rel: str) -> str:
    return unified_diff(None, "", rel).diff.partition("\n")[0]


def _output(states: dict[str, _State], changes: list[_Change]) -> object:
    by_rel = {s.resolved.rel: s for s in states.values()}
    loosest: dict[str, int] = {}
    moves: dict[str, str] = {}  # target -> source
    for change in changes:
        final = change.move_to or change.rel
        level = LEVEL_NAMES.index(change.match)
        loosest[final] = max(loosest.get(final, 0), level)
        if change.move_to is not None and change.move_to != change.rel:
            moves[change.move_to] = change.rel
    order = dict.fromkeys(r for c in changes for r in (c.rel, c.move_to) if r is not None)
    shown_sources = {s for t, s in moves.items() if by_rel[s].text is None and by_rel[t].text}
    files: list[FilePatch] = []
    for rel in order:
        state = by_rel[rel]
        if state.text == state.original or rel in shown_sources:
            continue
        match = LEVEL_NAMES[loosest.get(rel, 0)]
        source = moves.get(rel)
        if source in shown_sources and source is not None:
            moved = by_rel[source]
            gone = _file_diff(moved, moved.original, None)
            made = _file_diff(state, state.original, state.text)
            files.append(
                FilePatch(
                    path=source,
                    action="move",
                    move_to=rel,
                    diff=gone.diff + made.diff,
                    additions=gone.additions + made.additions,
                    deletions=gone.deletions + made.deletions,
                    match=match,
                    encoding=state.fmt.label,
                )
            )
            continue
        diff = _file_diff(state, state.original, state.text)
        action: Action = "update"
        if state.original is None:
            action = "add"
        elif state.text is None:
            action = "delete"
        files.append(
            FilePatch(
                path=rel,
                action=action,
                diff=diff.diff,
                additions=diff.additions,
                deletions=diff.deletions,
                match=match,
                encoding=state.fmt.label,
                note=other_links_note(rel, state.links - 1) if action == "update" else None,
            )
        )
    details = ApplyPatchDetails(
        files=files,
        additions=sum(f.additions for f in files),
        deletions=sum(f.deletions for f in files),
    )
    return tool_output(_summary(files), details)


_LETTERS = {"add": "A", "update": "M", "delete": "D", "move": "R"}


def _summary(files: list[FilePatch]) -> str:
    lines = ["Success. Updated the following files:"]
    for entry in files:
        line = f"{_LETTERS[entry.action]} {entry.path}"
        if entry.move_to is not None:
            line += f" -> {entry.move_to}"
        if entry.match != "exact":
            line += f" (matched with {entry.match.replace('_', ' ')} ignored)"
        if entry.note is not None:
            line += f" ({entry.note})"
        lines.append(line)
    return "\n".join(lines)
