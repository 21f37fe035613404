"""Checkpoints around a session's writing steps: what each step changed, restore and undo.

Before every step whose tool can write (``run_command`` included), :meth:`Checkpoints.before`
takes a manifest of the workspace (:mod:`workspace_tools.workspace._manifest`: every entry
the one walker lists, with mode and content hash) and puts the content of files not yet
stored into a content-addressed store outside the workspace
(:mod:`workspace_tools.workspace._store`). After the step, :meth:`Checkpoints.after` takes
the manifest again (hashes only); the difference is exactly what the step created, changed
and deleted.

Restore (:meth:`Checkpoints.restore`) brings the files the session's steps changed, from a
given step on, back to how they were just before the first of those steps changed them:
content and mode; what the steps created is removed, what they deleted comes back. A file
that differs from how the session's last step left it was changed by someone else: a
conflict, refused unless ``overwrite``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from workspace_tools._errors import ErrorCode, ToolError, clipped
from workspace_tools.session._encodable import Encodable
from workspace_tools.workspace import Workspace
from workspace_tools.workspace._files import os_error
from workspace_tools.workspace._manifest import (
    DEFAULT_MAX_FILE_BYTES,
    Change,
    Entry,
    EntryType,
    Manifest,
    Manifests,
    diff_manifests,
    same,
)
from workspace_tools.workspace._paths import shown_path
from workspace_tools.workspace._restore import TreeRestorer
from workspace_tools.workspace._store import BlobStore

logger = logging.getLogger("workspace_tools")

ChangeKind = Literal["created", "changed", "deleted"]

RECORD = "checkpoints.json"
"""The record of a session's steps, beside the blobs in its store."""
RECORD_VERSION = 1


class ChangedFile(Encodable):
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


