"""A session over the real workspace tools: the cache follows edits, outside changes and
discovery; the policy guards writes; a failure leaves earlier writes in place."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from workspace_tools import (
    Confirmation,
    ConfirmationRequest,
    ErrorCode,
    ToolPresentation,
    ToolSession,
    Workspace,
    workspace_tools,
)
from workspace_tools.cli._policy import policy_from_flags
from workspace_tools.workspace import _fingerprint

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _clock(clock_moved_on: None) -> None:
    """These tests are about what a cache key sees, not about the clock (see
    test_a_tree_changed_within_the_clock_tick_has_no_fingerprint)."""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("def main():\n    return 1\n")
    (tmp_path / "README.md").write_text("# demo\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    return tmp_path


async def test_real_read_is_cached_until_an_edit(root: Path) -> None:
    session = ToolSession(root)
    first = await session.call("read_file", {"path": "src/app.py"})
    again = await session.call("read_file", {"path": "src/app.py", "offset": 1})
    edit = {"path": "src/app.py", "old_text": "return 1", "new_text": "return 2"}
    edited = await session.call("edit_file", edit)
    after = await session.call("read_file", {"path": "src/app.py"})
    assert first.model_text() == again.model_text()
    assert edited.error is None
    assert "return 2" in after.model_text()
    assert [(s.cached, s.failed) for s in session.steps] == [
        (False, False),
        (True, False),
        (False, False),
        (False, False),
    ]


async def test_real_read_sees_an_outside_change(root: Path) -> None:
    session = ToolSession(root)
    await session.call("read_file", {"path": "src/app.py"})
    (root / "src" / "app.py").write_text("def main():\n    return 9\n")
    result = await session.call("read_file", {"path": "src/app.py"})
    assert session.steps[1].cached is False
    assert "return 9" in result.model_text()


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("glob", {"pattern": "**/*.py"}),
        ("grep", {"pattern": "def "}),
        ("list_files", {"recursive": True}),
    ],
)
async def test_real_discovery_is_cached_until_a_file_appears(
    root: Path, name: str, arguments: dict[str, object]
) -> None:
    session = ToolSession(root)
    first = await session.call(name, arguments)
    await session.call(name, arguments)
    (root / "src" / "extra.py").write_text("def extra():\n    pass\n")
    last = await session.call(name, arguments)
    assert [s.cached for s in session.steps] == [False, True, False]
    assert "extra.py" not in first.model_text()
    assert "extra.py" in last.model_text()


async def test_a_tree_changed_within_the_clock_tick_is_searched_again(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An entry whose timestamp the clock has not moved past may change again unseen by its
    # stat, so the repeated call runs (tests/test_fingerprint.py has the rule itself).
    monkeypatch.setattr(_fingerprint, "time_ns", time.time_ns)  # the real clock
    fresh = root / "src" / "fresh.py"
    fresh.write_text("x = 1\n")
    ahead = time.time_ns() + 3600 * 10**9
    os.utime(fresh, ns=(ahead, ahead))
    session = ToolSession(root)
    for _ in range(2):
        result = await session.call("grep", {"pattern": "x = 1"})
        assert result.model_text() == "src/fresh.py:1:x = 1"
    assert [s.cached for s in session.steps] == [False, False]


async def test_real_gitignore_change_invalidates_a_cached_glob(root: Path) -> None:
    session = ToolSession(root)
    await session.call("glob", {"pattern": "**/*.md"})
    (root / ".gitignore").write_text("README.md\n")
    result = await session.call("glob", {"pattern": "**/*.md"})
    assert session.steps[1].cached is False
    assert "README.md" not in result.model_text()


async def test_confirmation_sees_the_real_presentation(root: Path) -> None:
    seen: list[ConfirmationRequest] = []

    def confirm(request: ConfirmationRequest) -> Confirmation:
        seen.append(request)
        return Confirmation(approved=False, reason="not outside src")

    session = ToolSession(
        root, policy=policy_from_flags([("ask", "write_file:path!=src/**")]), confirm=confirm
    )
    result = await session.call("write_file", {"path": "notes.md", "content": "x\n"})
    assert [r.presentation for r in seen] == [
        ToolPresentation(label="Write file", icon="file-plus", detail="notes.md")
    ]
    assert result.model_text() == "Not run: the user declined this write_file call: not outside src"
    assert not (root / "notes.md").exists()


async def test_failed_edit_after_a_write_leaves_the_write(root: Path) -> None:
    session = ToolSession(root)
    written = await session.call("write_file", {"path": "src/new.py", "content": "x = 1\n"})
    failed = await session.call(
        "edit_file", {"path": "src/new.py", "old_text": "y = 1", "new_text": "y = 2"}
    )
    assert written.error is None
    assert failed.error_code == ErrorCode.NO_MATCH
    assert (root / "src" / "new.py").read_text() == "x = 1\n"
    assert [(s.tool, s.failed) for s in session.steps] == [
        ("write_file", False),
        ("edit_file", True),
    ]


def test_workspace_session_uses_the_workspace_for_policy_paths(root: Path) -> None:
    (root / "src" / "out").symlink_to("..")
    session = ToolSession(
        Workspace(root), policy=policy_from_flags([("deny", "write_file:path!=src/**")])
    )
    result = session.call_sync("write_file", {"path": "src/out/evil.md", "content": "x"})
    assert session.steps[0].denied_by == "--deny write_file:path!=src/**"
    assert result.error_code == ErrorCode.PERMISSION_DENIED


@pytest.mark.parametrize("spelling", ["src/new.py", "./src/new.py", "x/../src/new.py", "ABSOLUTE"])
async def test_a_session_over_the_tools_alone_tests_path_globs_on_the_real_path(
    root: Path, spelling: str
) -> None:
    """No workspace= given: the session works in the tools' workspace, so a path glob sees
    the path as it resolves and an absolute spelling does not slip past a deny rule."""
    path = str(root / "src" / "new.py") if spelling == "ABSOLUTE" else spelling
    session = ToolSession(
        workspace_tools(root), policy=policy_from_flags([("deny", "write_file:path=src/**")])
    )
    result = await session.call("write_file", {"path": path, "content": "x\n"})
    assert (result.error_code, session.steps[-1].denied_by) == (
        ErrorCode.PERMISSION_DENIED,
        "--deny write_file:path=src/**",
    ), result.error
    assert not (root / "src" / "new.py").exists()
