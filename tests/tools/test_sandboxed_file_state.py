"""Tools run in a sandbox child keep the state they declare. The file tools keep the
workspace's promises: staleness checks see every read and write made in a child, and calls
on one file still run one after another."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from sandbox import Sandbox
from workspace_tools import ErrorCode, ToolResult, ToolState, invoke_tool, tool
from workspace_tools.tools import workspace_tools

pytestmark = pytest.mark.anyio

EDITS = 8


@pytest.fixture
def box() -> Iterator[Sandbox]:
    sandbox = Sandbox()
    yield sandbox
    sandbox.close()


class Calls:
    """The tools over ``root`` run in ``box`` one of two ways: built with the sandbox
    (``workspace_tools(sandbox=)``), or built plain and run with ``invoke_tool(sandbox=)``."""

    def __init__(self, root: Path, box: Sandbox, mode: str) -> None:
        built = workspace_tools(root, sandbox=box) if mode == "built" else workspace_tools(root)
        self.tools = {t.name: t for t in built}
        self.options: dict[str, Any] = {} if mode == "built" else {"sandbox": box}

    async def __call__(self, name: str, **arguments: Any) -> ToolResult:
        return await invoke_tool(self.tools[name], arguments, **self.options)


@pytest.fixture(params=["built", "invoked"])
def calls(request: pytest.FixtureRequest, tmp_path: Path, box: Sandbox) -> Calls:
    return Calls(tmp_path, box, request.param)


async def test_change_on_disk_after_a_sandboxed_read_is_stale(tmp_path: Path, calls: Calls):
    (tmp_path / "a.txt").write_text("one\n")
    assert (await calls("read_file", path="a.txt")).error is None
    (tmp_path / "a.txt").write_text("two\n")  # outside the tools
    result = await calls("edit_file", path="a.txt", old_text="two", new_text="three")
    assert result.error_code is ErrorCode.STALE_FILE
    assert (tmp_path / "a.txt").read_text() == "two\n"


async def test_sandboxed_edits_one_after_another_are_not_stale(tmp_path: Path, calls: Calls):
    # Each child must see the hash the previous call left, not the one at its fork.
    (tmp_path / "a.txt").write_text("v0\n")
    assert (await calls("read_file", path="a.txt")).error is None
    for i in range(4):
        result = await calls("edit_file", path="a.txt", old_text=f"v{i}", new_text=f"v{i + 1}")
        assert result.error is None
    result = await calls("write_file", path="a.txt", content="w\n")
    assert result.error is None
    assert (tmp_path / "a.txt").read_text() == "w\n"


async def test_concurrent_sandboxed_edits_of_one_file_all_land(tmp_path: Path, calls: Calls):
    path = tmp_path / "f.txt"
    path.write_bytes(b"".join(b"line%d = 0\n" % i for i in range(EDITS)))
    results: list[ToolResult] = []

    async def one(i: int) -> None:
        results.append(
            await calls("edit_file", path="f.txt", old_text=f"line{i} = 0", new_text=f"line{i} = 1")
        )

    async with anyio.create_task_group() as group:
        for i in range(EDITS):
            group.start_soon(one, i)
    assert [r.error for r in results] == [None] * EDITS
    assert path.read_bytes() == b"".join(b"line%d = 1\n" % i for i in range(EDITS))


class Counter:
    """A tool's own state: counts per name, carried in and out of the sandbox."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def snapshot(self) -> dict[str, int]:
        return dict(self.counts)

    def restore(self, counts: dict[str, int]) -> None:
        self.counts = dict(counts)

    def changes(self, since: dict[str, int]) -> dict[str, int]:
        return {k: v for k, v in self.counts.items() if since.get(k) != v}

    def apply(self, changes: dict[str, int]) -> None:
        self.counts.update(changes)


@pytest.mark.parametrize("is_async", [False, True])
async def test_a_custom_tool_state_comes_back_from_the_sandbox(box: Sandbox, is_async: bool):
    class Args(BaseModel):
        name: str

    counter = Counter()

    def count(args: Args, context: object) -> int:
        counter.counts[args.name] = counter.counts.get(args.name, 0) + 1
        return counter.counts[args.name]

    async def count_async(args: Args, context: object) -> int:
        await anyio.sleep(0)
        return count(args, context)

    state = ToolState(counter.snapshot, counter.restore, counter.changes, counter.apply)
    counting = tool(
        name="count",
        description="",
        parameters=Args,
        execute=count_async if is_async else count,
        state=state,
    )
    seen = [
        (await invoke_tool(counting, {"name": name}, sandbox=box)).content
        for name in ("a", "a", "b", "a")
    ]
    assert seen == [1, 2, 1, 3]
    assert counter.counts == {"a": 3, "b": 1}
