"""The workspace: a root directory every tool path is confined to, and the tools' defaults."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from workspace_tools._errors import ToolError
from workspace_tools.workspace._line_index import LineIndexCache
from workspace_tools.workspace._paths import ResolvedPath, resolve_path, to_rel
from workspace_tools.workspace._state import FileStates
from workspace_tools.workspace._tempfiles import TempSweeps
from workspace_tools.workspace._walk import Walker

T = TypeVar("T")

#: What a call carries of the file hashes (:meth:`Workspace.snapshot_files`): real path ->
#: content hash, and the real paths those were looked up for, as text (it pickles faster
#: than a Path).
FileSnapshot = tuple[dict[str, bytes], list[str]]
#: What a call hands back (:meth:`Workspace.file_changes`): hashes recorded, paths forgotten.
FileChanges = tuple[dict[str, bytes], list[str]]


class WorkspaceOptions(BaseModel):
    """Defaults of the eight tools; pass any of them to :class:`Workspace` as keywords."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    read_limit: int = Field(2000, ge=1, description="read_file lines per call")
    max_line_length: int = Field(2000, ge=1, description="read_file cuts longer lines")
    max_file_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1,
        description="largest file write_file and edit_file rewrite; read_file streams larger ones",
    )
    max_image_bytes: int = Field(
        5 * 1024 * 1024, ge=1, description="largest image read_file returns as image content"
    )
    list_limit: int = Field(1000, ge=1, description="list_files entries per call")
    glob_limit: int = Field(100, ge=1, description="glob matches per call")
    grep_limit: int = Field(100, ge=1, description="grep results per call")
    command_timeout: float = Field(120, gt=0, description="run_command seconds")
    env_passthrough: tuple[str, ...] = Field(
        (), description="secret-looking environment variables run_command may still see"
    )
    write_read_only_files: bool = Field(
        False,
        description="write_file and edit_file replace files without any write permission "
        "bit (mode 0444) where the process may (root); off, they refuse them as for any user",
    )
    fsync: bool = Field(
        True,
        description="every write is on disk before the call reports success (fsync of each "
        "file and its directory); off, writes stay atomic (temp file, rename) but the kernel "
        "flushes them in its own time, as git does with the working tree: for throwaway "
        "workspaces, where a power loss costs nothing",
    )


