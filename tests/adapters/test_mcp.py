"""The MCP server, driven by the official Python client over stdio against a real subprocess."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from tests.adapters._custom_server import PIXEL_PNG
from workspace_tools import __version__, workspace_tools
from workspace_tools.tools import TOOL_NAMES

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]
CUSTOM_SERVER = Path(__file__).with_name("_custom_server.py")
NS = "dev.agent-workspace-tools/"

PRESENTATIONS = {
    "read_file": ("Read file", "file-text"),
    "write_file": ("Write file", "file-plus"),
    "edit_file": ("Edit file", "file-pen"),
    "list_files": ("List files", "folder"),
    "glob": ("Find files", "search"),
    "grep": ("Search files", "text-search"),
    "run_command": ("Run command", "terminal"),
    "apply_patch": ("Apply patch", "file-diff"),
}
READ_ONLY = {"read_file", "list_files", "glob", "grep"}


@asynccontextmanager
async def connect(
    *args: str, notifications: list[Any] | None = None
) -> AsyncIterator[ClientSession]:
    """A client session with a server started as ``python *args`` from the repository."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    params = StdioServerParameters(command=sys.executable, args=list(args), env=env, cwd=REPO)

    async def on_message(message: Any) -> None:
        if notifications is not None and isinstance(message, types.ServerNotification):
            notifications.append(message.root)

    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, message_handler=on_message) as session,
    ):
        await session.initialize()
        yield session


def workspace_server(root: Path, *flags: str) -> tuple[str, ...]:
    return ("-m", "workspace_tools", "mcp", "--root", str(root), *flags)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    # The subprocess server always runs on asyncio; the client's backend is not under test.
    # The server on both backends is covered in-process by test_mcp_in_memory.py.
    return "asyncio"


# One server per module for the tests that only read from it (each start costs most of a
# second); a test that writes, needs flags or watches every notification starts its own.
@pytest.fixture(scope="module")
async def shared_workspace(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[Path, ClientSession]]:
    """A server of the default tools on a root holding ``notes.txt`` ("alpha\nbeta\n"),
    for calls of read-only tools and of invalid ones only."""
    root = tmp_path_factory.mktemp("shared-root")
    (root / "notes.txt").write_text("alpha\nbeta\n")
    async with connect(*workspace_server(root)) as session:
        yield root, session


@pytest.fixture(scope="module")
async def custom_session() -> AsyncIterator[ClientSession]:
    """The custom server, whose tools keep no state between calls."""
    async with connect(str(CUSTOM_SERVER)) as session:
        yield session


