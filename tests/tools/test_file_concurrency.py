from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.file_support import tools
from workspace_tools import ToolResult, invoke_tool

pytestmark = pytest.mark.anyio

EDITS = 20


async def test_concurrent_edits_of_one_file_all_land(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_bytes(b"".join(b"line%d = 0\n" % i for i in range(EDITS)))
    edit = tools(tmp_path)["edit_file"]
    results: list[ToolResult] = []

    async def one(i: int) -> None:
        arguments = {"path": "f.txt", "old_text": f"line{i} = 0", "new_text": f"line{i} = 1"}
        results.append(await invoke_tool(edit, arguments))

    async with anyio.create_task_group() as group:
        for i in range(EDITS):
            group.start_soon(one, i)
    assert [r.error for r in results] == [None] * EDITS
    assert path.read_bytes() == b"".join(b"line%d = 1\n" % i for i in range(EDITS))


async def test_concurrent_writes_of_new_files_in_one_new_directory(tmp_path: Path) -> None:
    write = tools(tmp_path)["write_file"]

    async def one(i: int) -> None:
        result = await invoke_tool(write, {"path": f"a/b/{i}.txt", "content": f"{i}\n"})
        assert result.error is None

    async with anyio.create_task_group() as group:
        for i in range(EDITS):
            group.start_soon(one, i)
    assert sorted(p.name for p in (tmp_path / "a/b").iterdir()) == sorted(
        f"{i}.txt" for i in range(EDITS)
    )
