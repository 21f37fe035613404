"""grep: search file contents with a Python regular expression."""

from __future__ import annotations

import contextlib
import gc
import re
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools._output import ToolOutput, ToolPresentation, tool_output
from workspace_tools._tool import Tool, ToolContext, tool
from workspace_tools.search._discovery import (
    AS_SYNTAX,
    CompactRepr,
    GlobMatcher,
    Start,
    compile_glob,
    compile_literal_glob,
    note,
    resolve_start,
    with_limit_default,
)
from workspace_tools.search._format import format_grep, matching_lines
from workspace_tools.search._index import SearchIndex
from workspace_tools.search._matcher import BINARY_PROBE, LineMatch, Matcher, NeedsWorker
from workspace_tools.search._runner import GrepRun
from workspace_tools.search._worker import (
    Searchers,
    search_files,
    search_in_worker,
    worker_timeout,
)
from workspace_tools.tools._walk_notes import unreadable_dirs
from workspace_tools.workspace import Workspace
from workspace_tools.workspace._fingerprint import tree_fingerprint
from workspace_tools.workspace._ignore import cut_note

# Seconds (at most) before the call's deadline at which a search on Python's engine stops.
WORKER_MARGIN = 0.5

# Patterns whose compiled matchers a grep tool keeps for calls that repeat them.
POOLED_PATTERNS = 8

DESCRIPTION = """\
Search file contents with a Python regular expression (re syntax), like ripgrep. Returns \
matching lines as 'path:line:text', sorted by path then line; paths are relative to the \
workspace root.

- `path` may be a directory (searched recursively) or a single file.
- output_mode: 'content' (matching lines, default), 'files_with_matches' (paths only) or \
'count' ('path:count' per file).
- A match lies within one line unless multiline=true, which lets '.' and the pattern span \
lines. Escape regex characters to search for them literally, e.g. 'foo\\(' or '\\.get\\('; \
when a pattern matches nothing but its text occurs literally, a note says so.
- glob filters files, e.g. '*.py' (no '/': matched against file names at any depth) or \
'src/**/*.ts' (matched against paths relative to `path`); when it keeps no file so, its \
brackets and braces are tried as literal characters ('app/[id]/*.tsx'), with a note.
- context=N shows N lines around each match ('path-line-text'; groups separated by '--').
- Hidden files and directories (e.g. .github/) are searched; .git is not. Binary files are \
skipped and counted. Files matched by .gitignore, .ignore or .git/info/exclude rules are \
skipped (files git tracks are always searched); set include_ignored=true to search them, \
or name an ignored file as `path`.
- A line longer than 2,000 characters is shown cut around its match.
- Output stops after `limit` matching lines (files, in the other modes) with a note giving \
the totals."""


class GrepArgs(BaseModel):
    """Search file contents with a regular expression."""

    pattern: str = Field(description="Python regular expression, e.g. 'def \\w+\\(' or 'TODO'")
    path: str = Field(".", description="File or directory to search, relative to the root")
    glob: str | None = Field(
        None,
        description="Only files matching this glob: '*.py' (no '/': file names at any depth) "
        "or 'src/**/*.ts' (paths relative to path); a leading '!' leaves out the files it "
        "matches instead ('!*.min.js'), as ripgrep's --glob does",
    )
    ignore_case: bool = Field(False, description="Case-insensitive match")
    output_mode: Literal["content", "files_with_matches", "count"] = Field(
        "content", description="Matching lines, file paths, or counts per file"
    )
    context: int = Field(0, ge=0, description="Lines of context around each match")
    multiline: bool = Field(False, description="Let the pattern span lines ('.' matches newline)")
    include_ignored: bool = Field(
        False, description="Also search files that .gitignore/.ignore rules skip"
    )
    limit: int = Field(100, ge=1, description="Maximum number of results to show")

    @field_validator("limit")
    @classmethod
    def _no_more_than_any_count(cls, value: int) -> int:
        # JSON has integers of any size; a limit past sys.maxsize means no limit, and no
        # slice takes a bigger one.
        return min(value, sys.maxsize)

    @field_validator("context")
    @classmethod
    def _no_more_than_a_file(cls, value: int) -> int:
        # Context costs each match its width in lines; past MAX_CONTEXT it is all of any
        # file a model can read (the result is cut long before).
        return min(value, MAX_CONTEXT)


MAX_CONTEXT = 10_000
"""The most lines of context taken on each side of a match (more is all of it in practice)."""