async def test_server_introduces_itself_with_this_package_version(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    params = StdioServerParameters(
        command=sys.executable, args=list(workspace_server(tmp_path)), env=env, cwd=REPO
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        info = (await session.initialize()).serverInfo
    assert (info.name, info.version) == (
        "workspace-tools",
        __version__,
    )


async def test_lists_the_seven_tools_with_schemas_titles_and_hints(
    shared_workspace: tuple[Path, ClientSession],
) -> None:
    root, session = shared_workspace
    listed = (await session.list_tools()).tools
    expected = {t.name: t for t in workspace_tools(root)}
    assert [t.name for t in listed] == list(TOOL_NAMES)
    for item in listed:
        label, icon = PRESENTATIONS[item.name]
        assert item.title == label
        assert item.description == expected[item.name].description
        assert item.inputSchema == expected[item.name].input_schema()
        assert item.outputSchema == expected[item.name].output_json_schema()
        assert item.meta == {NS + "presentation": {"label": label, "icon": icon}}
        assert item.annotations == types.ToolAnnotations(
            title=label,
            readOnlyHint=item.name in READ_ONLY,
            destructiveHint=item.name not in READ_ONLY,
        )


async def test_read_only_serves_only_read_only_tools(tmp_path: Path) -> None:
    async with connect(*workspace_server(tmp_path, "--read-only")) as session:
        listed = (await session.list_tools()).tools
        refused = await session.call_tool("write_file", {"path": "a.txt", "content": "x"})
    assert [t.name for t in listed] == [n for n in TOOL_NAMES if n in READ_ONLY]
    assert refused.isError is True
    assert not (tmp_path / "a.txt").exists()


async def test_invalid_arguments_are_an_error_result_with_code(
    shared_workspace: tuple[Path, ClientSession],
) -> None:
    _, session = shared_workspace
    result = await session.call_tool("read_file", {"offset": 0})
    assert result.isError is True
    assert result.content == [
        types.TextContent(
            type="text",
            text="Invalid arguments for read_file:\n"
            "- path: Field required\n"
            "- offset: Input should be greater than or equal to 1",
        )
    ]
    assert result.structuredContent is None
    assert result.meta == {NS + "errorCode": "INVALID_ARGUMENTS"}


async def test_unknown_tool_is_an_error_result_naming_the_tools(tmp_path: Path) -> None:
    async with connect(*workspace_server(tmp_path, "--read-only")) as session:
        result = await session.call_tool("delete_everything", {})
    assert result.isError is True
    assert result.content == [
        types.TextContent(
            type="text",
            text="Unknown tool 'delete_everything'; available: read_file, list_files, glob, grep",
        )
    ]


@pytest.mark.parametrize("tool_name", ["count_sync", "count_async"])
async def test_progress_notifications_follow_updates_in_order(
    custom_session: ClientSession, tool_name: str
) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    result = await custom_session.call_tool(tool_name, {"n": 3}, progress_callback=on_progress)
    assert seen == [(1.0, None, "line 1"), (2.0, None, "line 2"), (3.0, None, "line 3")]
    assert result.isError is False
    assert result.structuredContent == {"total": 3}


async def test_progress_reaches_the_client_while_the_call_runs(
    custom_session: ClientSession, tmp_path: Path
) -> None:
    flag = tmp_path / "seen"

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        flag.write_text(message or "")

    result = await custom_session.call_tool(
        "wait_for_file", {"path": str(flag)}, progress_callback=on_progress
    )
    assert result.content == [types.TextContent(type="text", text="seen")]
    assert flag.read_text() == "waiting"


async def test_no_progress_without_a_progress_token() -> None:
    notifications: list[Any] = []
    async with connect(str(CUSTOM_SERVER), notifications=notifications) as session:
        result = await session.call_tool("count_sync", {"n": 3})
    assert result.isError is False
    assert [n for n in notifications if isinstance(n, types.ProgressNotification)] == []


async def test_structured_content_matches_the_output_schema_and_meta_stays_apart(
    custom_session: ClientSession,
) -> None:
    listed = {t.name: t for t in (await custom_session.list_tools()).tools}
    result = await custom_session.call_tool("count_sync", {"n": 2})
    schema = listed["count_sync"].outputSchema
    assert schema == {
        "properties": {"total": {"title": "Total", "type": "integer"}},
        "required": ["total"],
        "title": "CountOut",
        "type": "object",
    }
    jsonschema.validate(result.structuredContent, schema)
    assert result.structuredContent == {"total": 2}
    assert result.content == [types.TextContent(type="text", text='{"total":2}')]
    assert result.meta == {
        NS + "details": {"n": 2},
        NS + "presentation": {"label": "Count", "icon": "hash", "detail": "2"},
    }
    assert listed["count_sync"].title == "Count"
    assert listed["count_async"].outputSchema == schema


async def test_tool_error_sets_is_error_text_and_code(custom_session: ClientSession) -> None:
    result = await custom_session.call_tool("fail", {})
    assert result.isError is True
    assert result.content == [types.TextContent(type="text", text="no such thing")]
    assert result.structuredContent is None
    assert result.meta == {NS + "details": {"looked_in": "shelf"}, NS + "errorCode": "NOT_FOUND"}


async def test_content_its_schema_denies_is_an_error_not_structured_content(
    custom_session: ClientSession,
) -> None:
    result = await custom_session.call_tool("wrong_shape", {})
    assert result.isError is True
    assert result.structuredContent is None
    assert result.meta == {NS + "errorCode": "TOOL_ERROR"}


async def test_images_travel_as_image_blocks(custom_session: ClientSession) -> None:
    result = await custom_session.call_tool("picture", {})
    assert result.content == [
        types.TextContent(type="text", text="A pixel:"),
        types.ImageContent(
            type="image", data=base64.b64encode(PIXEL_PNG).decode(), mimeType="image/png"
        ),
    ]
    assert result.structuredContent is None


# --- the real tools (run once they are implemented) -------------------------------------


REAL_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("read_file", {"path": "notes.txt"}, "notes.txt"),
    ("write_file", {"path": "new.txt", "content": "one\n"}, "new.txt"),
    ("edit_file", {"path": "notes.txt", "old_text": "beta", "new_text": "gamma"}, "notes.txt"),
    ("list_files", {"path": "."}, "."),
    ("glob", {"pattern": "*.txt"}, "*.txt"),
    ("grep", {"pattern": "beta"}, "beta"),
    ("run_command", {"command": "echo hi"}, "echo hi"),
    (
        "apply_patch",
        {
            "patch": "*** Begin Patch\n*** Update File: notes.txt\n@@\n alpha\n-beta\n+delta\n"
            "*** Add File: more.txt\n+two\n*** End Patch\n"
        },
        "notes.txt, more.txt",
    ),
]
AFTER = {
    "write_file": {"notes.txt": "alpha\nbeta\n", "new.txt": "one\n"},
    "edit_file": {"notes.txt": "alpha\ngamma\n"},
    "apply_patch": {"notes.txt": "alpha\ndelta\n", "more.txt": "two\n"},
}


@pytest.mark.parametrize(
    ("name", "arguments", "detail"),
    [pytest.param(*call, id=call[0]) for call in REAL_CALLS],
)
async def test_calls_each_real_tool(
    tmp_path: Path,
    shared_workspace: tuple[Path, ClientSession],
    name: str,
    arguments: dict[str, Any],
    detail: str,
) -> None:
    if name in READ_ONLY:  # changes nothing: the shared server will do
        root, session = shared_workspace
        listed = {t.name: t for t in (await session.list_tools()).tools}
        result = await session.call_tool(name, arguments)
    else:
        root = tmp_path
        (root / "notes.txt").write_text("alpha\nbeta\n")
        async with connect(*workspace_server(root)) as session:
            listed = {t.name: t for t in (await session.list_tools()).tools}
            result = await session.call_tool(name, arguments)
    assert result.isError is False, result.content
    label, icon = PRESENTATIONS[name]
    assert result.meta is not None
    assert result.meta[NS + "presentation"] == {"label": label, "icon": icon, "detail": detail}
    text = "".join(b.text for b in result.content if isinstance(b, types.TextContent))
    assert NS not in text
    schema = listed[name].outputSchema
    if schema is not None:
        jsonschema.validate(result.structuredContent, schema)
    if result.structuredContent is not None:
        assert json.loads(text) == result.structuredContent
    for path, content in AFTER.get(name, {"notes.txt": "alpha\nbeta\n"}).items():
        assert (root / path).read_text() == content


@pytest.mark.parametrize(
    ("path", "code"),
    [("missing.txt", "NOT_FOUND"), ("../outside.txt", "OUTSIDE_WORKSPACE")],
)
async def test_bad_path_is_an_error_with_its_code(
    shared_workspace: tuple[Path, ClientSession], path: str, code: str
) -> None:
    _, session = shared_workspace
    result = await session.call_tool("read_file", {"path": path})
    assert result.isError is True
    assert result.meta is not None
    assert result.meta[NS + "errorCode"] == code
    assert result.structuredContent is None


async def test_slow_command_reports_progress(tmp_path: Path) -> None:
    messages: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    command = "for i in 1 2 3; do echo step-$i; sleep 0.2; done"
    async with connect(*workspace_server(tmp_path)) as session:
        result = await session.call_tool(
            "run_command", {"command": command}, progress_callback=on_progress
        )
    assert result.isError is False
    streamed = "\n".join(messages)
    assert [line for line in streamed.splitlines() if line.startswith("step-")] == [
        "step-1",
        "step-2",
        "step-3",
    ]


def _sandbox_available() -> bool:
    try:
        from sandbox import Sandbox  # type: ignore[attr-defined]

        Sandbox()
    except Exception:
        return False
    return True


@pytest.mark.skipif(not _sandbox_available(), reason="the sandbox is not available here")
async def test_sandboxed_server_runs_commands_without_progress(tmp_path: Path) -> None:
    messages: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message)

    async with connect(*workspace_server(tmp_path, "--sandbox")) as session:
        result = await session.call_tool(
            "run_command", {"command": "echo inside"}, progress_callback=on_progress
        )
    assert result.isError is False, result.content
    assert result.structuredContent is not None
    assert result.structuredContent["exit_code"] == 0
    assert result.structuredContent["stdout"] == "inside\n"
    assert messages == []


