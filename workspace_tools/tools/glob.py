"""glob: file paths matching a glob pattern, honouring ignore rules."""

from __future__ import annotations

import posixpath
import stat

from pydantic import BaseModel, Field
from wcmatch import glob as wcglob

from workspace_tools._errors import ToolError
from workspace_tools._output import ToolOutput, ToolPresentation, tool_output
from workspace_tools._tool import Tool, ToolContext, tool
from workspace_tools.search._discovery import (
    AS_SYNTAX,
    GLOB_FLAGS,
    CompactRepr,
    GlobMatcher,
    compile_glob,
    compile_literal_glob,
    note,
    resolve_start,
    with_limit_default,
)
from workspace_tools.tools._walk_notes import walk_notes
from workspace_tools.workspace import Workspace
from workspace_tools.workspace._files import stat_below
from workspace_tools.workspace._fingerprint import tree_fingerprint
from workspace_tools.workspace._paths import shown_path

DESCRIPTION = """\
Find files whose paths match a glob pattern, e.g. '**/*.py', 'src/**/*.{ts,tsx}' or \
'*.md'. Returns matching file paths relative to the workspace root, sorted; directories \
are not matches.

- The pattern is matched against paths relative to `path` (default: the root). '*' and '?' \
never cross '/': '*.py' matches only directly in `path`; '**/' spans any number of \
directories ('**/*.py' finds Python files at any depth). Braces '{a,b}' and classes '[abc]' \
work; when a pattern matches nothing so, its brackets and braces are tried as literal \
characters (names such as 'app/[id]/page.tsx'), with a note. Hidden files match like any other.
- Files matched by .gitignore, .ignore or .git/info/exclude rules are skipped (files git \
tracks are always found); set include_ignored=true to search them too.
- Output stops after `limit` paths with a note giving the total. To search file contents, \
use grep."""


class GlobArgs(BaseModel):
    """Find files by glob pattern."""

    pattern: str = Field(description="Glob pattern, e.g. '**/*.py' or 'src/{a,b}/*.ts'")
    path: str = Field(".", description="Directory to search from, relative to the root")
    include_ignored: bool = Field(
        False, description="Also match files that .gitignore/.ignore rules skip"
    )
    limit: int = Field(100, ge=1, description="Maximum number of paths to show")


class GlobDetails(CompactRepr):
    """What ``glob`` found: ``matches`` cut at the limit, ``count`` of all, whether the list
    was ``truncated``, and how many entries ignore rules skipped."""

    pattern: str
    matches: list[str]
    count: int
    truncated: bool
    ignored: int
    unreadable: list[str] = Field(
        default_factory=list,
        description="directories below the path this process may not read (not searched)",
    )


def execute(args: GlobArgs, context: ToolContext) -> ToolOutput:
    """Run a ``glob`` call on ``context.workspace``."""
    workspace = context.need_workspace()
    walker = workspace.walker
    matcher = compile_glob(args.pattern, workspace)
    start = resolve_start(workspace, args.path, need_dir=True)
    limit = args.limit
    walk = walker.walk(start.real, start.rel, recursive=True, include_ignored=args.include_ignored)
    candidates = walk.non_directories
    cut = len(start.lead)
    if cut:
        matches = [p for p in candidates if matcher.match(p[cut:])]
    else:
        matches = list(filter(matcher.match, candidates))
    if not matches and walk.ignored:
        matches = _named(workspace, start.rel, args.pattern, matcher, cut)
    literally = False
    literal = None if matches else compile_literal_glob(args.pattern, workspace)
    if literal is not None:
        matches = [p for p in candidates if literal.match(p[cut:])]
        literally = bool(matches)
    count = len(matches)
    shown = matches[:limit]
    lines = [shown_path(path) for path in shown] or ["No files matched"]
    if literally:
        lines.append(
            note(
                f"No file matches {args.pattern!r} {AS_SYNTAX}; these match it with them "
                "taken literally"
            )
        )
    if not count and args.pattern.startswith("!"):
        lines.append(
            note(
                "A leading '!' is a literal character in a glob, not an exclusion: give the "
                "files to keep (e.g. '**/*.py'), or use grep's glob filter, where '!pattern' "
                "leaves files out"
            )
        )
    if count > limit:
        lines.append(
            note(
                f"Showing {limit:,} of {count:,} matching files; narrow the pattern or "
                "path, or raise limit, to see the rest"
            )
        )
    unreadable, notes = walk_notes(walk, "searched")
    lines += notes
    details = GlobDetails(
        pattern=args.pattern,
        matches=shown,
        count=count,
        truncated=count > limit,
        ignored=walk.ignored,
        unreadable=unreadable,
    )
    return tool_output("\n".join(lines), details)


def build(workspace: Workspace) -> Tool[GlobArgs]:
    """The ``glob`` tool over ``workspace``."""
    return tool(
        name="glob",
        description=DESCRIPTION,
        parameters=with_limit_default(GlobArgs, workspace.options.glob_limit),
        execute=execute,
        stateless=True,
        presentation=lambda a: ToolPresentation(
            label="Find files", icon="search", detail=a.pattern
        ),
        read_only=True,
        workspace=workspace,
        cache_key=lambda a: tree_fingerprint(workspace, a.path),
    )


def _named(
    workspace: Workspace, start: str, pattern: str, matcher: GlobMatcher, cut: int
) -> list[str]:
    """The file a pattern without wildcards names, when the ignore rules kept it out of the
    walk: they never hide a named path (as read_file and grep do not), so that the model
    is not told an existing file is absent. Empty when the pattern has wildcards or names
    nothing, a directory, or something under ``.git``."""
    if wcglob.is_magic(pattern, flags=GLOB_FLAGS):
        return []
    try:
        resolved = workspace.resolve(
            pattern if pattern.startswith("/") else posixpath.join(start or ".", pattern)
        )
    except ToolError:
        return []
    rel = resolved.rel
    if ".git" in rel.split("/"):
        return []
    try:
        if not stat.S_ISREG(stat_below(workspace.root, resolved.real).st_mode):
            return []
    except OSError:
        return []
    return [rel] if matcher.match(rel[cut:]) else []