# Plain dataclasses, not models: a search may return thousands of matches, and each model
# instance costs a validation (its fields are ours, already of the right types). They
# serialize as the same JSON objects inside GrepDetails.
@dataclass(slots=True)
class GrepMatch:
    """A matching line: 1-based ``line`` and ``column`` (characters) of its first match."""

    path: str
    line: int
    column: int
    text: str


@dataclass(slots=True)
class GrepFile:
    """A file with matches and how many lines matched (matches, in multiline mode)."""

    path: str
    count: int


class GrepDetails(CompactRepr):
    """What ``grep`` found. ``matches`` and ``files`` are cut at the limit; the totals
    (``match_count``, ``files_matched``, ``files_searched``, ``binary_skipped``,
    ``ignored``) count everything."""

    pattern: str
    matches: list[GrepMatch]
    files: list[GrepFile]
    match_count: int
    files_matched: int
    files_searched: int
    truncated: bool
    binary_skipped: int
    ignored: int
    unreadable: list[str] = Field(
        default_factory=list,
        description="files and directories (ending in /) this process may not read: not searched",
    )


class MatcherPool:
    """Compiled matchers of the last :data:`POOLED_PATTERNS` patterns, for calls that
    repeat one (as Python's ``re`` caches compiled patterns): an RE2 program keeps the
    automaton it built while searching, which a fresh one builds again.

    A matcher is used by one call at a time (taken, then given back): a call sets its
    ``in_process`` and reads into its probe buffer.
    """

    def __init__(self, size: int = POOLED_PATTERNS) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._idle: OrderedDict[tuple[str, bool, bool], Matcher] = OrderedDict()

    def take(self, pattern: str, *, ignore_case: bool, multiline: bool) -> Matcher:
        """An idle matcher for these arguments, or a new one.

        Raises:
            ToolError: see :class:`Matcher`.
        """
        key = (pattern, ignore_case, multiline)
        with self._lock:
            matcher = self._idle.pop(key, None)
        if matcher is None:
            matcher = Matcher(pattern, ignore_case=ignore_case, multiline=multiline)
        return matcher

    def give(self, matcher: Matcher) -> None:
        """Give back a matcher taken from this pool; the oldest pattern's goes past
        :data:`POOLED_PATTERNS`."""
        with self._lock:
            self._idle[matcher.key] = matcher
            self._idle.move_to_end(matcher.key)
            while len(self._idle) > self._size:
                self._idle.popitem(last=False)


class _Kept:
    """What a call returns of the matching lines a run keeps, made as the run keeps them
    (its ``on_found``, see :class:`GrepRun`): the result models and, in content mode
    without context, the model text's lines. A split search hands the caller each block's
    lines while the searchers are still at work, so this costs the call little time."""

    def __init__(self, output_mode: str, context: int, multiline: bool) -> None:
        self.matches: list[GrepMatch] = []
        self.text: list[str] | None = [] if output_mode == "content" and not context else None
        self.multiline = multiline

    def __call__(self, path: str, rows: list[LineMatch]) -> None:
        self.matches += [GrepMatch(path, line, column, text) for line, column, text, _ in rows]
        if self.text is not None:
            self.text += matching_lines(path, rows, self.multiline)


def _search_in_worker(
    run: GrepRun,
    searchers: Searchers,
    root: str,
    files: list[str] | tuple[str, str],
    context: ToolContext,
) -> None:
    """:func:`search_in_worker` ended a little before the call's deadline, so that its
    timeout, which says why the search took long, is the one reported; should the call's
    timeout fire first all the same, its result says the same (``context.timeout_error``)."""
    left = context.seconds_left()
    if left is None or context.timeout is None:
        search_in_worker(run, searchers, root, files, deadline=None, stopped=lambda: context.ended)
        return
    context.timeout_error = worker_timeout(context.timeout)
    search_in_worker(
        run,
        searchers,
        root,
        files,
        deadline=time.monotonic() + left - min(WORKER_MARGIN, left / 5),
        stopped=lambda: context.ended,
        seconds=context.timeout,
    )


#: Under these keys a workspace keeps grep's warm index, its pool of compiled patterns and
#: its searcher processes (:meth:`Workspace.kept`), shared by the grep tools built over it.
INDEX_KEY = "grep.index"
POOL_KEY = "grep.matchers"
SEARCHERS_KEY = "grep.searchers"


def execute(args: GrepArgs, context: ToolContext) -> ToolOutput:
    """Run a ``grep`` call on ``context.workspace``."""
    workspace = context.need_workspace()
    pool = workspace.kept(POOL_KEY, MatcherPool)
    matcher = pool.take(args.pattern, ignore_case=args.ignore_case, multiline=args.multiline)
    try:
        with _collector_paused():
            output = _execute(workspace, args, context, matcher)
    finally:
        pool.give(matcher)
    details = output.details
    if isinstance(details, GrepDetails) and not details.match_count:
        output = _with_literal_hint(workspace, args, context, output)
        if details.binary_skipped and not details.files_searched:
            output = tool_output(
                f"{output.content}\n{_binary_note(details.binary_skipped)}", output.details
            )
    return output