async def test_policy_flags_run_calls_through_a_session(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    flags = ("--deny", "run_command:command~\\brm\\b", "--ask", "write_file")
    async with connect(*workspace_server(tmp_path, *flags)) as session:
        removed = await session.call_tool("run_command", {"command": "rm a.txt"})
        listed = await session.call_tool("run_command", {"command": "ls"})
        # This client declared no elicitation capability, so nobody can be asked.
        written = await session.call_tool("write_file", {"path": "b.txt", "content": "b\n"})
    assert removed.isError
    assert removed.content[0].text == (
        "Not run: policy rule '--deny run_command:command~\\brm\\b' denies this run_command call."
    )
    assert not listed.isError
    assert listed.structuredContent["stdout"] == "a.txt\n"
    assert written.isError
    assert written.content[0].text == (
        "Not run: the user declined this write_file call: "
        "the MCP client cannot ask the user (no elicitation)"
    )
    assert (tmp_path / "a.txt").read_text() == "alpha\n"
    assert not (tmp_path / "b.txt").exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--deny", ":x"], "workspace-tools mcp: error: policy flag ':x' names no tool "
         "(use '*' for every tool)"),
        (["--deny", "run_command:command~("], "workspace-tools mcp: error: policy condition "
         "'command~(': invalid regular expression '(': missing ), unterminated subpattern "
         "at position 0"),
        (["--deny", "run_comand"], "workspace-tools: error: policy rule '--deny run_comand' "
         "names an unknown tool run_comand; the tools are: " + ", ".join(TOOL_NAMES)),
        (["--deny", "run_command:cmd~rm"], "workspace-tools: error: policy rule "
         "'--deny run_command:cmd~rm' tests argument 'cmd', which its tools do not take; "
         "they take: command, cwd, timeout"),
        # Rules and regexes are quoted as typed: a backslash is not doubled.
        (["--read-only", "--deny", "run_command:command~\\brm\\b"], "workspace-tools: error: "
         "policy rule '--deny run_command:command~\\brm\\b' names an unknown tool "
         "run_command; the tools are: " + ", ".join(n for n in TOOL_NAMES if n in READ_ONLY)),
        (["--deny", "run_command:command~\\b("], "workspace-tools mcp: error: policy "
         "condition 'command~\\b(': invalid regular expression '\\b(': missing ), "
         "unterminated subpattern at position 2"),
        (["--deny", "\\x:command~x"], "workspace-tools: error: policy rule "
         "'--deny \\x:command~x' names an unknown tool \\x; the tools are: "
         + ", ".join(TOOL_NAMES)),
    ],
)  # fmt: skip
def test_bad_policy_flag_is_a_one_line_usage_error(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "workspace_tools", "mcp", "--root", str(tmp_path), *flags],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert (done.returncode, done.stderr) == (2, message + "\n")
