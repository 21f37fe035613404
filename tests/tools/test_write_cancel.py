"""A write_file or edit_file call that timed out changes nothing afterwards, although its
worker thread runs on; custom tools get the same means through the ToolContext."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from pydantic import BaseModel

from tests.file_support import tools
from workspace_tools import ErrorCode, ToolContext, ToolError, invoke_tool, tool
from workspace_tools.workspace import _files, _textfile

pytestmark = pytest.mark.anyio

ABORTED_MESSAGE = (
    "The {} call was cancelled (it timed out or was aborted); it stopped before its next change"
)


class Watch:
    """Holds the write at a chosen step until released, and records how it ended."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.finished = threading.Event()
        self.outcome: list[BaseException | None] = []

    def hold(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def held(*args: Any, **kwargs: Any) -> Any:
            self.release.wait(30)
            return real(*args, **kwargs)

        return held

    def record(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            try:
                value = real(*args, **kwargs)
            except BaseException as exc:
                self.outcome.append(exc)
                raise
            else:
                self.outcome.append(None)
                return value
            finally:
                self.finished.set()

        return recorded

    async def after_timeout(self) -> list[tuple[Any, ...]]:
        """Let the abandoned thread go on, wait for its end, and say how it ended."""
        self.release.set()
        assert await anyio.to_thread.run_sync(self.finished.wait, 30)
        return [
            (None,) if exc is None else (type(exc), getattr(exc, "code", None), str(exc))
            for exc in self.outcome
        ]


@pytest.fixture
def watch(monkeypatch: pytest.MonkeyPatch) -> Watch:
    watch = Watch()
    monkeypatch.setattr(_textfile, "atomic_write", watch.record(_textfile.atomic_write))
    return watch


CASES = [
    ("write_file", {"path": "f.txt", "content": "new\n"}),
    ("edit_file", {"path": "f.txt", "old_text": "old", "new_text": "new"}),
    ("write_file", {"path": "created.txt", "content": "new\n"}),
]


@pytest.mark.parametrize(("tool_name", "arguments"), CASES, ids=["write", "edit", "create"])
@pytest.mark.parametrize("step", ["_write_all", "open_parent"])
async def test_a_timed_out_write_changes_nothing_afterwards(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    watch: Watch,
    tool_name: str,
    arguments: dict[str, str],
    step: str,
) -> None:
    # Held before the commit (the temp file written) or before anything (the parent
    # directories), until the timeout was reported.
    monkeypatch.setattr(_files, step, watch.hold(getattr(_files, step)))
    (tmp_path / "f.txt").write_bytes(b"old\n")
    tool_set = tools(tmp_path)
    result = await invoke_tool(tool_set[tool_name], arguments, timeout=0.2)
    assert (result.error_code, result.error) == (
        ErrorCode.TOOL_TIMEOUT,
        f"{tool_name} timed out after 0.2 s",
    )
    assert await watch.after_timeout() == [
        (ToolError, ErrorCode.ABORTED, ABORTED_MESSAGE.format(tool_name))
    ]
    assert (tmp_path / "f.txt").read_bytes() == b"old\n"
    assert sorted(os.listdir(tmp_path)) == ["f.txt"]
    # The file's lock is free again and nothing was recorded as seen: a new call works.
    watch.release.set()
    again = await invoke_tool(tool_set[tool_name], arguments)
    assert again.error is None, again.error
    assert (tmp_path / arguments["path"]).read_bytes() == b"new\n"


async def test_a_new_file_in_new_directories_leaves_no_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watch: Watch
) -> None:
    monkeypatch.setattr(_files, "open_parent", watch.hold(_files.open_parent))
    write = tools(tmp_path)["write_file"]
    result = await invoke_tool(write, {"path": "a/b/new.txt", "content": "x\n"}, timeout=0.2)
    assert result.error_code is ErrorCode.TOOL_TIMEOUT
    assert await watch.after_timeout() == [
        (ToolError, ErrorCode.ABORTED, ABORTED_MESSAGE.format("write_file"))
    ]
    assert os.listdir(tmp_path) == []


async def test_a_write_that_finished_in_time_is_not_affected(tmp_path: Path, watch: Watch) -> None:
    write = tools(tmp_path)["write_file"]
    result = await invoke_tool(write, {"path": "f.txt", "content": "x\n"}, timeout=30)
    assert result.error is None
    assert await watch.after_timeout() == [(None,)]
    assert (tmp_path / "f.txt").read_bytes() == b"x\n"


class NoArgs(BaseModel):
    pass


async def test_a_custom_sync_tool_learns_that_its_call_timed_out() -> None:
    release = threading.Event()
    seen: list[object] = []
    done = threading.Event()

    def execute(args: NoArgs, context: ToolContext) -> str:
        release.wait(30)
        seen.append(context.cancelled)
        try:
            with context.committing():
                seen.append("committed")
        except ToolError as exc:
            seen.append((exc.code, exc.message))
        done.set()
        return "late"

    slow = tool(name="slow", description="", parameters=NoArgs, execute=execute)
    result = await invoke_tool(slow, {}, timeout=0.2)
    assert result.error_code is ErrorCode.TOOL_TIMEOUT
    release.set()
    assert await anyio.to_thread.run_sync(done.wait, 30)
    assert seen == [True, (ErrorCode.ABORTED, ABORTED_MESSAGE.format("slow"))]


async def test_an_async_tool_context_is_cancelled_on_timeout() -> None:
    contexts: list[ToolContext] = []

    async def execute(args: NoArgs, context: ToolContext) -> str:
        contexts.append(context)
        await anyio.sleep(30)
        return "late"

    slow = tool(name="slow", description="", parameters=NoArgs, execute=execute)
    result = await invoke_tool(slow, {}, timeout=0.2)
    assert result.error_code is ErrorCode.TOOL_TIMEOUT
    assert [c.cancelled for c in contexts] == [True]
    with pytest.raises(ToolError) as caught:
        contexts[0].check_cancelled()
    assert caught.value.code is ErrorCode.ABORTED


def test_cancel_waits_for_a_running_commit() -> None:
    context = ToolContext("call_1", "t")
    context.check_cancelled()  # not cancelled: nothing raised
    inside = threading.Event()
    leave = threading.Event()
    order: list[str] = []

    def commit() -> None:
        with context.committing():
            inside.set()
            leave.wait(30)
            order.append("committed")

    committer = threading.Thread(target=commit)
    committer.start()
    assert inside.wait(30)
    canceller = threading.Thread(target=lambda: (context.cancel(), order.append("cancelled")))
    canceller.start()
    canceller.join(0.2)
    # cancel() is blocked until the commit block ends.
    assert canceller.is_alive() and order == [] and not context.cancelled
    leave.set()
    committer.join(30)
    canceller.join(30)
    assert order == ["committed", "cancelled"]
    assert context.cancelled
    with pytest.raises(ToolError), context.committing():
        order.append("never")
    assert order == ["committed", "cancelled"]
