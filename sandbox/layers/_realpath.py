"""``os.path.realpath`` in time linear in the path's components.

realpath ``lstat``s each prefix of the path as one string, so the kernel walks the whole
prefix again for every component: a path ``n`` levels deep costs ``n²`` lookups (83 ms at
2,000 levels), and a path longer than ``PATH_MAX`` cannot be resolved at all. The sandbox
resolves every path it is given (writable, denied, allowed) and the layers resolve them
again; :func:`realpath` gives the same answer by holding an fd of the directory reached
(``O_PATH``, ``O_NOFOLLOW``) and looking up one name in it at a time.

Only the standard library: the layers run in children that import nothing else.
"""

from __future__ import annotations

import errno
import os
import stat
import sys

_O_PATH: int | None = getattr(os, "O_PATH", None)
_FLAGS = (_O_PATH or 0) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Python 3.13 rewrote realpath: links in a loop and relative paths are treated otherwise.
_LEGACY = sys.version_info < (3, 13)


class _End:
    """Marks, among the names still to resolve, where the target of the link ``key`` (its
    path as realpath names it) ends: the link's resolution is then known."""

    __slots__ = ("key",)

    def __init__(self, key: str) -> None:
        self.key = key


def realpath(path: str | os.PathLike[str]) -> str:
    """``os.path.realpath(path)`` (not strict), as the running Python gives it: a relative
    path from the current directory, every symbolic link resolved, a name that is missing,
    not a directory or not searchable taken as it is (a later ``..`` takes it back). A link
    loop is what that Python's realpath makes of it: up to 3.12 the loop's link and the
    rest of the path left unresolved (the loop noticed where realpath notices it, by the
    link's path as realpath spells it), from 3.13 on the looping link taken as a name.

    The walk holds one fd of the directory reached and looks up one name in it at a time
    (``openat``, ``fstatat``, ``readlinkat``); ``..`` is that directory's parent; a link's
    target is walked in turn (from ``/`` when absolute), and a link met again reuses what
    it resolved to, as realpath's own cache does. Without ``O_PATH`` (not Linux), it is
    ``os.path.realpath``.

    Raises:
        OSError: up to Python 3.12, what ``readlink`` raises for a link swapped or removed
            during the walk, as realpath does; ``getcwd``'s for a relative path when the
            current directory is gone.
    """
    text = os.fspath(path)
    if _O_PATH is None:
        return os.path.realpath(text)
    return _Walk(text).run()


