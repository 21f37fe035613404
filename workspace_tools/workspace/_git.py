"""The git repository around a workspace: where it is and which files it tracks.

A tracked file is always discovered, even when an ignore rule matches it, because git lists
it too (``git ls-files --cached --others --exclude-standard``). The tracked set comes from
one ``git ls-files -z`` and is reused while the index file keeps its stat.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import threading
from dataclasses import dataclass

from workspace_tools.workspace._ignore import FileStamp

# Variables that would point git at another repository than the one found on disk.
_GIT_ENV_OVERRIDES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR")


@dataclass(frozen=True)
class GitRepo:
    """A work tree: ``top`` (real path of the work tree) and ``git_dir`` (its git directory)."""

    top: str
    git_dir: str

    @property
    def index_path(self) -> str:
        """The index file (``$GIT_DIR/index``)."""
        return os.path.join(self.git_dir, "index")

    def config_paths(self) -> list[str]:
        """The config files that may set ``core.excludesFile``: the repository's, the
        user's (``~/.gitconfig``, ``$XDG_CONFIG_HOME/git/config``) and ``GIT_CONFIG_GLOBAL``."""
        home = os.path.expanduser("~")
        config_home = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
        paths = [
            os.path.join(self.git_dir, "config"),
            os.path.join(self.git_dir, "config.worktree"),
            # A linked worktree's git reads the common directory's config (and its own).
            *([os.path.join(self.common_dir, "config")] if self.common_dir != self.git_dir else []),
            os.path.join(home, ".gitconfig"),
            os.path.join(config_home, "git", "config"),
        ]
        if os.environ.get("GIT_CONFIG_GLOBAL"):
            paths.append(os.environ["GIT_CONFIG_GLOBAL"])
        return paths

    @property
    def common_dir(self) -> str:
        """The common git directory: ``git_dir`` itself, or for a linked worktree the
        directory its ``commondir`` file names."""
        common = _read_small_file(os.path.join(self.git_dir, "commondir"))
        base = self.git_dir
        if common is not None:
            with contextlib.suppress(UnicodeDecodeError):
                base = os.path.normpath(os.path.join(self.git_dir, common.decode("utf-8").strip()))
        return base

    @property
    def exclude_path(self) -> str:
        """The repository's own exclude file (``$GIT_DIR/info/exclude``, or the common
        directory's for a linked worktree)."""
        return os.path.join(self.common_dir, "info", "exclude")


class GlobalExcludes:
    """Where the global ignore file of one repository is: ``core.excludesFile`` (from any
    config level git reads there), else ``$XDG_CONFIG_HOME/git/ignore`` or
    ``~/.config/git/ignore``. Asked of ``git config`` once, again when a config file that
    could set it changes."""

    def __init__(self, repo: GitRepo) -> None:
        self._repo = repo
        self._lock = threading.Lock()
        self._stamps: list[FileStamp] = []
        self._path: str | None = None

    def get(self) -> tuple[str, list[FileStamp]]:
        """The path (which may not exist) and stamps of the config files it came from."""
        with self._lock:
            if not self._stamps or not all(s.current() for s in self._stamps):
                self._stamps = [
                    FileStamp.take(path, follow=True) for path in self._repo.config_paths()
                ]
                self._path = _excludes_file(self._repo)
            assert self._path is not None
            return self._path, self._stamps


def _excludes_file(repo: GitRepo) -> str:
    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV_OVERRIDES}
    try:
        proc = subprocess.run(
            ["git", "config", "--path", "--get", "core.excludesFile"],
            cwd=repo.top,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
        configured = os.fsdecode(proc.stdout).strip() if proc.returncode == 0 else ""
    except OSError:
        configured = ""
    if configured:
        return os.path.join(repo.top, os.path.expanduser(configured))
    home = os.path.expanduser("~")
    config_home = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    return os.path.join(config_home, "git", "ignore")


def find_repo(start: str) -> GitRepo | None:
    """The work tree containing the real directory ``start``, or ``None``.

    Looks for ``.git`` (a directory, or a file ``gitdir: PATH`` as in worktrees and
    submodules) in ``start`` and each parent, as git's discovery does.
    """
    current = start
    while True:
        dot_git = os.path.join(current, ".git")
        if os.path.isdir(dot_git):
            return GitRepo(top=current, git_dir=dot_git)
        if os.path.isfile(dot_git):
            git_dir = _read_gitdir_file(dot_git, current)
            if git_dir is not None:
                return GitRepo(top=current, git_dir=git_dir)
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def _read_small_file(path: str, limit: int = 1 << 16) -> bytes | None:
    """The first ``limit`` bytes of the regular file ``path``; ``None`` when it is absent,
    unreadable or not a regular file. A command may leave a FIFO where git keeps a one-line
    file (``.git``, ``commondir``): opening it blocking would hold every walk."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_gitdir_file(path: str, top: str) -> str | None:
    data = _read_small_file(path)
    try:
        line = (data or b"").decode("utf-8").split("\n", 1)[0].strip()
    except UnicodeDecodeError:
        return None
    if not line.startswith("gitdir:"):
        return None
    return os.path.normpath(os.path.join(top, line[len("gitdir:") :].strip()))


@dataclass(frozen=True)
class TrackedSet:
    """Tracked paths relative to the repository top, and every directory above one."""

    files: frozenset[str]
    dirs: frozenset[str]


_EMPTY = TrackedSet(frozenset(), frozenset())


class TrackedFiles:
    """The tracked files of one repository, cached by the index file's stat.

    Without ``git`` on ``PATH``, or when it fails (a repository it refuses to read), the set
    is empty and ignore rules alone decide.
    """

    def __init__(self, repo: GitRepo) -> None:
        self._repo = repo
        self._lock = threading.Lock()
        self._stamp: FileStamp | None = None
        self._value = _EMPTY

    def get(self) -> tuple[TrackedSet, FileStamp]:
        """The current tracked set and the index stamp it was read under."""
        with self._lock:
            if self._stamp is not None and self._stamp.current():
                return self._value, self._stamp
            stamp = FileStamp.take(self._repo.index_path)
            value = _EMPTY if stamp.stamp is None else _ls_files(self._repo.top)
            self._stamp, self._value = stamp, value
            return value, stamp


def _ls_files(top: str) -> TrackedSet:
    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV_OVERRIDES}
    try:
        proc = subprocess.run(
            # fsmonitor off: reading the index must never run a hook the repository names.
            ["git", "-c", "core.fsmonitor=false", "ls-files", "-z", "--cached"],
            cwd=top,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
    except OSError:
        return _EMPTY
    if proc.returncode != 0:
        return _EMPTY
    files = frozenset(os.fsdecode(p) for p in proc.stdout.split(b"\0") if p)
    dirs: set[str] = set()
    for path in files:
        slash = path.rfind("/")
        while slash > 0:
            parent = path[:slash]
            if parent in dirs:
                break
            dirs.add(parent)
            slash = parent.rfind("/")
    return TrackedSet(files, frozenset(dirs))
