"""The workspace's ``fsync`` option: on (the default) every write is flushed, file and
directory, before the call reports success; off, nothing is flushed and every write is
still atomic (temp file renamed over the target, no temp file left) and all or nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workspace_tools import Workspace, invoke_tool_sync, workspace_tools
from workspace_tools.workspace import _textfile

PATCH = (
    "*** Begin Patch\n"
    "*** Update File: a.txt\n@@\n-one\n+ONE\n"
    "*** Update File: d/b.txt\n@@\n-two\n+TWO\n"
    "*** Add File: d/c.txt\n+three\n"
    "*** End Patch\n"
)


CALLS: list[tuple[str, dict[str, object]]] = [
    ("write_file", {"path": "new.txt", "content": "fresh\n"}),
    ("edit_file", {"path": "a.txt", "old_text": "one", "new_text": "uno"}),
    ("apply_patch", {"patch": PATCH.replace("-one\n+ONE", "-uno\n+ONE")}),
]


def _tree(root: Path) -> None:
    (root / "d").mkdir()
    (root / "a.txt").write_bytes(b"one\n")
    (root / "d" / "b.txt").write_bytes(b"two\n")


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("fsync", [True, False])
def test_writes_flush_only_when_the_option_is_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool
) -> None:
    _tree(tmp_path)
    flushed: list[str] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        flushed.append("dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "file")
        real_fsync(fd)

    started: list[int] = []
    monkeypatch.setattr(os, "fsync", counting_fsync)
    monkeypatch.setattr(_textfile, "start_writeback", started.append)
    options = {} if fsync else {"fsync": False}
    tools = {t.name: t for t in workspace_tools(Workspace(tmp_path, **options))}
    seen: dict[str, list[str]] = {}
    for name, args in CALLS:
        flushed.clear()
        result = invoke_tool_sync(tools[name], args)
        assert result.error is None, (name, result.error)
        seen[name] = sorted(flushed)
    if fsync:
        # One file: its data, then its directory. The patch: three files' data, then each
        # of the two directories once.
        assert seen == {
            "write_file": ["dir", "file"],
            "edit_file": ["dir", "file"],
            "apply_patch": ["dir", "dir", "file", "file", "file"],
        }, seen
        assert len(started) == 3, started
    else:
        assert seen == {"write_file": [], "edit_file": [], "apply_patch": []}, seen
        assert started == []
    assert _files(tmp_path) == {
        "a.txt": b"ONE\n",
        "d/b.txt": b"TWO\n",
        "d/c.txt": b"three\n",
        "new.txt": b"fresh\n",
    }


def test_without_fsync_a_failing_patch_still_changes_nothing(tmp_path: Path) -> None:
    _tree(tmp_path)
    before = _files(tmp_path)
    tools = {t.name: t for t in workspace_tools(Workspace(tmp_path, fsync=False))}
    result = invoke_tool_sync(
        tools["apply_patch"], {"patch": PATCH.replace("-two\n+TWO", "-absent\n+TWO")}
    )
    assert result.error_code is not None and result.error_code.value == "NO_MATCH", result.error
    assert _files(tmp_path) == before