class _Walk:
    """One resolution (see :func:`realpath`).

    ``parts`` is the real location reached, by name; the last ``lexical`` of them are not
    held by ``fd`` (missing, a file, not searchable). Up to Python 3.12 realpath spells a
    relative path relatively (``../a/b``) until an absolute link target, and names the
    links it has seen by that spelling: ``ups`` is how many ``..`` it begins with (``None``
    once the spelling is absolute) and ``base`` how many of ``parts`` that leaves of the
    current directory's.
    """

    def __init__(self, text: str) -> None:
        self.pending: list[str | _End] = list(reversed(text.split("/")))  # next on top
        self.seen: dict[str, tuple[tuple[str, ...], int, int | None] | None] = {}
        self.parts: list[str] = []
        self.lexical = 0
        self.ups: int | None = None
        self.cwd_len = 0
        if text.startswith("/"):
            self.fd = os.open("/", _FLAGS)
            return
        cwd = [name for name in os.getcwd().split("/") if name]
        if _LEGACY:
            self.ups, self.cwd_len = 0, len(cwd)
            self.parts = cwd
            self.fd, held = _walk_down(cwd)
            self.lexical = len(cwd) - held
        else:  # 3.13 starts from getcwd() as an absolute path
            self.pending.extend(reversed(cwd))
            self.fd = os.open("/", _FLAGS)

    def run(self) -> str:
        try:
            while self.pending:
                name = self.pending.pop()
                if isinstance(name, _End):
                    self.seen[name.key] = (tuple(self.parts), self.lexical, self.ups)
                elif name == "..":
                    self.up()
                elif name not in ("", "."):
                    loop = self.down(name)
                    if loop is not None:
                        return loop
            return "/" + "/".join(self.parts)
        finally:
            os.close(self.fd)

    def up(self) -> None:
        parts = self.parts
        if self.ups is not None and len(parts) <= max(0, self.cwd_len - self.ups):
            self.ups += 1  # realpath's spelling gains a leading ".."
        if self.lexical:
            self.lexical -= 1
            parts.pop()
        elif parts:
            parent = os.open("..", _FLAGS, dir_fd=self.fd)
            os.close(self.fd)
            self.fd = parent
            parts.pop()

    def down(self, name: str) -> str | None:
        """Resolve ``name`` in the directory reached; the whole result when it closes a
        loop that realpath gives up at (Python up to 3.12), else ``None``."""
        if self.lexical:
            self.as_name(name)
            return None
        try:
            child = os.open(name, _FLAGS, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                self.as_name(name)  # missing, or not searchable: as lstat fails
                return None
        else:
            os.close(self.fd)
            self.fd = child
            self.parts.append(name)
            return None
        # A link, or another file (or a directory swapped for a link just now).
        try:
            mode = os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_mode
        except OSError:
            mode = 0
        if not stat.S_ISLNK(mode):
            self.as_name(name)
            return None
        key = self.spelling(name)
        if key in self.seen:
            known = self.seen[key]
            if known is not None:
                self.restore(*known)
            elif _LEGACY:
                return self.given_up(key)
            else:
                self.as_name(name)
            return None
        try:
            target = os.readlink(name, dir_fd=self.fd)
        except OSError:
            if _LEGACY:
                raise
            self.as_name(name)
            return None
        self.seen[key] = None
        self.pending.append(_End(key))
        self.pending.extend(reversed(target.split("/")))
        if target.startswith("/"):
            top = os.open("/", _FLAGS)
            os.close(self.fd)
            self.fd = top
            self.parts.clear()
            self.ups = None
        return None

    def given_up(self, key: str) -> str:
        """What realpath up to 3.12 returns for the loop closed at the link ``key``: the
        link's spelling joined (``os.path.join``) to the rest of each link target being
        walked, innermost first, then to the rest of the path, and made absolute."""
        given = key
        rest: list[str] = []
        for item in reversed(self.pending):  # from the top of the stack
            if isinstance(item, _End):
                given = os.path.join(given, "/".join(rest))
                rest = []
            else:
                rest.append(item)
        return os.path.abspath(os.path.join(given, "/".join(rest)))

    def as_name(self, name: str) -> None:
        """Take ``name`` as it is, not held by the fd."""
        self.parts.append(name)
        self.lexical += 1

    def spelling(self, name: str) -> str:
        """The path of ``name`` in the directory reached, as realpath spells it."""
        if self.ups is None:
            return "/" + "/".join([*self.parts, name])
        base = max(0, self.cwd_len - self.ups)
        return "/".join([*[".."] * self.ups, *self.parts[base:], name])

    def restore(self, parts: tuple[str, ...], lexical: int, ups: int | None) -> None:
        """Go to where a link seen before led (``parts``, as realpath's cache does)."""
        reached, held = _walk_down(list(parts[: len(parts) - lexical]))
        os.close(self.fd)
        self.fd = reached
        self.parts = list(parts)
        self.lexical = len(parts) - held
        self.ups = ups


def _walk_down(names: list[str]) -> tuple[int, int]:
    """An fd of ``/names[0]/names[1]/...`` walked from ``/`` without following a link, and
    how many names it holds: fewer when one is no longer a directory (the rest is then
    lexical, as realpath would find it)."""
    fd = os.open("/", _FLAGS)
    for held, name in enumerate(names):
        try:
            child = os.open(name, _FLAGS, dir_fd=fd)
        except OSError:
            return fd, held
        os.close(fd)
        fd = child
    return fd, len(names)