class RestoreResult(Encodable):
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
        protected: paths left as they are because the session's sandbox keeps them from
            its commands (what tools on the host run, such as ``.envrc``; see
            ``Sandbox.host_exec_paths``), with what it set aside of them
            (``NAME.sandbox-blocked``): a restore, which runs outside the sandbox, must not
            put back under its own name what a sandboxed command wrote there.
        diff: for a dry run, the ``git diff`` of the change the restore would make
            (without ``index`` lines): text by git's rule (no NUL in the first 8,000
            bytes), each line shown in its file's encoding; a binary file named, a link
            as git shows one (mode 120000, its target the content; a change between link
            and file a deletion and a creation); directories are in ``files`` only.
    """

    step: int | None
    applied: bool = False
    dry_run: bool = False
    files: list[ChangedFile] = Field(default_factory=list)
    conflicts: list[str] = Field(default_factory=list)
    not_restorable: list[str] = Field(default_factory=list)
    protected: list[str] = Field(default_factory=list)
    diff: str = ""

    def model_text(self) -> str:
        """What a model reads about the restore."""
        lines = []
        if self.conflicts and not self.applied and not self.dry_run:
            lines.append(
                f"Not restored: {_counted(len(self.conflicts), 'file')} changed since the "
                "session's steps left them (by someone else); nothing was changed. Restore "
                "them anyway with overwrite, or leave them out with paths:"
            )
            lines.extend(f"  {shown_path(path)}" for path in self.conflicts)
            return "\n".join(lines)
        if self.step is None:
            return (
                "Nothing to undo: no change of this session is left to undo (no step changed a "
                "file, or each change was undone already)."
            )
        if not self.files:
            lines.append(f"Nothing to restore: no file changed from step {self.step} on.")
        else:
            verb = "Would restore" if self.dry_run else "Restored"
            lines.append(f"{verb} {_counted(len(self.files), 'path')} as before step {self.step}:")
            lines.extend(f"  {f.change} {shown_path(f.path)}" for f in self.files)
        if self.conflicts:
            lines.append(
                "Changed since by someone else (overwritten):"
                if self.applied
                else "Changed since by someone else (a restore would refuse them):"
            )
            lines.extend(f"  {shown_path(path)}" for path in self.conflicts)
        if self.not_restorable:
            lines.append("Not restorable (never stored; left as they are):")
            lines.extend(f"  {shown_path(path)}" for path in self.not_restorable)
        if self.protected:
            lines.append(
                "Left as they are (the sandbox keeps these from commands: tools on the host "
                "run what they hold):"
            )
            lines.extend(f"  {shown_path(path)}" for path in self.protected)
        if self.dry_run and self.diff:
            lines.append(self.diff.rstrip("\n"))
        return "\n".join(lines)


def _counted(count: int, noun: str) -> str:
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


@dataclass
class StepCheckpoint:
    """What one writing step changed: ``path -> (before, after)``, the paths a restore
    has brought back since (they are not restored twice), and those a restore found not
    restorable and ``left`` as they are (an undo passes over them to the step before; a
    restore of the step tries them again)."""

    step: int
    changes: dict[str, Change]
    undone: set[str] = field(default_factory=set)
    left: set[str] = field(default_factory=set)


class Checkpoints:
    """Checkpoints of one workspace across a session's writing steps.

    Args:
        workspace: the workspace the steps change.
        directory: where the content store lives (outside the workspace), with the record
            of the steps (``checkpoints.json``, rewritten after each step and restore) that
            :meth:`load` reads back; a new directory in the temp directory when ``None``.
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
        self._manifests = Manifests(workspace, self.store, max_file_bytes)
        self._restorer = TreeRestorer(workspace, self.store)
        self._lock = threading.Lock()
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

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> Checkpoints:
        """The checkpoints a session recorded in ``directory`` (its store, kept), for a
        restore after the session ended (``workspace-tools restore``).

        Raises:
            ValueError: no record in ``directory``, one that cannot be read (the cause
                named, as ``Is a directory``), one this version cannot read, or a damaged
                one (the first fields that are wrong named, as ``steps.0.step: ...``).
            NotADirectoryError: the recorded workspace root is gone.
        """
        path = Path(directory)
        shown = clipped(str(path))
        try:
            text = (path / RECORD).read_bytes()
        except FileNotFoundError:
            raise ValueError(f"no checkpoints recorded in {shown}") from None
        except OSError as exc:
            cause = exc.strerror or str(exc)
            raise ValueError(f"cannot read the checkpoint record in {shown}: {cause}") from None
        try:
            # json, not pydantic's parser: names that are not UTF-8 are kept as lone
            # surrogates (surrogateescape), which pydantic's JSON parser refuses.
            loaded = json.loads(text)
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            raise ValueError(f"the checkpoint record in {shown} is damaged: {exc}") from None
        if not isinstance(loaded, dict) or loaded.get("version") != RECORD_VERSION:
            raise ValueError(f"the checkpoint record in {shown} is not of version {RECORD_VERSION}")
        try:
            record = _Record.model_validate(loaded)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, error['loc']))}: {error['msg']}" for error in exc.errors()[:3]
            )
            raise ValueError(f"the checkpoint record in {shown} is damaged: {problems}") from None
        checkpoints = cls(Workspace(record.root), directory=path, keep=True)
        checkpoints._steps = [
            StepCheckpoint(item.step, dict(item.changes), set(item.undone)) for item in record.steps
        ]
        checkpoints._seen = dict(record.seen)
        return checkpoints

    def _save(self) -> None:
        """Write the record of the steps next to the store (see :meth:`load`)."""
        record = {
            "version": RECORD_VERSION,
            "root": str(self.workspace.root),
            "steps": [
                {
                    "step": c.step,
                    "changes": {p: [b, a] for p, (b, a) in c.changes.items()},
                    "undone": sorted(c.undone),
                }
                for c in self._steps
            ],
            "seen": self._seen,
        }
        self.store.write_record(RECORD, json.dumps(record).encode())

    def before(self) -> None:
        """Take the manifest before a writing step, storing what is not yet stored.

        Raises:
            OSError: as :meth:`manifest` (the step should then not run).
        """
        with self._lock:
            self._before = self._manifests.take(store=True)

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
            after = self._manifests.take(store=False)
            changes = diff_manifests(before, after)
            self._steps.append(StepCheckpoint(step, changes))
            for path, (_, new) in changes.items():
                self._seen[path] = new
            self._save()
            return changed_files(changes)

    @property
    def running(self) -> bool:
        """A step is between :meth:`before` and :meth:`after`."""
        return self._before is not None

    def last_step(self) -> int | None:
        """The last step with a change not yet restored nor left as not restorable, or
        ``None``."""
        for checkpoint in reversed(self._steps):
            if set(checkpoint.changes) - checkpoint.undone - checkpoint.left:
                return checkpoint.step
        return None

    def restore_targets(self, step: int, paths: Sequence[str] | None = None) -> list[str]:
        """The paths (relative to the root) a :meth:`restore` of ``step`` limited to
        ``paths`` would consider bringing back, in path order.

        Raises:
            ToolError: the errors of path resolution for ``paths``.
        """
        prefixes = None if paths is None else [self._rel(p) for p in paths]
        with self._lock:
            return sorted(self._targets(step, prefixes)[0])

    def restore(
        self,
        step: int,
        paths: Sequence[str] | None = None,
        *,
        dry_run: bool = False,
        overwrite: bool = False,
        protected: Collection[str] = (),
    ) -> RestoreResult:
        """Bring back the files the steps from ``step`` on changed, as they were just
        before the first of those steps changed each.

        Args:
            step: a step index of the session.
            paths: only these paths (a directory stands for everything below it),
                relative to the root; all when ``None``.
            dry_run: change nothing; the result carries the unified diff a restore applies.
            overwrite: restore also files changed since by someone else (conflicts).
            protected: paths relative to the root left as they are, with everything below
                them and what a sandbox set aside of them (``NAME.sandbox-blocked...``);
                the result lists those the restore would have changed
                (:attr:`RestoreResult.protected`). A path with a set-aside copy in the
                workspace now is left too, whoever restores: a sandbox set it aside because
                tools on the host run what it holds.

        Returns the :class:`RestoreResult`; a restore with conflicts and without
        ``overwrite`` changes nothing and lists them.

        Raises:
            ToolError: ``INVALID_ARGUMENTS`` for a negative step or a step still running,
                the errors of path resolution for ``paths``, ``TOOL_ERROR`` when a stored
                content is missing or damaged, and the mapped ``OSError`` of a write (the
                files restored until then stay restored and are listed in the message).
                Short of file descriptors (or any other ``OSError``) before the first
                write: the mapped error (``Nothing was restored: ...``, ``TOOL_ERROR``);
                nothing changed and the steps stay restorable, so the same call works
                once descriptors are free.
        """
        if step < 0:
            raise ToolError(f"step must be 0 or more, not {step}", ErrorCode.INVALID_ARGUMENTS)
        if self.running:
            raise ToolError(
                "Cannot restore while a step runs; wait for it to end",
                ErrorCode.INVALID_ARGUMENTS,
            )
        prefixes = None if paths is None else [self._rel(p) for p in paths]
        try:
            return self._restore(step, prefixes, dry_run, overwrite, protected)
        except OSError as exc:
            # Raised before any file changed (a write's own failure is a ToolError).
            rel = exc.filename if isinstance(exc.filename, str) else ""
            if os.path.isabs(rel) or not rel:
                rel = "the workspace root" if rel == str(self.workspace.root) else "the store"
            error = os_error(exc, rel)
            raise ToolError(f"Nothing was restored: {error.message}", error.code) from exc

    def _restore(
        self,
        step: int,
        prefixes: list[str] | None,
        dry_run: bool,
        overwrite: bool,
        protected: Collection[str],
    ) -> RestoreResult:
        """:meth:`restore` of resolved ``prefixes``.

        Raises:
            OSError: before any file changed (the walk, the root's descriptor).
        """
        with self._lock:
            targets, owners = self._targets(step, prefixes)
            current = self._manifests.take(store=False) if targets else {}
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
            # What a sandbox set aside shows what it keeps from commands, whoever restores.
            guarded = {*protected, *_set_aside_from(current)}
            for path in [p for p in plan if _guarded(p, guarded)]:
                del plan[path]
                result.protected.append(path)
            for path in _held_directories(plan, current):
                del plan[path]
                result.not_restorable.append(path)
            result.not_restorable.sort()
            result.protected.sort()
            result.conflicts = [p for p in result.conflicts if p in plan]
            result.files = changed_files({p: (current.get(p), t) for p, t in plan.items()})
            if dry_run:
                result.diff = self._restorer.diff(plan, current)
                return result
            if result.conflicts and not overwrite:
                result.files = []
                return result
            self._restorer.apply(plan, current)
            kept = {*result.not_restorable, *result.protected}
            for index, path in owners:
                if path not in kept:
                    self._steps[index].undone.add(path)
                else:
                    self._steps[index].left.add(path)
            for path, target in plan.items():
                self._seen[path] = target
            try:
                self._save()
            except OSError:
                # The files are restored and this object knows it: only a later load()
                # of the record would not.
                logger.warning("the record after a restore was not saved", exc_info=True)
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