class Workspace:
    """A directory that every tool path is confined to.

    Args:
        root: the workspace directory; it must exist. Stored as its real path.
        **options: any field of :class:`WorkspaceOptions`.

    Attributes:
        root: the real path of the root.
        options: the tools' defaults.
        file_states: content hashes for staleness checks and per-file locks, shared by
            every tool built over this workspace.
        walker: the one walk of the tree (with its stat-validated cache) behind list_files,
            glob, grep and the session's fingerprints of directories.
        line_indexes: line indexes of the big files read_file read (:class:`LineIndexCache`).
        temp_sweeps: which directories its writes looked in for temp files of dead writes
            (:class:`~._tempfiles.TempSweeps`), so that a write looks only when it may find one.
        one_call: this copy was restored in another process for one call
            (:meth:`restore_files`): the tools start nothing meant to outlive it there
            (grep's searcher processes).

    A workspace pickles as its settings (root and options): the copy in another process
    starts with fresh file states, walker and caches. A sandbox's warm worker keeps one
    such copy (``sandbox_by_reference``) and gives each call's child that copy; the child
    that runs the stateless calls one after another keeps its walk cache and line indexes
    warm (both are checked against the files' stats before use). A call carries the content
    hashes of the files it names (:meth:`snapshot_files`, then :meth:`restore_files` in the
    child) and hands back what it changed (:meth:`file_changes`, then
    :meth:`apply_file_changes`).

    Raises:
        NotADirectoryError: ``root`` is not an existing directory.
        pydantic.ValidationError: an unknown or invalid option.
    """

    #: A sandbox's warm worker may keep the workspace and be sent it by reference
    #: (see ``sandbox.Sandbox.call``), so that its calls find the caches warm.
    sandbox_by_reference: ClassVar[bool] = True

    def __init__(self, root: str | os.PathLike[str], **options: object) -> None:
        real = os.path.realpath(os.fspath(root))
        if not os.path.isdir(real):
            raise NotADirectoryError(f"workspace root is not a directory: {root}")
        self.root = Path(real)
        self._root_str = real
        self.options = WorkspaceOptions.model_validate(options)
        self.file_states = FileStates()
        self.walker = Walker(real)
        self.line_indexes = LineIndexCache()
        self.temp_sweeps = TempSweeps()
        self._kept: dict[str, Any] = {}
        self._kept_lock = threading.Lock()
        self.one_call = False

    def __repr__(self) -> str:
        return f"Workspace({self._root_str!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_from_settings, (type(self), self._root_str, self.options.model_dump()))

    def kept(self, key: str, make: Callable[[], T]) -> T:
        """The object the tools keep with this workspace under ``key`` (grep's warm index
        and compiled patterns, apply_patch's last parse), made by ``make()`` on first use.
        A copy of the workspace in another process starts without any."""
        with self._kept_lock:
            if key not in self._kept:
                self._kept[key] = make()
            return self._kept[key]  # type: ignore[no-any-return]

    def keep(self, key: str, value: object) -> None:
        """Keep ``value`` under ``key`` for :meth:`kept`, in place of what was kept."""
        with self._kept_lock:
            self._kept[key] = value

    def close(self) -> None:
        """Release what the tools keep with this workspace that holds a process or a
        watch (grep's searcher processes and warm index, run_command's runners: the
        commands they run stopped, their idle supervisors closed; each kept object's
        ``close``);
        they are made again if a tool is used after this. Collecting the workspace, or
        the interpreter's exit, does the same."""
        with self._kept_lock:
            kept, self._kept = self._kept, {}
        for value in kept.values():
            close = getattr(value, "close", None)
            if callable(close):
                close()

    def __enter__(self) -> Workspace:
        """``with Workspace(root) as workspace:`` closes it at the end (:meth:`close`)."""
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def named_files(self, paths: Iterable[str]) -> list[Path]:
        """The real paths of the files ``paths`` name (tool path arguments), distinct and
        sorted; a path that does not resolve is left out: the call itself reports it."""
        reals = {}
        for path in paths:
            try:
                real = self.resolve(path).real
            except ToolError:
                continue
            reals[str(real)] = real
        return [reals[key] for key in sorted(reals)]

    def snapshot_files(self, reals: list[Path]) -> FileSnapshot:
        """What a call on the files ``reals`` (:meth:`named_files`) carries into another
        process: their content hashes as last seen here."""
        return self.file_states.snapshot(reals), [str(real) for real in reals]

    def restore_files(self, snapshot: FileSnapshot) -> None:
        """In the other process, before the call: take the hashes of ``snapshot``. A
        staleness check of a file outside it (a path that resolved to another file there)
        is ``STALE_FILE`` (see :meth:`FileStates.restore`). The locks are made anew: a
        worker's fork may have copied them held by a thread it does not have."""
        self.file_states.restore(*snapshot)
        self._kept_lock = threading.Lock()
        self.walker.fresh_lock()
        self.line_indexes.fresh_lock()
        self.one_call = True

    def file_changes(self, snapshot: FileSnapshot) -> FileChanges:
        """In the other process, after the call: what it recorded or forgot since
        ``snapshot``."""
        return self.file_states.changes(snapshot[0])

    def apply_file_changes(self, changes: FileChanges) -> None:
        """Back here: take over the :meth:`file_changes` of a call run elsewhere."""
        self.file_states.apply(changes)

    def resolve(self, path: str | os.PathLike[str]) -> ResolvedPath:
        """Resolve a tool's path argument; see :func:`resolve_path` for the rules and errors."""
        return resolve_path(self._root_str, os.fspath(path))

    def rel(self, path: str | os.PathLike[str]) -> str:
        """An absolute path under the root as results show it (relative, ``/`` separators)."""
        return to_rel(self._root_str, os.fspath(path))


def _from_settings(cls: type[Workspace], root: str, options: dict[str, Any]) -> Workspace:
    return cls(root, **options)


def as_workspace(
    root_or_workspace: Workspace | str | os.PathLike[str], **options: object
) -> Workspace:
    """A :class:`Workspace` from a root path, or the given one (then ``options`` must be empty).

    Raises:
        TypeError: options given together with an existing Workspace.
    """
    if isinstance(root_or_workspace, Workspace):
        if options:
            raise TypeError("options apply when a root path is given, not a Workspace")
        return root_or_workspace
    return Workspace(root_or_workspace, **options)
