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


def test_a_call_carries_the_hashes_of_the_files_it_names_only(tmp_path: Path):
    # What crosses into the child does not grow with every file the workspace has seen.
    for i in range(40):
        (tmp_path / f"f{i}.txt").write_text(f"file {i}\n")
    (tmp_path / "link.txt").symlink_to("f3.txt")
    tools = {t.name: t for t in workspace_tools(tmp_path)}
    for i in range(40):
        assert anyio.run(invoke_tool, tools["read_file"], {"path": f"f{i}.txt"}).error is None
    workspace = tools["read_file"].workspace
    assert workspace is not None
    assert all(t.workspace is workspace and t.state is None for t in tools.values())
    whole = (workspace.file_states.snapshot(), None)
    assert len(whole[0]) == 40

    def shipped(name: str, **arguments: Any) -> dict[str, bytes]:
        tool_ = tools[name]
        args = tool_.parameters.model_validate(arguments)
        assert tool_.paths is not None
        hashes, scope = workspace.snapshot_files(workspace.named_files(tool_.paths(args)))
        assert set(hashes) <= set(scope)
        return hashes

    def key(name: str) -> str:
        return str((tmp_path / name).resolve())

    assert shipped("edit_file", path="f1.txt", old_text="a", new_text="b") == {
        key("f1.txt"): whole[0][key("f1.txt")]
    }
    assert shipped("write_file", path="link.txt", content="x") == {
        key("f3.txt"): whole[0][key("f3.txt")]
    }
    assert shipped("read_file", path="new.txt") == {}
    assert shipped("read_file", path="../outside.txt") == {}
    patch = (
        "*** Begin Patch\n*** Update File: f5.txt\n*** Move to: f6.txt\n@@\n-file 5\n+five\n"
        "*** Delete File: f7.txt\n*** End Patch\n"
    )
    assert set(shipped("apply_patch", patch=patch)) == {key("f5.txt"), key("f6.txt"), key("f7.txt")}
    assert shipped("apply_patch", patch="not a patch") == {}


async def test_sandboxed_patch_over_files_read_before_sees_their_staleness(
    tmp_path: Path, calls: Calls
):
    # The patch's files are the ones it names, a move's destination included.
    (tmp_path / "a.txt").write_text("one\n")
    (tmp_path / "b.txt").write_text("bee\n")
    for name in ("a.txt", "b.txt"):
        assert (await calls("read_file", path=name)).error is None
    (tmp_path / "b.txt").write_text("changed\n")  # outside the tools
    patch = (
        "*** Begin Patch\n*** Update File: a.txt\n*** Move to: b.txt\n"
        "@@\n-one\n+two\n*** End Patch\n"
    )
    result = await calls("apply_patch", patch=patch, allow_overwrite=True)
    assert result.error_code is ErrorCode.STALE_FILE, result.error
    assert (tmp_path / "a.txt").read_text() == "one\n"
    assert (tmp_path / "b.txt").read_text() == "changed\n"
    (tmp_path / "b.txt").write_text("bee\n")  # as it was read
    result = await calls("apply_patch", patch=patch, allow_overwrite=True)
    assert result.error is None, result.error
    assert not (tmp_path / "a.txt").exists()
    assert (tmp_path / "b.txt").read_text() == "two\n"
