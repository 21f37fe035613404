"""A session's checkpoint store ends with the session: close() and the with block."""

from __future__ import annotations

import logging
import tempfile
import threading
from pathlib import Path

import anyio
import pytest

from tests._waiting import wait_until
from workspace_tools import ErrorCode, ToolResult, ToolSession
from workspace_tools.session._checkpoints import Checkpoints
from workspace_tools.workspace import Workspace


@pytest.fixture
def temp_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty temp directory the session's store is made in (and must leave empty)."""
    parent = tmp_path / "temp"
    parent.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(parent))
    return parent


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "a.txt").write_bytes(b"one\n")
    return root


def _write(session: ToolSession) -> None:
    result = session.call_sync("write_file", {"path": "a.txt", "content": "two\n"})
    assert not result.is_error, result.error
    assert [row["path"] for row in result.details["changed_files"]] == ["a.txt"]


def test_close_removes_the_store_and_leaves_its_parent_empty(
    project: Path, temp_parent: Path
) -> None:
    session = ToolSession(project, checkpoints=True)
    assert session.checkpoints is not None
    assert session.checkpoints.store.directory.parent == temp_parent
    _write(session)
    assert list(temp_parent.iterdir()) != []
    session.close()
    assert list(temp_parent.iterdir()) == []
    session.close()  # idempotent
    assert list(temp_parent.iterdir()) == []
    # A writing call after close is refused with a reason, not run without its checkpoint.
    after = session.call_sync("write_file", {"path": "a.txt", "content": "three\n"})
    assert after.error_code is ErrorCode.NOT_FOUND, after.error
    assert after.error is not None
    assert after.error.startswith("Not run: the checkpoint before this call failed"), after.error
    assert (project / "a.txt").read_bytes() == b"two\n"
    assert list(temp_parent.iterdir()) == []


def test_with_block_removes_the_store(project: Path, temp_parent: Path) -> None:
    with ToolSession(project, checkpoints=True) as session:
        _write(session)
        assert session.undo().applied
    assert (project / "a.txt").read_bytes() == b"one\n"
    assert list(temp_parent.iterdir()) == []


def test_async_with_block_removes_the_store(project: Path, temp_parent: Path) -> None:
    async def main() -> None:
        async with ToolSession(project, checkpoints=True) as session:
            result = await session.call("write_file", {"path": "a.txt", "content": "two\n"})
            assert not result.is_error, result.error

    anyio.run(main)
    assert (project / "a.txt").read_bytes() == b"two\n"
    assert list(temp_parent.iterdir()) == []


def test_a_kept_store_outlives_the_session(project: Path, temp_parent: Path) -> None:
    checkpoints = Checkpoints(Workspace(project), keep=True)
    with ToolSession(project, checkpoints=checkpoints) as session:
        _write(session)
    assert [p.name for p in temp_parent.iterdir()] == [checkpoints.store.directory.name]
    loaded = Checkpoints.load(checkpoints.store.directory)
    assert loaded.restore(0).applied
    assert (project / "a.txt").read_bytes() == b"one\n"


def test_closing_the_session_while_a_command_runs_ends_it_without_a_logged_failure(
    project: Path, temp_parent: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The close removes the store while the command's step is still open: the step has
    nowhere to be recorded, which is the close's doing, not a failure to log (a harness
    closing many sessions would get a traceback for each)."""
    session = ToolSession(project, checkpoints=True)
    flag = project / "started"
    out: list[ToolResult] = []

    def run() -> None:
        command = f"touch {flag}; sleep 600"
        out.append(session.call_sync("run_command", {"command": command, "timeout": 600}))

    thread = threading.Thread(target=run)
    thread.start()
    try:
        wait_until(flag.exists, bool, "the command to start")
        with caplog.at_level(logging.WARNING, logger="workspace_tools"):
            session.close()
            thread.join(60)
    finally:
        session.close()
        thread.join(60)
    assert not thread.is_alive()
    [result] = out
    assert result.error_code is ErrorCode.SANDBOX_ERROR, result.error
    assert [r.getMessage() for r in caplog.records] == []
    assert list(temp_parent.iterdir()) == []
