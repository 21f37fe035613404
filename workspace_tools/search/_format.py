"""The text the model reads for a grep run: matching lines, paths or counts, cut at the
limit with a note giving the totals, and the files that could not be read."""

from __future__ import annotations

from workspace_tools.search._discovery import note, unreadable_note
from workspace_tools.search._matcher import LineMatch
from workspace_tools.search._runner import GrepRun
from workspace_tools.workspace._paths import shown_path


def format_grep(run: GrepRun, output_mode: str, matching: list[str] | None = None) -> str:
    """The text the model reads for ``run`` in ``output_mode``; ``matching``: the lines
    :func:`matching_lines` made of ``run.found`` already (content mode, no context)."""
    text = _format_found(run, output_mode, matching)
    if run.unreadable:
        text += "\n" + unreadable_note(sorted(run.unreadable), "searched")
    return text


def matching_lines(path: str, rows: list[LineMatch], multiline: bool) -> list[str]:
    """The model text's lines for one file's kept matching lines, without context."""
    if not multiline:
        # One line a match: one string each, built with the path's part once a file.
        prefix = shown_path(path) + ":"
        return [f"{prefix}{line}:{text}" for line, _, text, _ in rows]
    out = []
    for line, _, text, _ in rows:
        for offset, part in enumerate(text.split("\n")):
            out.append(f"{shown_path(path)}:{line + offset}:{part}")
    return out


def _format_found(run: GrepRun, output_mode: str, matching: list[str] | None) -> str:
    if not run.match_count:
        return "No matches"
    if output_mode == "content":
        lines = _content_lines(run) if matching is None else list(matching)
        if run.kept < run.match_count:
            lines.append(
                note(
                    f"Showing {run.kept:,} of {run.match_count:,} matching lines in "
                    f"{run.files_matched:,} files; narrow the pattern, path or glob, or raise "
                    "limit, to see the rest"
                )
            )
        return "\n".join(lines)
    if output_mode == "count":
        lines = [f"{shown_path(path)}:{count}" for path, count in run.files]
    else:
        lines = [shown_path(path) for path, _ in run.files]
    if len(run.files) < run.files_matched:
        lines.append(
            note(
                f"Showing {len(run.files):,} of {run.files_matched:,} files with matches "
                f"({run.match_count:,} matching lines); narrow the pattern, path or glob, or "
                "raise limit, to see the rest"
            )
        )
    return "\n".join(lines)


def _content_lines(run: GrepRun) -> list[str]:
    if run.context:
        return _with_context(run)
    out: list[str] = []
    for path, rows in run.found:
        out += matching_lines(path, rows, run.matcher.multiline)
    return out


def _with_context(run: GrepRun) -> list[str]:
    # Match and context lines of each file merged by line number; a gap starts a new
    # group, groups are separated by "--" as grep and ripgrep print them.
    out: list[str] = []
    by_file: dict[str, dict[int, tuple[str, str]]] = {}
    for path, rows in run.found:
        numbered = by_file.setdefault(path, {})
        for line, _, text, _ in rows:
            for offset, part in enumerate(text.split("\n")):
                numbered[line + offset] = (":", part)
    for path, numbered in by_file.items():
        for number, text in run.context_lines.get(path, {}).items():
            numbered.setdefault(number, ("-", text))
        previous = None
        for number in sorted(numbered):
            if out and (previous is None or number != previous + 1):
                out.append("--")
            sep, text = numbered[number]
            out.append(f"{shown_path(path)}{sep}{number}{sep}{text}")
            previous = number
    return out
