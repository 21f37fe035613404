"""What list_files, glob and grep share: the start path, glob patterns, notes for the model."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from typing import Protocol, TypeVar

import re2
from pydantic import BaseModel, Field, create_model
from wcmatch import glob as wcglob

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools.workspace import ResolvedPath, Workspace
from workspace_tools.workspace._files import open_dir, os_error, special_kind, stat_below
from workspace_tools.workspace._near_miss import not_found_hint
from workspace_tools.workspace._paths import shown_path

# wcmatch semantics: ``**`` spans directories, braces expand, ``*`` also matches names that
# start with a dot (hidden files are discovered like any other), ``/`` separates.
ModelT = TypeVar("ModelT", bound=BaseModel)


GLOB_FLAGS = wcglob.GLOBSTAR | wcglob.BRACE | wcglob.DOTGLOB | wcglob.FORCEUNIX


@dataclass(frozen=True)
class Start:
    """A resolved discovery path: ``real`` (absolute), ``rel`` (``""`` for the root), and
    ``is_dir``."""

    real: str
    rel: str
    is_dir: bool

    @property
    def shown(self) -> str:
        """The path as results show it (``.`` for the root)."""
        return self.rel or "."

    @property
    def lead(self) -> str:
        """The prefix that entry paths below this directory start with."""
        return self.rel + "/" if self.rel else ""


def resolve_start(workspace: Workspace, path: str, *, need_dir: bool) -> Start:
    """Resolve a discovery tool's ``path`` argument.

    Raises:
        ToolError: ``NOT_FOUND`` when it does not exist, ``NOT_A_DIRECTORY`` when
            ``need_dir`` and it is a file, ``PERMISSION_DENIED`` for a directory this
            process may not read, plus the errors of ``Workspace.resolve``.
    """
    resolved: ResolvedPath = workspace.resolve(path)
    real = str(resolved.real)
    try:
        st = stat_below(workspace.root, resolved.real)
    except FileNotFoundError:
        raise ToolError(
            f"Path {path!r} does not exist"
            + (
                not_found_hint(str(workspace.root), path)
                or "; list_files on its parent shows what is there"
            ),
            ErrorCode.NOT_FOUND,
        ) from None
    except PermissionError:
        raise ToolError(f"Permission denied: {path!r}", ErrorCode.PERMISSION_DENIED) from None
    except OSError as exc:
        raise os_error(exc, path) from None
    is_dir = stat.S_ISDIR(st.st_mode)
    if need_dir and not is_dir:
        raise ToolError(
            f"Path {path!r} is {special_kind(st.st_mode) or 'a file'}, not a directory; "
            "pass its directory instead",
            ErrorCode.NOT_A_DIRECTORY,
        )
    rel = "" if resolved.rel == "." else resolved.rel
    if is_dir and rel:
        # Entries are shown under the directory's real location so that their paths name
        # files inside the root, whatever link the caller went through.
        rel = workspace.rel(real)
        rel = "" if rel == "." else rel
    if is_dir:
        # Opened as the walk will open it (from the root, no link followed), so a directory
        # swapped meanwhile is reported as what happened, not as unreadable.
        try:
            os.close(open_dir(str(workspace.root), rel))
        except PermissionError:
            # The walk would see no entries and report an empty directory.
            raise ToolError(
                f"Permission denied: the directory {path!r} is not readable by this process",
                ErrorCode.PERMISSION_DENIED,
            ) from None
        except OSError as exc:
            raise os_error(exc, path) from None
    return Start(real=real, rel=rel, is_dir=is_dir)


class GlobMatcher(Protocol):
    """What matches a path against a glob: ``match(path)`` is truthy when it matches."""

    def match(self, path: str, /) -> object: ...


#: Wildcards ``*`` (besides whole ``**`` segments) from which a glob is matched in linear
#: time: a backtracking regex of k stars takes up to n**k steps on a path of n characters
#: that nearly matches (8 stars over 60-character names: minutes, holding the GIL, so that
#: no call's timeout could end it).
LINEAR_FROM_STARS = 3


def compile_glob(pattern: str, workspace: Workspace) -> GlobMatcher:
    """What matches paths (relative to the search directory) that the glob matches: a
    regex, run by RE2 (linear time, about 2 µs a path) for a pattern of
    :data:`LINEAR_FROM_STARS` stars or more, else by Python's engine.

    An absolute pattern inside the root is taken relative to the root; a leading ``./`` is
    dropped.

    Raises:
        ToolError: ``INVALID_ARGUMENTS`` for an empty pattern, one with a ``..`` segment
            (walked paths never climb, so it could match nothing), one wcmatch rejects, or
            one of that many stars with syntax beyond names, ``?``, ``**`` and ``{a,b}``
            lists (character classes, escapes), which only a backtracking regex matches;
            ``OUTSIDE_WORKSPACE`` for an absolute one outside the root.
    """
    if not pattern.strip():
        raise ToolError("The glob pattern is empty", ErrorCode.INVALID_ARGUMENTS)
    root = str(workspace.root)
    given = pattern
    if pattern.startswith("/"):
        if not pattern.startswith(root.rstrip("/") + "/"):
            raise ToolError(
                f"Glob pattern {pattern!r} is outside the workspace root; give a pattern "
                "relative to the search path, e.g. '**/*.py'",
                ErrorCode.OUTSIDE_WORKSPACE,
            )
        pattern = pattern[len(root.rstrip("/")) + 1 :]
    while pattern.startswith("./"):
        pattern = pattern[2:]
    if ".." in pattern.split("/"):
        raise ToolError(
            f"Glob pattern {given!r} has a '..' segment, but a pattern only matches paths "
            "below the search path; set path to the directory to search (inside the "
            "workspace) and give the pattern from there",
            ErrorCode.INVALID_ARGUMENTS,
        )
    simple = _simple_glob_regex(pattern)
    stars = sum(part.count("*") for part in pattern.split("/") if part != "**")
    if simple is not None:
        if stars >= LINEAR_FROM_STARS:
            # RE2's end of text is $ (no \Z), and its . spans lines only with (?s).
            return _LinearGlob(re2.compile("(?s)" + simple.replace(r"\Z", "$")))
        return re.compile(simple, re.DOTALL)
    if stars >= LINEAR_FROM_STARS:
        raise ToolError(
            f"Glob pattern {given!r} has {stars} '*' wildcards (besides '**') with syntax "
            f"that is matched by backtracking ([...] classes, escapes, nested braces), "
            f"which could take minutes; use at most {LINEAR_FROM_STARS - 1} there, or "
            "write the pattern with names, '*', '?', '**' and {a,b} lists only",
            ErrorCode.INVALID_ARGUMENTS,
        )
    try:
        include, _exclude = wcglob.translate(pattern, flags=GLOB_FLAGS)
    except (ValueError, re.error) as exc:
        raise ToolError(
            f"Invalid glob pattern {pattern!r}: {exc}", ErrorCode.INVALID_ARGUMENTS
        ) from None
    return re.compile("|".join(f"(?:{part})" for part in include))


# A name's bytes that are not UTF-8 reach us as lone surrogates (os.fsdecode's
# surrogateescape), which RE2 cannot take; each becomes one private-use character, still
# one character for '?' and '*' (a lean pattern holds none: they are not word characters).
_UNDECODABLE = {0xDC80 + b: 0xF780 + b for b in range(128)}


class _LinearGlob:
    """An RE2 program matched against walked paths, names that are not UTF-8 included."""

    __slots__ = ("_program",)

    def __init__(self, program: re2._Regexp) -> None:
        self._program = program

    def match(self, path: str, /) -> object:
        try:
            return self._program.match(path)
        except UnicodeEncodeError:
            return self._program.match(path.translate(_UNDECODABLE))


# Characters beyond these (classes, escapes, extglob's parentheses) go to wcmatch; ``!``,
# ``@`` and ``+`` are literal here, as wcmatch reads them without NEGATE or EXTGLOB.
_SIMPLE_GLOB = re.compile(r"[\w.\-/ *?{},!@+#%=:~]+")
_BRACE = re.compile(r"\{([^{}]*)\}")


def _simple_glob_regex(pattern: str) -> str | None:
    """A lean regex for the common glob shapes (names, ``*``, ``?``, whole-segment ``**``,
    flat ``{a,b}`` lists), matching real paths exactly as wcmatch does with
    :data:`GLOB_FLAGS`; ``None`` for anything else, which wcmatch then translates.

    wcmatch's own regex guards against empty, ``.`` and ``..`` segments, which walked paths
    never have, and no wcmatch flag leaves them out; without them the match is several
    times faster (50,000 paths: ``**/*.py`` 23 ms against 76 ms, ``**/{a,b}*.py`` 27 ms
    against 140 ms). wcmatch stays the one definition of a glob: ``test_glob_translation``
    checks this regex against wcmatch's.
    """
    if not _SIMPLE_GLOB.fullmatch(pattern):
        return None
    alternatives = [pattern]
    while any("{" in p or "}" in p for p in alternatives):
        expanded = []
        for alternative in alternatives:
            group = _BRACE.search(alternative)
            if group is None or "," not in group.group(1) or ".." in group.group(1):
                return None
            head, tail = alternative[: group.start()], alternative[group.end() :]
            expanded.extend(head + item + tail for item in group.group(1).split(","))
        alternatives = expanded
        if len(alternatives) > 256:
            return None
    if any(p.startswith("/") or p.endswith("/") or "//" in p for p in alternatives):
        return None
    return "|".join(f"(?:{_simple_alternative(p)})" for p in alternatives)


def _simple_alternative(pattern: str) -> str:
    segments = pattern.split("/")
    out = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            out.append(".+" if last else "(?:[^/]+/)*")
            continue
        part = "".join(
            "[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in segment
        )
        out.append(part if last else part + "/")
    return "".join(out) + r"\Z"


def with_limit_default(model: type[ModelT], default: int) -> type[ModelT]:
    """``model`` with the workspace's configured default for ``limit`` (so the schema a
    model reads shows the real default); ``model`` itself when it already has it."""
    field = model.model_fields["limit"]
    if field.default == default:
        return model
    limit = Field(default, ge=1, description=field.description)
    return create_model(model.__name__, __base__=model, limit=(int, limit))


def note(text: str) -> str:
    """A note line for the model, set apart from results."""
    return f"[{text}]"


# Glob syntax that is also common in real names: Next.js and expo-router directories
# (``[id]``, ``[...slug]``), template files (``{name}.md``).
_LITERAL_SYNTAX = re.compile(r"[\[\]{}]")

#: How a glob that matched only with its brackets and braces taken literally reads them.
AS_SYNTAX = (
    "with its brackets and braces read as pattern syntax ([abc] a character class, {a,b} "
    "alternatives)"
)


def compile_literal_glob(pattern: str, workspace: Workspace) -> GlobMatcher | None:
    """:func:`compile_glob` of ``pattern`` with its brackets and braces escaped (its ``*``,
    ``?`` and ``**`` still wildcards), for a pattern that matched nothing as written:
    ``app/[id]/*.tsx`` matches nothing when ``[id]`` is read as a class, and the model meant
    the directory it saw. ``None`` when it has none, or the escaped pattern is not valid
    either."""
    if _LITERAL_SYNTAX.search(pattern) is None:
        return None
    try:
        return compile_glob(_LITERAL_SYNTAX.sub(lambda m: "\\" + m.group(), pattern), workspace)
    except ToolError:
        return None


def ignored_hint(ignored: int, include_ignored: bool) -> str:
    """Why fewer entries may show than exist, for the empty-result message."""
    if include_ignored or not ignored:
        return ""
    noun = "entry" if ignored == 1 else "entries"
    return f" ({ignored:,} {noun} skipped by ignore rules; include_ignored=true shows them)"


_UNREADABLE_SHOWN = 10


def unreadable_note(paths: list[str], verb: str) -> str:
    """The note naming what this process may not read, so the model can tell "not there"
    from "not ``verb``" (listed, searched): directories end in ``/``; at most
    :data:`_UNREADABLE_SHOWN` are named."""
    shown = ", ".join(map(shown_path, paths[:_UNREADABLE_SHOWN]))
    more = len(paths) - _UNREADABLE_SHOWN
    if more > 0:
        shown += f" and {more:,} more"
    one = len(paths) == 1
    return note(
        f"Permission denied: {len(paths):,} {'path' if one else 'paths'} could not be read "
        f"and {'was' if one else 'were'} not {verb}: {shown}"
    )


class CompactRepr(BaseModel):
    """A details model whose ``repr`` gives list lengths, not thousands of items (event
    loops and loggers repr results they pass along)."""

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{name}=<{len(value)} items>" if isinstance(value, list) else f"{name}={value!r}"
            for name, value in self.__dict__.items()
        )
        return f"{type(self).__name__}({fields})"
