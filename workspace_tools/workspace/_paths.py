"""Confining paths to a workspace root.

A path is inside when its real location (every symlink resolved, as ``os.path.realpath``)
is the root or below it. Sibling prefixes (``/w`` vs ``/w-evil``) are outside.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from workspace_tools._errors import PATH_ECHO_LIMIT, ErrorCode, ToolError, echoed
from workspace_tools.workspace._files import os_error


def _shown(path: str) -> str:
    """``path`` quoted for a message, cut when a caller sent one of any length."""
    return echoed(path, PATH_ECHO_LIMIT)


# A resolution that raced a rename is tried again this many times in all.
_RESOLVE_ATTEMPTS = 5
_RACED = (errno.EINVAL, errno.ENOENT)


@dataclass(frozen=True)
class ResolvedPath:
    """A path checked against the root.

    Attributes:
        real: absolute real path (symlinks resolved); what to open, stat or rename onto.
        rel: path relative to the root with ``/`` separators, as results show it
            (``.`` for the root itself).
        directory_form: the path as given ends with ``/`` or ``/.``, so it can only name a
            directory (POSIX pathname resolution); a tool never creates a file there.
    """

    real: Path
    rel: str
    directory_form: bool = False

    def refuse_directory_form(self) -> None:
        """Refuse to create or write a file at a path written as a directory's (``new/``),
        which ``open(2)`` would refuse too (``EISDIR``), rather than write ``new``.

        Raises:
            ToolError: ``INVALID_ARGUMENTS`` when :attr:`directory_form`.
        """
        if self.directory_form:
            raise ToolError(
                f"{self.rel + '/'!r} names a directory; give the path of a file",
                ErrorCode.INVALID_ARGUMENTS,
            )


def is_within(root: str, real: str) -> bool:
    """Whether the real path ``real`` is ``root`` or below it (both already resolved)."""
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def to_rel(root: str, path: str) -> str:
    """``path`` (absolute, under ``root``) relative to ``root`` with ``/`` separators."""
    if path == root:
        return "."
    prefix = root.rstrip(os.sep) + os.sep
    if path.startswith(prefix) and os.path.normpath(path) == path:
        rel = path[len(prefix) :]  # what relpath would compute, at a fraction of its cost
    else:
        rel = os.path.relpath(path, root)
    return rel.replace(os.sep, "/")


def resolve_path(root: str, path: str) -> ResolvedPath:
    """Resolve ``path`` (relative to ``root``, or absolute inside it) and confine it.

    ``root`` must already be a real absolute path. Symlinks are resolved whether or not
    their targets exist, so a link (direct, through a linked directory, a chain or a
    dangling link) whose real location is outside is refused.

    Resolving while another process renames the path's links and directories never fails
    with a bare ``OSError``: a resolution that raced a rename is retried, and every error
    becomes a :class:`ToolError` through :func:`~._files.os_error`.

    Raises:
        ToolError: ``INVALID_ARGUMENTS`` for an empty path, one with a NUL byte or a
            character no file name can hold (a lone surrogate), or one too long for the file
            system; ``OUTSIDE_WORKSPACE`` when the real location is outside the root or kept
            changing while it was resolved; ``NOT_FOUND`` for a symbolic link loop;
            ``PERMISSION_DENIED`` when a directory on the way may not be searched;
            ``NOT_A_DIRECTORY`` for a path ending in ``/`` that names a file.
    """
    if "\x00" in path:
        raise ToolError("Path contains a NUL byte", ErrorCode.INVALID_ARGUMENTS)
    if path.strip() == "":
        raise ToolError("Path is empty", ErrorCode.INVALID_ARGUMENTS)
    try:
        os.fsencode(path)
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end]
        raise ToolError(
            f"Path {_shown(path)} contains {bad!r}, a character no file name can hold",
            ErrorCode.INVALID_ARGUMENTS,
        ) from None
    joined = os.path.join(root, os.path.expanduser(path) if path.startswith("~") else path)
    real = _realpath(path, joined)
    if not is_within(root, real):
        raise ToolError(
            f"Path {_shown(path)} is outside the workspace root; use a path inside it",
            ErrorCode.OUTSIDE_WORKSPACE,
        )
    _refuse_link_loop(path, real)
    directory_form = path.endswith(("/", "/."))
    if directory_form and os.path.exists(real) and not os.path.isdir(real):
        # As open("f.txt/") fails: a trailing slash names a directory, never the file.
        raise ToolError(
            f"Path {_shown(path)} ends with a slash, but {to_rel(root, real)} is not a directory",
            ErrorCode.NOT_A_DIRECTORY,
        )
    # Show the path as the caller named it when it names the same place (a link inside the
    # root keeps its own name); otherwise its real location. ``a/..`` with ``a`` a link is
    # not its lexical parent, hence the second realpath (not needed when no link was met).
    lexical = os.path.normpath(joined)
    same = lexical == real or (is_within(root, lexical) and _realpath(path, lexical) == real)
    rel = to_rel(root, lexical if same else real)
    return ResolvedPath(real=Path(real), rel=rel, directory_form=directory_form)


def _realpath(path: str, target: str) -> str:
    """``os.path.realpath(target)``; ``path`` is how the caller named it, for messages.

    A non-strict realpath still calls ``readlink`` on each component ``lstat`` showed as a
    link; when a rename swaps that link for a directory (``EINVAL``) or removes it
    (``ENOENT``) in between, resolving again sees one state or the other.
    """
    for _ in range(_RESOLVE_ATTEMPTS):
        try:
            return os.path.realpath(target)
        except OSError as exc:
            if exc.errno not in _RACED:
                raise os_error(exc, path) from exc
    raise ToolError(
        f"Path {_shown(path)} kept changing while it was resolved (a symbolic link in it was "
        f"replaced {_RESOLVE_ATTEMPTS} times over); its real location is unknown, so it is "
        "refused. Try again once it stops changing",
        ErrorCode.OUTSIDE_WORKSPACE,
    )


def _refuse_link_loop(path: str, real: str) -> None:
    # A non-strict realpath leaves the links of a loop unresolved (and every other link
    # resolved): following what is left fails with ELOOP exactly when there is a loop.
    try:
        os.stat(real)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ToolError(
                f"Path {_shown(path)} goes through a symbolic link loop",
                ErrorCode.NOT_FOUND,
            ) from exc
