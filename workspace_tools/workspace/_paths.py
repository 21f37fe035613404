"""Confining paths to a workspace root.

A path is inside when its real location (every symlink resolved, as ``os.path.realpath``
gives it, found in time linear in the path's depth) is the root or below it. Sibling
prefixes (``/w`` vs ``/w-evil``) are outside.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
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
    found = _realpath(path, joined)
    real = found.path
    if not is_within(root, real):
        # A path that names a place inside the root as written got out through a link
        # (a venv's bin/python, a swapped directory): "outside" alone reads as wrong.
        how = " through a symbolic link" if is_within(root, os.path.normpath(joined)) else ""
        raise ToolError(
            f"Path {_shown(path)} is outside the workspace root{how}; use a path inside it",
            ErrorCode.OUTSIDE_WORKSPACE,
        )
    if found.loop:
        raise ToolError(
            f"Path {_shown(path)} goes through a symbolic link loop", ErrorCode.NOT_FOUND
        )
    directory_form = path.endswith(("/", "/."))
    if directory_form and found.kind == "other":
        # As open("f.txt/") fails: a trailing slash names a directory, never the file.
        raise ToolError(
            f"Path {_shown(path)} ends with a slash, but {to_rel(root, real)} is not a directory",
            ErrorCode.NOT_A_DIRECTORY,
        )
    # Show the path as the caller named it when it names the same place (a link inside the
    # root keeps its own name); otherwise its real location. ``a/..`` with ``a`` a link is
    # not its lexical parent, hence the second resolution (not needed when no link was met).
    lexical = os.path.normpath(joined)
    same = lexical == real or (is_within(root, lexical) and _realpath(path, lexical).path == real)
    rel = to_rel(root, lexical if same else real)
    return ResolvedPath(real=Path(real), rel=rel, directory_form=directory_form)


def _realpath(path: str, target: str) -> _Real:
    """:func:`_resolve` of ``target``; ``path`` is how the caller named it, for messages.

    When a rename swaps a link on the way for a directory (``EINVAL`` from ``readlink``)
    or removes it (``ENOENT``) between its lookup and its reading, resolving again sees
    one state or the other.
    """
    for _ in range(_RESOLVE_ATTEMPTS):
        try:
            return _resolve(target)
        except _TooManyLinks:
            raise ToolError(
                f"Path {_shown(path)} goes through more than {_MAX_LINKS} symbolic links; "
                "name the file by a path with fewer links",
                ErrorCode.NOT_FOUND,
            ) from None
        except OSError as exc:
            if exc.errno not in _RACED:
                raise os_error(exc, path) from exc
    raise ToolError(
        f"Path {_shown(path)} kept changing while it was resolved (a symbolic link in it was "
        f"replaced {_RESOLVE_ATTEMPTS} times over); its real location is unknown, so it is "
        "refused. Try again once it stops changing",
        ErrorCode.OUTSIDE_WORKSPACE,
    )


# Most symbolic links one resolution follows, as the kernel's own path walk (``MAXSYMLINKS``
# of Linux): each costs a walk of its target, so a chain of links that double one another
# cannot cost more than this many walks.
_MAX_LINKS = 40
_PATH_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class _Real:
    """What :func:`_resolve` found: ``path`` as ``os.path.realpath`` gives it, ``kind`` of
    what it names (``"dir"``, ``"other"`` or ``None`` when absent), and ``loop``: a link
    on the way leads back to itself, left unresolved in ``path`` (as realpath leaves it)."""

    path: str
    kind: str | None
    loop: bool = False


class _TooManyLinks(Exception):
    """A resolution followed more than :data:`_MAX_LINKS` symbolic links."""


class _LinkEnd:
    """Marks, among the components still to resolve, where a link's target ends."""

    __slots__ = ("link",)

    def __init__(self, link: tuple[int, int]) -> None:
        self.link = link