def _binary_note(skipped: int) -> str:
    """The note under "No matches" when every file the search found was binary (a named
    binary file, say): the text may be in them, and "No matches" alone says it is nowhere
    (ripgrep says "binary file matches" of a named one). Among text files, skipped binary
    files are only counted, as ripgrep skips them silently."""
    files = "1 binary file was" if skipped == 1 else f"{skipped:,} binary files were"
    return note(
        f"{files} skipped, not searched (a NUL byte in the first {BINARY_PROBE:,} bytes); "
        "the pattern may occur in "
        + ("it" if skipped == 1 else "them")
        + ": run_command can search binary files (e.g. grep -c)"
    )


# Regex syntax that can make a pattern miss text it spells out literally (a group's
# parentheses, a class's brackets, an anchor, a quantifier, an alternative); '.' and '\\'
# cannot ('.' matches itself too, and a backslash in the pattern is deliberate).
_NARROWING = re.compile(r"[()\[\]{}$^+?*|]")


def _with_literal_hint(
    workspace: Workspace, args: GrepArgs, context: ToolContext, output: ToolOutput
) -> ToolOutput:
    """``output`` of a search that matched nothing, with a note when the pattern's text
    occurs literally: ``foo(bar)``, ``$scope``, ``items[0]`` typed as they read find
    nothing as a regex, and "No matches" alone says the text is absent."""
    if "\\" in args.pattern or not _NARROWING.search(args.pattern):
        return output
    literal = re.escape(args.pattern)
    pool = workspace.kept(POOL_KEY, MatcherPool)
    try:
        matcher = pool.take(literal, ignore_case=args.ignore_case, multiline=args.multiline)
    except ToolError:
        return output
    probe = args.model_copy(update={"pattern": literal, "output_mode": "count", "context": 0})
    try:
        with _collector_paused():
            found = _execute(workspace, probe, context, matcher).details
    finally:
        pool.give(matcher)
    if not isinstance(found, GrepDetails) or not found.match_count:
        return output
    files = found.files_matched
    hint = note(
        f"As a regular expression the pattern matches nothing, but its text occurs literally "
        f"{found.match_count:,} time{'' if found.match_count == 1 else 's'} in {files:,} "
        f"file{'' if files == 1 else 's'}; with its regex characters escaped, the pattern "
        f"{literal} finds it"
    )
    return tool_output(f"{output.content}\n{hint}", output.details)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for the call, if it runs: a search keeps
    tens of thousands of small objects that hold no cycle (a tuple a matching line, its
    model), and each few hundred of them set off a collection, now and then one over the
    whole heap. Measured over mypy's sources, TypeVar's 8,103 matches: the call took
    32.8 ms with the collector, 23.6 without (medians of 25, a process holding the
    package's imports). The collector is the process's: should another thread pause it
    meanwhile, or a concurrent call resume it first, the objects are collected later,
    never lost."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _execute(
    workspace: Workspace, args: GrepArgs, context: ToolContext, matcher: Matcher
) -> ToolOutput:
    walker = workspace.walker
    index = workspace.kept(INDEX_KEY, lambda: SearchIndex(str(workspace.root)))
    # As ripgrep's --glob: a leading "!" leaves out what the rest matches.
    glob = args.glob
    excluding = glob is not None and glob.startswith("!")
    if excluding and glob is not None:
        glob = glob[1:]
        if not glob.strip():
            raise ToolError(
                "The glob filter '!' names no files to leave out: give a pattern after it "
                "('!*.min.js'), or no glob to search every file",
                ErrorCode.INVALID_ARGUMENTS,
            )
    file_filter = compile_glob(glob, workspace) if glob else None
    start = resolve_start(workspace, args.path, need_dir=False)
    limit = args.limit
    files: list[str] = []
    walked = 0
    ignored = 0
    unreadable: list[str] = []
    cut_ignore_files: list[str] = []
    glob_read_literally = False
    if start.is_dir:
        walk = walker.walk(
            start.real, start.rel, recursive=True, include_ignored=args.include_ignored
        )
        files = walk.files
        walked = len(files)
        if file_filter is not None and glob is not None:
            files, glob_read_literally = _filtered(
                workspace, files, glob, file_filter, start, excluding=excluding
            )
        ignored = walk.ignored
        unreadable = unreadable_dirs(walk)
        cut_ignore_files = walk.cut_ignore_files

    # Files the warm index knows cannot hold the pattern's required literal are
    # counted, not read.
    selection = None
    if start.is_dir and matcher.required is not None:
        selection = index.select(files, matcher.required)
    searched = files if selection is None else selection.files
    root = str(workspace.root)
    searchers = workspace.kept(SEARCHERS_KEY, Searchers)

    run: GrepRun | None = None
    kept = _Kept(args.output_mode, args.context, args.multiline)
    if not matcher.needs_worker:
        run = GrepRun(
            matcher,
            limit=limit,
            context=args.context,
            on_found=kept,
            kept_files=None if selection is None else selection.kept,
        )
        matcher.in_process = True
        try:
            if start.is_dir:
                # A sandboxed call's copy of the workspace lives for the call: a searcher
                # started there would die before any later call could use it.
                search_files(
                    run,
                    root,
                    searched,
                    searchers,
                    size=None if selection is None else selection.size,
                    start=not workspace.one_call,
                )
            else:
                run.search_named_file(root, start.real, start.rel)
        except NeedsWorker:
            run = None  # text that only Python's engine can search
    if run is None:
        # Python's engine may backtrack for ever: it runs in a searcher process, killed
        # at the call's deadline or when the call is over.
        kept = _Kept(args.output_mode, args.context, args.multiline)
        run = GrepRun(matcher, limit=limit, context=args.context, on_found=kept)
        named = (start.real, start.rel)
        _search_in_worker(run, searchers, root, searched if start.is_dir else named, context)
    if selection is not None:
        run.files_searched += selection.skipped_text
        run.binary_skipped += selection.skipped_binary
    if start.is_dir:
        index.after_search(walker, walked)
    run.ignored = ignored
    run.unreadable = sorted([*unreadable, *run.unreadable])
    content = format_grep(run, args.output_mode, kept.text)
    if glob_read_literally:
        content += "\n" + note(
            f"No file matches the glob {args.glob!r} {AS_SYNTAX}; the files it matches with "
            "them taken literally were searched"
        )
    if cut_ignore_files:
        content += "\n" + cut_note(cut_ignore_files)
    # Built from values of the right types: no validation, which would cost as much
    # as the search for a result of thousands of matches.
    details = GrepDetails.model_construct(
        pattern=args.pattern,
        matches=kept.matches,
        files=[GrepFile(p, c) for p, c in run.files],
        match_count=run.match_count,
        files_matched=run.files_matched,
        files_searched=run.files_searched,
        truncated=run.truncated,
        binary_skipped=run.binary_skipped,
        ignored=run.ignored,
        unreadable=run.unreadable,
    )
    return tool_output(content, details)


