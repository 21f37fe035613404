"""Arguments of any size a model or a client may send: integers past 64 bits, names and
paths of 100 KB. Each call answers, fast, with a message of bounded size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from workspace_tools import ErrorCode, ToolSession, Workspace, invoke_tool, workspace_tools
from workspace_tools._errors import PATH_ECHO_LIMIT

pytestmark = pytest.mark.anyio

HUGE = 10**30


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "a.txt").write_text("one\ntwo\nthree\n")
    return tmp_path


async def call(root: Path, name: str, **args: object) -> Any:
    tool = next(t for t in workspace_tools(root) if t.name == name)
    with anyio.fail_after(60):
        return await invoke_tool(tool, args, timeout=30)


@pytest.mark.parametrize(
    "name, args, text",
    [
        ("grep", {"pattern": "two", "limit": HUGE}, "a.txt:2:two"),
        ("grep", {"pattern": "two", "limit": 2**63}, "a.txt:2:two"),
        ("grep", {"pattern": "two", "context": HUGE}, "a.txt-1-one\na.txt:2:two\na.txt-3-three"),
        ("grep", {"pattern": "two", "output_mode": "count", "limit": HUGE}, "a.txt:1"),
        ("read_file", {"path": "a.txt", "offset": 2, "limit": HUGE}, "     2\ttwo\n     3\tthree"),
        ("list_files", {"limit": HUGE}, "a.txt"),
        ("glob", {"pattern": "*", "limit": HUGE}, "a.txt"),
    ],
)
async def test_integers_past_64_bits_answer_as_no_limit(
    root: Path, name: str, args: dict[str, object], text: str
) -> None:
    result = await call(root, name, **args)
    assert result.error is None, result.error
    assert result.model_text() == text


async def test_a_past_the_end_offset_of_any_size_is_named(root: Path) -> None:
    result = await call(root, "read_file", path="a.txt", offset=HUGE)
    assert (result.error_code, result.error) == (
        ErrorCode.INVALID_ARGUMENTS,
        f"offset {HUGE} is past the end of a.txt, which has 3 lines",
    )


async def test_a_100kb_path_is_clipped_in_the_error(root: Path) -> None:
    result = await call(root, "read_file", path="/" + "x" * 100_000)
    assert result.error_code == ErrorCode.OUTSIDE_WORKSPACE
    assert result.error == (
        f"Path '/{'x' * (PATH_ECHO_LIMIT - 1)}…' (100,001 characters) is outside the "
        "workspace root; use a path inside it"
    )
    deep = await call(root, "read_file", path="d/" * 50_000 + "f")
    assert deep.error_code in (ErrorCode.NOT_FOUND, ErrorCode.INVALID_ARGUMENTS)
    assert len(deep.error) < PATH_ECHO_LIMIT + 300, deep.error[:200]
    assert "(100,001 characters)" in deep.error


async def test_unknown_argument_names_are_clipped_and_counted(root: Path) -> None:
    args = {"path": "a.txt", "b" * 100_000: 1, **{f"extra{i}": i for i in range(100)}}
    result = await call(root, "read_file", **args)
    assert result.error_code == ErrorCode.INVALID_ARGUMENTS
    lines = result.error.splitlines()
    assert lines[0] == "Invalid arguments for read_file:"
    assert lines[1].startswith(f"- {'b' * 200}… (100,000 characters): unknown argument")
    assert lines[-1] == "- … and 81 more unknown arguments"
    assert len(lines) == 22


async def test_a_session_clips_an_unknown_tool_name(root: Path) -> None:
    workspace = Workspace(root)
    session = ToolSession(workspace_tools(workspace), workspace=workspace)
    with anyio.fail_after(60):
        result = await session.call("z" * 100_000, {})
    assert result.error_code == ErrorCode.INVALID_ARGUMENTS
    assert result.error is not None
    assert result.error.startswith(f"Unknown tool '{'z' * 200}…' (100,000 characters); ")