def _resolve(target: str) -> _Real:
    """``os.path.realpath(target)`` (``target`` absolute) in time linear in its components.

    realpath ``lstat``s each prefix of the path as one string, so the kernel walks the
    whole prefix again for every component (a path ``n`` levels deep costs ``n²``
    lookups) and a path longer than ``PATH_MAX`` cannot be resolved at all. Here the walk
    holds an fd of the directory reached (``O_PATH``, ``O_NOFOLLOW``) and looks up one
    name in it at a time; a link's target is walked in turn (from ``/`` when absolute),
    ``..`` is the parent of the directory held. A name that is missing, not a directory
    or not searchable ends the walk by fds: the rest is applied lexically (``..`` taking
    back one such name, after which the walk by fds resumes), as realpath does. The
    result is a string only: what opens it later walks it again from the root without
    following links (:func:`~._files.open_parent`), so a link swapped in meanwhile is
    refused there.

    Raises:
        _TooManyLinks: past :data:`_MAX_LINKS` links.
        OSError: what ``readlink`` raises for a link swapped or removed during the walk
            (``EINVAL``, ``ENOENT``).
    """
    parts: list[str] = []  # the real location reached, by component
    lexical: list[str | None] = []  # kinds of the trailing parts not held by an fd
    pending: list[str | _LinkEnd] = target.split("/")[::-1]  # a stack, next on top
    expanding: set[tuple[int, int]] = set()  # links whose target is being walked
    followed = 0
    fd = os.open("/", _PATH_FLAGS)
    try:
        while pending:
            name = pending.pop()
            if isinstance(name, _LinkEnd):
                expanding.discard(name.link)
                continue
            if name in ("", "."):
                continue
            if name == "..":
                if lexical:
                    lexical.pop()
                    parts.pop()
                elif parts:
                    parent = os.open("..", _PATH_FLAGS, dir_fd=fd)
                    os.close(fd)
                    fd = parent
                    parts.pop()
                continue
            if lexical:
                parts.append(name)
                lexical.append(None)
                continue
            try:
                child = os.open(name, _PATH_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno != errno.ENOTDIR:
                    parts.append(name)
                    lexical.append(None)
                    continue
            else:
                os.close(fd)
                fd = child
                parts.append(name)
                continue
            # ENOTDIR: a link, or a file (or a directory swapped for a link just now).
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                parts.append(name)
                lexical.append(None)
                continue
            if not stat.S_ISLNK(info.st_mode):
                parts.append(name)
                lexical.append("dir" if stat.S_ISDIR(info.st_mode) else "other")
                continue
            link = (info.st_dev, info.st_ino)
            if link in expanding:
                rest = [p for p in reversed(pending) if isinstance(p, str)]
                # As realpath: the rest joined to the link unresolved, then normalized.
                unresolved = "/" + "/".join([*parts, name, *rest])
                return _Real(os.path.normpath(unresolved), None, loop=True)
            followed += 1
            if followed > _MAX_LINKS:
                raise _TooManyLinks
            value = os.readlink(name, dir_fd=fd)
            expanding.add(link)
            pending.append(_LinkEnd(link))
            pending.extend(value.split("/")[::-1])
            if value.startswith("/"):
                os.close(fd)
                fd = os.open("/", _PATH_FLAGS)
                parts.clear()
        kind = lexical[-1] if lexical else "dir"
        return _Real("/" + "/".join(parts), kind)
    finally:
        os.close(fd)


# Characters that would let a file name pass for something else in a listing: controls
# (a newline starts a fake entry, CR and ESC rewrite a terminal line), the quote and
# backslash of the quoting itself, Unicode line separators, bidirectional marks, overrides
# and isolates ("Trojan Source"), and lone surrogates (bytes not valid UTF-8).
_UNSAFE_NAME = re.compile(
    r'[\x00-\x1f"\\\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]'
)


def _escape(match: re.Match[str]) -> str:
    # JSON's escape of the one character: \n, \", \\, else \uXXXX (ensure_ascii).
    return json.dumps(match.group())[1:-1]


def shown_path(rel: str) -> str:
    """``rel`` as a line of the model's text shows it: unchanged, or, when it holds a
    character that could make it pass for something else (see :data:`_UNSAFE_NAME`), in
    double quotes as git quotes such names (``core.quotePath``), with JSON's escapes for
    those characters (``"a\\nb.txt"``, ``"\\u202egnp.exe"``), so that the line is a JSON
    string a model can copy into a ``path`` argument as it is. Details keep the name as
    it is."""
    if _UNSAFE_NAME.search(rel) is None:
        return rel
    return '"' + _UNSAFE_NAME.sub(_escape, rel) + '"'