def _filtered(
    workspace: Workspace,
    files: list[str],
    glob: str,
    matcher: GlobMatcher,
    start: Start,
    *,
    excluding: bool = False,
) -> tuple[list[str], bool]:
    """The ``files`` the ``glob`` filter keeps (a glob without ``/`` matches names at any
    depth, else paths below ``start``; with ``excluding``, those it does not match), and
    whether they are those of the glob with its brackets and braces taken literally, which
    it names when as written it keeps none (``app/[id]/*.tsx``)."""
    by_name = "/" not in glob.strip("/")
    cut = len(start.lead)

    def matches(pattern: GlobMatcher, path: str) -> bool:
        return bool(pattern.match(path[path.rfind("/") + 1 :] if by_name else path[cut:]))

    def kept(pattern: GlobMatcher) -> list[str]:
        return [p for p in files if matches(pattern, p)]

    if excluding:
        return [p for p in files if not matches(matcher, p)], False
    matching = kept(matcher)
    literal = None if matching or not files else compile_literal_glob(glob, workspace)
    if literal is None:
        return matching, False
    matching = kept(literal)
    return matching, bool(matching)


def build(workspace: Workspace, *, index: SearchIndex | None = None) -> Tool[GrepArgs]:
    """The ``grep`` tool over ``workspace``; ``index`` is the warm index its searches use
    and keep (by default the workspace's own, made on its first search, see
    ``search/_index.py``)."""
    if index is not None:
        workspace.keep(INDEX_KEY, index)
    return tool(
        name="grep",
        description=DESCRIPTION,
        parameters=with_limit_default(GrepArgs, workspace.options.grep_limit),
        execute=execute,
        stateless=True,
        presentation=lambda a: ToolPresentation(
            label="Search files", icon="text-search", detail=a.pattern
        ),
        read_only=True,
        workspace=workspace,
        cache_key=lambda a: tree_fingerprint(workspace, a.path),
    )
