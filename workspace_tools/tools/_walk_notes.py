"""What list_files, glob and grep tell of a walk besides what it found: the directories
this process may not read, and ignore files too big to apply whole."""

from __future__ import annotations

from workspace_tools.search._discovery import unreadable_note
from workspace_tools.workspace._ignore import cut_note
from workspace_tools.workspace._walk import Walk


def unreadable_dirs(walk: Walk) -> list[str]:
    """The directories ``walk`` could not read as results name them: ending in ``/``, the
    start itself ``./``."""
    return [rel + "/" if rel else "./" for rel in walk.unreadable]


def walk_notes(walk: Walk, verb: str) -> tuple[list[str], list[str]]:
    """:func:`unreadable_dirs` and the notes for the model on them (not ``verb``: listed,
    searched) and on the ignore files cut, none when there are neither."""
    unreadable = unreadable_dirs(walk)
    notes = [unreadable_note(unreadable, verb)] if unreadable else []
    if walk.cut_ignore_files:
        notes.append(cut_note(walk.cut_ignore_files))
    return unreadable, notes