class _StepRecord(BaseModel):
    """One step in the saved record (:meth:`Checkpoints._save`)."""

    step: int
    changes: dict[str, tuple[Entry | None, Entry | None]]
    undone: list[str]


class _Record(BaseModel):
    """The saved record's shape, so a damaged one is refused with the field that is wrong."""

    version: Literal[1]
    root: str
    steps: list[_StepRecord]
    seen: dict[str, Entry | None]


def _set_aside_from(current: Manifest) -> set[str]:
    """The paths a sandbox set aside in ``current`` (``NAME.sandbox-blocked``, with a
    suffix when that was taken) under their own names: it keeps those from its commands."""
    return {m.group(1) for m in map(_SET_ASIDE.match, current) if m is not None}


# A set-aside name (sandbox._defaults.set_aside), or a path beneath one: group 1 is the
# name it had.
_SET_ASIDE = re.compile(r"(.+?)\.sandbox-blocked(?:-[0-9a-f]{8})?(?:/|\Z)", re.DOTALL)


def _guarded(path: str, protected: Collection[str]) -> bool:
    """Whether ``path`` is one of ``protected``, beneath one, or what a sandbox set aside
    of one (``NAME.sandbox-blocked``, with a suffix when that was taken), or beneath that."""
    for name in protected:
        if path == name or path.startswith((f"{name}/", f"{name}.sandbox-blocked")):
            return True
    return False


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
