"""Checkpoints around a session's writing steps: manifests, what each step changed, restore.

Before every step whose tool can write (``run_command`` included), :meth:`Checkpoints.before`
takes a manifest of the workspace: path, type, mode, size, ``mtime_ns`` and the SHA-256 of
the content of every entry the one walker lists (``workspace.walker``, ignore rules and all),
and puts the content of files not yet stored into a content-addressed store outside the
workspace (:mod:`workspace_tools.workspace._store`). After the step,
:meth:`Checkpoints.after` takes the manifest again (hashes only) and the difference is
exactly what the step created, changed and deleted.

Cost is bounded the way git bounds ``git status``: a file's hash is reused while its
``lstat`` (size, mtime, ctime, inode) is unchanged, except for a file modified within
:data:`RACY_NS` of the hashing (the clock may not have ticked since), which is hashed again;
contents are stored once per hash. What ignore rules skip (an ignored directory is one entry,
never entered) and files over the size cap are listed by their stat only: a change to them
is reported, but it cannot be restored.

Restore (:meth:`Checkpoints.restore`) brings the files the session's steps changed, from a
given step on, back to how they were just before the first of those steps changed them:
content and mode; what the steps created is removed, what they deleted comes back. A file
that differs from how the session's last step left it was changed by someone else: a
conflict, refused unless ``overwrite``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, Field
from pydantic_core import to_jsonable_python

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools._output import ToolOutput, ToolPresentation, tool_output
from workspace_tools._tool import Tool, ToolContext, tool
from workspace_tools.text._diff import unified_diff
from workspace_tools.workspace import Workspace
from workspace_tools.workspace._files import DirFds, open_dir, os_error
from workspace_tools.workspace._store import BlobStore, StoreError
from workspace_tools.workspace._tempfiles import create_temp

EntryType = Literal["file", "directory", "symlink"]
ChangeKind = Literal["created", "changed", "deleted"]

DEFAULT_MAX_FILE_BYTES = 16 * 1024 * 1024
"""Files larger than this are listed by their stat only, never stored."""

RACY_NS = 2_000_000_000
"""A file modified this close to its hashing is hashed again next time (coarse clocks)."""

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Entry(NamedTuple):
    """One path in a manifest.

    ``digest`` is the hex SHA-256 of a file's bytes or a symlink's target, ``None`` for a
    directory and for an entry recorded by its stat only (``tracked`` false: ignored by
    rules, over the size cap, or unreadable), whose content is not restorable.
    """

    type: EntryType
    mode: int
    size: int
    mtime_ns: int
    digest: str | None
    tracked: bool


Manifest = dict[str, Entry]
Change = tuple[Entry | None, Entry | None]


def same(a: Entry | None, b: Entry | None) -> bool:
    """Whether two manifest entries describe the same content and mode (mtime plays no part
    for tracked entries; untracked ones can only be compared by their stat)."""
    if a is None or b is None:
        return a is b
    if a.type != b.type:
        return False
    if not (a.tracked and b.tracked):
        return (a.mode, a.size, a.mtime_ns, a.tracked) == (b.mode, b.size, b.mtime_ns, b.tracked)
    if a.type == "symlink":
        return a.digest == b.digest
    return a.mode == b.mode and a.digest == b.digest


def diff_manifests(before: Manifest, after: Manifest) -> dict[str, Change]:
    """Every path whose entry differs between two manifests: ``path -> (before, after)``,
    ``None`` for absent; sorted by path."""
    out: dict[str, Change] = {}
    for path in sorted(before.keys() | after.keys()):
        old, new = before.get(path), after.get(path)
        if not same(old, new):
            out[path] = (old, new)
    return out


class ChangedFile(BaseModel):
    """One path a step (or a restore) created, changed or deleted.

    Attributes:
        path: relative to the workspace root, ``/``-separated.
        change: ``created``, ``changed`` (content or mode) or ``deleted``.
        type: ``file``, ``directory`` or ``symlink`` (what it is now; for a deleted path,
            what it was).
        restorable: its state before the change can be brought back (false for what
            ignore rules skip and files over the size cap: their content is not stored,
            and a restore leaves them as they are).
    """

    path: str
    change: ChangeKind
    type: EntryType
    restorable: bool = True


def changed_files(changes: dict[str, Change]) -> list[ChangedFile]:
    """The :class:`ChangedFile` rows of a manifest diff, in path order."""
    rows = []
    for path, (old, new) in changes.items():
        kind: ChangeKind = "created" if old is None else "deleted" if new is None else "changed"
        shown = new if new is not None else old
        assert shown is not None
        restorable = all(e is None or e.tracked for e in (old, new))
        rows.append(ChangedFile(path=path, change=kind, type=shown.type, restorable=restorable))
    return rows


def with_changed_files(details: Any, rows: list[ChangedFile]) -> dict[str, Any]:
    """A result's ``details`` as JSON with ``changed_files`` added (a tool's details that
    are not an object are kept under ``details``)."""
    base = {} if details is None else to_jsonable_python(details)
    if not isinstance(base, dict):
        base = {"details": base}
    return {**base, "changed_files": [row.model_dump() for row in rows]}


class RestoreResult(BaseModel):
    """What :meth:`Checkpoints.restore` did, or would do.

    Attributes:
        step: the step restored to (the state just before it); ``None`` for an undo with
            nothing left to undo.
        applied: the files were changed (false for a dry run and for a refused restore).
        dry_run: nothing was to be changed.
        files: what the restore changes (or would), each as the change restore makes.
        conflicts: paths changed since the session's steps left them; a restore with any
            is refused, unless ``overwrite``.
        not_restorable: paths left as they are: their content was never stored (ignored
            by rules, over the size cap), or a directory to remove still holds such
            entries or entries no step made.
        diff: for a dry run, the unified diff the restore would apply (``git apply`` form
            for text files and modes; a binary file is named, as ``git diff`` names it;
            directories are in ``files`` only).
    """

    step: int | None
    applied: bool = False
    dry_run: bool = False
    files: list[ChangedFile] = Field(default_factory=list)
    conflicts: list[str] = Field(default_factory=list)
    not_restorable: list[str] = Field(default_factory=list)
    diff: str = ""

    def model_text(self) -> str:
        """What a model reads about the restore."""
        lines = []
        if self.conflicts and not self.applied and not self.dry_run:
            lines.append(
                f"Not restored: {len(self.conflicts)} file(s) changed since the session's steps "
                "left them (by someone else); nothing was changed. Restore them anyway with "
                "overwrite, or leave them out with paths:"
            )
            lines.extend(f"  {path}" for path in self.conflicts)
            return "\n".join(lines)
        if self.step is None:
            return "Nothing to undo: no step of this session changed a file."
        if not self.files:
            lines.append(f"Nothing to restore: no file changed from step {self.step} on.")
        else:
            verb = "Would restore" if self.dry_run else "Restored"
            lines.append(f"{verb} {len(self.files)} path(s) as before step {self.step}:")
            lines.extend(f"  {f.change} {f.path}" for f in self.files)
        if self.conflicts:
            lines.append(
                "Changed since by someone else (overwritten):"
                if self.applied
                else "Changed since by someone else (a restore would refuse them):"
            )
            lines.extend(f"  {path}" for path in self.conflicts)
        if self.not_restorable:
            lines.append("Not restorable (never stored; left as they are):")
            lines.extend(f"  {path}" for path in self.not_restorable)
        if self.dry_run and self.diff:
            lines.append(self.diff.rstrip("\n"))
        return "\n".join(lines)


@dataclass
class StepCheckpoint:
    """What one writing step changed: ``path -> (before, after)``, and the paths a restore
    has brought back since (they are not restored twice)."""

    step: int
    changes: dict[str, Change]
    undone: set[str] = field(default_factory=set)


class Checkpoints:
    """Checkpoints of one workspace across a session's writing steps.

    Args:
        workspace: the workspace the steps change.
        directory: where the content store lives (outside the workspace); a temporary
            directory when ``None``.
        keep: keep the store when :meth:`close` is called or the object is collected.
        max_file_bytes: files over this many bytes are listed by stat only, never stored.

    Raises:
        ValueError: ``directory`` is inside the workspace or a ``.git`` directory.

    Thread-safe: one lock covers a step's :meth:`before` and :meth:`after` pair and each
    :meth:`restore`; a restore while a step runs is refused.
    """

    def __init__(
        self,
        workspace: Workspace,
        *,
        directory: str | os.PathLike[str] | None = None,
        keep: bool = False,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    ) -> None:
        self.workspace = workspace
        self.store = BlobStore(directory, workspace.root, keep=keep)
        self.max_file_bytes = max_file_bytes
        self._root = str(workspace.root)
        self._lock = threading.Lock()
        # rel -> ((size, mtime_ns, ctime_ns, ino), digest): hashes reused while the stat holds.
        self._hashes: dict[str, tuple[tuple[int, int, int, int], str]] = {}
        self._stored: set[str] = set()
        self._before: Manifest | None = None
        self._steps: list[StepCheckpoint] = []
        # rel -> how the session's last step (or restore) left it: a conflict is a difference.
        self._seen: dict[str, Entry | None] = {}

    @property
    def steps(self) -> list[StepCheckpoint]:
        """The checkpoints so far, one per writing step, in order."""
        return list(self._steps)

    def close(self) -> None:
        """Remove the content store (unless kept or given)."""
        self.store.close()

    # -- manifests -------------------------------------------------------------------------

    def manifest(self, *, store: bool) -> Manifest:
        """The workspace as it is now; with ``store``, the content of every tracked file
        is in the store afterwards.

        Raises:
            OSError: the store cannot be written (disk full), or the root is unreadable.
        """
        walk = self.workspace.walker.walk(self._root, "", recursive=True, include_ignored=False)
        now = time.time_ns()
        out: Manifest = {}
        with DirFds(self._root) as dirs:
            for rels, tracked in ((walk.entries, True), (walk.skipped, False)):
                for rel, _kind in rels:
                    head, _, name = rel.rpartition("/")
                    try:
                        dir_fd = dirs.get(head)
                        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    except OSError:
                        continue  # gone since it was listed
                    entry = self._entry(dir_fd, name, rel, st, tracked, store, now)
                    if entry is not None:
                        out[rel] = entry
        return out

    def _entry(
        self,
        dir_fd: int,
        name: str,
        rel: str,
        st: os.stat_result,
        tracked: bool,
        store: bool,
        now: int,
    ) -> Entry | None:
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            return Entry("directory", mode, st.st_size, st.st_mtime_ns, None, tracked)
        if stat.S_ISLNK(st.st_mode):
            kind: EntryType = "symlink"
        elif stat.S_ISREG(st.st_mode):
            kind = "file"
        else:
            return None  # sockets, FIFOs, devices: never listed by the walker either
        untracked = Entry(kind, mode, st.st_size, st.st_mtime_ns, None, False)
        if not tracked or st.st_size > self.max_file_bytes:
            return untracked
        key = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        cached = self._hashes.get(rel)
        digest = cached[1] if cached is not None and cached[0] == key else None
        if digest is None or (store and digest not in self._stored):
            data = self._read(dir_fd, name, kind, st)
            if data is None:
                return untracked
            digest = hashlib.sha256(data).hexdigest()
            if store and digest not in self._stored:
                self.store.put(data)
                self._stored.add(digest)
            if now - st.st_mtime_ns > RACY_NS and now - st.st_ctime_ns > RACY_NS:
                self._hashes[rel] = (key, digest)
            else:
                self._hashes.pop(rel, None)
        return Entry(kind, mode, st.st_size, st.st_mtime_ns, digest, True)

    @staticmethod
    def _read(dir_fd: int, name: str, kind: EntryType, st: os.stat_result) -> bytes | None:
        """A file's bytes or a link's target, as ``st`` described it; ``None`` when it is
        unreadable or changed since the stat (then the entry is listed by stat only)."""
        try:
            if kind == "symlink":
                return os.fsencode(os.readlink(name, dir_fd=dir_fd))
            fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
        except OSError:
            return None
        try:
            info = os.fstat(fd)
            if (info.st_ino, info.st_dev) != (st.st_ino, st.st_dev):
                return None
            os.set_blocking(fd, True)
            chunks = []
            while chunk := os.read(fd, max(info.st_size, 1 << 16)):
                chunks.append(chunk)
            return b"".join(chunks)
        except OSError:
            return None
        finally:
            os.close(fd)

    # -- steps -----------------------------------------------------------------------------

    def before(self) -> None:
        """Take the manifest before a writing step, storing what is not yet stored.

        Raises:
            OSError: as :meth:`manifest` (the step should then not run).
        """
        with self._lock:
            self._before = self.manifest(store=True)

    def after(self, step: int) -> list[ChangedFile]:
        """Take the manifest after step ``step`` and record what it changed.

        Raises:
            RuntimeError: no :meth:`before` is pending.
            OSError: the workspace cannot be walked (then nothing is recorded).
        """
        with self._lock:
            before, self._before = self._before, None
            if before is None:
                raise RuntimeError("Checkpoints.after without Checkpoints.before")
            after = self.manifest(store=False)
            changes = diff_manifests(before, after)
            self._steps.append(StepCheckpoint(step, changes))
            for path, (_, new) in changes.items():
                self._seen[path] = new
            return changed_files(changes)

    @property
    def running(self) -> bool:
        """A step is between :meth:`before` and :meth:`after`."""
        return self._before is not None

    def last_step(self) -> int | None:
        """The last step with a change not yet restored, or ``None``."""
        for checkpoint in reversed(self._steps):
            if set(checkpoint.changes) - checkpoint.undone:
                return checkpoint.step
        return None

    # -- restore ---------------------------------------------------------------------------

    def restore(
        self,
        step: int,
        paths: Sequence[str] | None = None,
        *,
        dry_run: bool = False,
        overwrite: bool = False,
    ) -> RestoreResult:
        """Bring back the files the steps from ``step`` on changed, as they were just
        before the first of those steps changed each.

        Args:
            step: a step index of the session.
            paths: only these paths (a directory stands for everything below it),
                relative to the root; all when ``None``.
            dry_run: change nothing; the result carries the unified diff a restore applies.
            overwrite: restore also files changed since by someone else (conflicts).

        Returns the :class:`RestoreResult`; a restore with conflicts and without
        ``overwrite`` changes nothing and lists them.

        Raises:
            ToolError: ``INVALID_ARGUMENTS`` for a negative step or a step still running,
                the errors of path resolution for ``paths``, ``TOOL_ERROR`` when a stored
                content is missing or damaged, and the mapped ``OSError`` of a write (the
                files restored until then stay restored and are listed in the message).
        """
        if step < 0:
            raise ToolError(f"step must be 0 or more, not {step}", ErrorCode.INVALID_ARGUMENTS)
        if self.running:
            raise ToolError(
                "Cannot restore while a step runs; wait for it to end",
                ErrorCode.INVALID_ARGUMENTS,
            )
        prefixes = None if paths is None else [self._rel(p) for p in paths]
        with self._lock:
            targets, owners = self._targets(step, prefixes)
            current = self.manifest(store=False) if targets else {}
            result = RestoreResult(step=step, dry_run=dry_run)
            plan: dict[str, Entry | None] = {}
            for path, target in targets.items():
                now = current.get(path)
                if same(now, target):
                    continue
                if any(e is not None and not e.tracked for e in (now, target)):
                    result.not_restorable.append(path)
                elif not same(now, self._seen.get(path)):
                    result.conflicts.append(path)
                    plan[path] = target
                else:
                    plan[path] = target
            for path in _held_directories(plan, current):
                del plan[path]
                result.not_restorable.append(path)
            result.not_restorable.sort()
            result.conflicts = [p for p in result.conflicts if p in plan]
            result.files = changed_files({p: (current.get(p), t) for p, t in plan.items()})
            if dry_run:
                result.diff = self._diff(plan, current)
                return result
            if result.conflicts and not overwrite:
                result.files = []
                return result
            self._apply(plan, current)
            kept = set(result.not_restorable)
            for index, path in owners:
                if path not in kept:
                    self._steps[index].undone.add(path)
            for path, target in plan.items():
                self._seen[path] = target
            result.applied = True
            return result

    def _rel(self, path: str) -> str:
        rel = self.workspace.resolve(path).rel
        return "" if rel == "." else rel

    def _targets(
        self, step: int, prefixes: list[str] | None
    ) -> tuple[dict[str, Entry | None], list[tuple[int, str]]]:
        """``path -> state before the first step from ``step`` on that changed it``, and
        which ``(checkpoint index, path)`` pairs a restore undoes."""
        targets: dict[str, Entry | None] = {}
        owners: list[tuple[int, str]] = []
        for index, checkpoint in enumerate(self._steps):
            if checkpoint.step < step:
                continue
            for path, (old, _new) in checkpoint.changes.items():
                if path in checkpoint.undone or not _selected(path, prefixes):
                    continue
                targets.setdefault(path, old)
                owners.append((index, path))
        return targets, owners

    def _diff(self, plan: dict[str, Entry | None], current: Manifest) -> str:
        parts = []
        for path, target in plan.items():
            parts.append(self._path_diff(path, current.get(path), target))
        return "".join(parts)

    def _path_diff(self, path: str, now: Entry | None, target: Entry | None) -> str:
        """The ``git apply`` diff turning ``path`` from ``now`` into ``target``."""
        if any(e is not None and e.type == "directory" for e in (now, target)):
            return ""  # git diffs no directories; the result's files list them
        old = None if now is None else self._text(path, now)
        new = None if target is None else self._blob_text(target)
        if (now is not None and old is None) or (target is not None and new is None):
            # As git prints a binary change without --binary: named, not shown.
            return f"diff --git a/{path} b/{path}\nBinary files a/{path} and b/{path} differ\n"
        if target is None:
            assert old is not None and now is not None
            shown = unified_diff(old, "", path).diff
            header = f"diff --git a/{path} b/{path}\ndeleted file mode {_git_mode(now)}\n"
            body = shown.split("\n", 1)[1].replace(f"+++ b/{path}\n", "+++ /dev/null\n", 1)
            return header + body if old else header
        assert new is not None
        if now is None:
            return unified_diff(None, new, path, mode=_git_mode_bits(target)).diff
        text = unified_diff(old, new, path).diff
        if now.mode != target.mode and now.type == "file":
            lines = f"old mode {_git_mode(now)}\nnew mode {_git_mode(target)}\n"
            head = f"diff --git a/{path} b/{path}\n"
            text = head + lines + (text.split("\n", 1)[1] if text else "")
        return text

    def _text(self, path: str, entry: Entry) -> str | None:
        """The current content of ``path`` as text (``None``: not UTF-8 or unreadable)."""
        head, _, name = path.rpartition("/")
        try:
            fd = open_dir(self._root, head)
        except OSError:
            return None
        try:
            data = self._read(fd, name, entry.type, os.stat(name, dir_fd=fd, follow_symlinks=False))
        except OSError:
            data = None
        finally:
            os.close(fd)
        return _decoded(data)

    def _blob_text(self, entry: Entry) -> str | None:
        assert entry.digest is not None
        return _decoded(self._blob(entry))

    def _blob(self, entry: Entry) -> bytes:
        assert entry.digest is not None
        try:
            return self.store.get(entry.digest)
        except StoreError as exc:
            raise ToolError(f"Cannot restore: {exc}", ErrorCode.TOOL_ERROR) from exc

    def _apply(self, plan: dict[str, Entry | None], current: Manifest) -> None:
        """Change the tree as ``plan`` says: removals deepest first, then creations and
        contents shallowest first, then directory modes deepest first."""
        done: list[str] = []
        try:
            # A directory the steps made read-only must let its entries be changed first.
            for path, target in plan.items():
                now = current.get(path)
                if now is not None and now.type == "directory" and target is not None:
                    self._chmod_dir(path, now.mode | 0o700)
            for path in sorted(plan, key=_depth, reverse=True):
                now, target = current.get(path), plan[path]
                if now is not None and (target is None or target.type != now.type):
                    self._remove(path, now)
                    done.append(path)
            for path in sorted(plan, key=_depth):
                now, target = current.get(path), plan[path]
                if target is None:
                    continue
                replaced = now is not None and now.type != target.type
                if target.type == "directory":
                    if now is None or replaced:
                        self._mkdir(path, target.mode | 0o700)
                else:
                    self._write(path, target)
                done.append(path)
            for path in sorted(plan, key=_depth, reverse=True):
                target = plan[path]
                if target is not None and target.type == "directory":
                    self._chmod_dir(path, target.mode)
        except OSError as exc:
            error = os_error(exc, getattr(exc, "rel", "?"))
            restored = ", ".join(dict.fromkeys(done)) or "none"
            raise ToolError(
                f"Restore stopped: {error.message}; restored before that: {restored}", error.code
            ) from exc

    def _remove(self, path: str, now: Entry) -> None:
        head, _, name = path.rpartition("/")
        with _at(self._root, head, path) as dir_fd:
            if now.type == "directory":
                os.rmdir(name, dir_fd=dir_fd)
            else:
                os.unlink(name, dir_fd=dir_fd)
        self.workspace.file_states.forget(self.workspace.root / path)

    def _mkdir(self, path: str, mode: int) -> None:
        head, _, name = path.rpartition("/")
        with _at(self._root, head, path) as dir_fd:
            os.mkdir(name, mode, dir_fd=dir_fd)

    def _chmod_dir(self, path: str, mode: int) -> None:
        head, _, name = path.rpartition("/")
        with _at(self._root, head, path) as dir_fd:
            fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            try:
                os.fchmod(fd, mode)
            finally:
                os.close(fd)

    def _write(self, path: str, target: Entry) -> None:
        """Put ``target``'s content at ``path`` by a temp file renamed over it (a symlink
        by a temp link), with its mode; crash-safe as any atomic write."""
        data = self._blob(target)
        head, _, name = path.rpartition("/")
        with _at(self._root, head, path) as dir_fd:
            if target.type == "symlink":
                temp = f".{name[:200]}.{os.urandom(8).hex()}.wt-tmp"
                os.symlink(os.fsdecode(data), temp, dir_fd=dir_fd)
            else:
                temp, fd = create_temp(dir_fd, name, 0o600)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                    os.fchmod(fd, target.mode)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            try:
                os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temp, dir_fd=dir_fd)
                raise
            os.fsync(dir_fd)
        real = self.workspace.root / path
        if target.type == "file":
            self.workspace.file_states.record(real, data)


@contextlib.contextmanager
def _at(root: str, head: str, rel: str) -> Iterator[int]:
    """The fd of ``head`` below ``root`` (no symlink followed); an ``OSError`` names ``rel``."""
    try:
        fd = open_dir(root, head)
    except OSError as exc:
        exc.rel = rel  # type: ignore[attr-defined]
        raise
    try:
        yield fd
    except OSError as exc:
        exc.rel = rel  # type: ignore[attr-defined]
        raise
    finally:
        os.close(fd)


def _selected(path: str, prefixes: list[str] | None) -> bool:
    if prefixes is None:
        return True
    return any(p == "" or path == p or path.startswith(p + "/") for p in prefixes)


def _held_directories(plan: dict[str, Entry | None], current: Manifest) -> list[str]:
    """Directories ``plan`` would remove (or replace) that still hold entries the restore
    leaves: what someone else put there, or what ignore rules skip. They stay."""
    removed = {
        path
        for path, target in plan.items()
        if target is None or (path in current and current[path].type != target.type)
    }
    held: set[str] = set()
    for path in current:
        if path in removed:
            continue
        head = path.rpartition("/")[0]
        while head and head not in held:
            held.add(head)
            head = head.rpartition("/")[0]
    return sorted(p for p in removed if p in held and current.get(p, _FILE).type == "directory")


_FILE = Entry("file", 0, 0, 0, None, False)


def _depth(path: str) -> tuple[int, str]:
    return path.count("/"), path


def _decoded(data: bytes | None) -> str | None:
    if data is None or b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _git_mode_bits(entry: Entry) -> int:
    if entry.type == "symlink":
        return 0o120000
    return 0o100755 if entry.mode & 0o111 else 0o100644


def _git_mode(entry: Entry) -> str:
    return f"{_git_mode_bits(entry):06o}"


class UndoArgs(BaseModel):
    """Arguments of the ``undo`` tool."""

    paths: list[str] | None = Field(
        None,
        description="Undo only these paths (a directory stands for everything below it); "
        "default: every file the last step changed",
    )
    dry_run: bool = Field(
        False, description="Show the unified diff the undo would apply; change nothing"
    )
    overwrite: bool = Field(
        False,
        description="Also put back files someone else changed since the step (without it, "
        "such files make the undo refuse and are listed)",
    )


UNDO_DESCRIPTION = (
    "Undo the last step of this session that changed files, whichever tool made it "
    "(run_command included): files it changed or deleted come back as they were before it, "
    "with their permissions; files it created are removed. Call it again to undo the step "
    "before. Files changed since by someone else are not overwritten unless asked."
)


def undo_tool(undo: Callable[[UndoArgs], RestoreResult]) -> Tool[UndoArgs]:
    """The ``undo`` tool a session offers a model (:meth:`ToolSession.undo_tool`).

    ``undo`` runs the undo for the validated arguments. The result's content is
    :meth:`RestoreResult.model_text`, its details the :class:`RestoreResult` as JSON with
    ``changed_files``. A refused undo (conflicts) is a ``STALE_FILE`` error listing them.
    """

    def execute(args: UndoArgs, context: ToolContext) -> ToolOutput:
        result = undo(args)
        if result.conflicts and not result.applied and not result.dry_run:
            raise ToolError(result.model_text(), ErrorCode.STALE_FILE)
        details = with_changed_files(result, result.files if result.applied else [])
        return tool_output(result.model_text(), details=details)

    return tool(
        name="undo",
        description=UNDO_DESCRIPTION,
        parameters=UndoArgs,
        execute=execute,
        presentation=ToolPresentation(label="Undo", icon="undo"),
    )
