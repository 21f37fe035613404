"""Every rule of invoke_tool, on asyncio and trio."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel, Field

from sandbox import Sandbox
from workspace_tools import (
    ErrorCode,
    ToolContext,
    ToolError,
    ToolPresentation,
    ToolSession,
    ToolUpdate,
    Workspace,
    invoke_tool,
    invoke_tool_sync,
    tool,
    tool_output,
    tool_output_content,
    workspace_tools,
)
from workspace_tools.adapters._common import invoke_call

pytestmark = pytest.mark.anyio


class EchoArgs(BaseModel):
    text: str = Field(description="text to echo")
    times: int = 1


def echo_tool(**kwargs: Any):
    def execute(args: EchoArgs, context: ToolContext) -> str:
        return args.text * args.times

    return tool(
        name="echo",
        description="Echo text.",
        parameters=EchoArgs,
        execute=execute,
        presentation=kwargs.pop(
            "presentation", ToolPresentation(label="Echo", icon="repeat", detail="static")
        ),
        **kwargs,
    )


# Rule 1: validation before execute.
async def test_invalid_arguments_never_run_execute() -> None:
    ran: list[bool] = []

    def execute(args: EchoArgs, context: ToolContext) -> str:
        ran.append(True)
        return "ran"

    t = tool(name="echo", description="", parameters=EchoArgs, execute=execute)
    result = await invoke_tool(t, {"text": 5, "times": "many"}, call_id="c1")
    assert ran == []
    assert result.error_code is ErrorCode.INVALID_ARGUMENTS
    assert result.is_error
    assert result.model_text() == (
        "Invalid arguments for echo:\n"
        "- text: Input should be a valid string\n"
        "- times: Input should be a valid integer, unable to parse string as an integer"
    )


async def test_missing_argument_names_the_field() -> None:
    result = await invoke_tool(echo_tool(), {})
    assert result.error_code is ErrorCode.INVALID_ARGUMENTS
    assert result.error == "Invalid arguments for echo:\n- text: Field required"


async def test_unknown_argument_is_invalid_and_named() -> None:
    # A misspelt argument must not be dropped silently and the call run with the default.
    result = await invoke_tool(echo_tool(), {"text": "ab", "tims": 2})
    assert result.error_code is ErrorCode.INVALID_ARGUMENTS
    assert result.error == (
        "Invalid arguments for echo:\n- tims: unknown argument (the arguments are: text, times)"
    )
    result = await invoke_tool(echo_tool(), {"txt": "ab"})
    assert result.error == (
        "Invalid arguments for echo:\n"
        "- text: Field required\n"
        "- txt: unknown argument (the arguments are: text, times)"
    )


async def test_a_model_that_allows_extra_fields_takes_them() -> None:
    class Open(BaseModel, extra="allow"):
        text: str

    def execute(args: Open, context: ToolContext) -> object:
        return args.model_dump()

    t = tool(name="open", description="", parameters=Open, execute=execute)
    result = await invoke_tool(t, {"text": "a", "more": 1})
    assert result.content == {"text": "a", "more": 1}


async def test_arguments_as_json_string_are_validated() -> None:
    result = await invoke_tool(echo_tool(), '{"text": "ab", "times": 2}')
    assert result.content == "abab"
    assert result.arguments == EchoArgs(text="ab", times=2)


async def test_malformed_json_arguments_are_invalid() -> None:
    result = await invoke_tool(echo_tool(), '{"text": ')
    assert result.error_code is ErrorCode.INVALID_ARGUMENTS
    assert result.error.startswith("Invalid arguments for echo: not valid JSON")


# Rule 2: presentation precedence and fallbacks.
async def test_result_presentation_overrides_tool_presentation() -> None:
    own = ToolPresentation(label="Echoed", icon="check", detail="3 chars")

    def execute(args: EchoArgs, context: ToolContext) -> Any:
        return tool_output(args.text, presentation=own)

    t = tool(
        name="echo",
        description="",
        parameters=EchoArgs,
        execute=execute,
        presentation=ToolPresentation(label="Echo"),
    )
    result = await invoke_tool(t, {"text": "abc"})
    assert result.presentation == own


async def test_presentation_function_of_arguments() -> None:
    t = echo_tool(presentation=lambda a: ToolPresentation(label="Echo", detail=a.text))
    result = await invoke_tool(t, {"text": "hi"})
    assert result.presentation == ToolPresentation(label="Echo", detail="hi")


async def test_failed_call_keeps_tool_presentation() -> None:
    def execute(args: EchoArgs, context: ToolContext) -> str:
        raise ToolError("no such thing", ErrorCode.NOT_FOUND)

    t = tool(
        name="echo",
        description="",
        parameters=EchoArgs,
        execute=execute,
        presentation=lambda a: ToolPresentation(label="Echo", detail=a.text),
    )
    result = await invoke_tool(t, {"text": "x"})
    assert result.presentation == ToolPresentation(label="Echo", detail="x")
    assert result.error_code is ErrorCode.NOT_FOUND


async def test_raising_presentation_function_leaves_none_and_call_succeeds() -> None:
    def broken(args: EchoArgs) -> ToolPresentation:
        raise RuntimeError("bad presentation")

    result = await invoke_tool(echo_tool(presentation=broken), {"text": "ok"})
    assert result.presentation is None
    assert result.error is None
    assert result.content == "ok"


# Rule 3: ToolOutput taken apart.
async def test_tool_output_split_model_text_has_no_details() -> None:
    def execute(args: EchoArgs, context: ToolContext) -> Any:
        return tool_output({"echo": args.text}, details={"secret_diff": "--- a\n+++ b"})

    t = tool(name="echo", description="", parameters=EchoArgs, execute=execute)
    result = await invoke_tool(t, {"text": "hi"})
    assert result.content == {"echo": "hi"}
    assert result.details == {"secret_diff": "--- a\n+++ b"}
    assert result.model_text() == '{"echo":"hi"}'


async def test_plain_return_value_is_content() -> None:
    result = await invoke_tool(echo_tool(), {"text": "ab", "times": 3})
    assert result.content == "ababab"
    assert result.details is None


def test_tool_output_content_of_any_value() -> None:
    assert tool_output_content(tool_output("c", details={"d": 1})) == "c"
    assert tool_output_content({"x": 1}) == {"x": 1}


# Rule 4: exceptions become results.
@pytest.mark.parametrize(
    ("exc", "message", "code"),
    [
        (
            ToolError("file not found: a.txt", ErrorCode.NOT_FOUND),
            "file not found: a.txt",
            ErrorCode.NOT_FOUND,
        ),
        (ToolError("plain"), "plain", ErrorCode.TOOL_ERROR),
        (ValueError("boom"), "boom", ErrorCode.TOOL_ERROR),
        (KeyError("k"), "'k'", ErrorCode.TOOL_ERROR),
        (RuntimeError(), "RuntimeError", ErrorCode.TOOL_ERROR),
    ],
)
async def test_exceptions_become_error_results(
    exc: Exception, message: str, code: ErrorCode
) -> None:
    def execute(args: EchoArgs, context: ToolContext) -> str:
        raise exc

    t = tool(name="echo", description="", parameters=EchoArgs, execute=execute)
    result = await invoke_tool(t, {"text": "x"})
    assert (result.error, result.error_code, result.model_text()) == (message, code, message)


async def test_async_execute_errors_become_results() -> None:
    async def execute(args: EchoArgs, context: ToolContext) -> str:
        await anyio.sleep(0)
        raise ToolError("ambiguous", ErrorCode.AMBIGUOUS_MATCH)

    t = tool(name="echo", description="", parameters=EchoArgs, execute=execute)
    result = await invoke_tool(t, {"text": "x"})
    assert result.error_code is ErrorCode.AMBIGUOUS_MATCH


class PathArgs(BaseModel):
    path: str


def _open_resolved(args: PathArgs, context: ToolContext) -> str:
    with open(context.workspace.resolve(args.path).real, "rb") as handle:
        return handle.read().decode()


@pytest.mark.parametrize(
    ("path", "message", "code"),
    [
        ("SRC/app.py", "File not found: SRC/app.py; did you mean 'src/App.py'?", "NOT_FOUND"),
        ("src/App.py:3", "File not found: src/App.py:3; did you mean 'src/App.py'?", "NOT_FOUND"),
        ("nope/x.py", "File not found: nope/x.py", "NOT_FOUND"),
        ("src", "src is a directory; use list_files to see its entries", "IS_A_DIRECTORY"),
    ],
)
async def test_an_os_error_of_a_custom_tool_names_the_file_as_results_do(
    tmp_path: Path, path: str, message: str, code: str
) -> None:
    # The README's custom tool opens ``resolve(path).real``, an absolute host path: the
    # model reads the path relative to the root, with the file it most likely meant.
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "App.py").write_text("x = 1\n")
    t = tool(
        name="cat",
        description="",
        parameters=PathArgs,
        execute=_open_resolved,
        workspace=Workspace(tmp_path),
        read_only=True,
    )
    result = await invoke_tool(t, {"path": path})
    assert (result.error, result.error_code) == (message, ErrorCode(code)), result
    assert str(tmp_path) not in result.model_text()


# Rule 5: timeout.
# A tool that would never finish by itself: the result can only come from the timeout. The
# outer deadline (far past the timeout) turns a broken timeout into a failure, not a hang.
async def test_timeout_on_async_sleeping_tool() -> None:
    events: list[str] = []

    async def execute(args: EchoArgs, context: ToolContext) -> str:
        events.append("started")
        try:
            await anyio.sleep_forever()
        finally:
            events.append("cancelled")
        return "late"

    t = tool(name="sleepy", description="", parameters=EchoArgs, execute=execute)
    with anyio.fail_after(60):
        result = await invoke_tool(t, {"text": "x"}, timeout=0.5)
    assert (result.error_code, result.error) == (
        ErrorCode.TOOL_TIMEOUT,
        "sleepy timed out after 0.5 s",
    )
    assert events == ["started", "cancelled"]


async def test_timeout_on_sync_sleeping_tool_uses_tool_timeout() -> None:
    release = threading.Event()
    returned = threading.Event()

    def execute(args: EchoArgs, context: ToolContext) -> str:
        release.wait(120)
        returned.set()
        return "late"

    t = tool(name="sleepy", description="", parameters=EchoArgs, execute=execute, timeout=0.3)
    try:
        with anyio.fail_after(60):
            result = await invoke_tool(t, {"text": "x"})
        # The caller got its result while the tool was still blocked.
        assert not returned.is_set()
        assert (result.error_code, result.error) == (
            ErrorCode.TOOL_TIMEOUT,
            "sleepy timed out after 0.3 s",
        )
    finally:
        release.set()
    assert returned.wait(30)


@pytest.mark.parametrize("timeout", [None, 30])
async def test_timeout_error_raised_by_the_tool_is_a_tool_error(timeout: float | None) -> None:
    # Only the call's own deadline is TOOL_TIMEOUT; a tool's network timeout is its failure.
    def execute(args: EchoArgs, context: ToolContext) -> str:
        raise TimeoutError("upstream did not answer")

    t = tool(name="fetchy", description="", parameters=EchoArgs, execute=execute)
    result = await invoke_tool(t, {"text": "x"}, timeout=timeout)
    assert (result.error_code, result.error) == (ErrorCode.TOOL_ERROR, "upstream did not answer")


async def test_timeout_stops_child_process() -> None:
    pids: list[int] = []

    async def execute(args: EchoArgs, context: ToolContext) -> str:
        async with await anyio.open_process(["sleep", "30"]) as process:
            pids.append(process.pid)
            await process.wait()
        return "done"

    t = tool(name="proc", description="", parameters=EchoArgs, execute=execute)
    # The timeout must strike after the process started: a host too loaded to start it
    # in time gets a longer one.
    for timeout in (0.3, 3, 30):
        result = await invoke_tool(t, {"text": "x"}, timeout=timeout)
        if pids:
            break
    assert pids, "the tool never started its process before the timeout"
    assert result.error_code is ErrorCode.TOOL_TIMEOUT
    with pytest.raises(ProcessLookupError):
        os.kill(pids[0], 0)


# Rule 6: updates.
async def test_updates_reach_callback_in_order() -> None:
    async def execute(args: EchoArgs, context: ToolContext) -> str:
        for i in range(3):
            context.update(content=f"step {i}", details={"i": i})
        return "done"

    seen: list[ToolUpdate] = []
    t = tool(name="steps", description="", parameters=EchoArgs, execute=execute)
    result = await invoke_tool(t, {"text": "x"}, call_id="c9", on_update=seen.append)
    assert result.content == "done"
    assert [(u.call_id, u.name, u.content, u.details) for u in seen] == [
        ("c9", "steps", "step 0", {"i": 0}),
        ("c9", "steps", "step 1", {"i": 1}),
        ("c9", "steps", "step 2", {"i": 2}),
    ]


async def test_update_from_worker_thread_is_delivered() -> None:
    def execute(args: EchoArgs, context: ToolContext) -> str:
        context.update(content="from thread")
        return "done"

    seen: list[ToolUpdate] = []
    t = tool(name="t", description="", parameters=EchoArgs, execute=execute)
    await invoke_tool(t, {"text": "x"}, on_update=seen.append)
    assert [u.content for u in seen] == ["from thread"]


async def test_update_from_thread_after_return_is_dropped() -> None:
    returned = threading.Event()
    fired = threading.Event()

    def execute(args: EchoArgs, context: ToolContext) -> str:
        def late() -> None:
            returned.wait(30)  # sends once the caller has the result
            context.update(content="too late")
            fired.set()

        threading.Thread(target=late, daemon=True).start()
        return "done"

    seen: list[ToolUpdate] = []
    t = tool(name="t", description="", parameters=EchoArgs, execute=execute)
    result = await invoke_tool(t, {"text": "x"}, on_update=seen.append)
    returned.set()
    assert result.content == "done"
    assert fired.wait(30)
    assert seen == []


async def test_update_after_timeout_is_dropped() -> None:
    release = threading.Event()
    sent = threading.Event()

    def execute(args: EchoArgs, context: ToolContext) -> str:
        release.wait(60)
        context.update(content="after timeout")
        sent.set()
        return "late"

    seen: list[ToolUpdate] = []
    t = tool(name="t", description="", parameters=EchoArgs, execute=execute)
    result = await invoke_tool(t, {"text": "x"}, on_update=seen.append, timeout=0.2)
    release.set()
    assert sent.wait(30)
    assert result.error_code is ErrorCode.TOOL_TIMEOUT
    assert seen == []


async def test_raising_callback_is_logged_and_call_succeeds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def execute(args: EchoArgs, context: ToolContext) -> str:
        context.update(content="progress")
        return "done"

    def on_update(update: ToolUpdate) -> None:
        raise RuntimeError("callback broke")

    t = tool(name="t", description="", parameters=EchoArgs, execute=execute)
    with caplog.at_level(logging.ERROR, logger="workspace_tools"):
        result = await invoke_tool(t, {"text": "x"}, on_update=on_update)
    assert result.content == "done"
    assert result.error is None
    records = [r for r in caplog.records if r.name == "workspace_tools"]
    assert len(records) == 1
    assert "on_update callback raised" in records[0].getMessage()


async def test_async_callback_is_refused_before_the_call_runs() -> None:
    # An async callback was called, never awaited: its updates were lost, with only a
    # RuntimeWarning about a coroutine never awaited.
    ran: list[bool] = []

    def execute(args: EchoArgs, context: ToolContext) -> str:
        ran.append(True)
        context.update(content="progress")
        return "done"

    async def on_update(update: ToolUpdate) -> None:
        raise AssertionError("never called")

    class AsyncCallable:
        async def __call__(self, update: ToolUpdate) -> None:
            raise AssertionError("never called")

    t = tool(name="t", description="", parameters=EchoArgs, execute=execute)
    expected = (
        "on_update must be a plain function, not an async one ({}): it is called with "
        "each update from the thread the tool runs in, never awaited; hand the update to "
        "your event loop from it (loop.call_soon_threadsafe, a queue)"
    )
    local = "test_async_callback_is_refused_before_the_call_runs.<locals>."
    name = local + "on_update"
    with pytest.raises(TypeError) as raised:
        await invoke_tool(t, {"text": "x"}, on_update=on_update)
    assert str(raised.value) == expected.format(name)
    with pytest.raises(TypeError) as raised:
        await invoke_tool(t, {"text": "x"}, on_update=AsyncCallable())
    assert str(raised.value) == expected.format(local + "AsyncCallable")
    with ToolSession([t]) as session:
        with pytest.raises(TypeError) as raised:
            await session.call("t", {"text": "x"}, on_update=on_update)
        assert str(raised.value) == expected.format(name)
        assert session.steps == []
    assert ran == []


async def test_update_without_callback_is_a_no_op() -> None:
    def execute(args: EchoArgs, context: ToolContext) -> str:
        context.update(content="nobody listens")
        return str(context.reports_progress)

    t = tool(name="t", description="", parameters=EchoArgs, execute=execute)
    result = await invoke_tool(t, {"text": "x"})
    assert result.content == "False"


# Rule 7: truncation.
async def test_truncates_model_text_with_marker_and_keeps_content() -> None:
    t = echo_tool()
    result = await invoke_tool(t, {"text": "a", "times": 100_000}, max_result_length=1000)
    text = result.model_text()
    marker = "\n[truncated: showing 953 of 100,000 characters]"
    assert text == "a" * 953 + marker
    assert len(text) == 1000
    assert len(result.content) == 100_000


async def test_default_limit_is_50000_characters() -> None:
    result = await invoke_tool(echo_tool(), {"text": "b", "times": 100_000})
    text = result.model_text()
    assert len(text) == 50_000
    assert text.endswith("\n[truncated: showing 49,950 of 100,000 characters]")


async def test_short_text_is_not_truncated() -> None:
    result = await invoke_tool(echo_tool(), {"text": "b", "times": 10}, max_result_length=10)
    assert result.model_text() == "b" * 10


# Rule 9: output schema.
class Sum(BaseModel):
    total: int


async def test_content_against_output_schema() -> None:
    def good(args: EchoArgs, context: ToolContext) -> Any:
        return tool_output({"total": 3}, details={"terms": [1, 2]})

    def bad(args: EchoArgs, context: ToolContext) -> Any:
        return {"total": "three"}

    ok = tool(name="sum", description="", parameters=EchoArgs, execute=good, output_schema=Sum)
    ko = tool(name="sum", description="", parameters=EchoArgs, execute=bad, output_schema=Sum)
    assert (await invoke_tool(ok, {"text": "x"})).content == {"total": 3}
    result = await invoke_tool(ko, {"text": "x"})
    assert result.error_code is ErrorCode.TOOL_ERROR
    assert result.error == (
        "sum returned content that does not match its output schema: "
        "total: Input should be a valid integer, unable to parse string as an integer"
    )


async def test_model_instance_content_is_dumped_to_json_value() -> None:
    def execute(args: EchoArgs, context: ToolContext) -> Any:
        return Sum(total=7)

    t = tool(name="sum", description="", parameters=EchoArgs, execute=execute, output_schema=Sum)
    result = await invoke_tool(t, {"text": "x"})
    assert result.content == {"total": 7}
    assert result.model_text() == '{"total":7}'


# Results serialise.
async def test_result_round_trips_through_json() -> None:
    result = await invoke_tool(echo_tool(), {"text": "hi"}, call_id="abc")
    data = result.model_dump(mode="json")
    assert data["call_id"] == "abc"
    assert data["arguments"] == {"text": "hi", "times": 1}
    assert data["content"] == "hi"
    assert data["presentation"] == {"label": "Echo", "icon": "repeat", "detail": "static"}
    assert data["error_code"] is None
    assert data["duration_ms"] >= 0


def test_invoke_tool_sync() -> None:
    result = invoke_tool_sync(echo_tool(), {"text": "x", "times": 2}, call_id="s")
    assert (result.call_id, result.content) == ("s", "xx")


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        (0, ""),
        (5, "aaaaa"),
        (60, "a" * 18 + "\n[truncated: showing 18 of 100 characters]"),
    ],
)
def test_truncation_never_exceeds_limit(limit: int, expected: str) -> None:
    from workspace_tools._result import truncate_text

    out = truncate_text("a" * 100, limit)
    assert len(out) <= limit
    assert out == expected


# One pipeline: every way to ask for a sandbox runs execute in its child, with no updates.
class PidArgs(BaseModel):
    pass


def _pid(args: PidArgs, context: ToolContext) -> dict[str, Any]:
    context.update("progress")
    return {"pid": os.getpid(), "reports_progress": context.reports_progress}


@pytest.fixture
def box() -> Iterator[Sandbox]:
    made = Sandbox(layers=False)
    yield made
    made.close()


@pytest.mark.parametrize("door", ["tool", "invoke_tool", "session", "invoke_call"])
async def test_every_sandbox_door_runs_execute_in_a_child(box: Sandbox, door: str) -> None:
    plain = tool(name="pid", description="", parameters=PidArgs, execute=_pid)
    updates: list[ToolUpdate] = []
    if door == "tool":
        boxed = tool(name="pid", description="", parameters=PidArgs, execute=_pid, sandbox=box)
        result = await invoke_tool(boxed, {}, on_update=updates.append)
    elif door == "invoke_tool":
        result = await invoke_tool(plain, {}, on_update=updates.append, sandbox=box)
    elif door == "session":
        result = await ToolSession([plain], sandbox=box).call("pid", {}, None, updates.append)
    else:
        result = await invoke_call(box)(plain, {}, "c1", updates.append)
    assert result.error is None, result.error
    assert result.content["pid"] != os.getpid(), result.content
    assert (result.content["reports_progress"], updates) == (False, [])


async def test_in_process_the_same_tool_reports_progress() -> None:
    plain = tool(name="pid", description="", parameters=PidArgs, execute=_pid)
    updates: list[ToolUpdate] = []
    result = await invoke_tool(plain, {}, on_update=updates.append)
    assert result.content == {"pid": os.getpid(), "reports_progress": True}
    assert [u.content for u in updates] == ["progress"]


async def test_a_tools_timeout_words_stand_when_the_calls_timeout_fires() -> None:
    # What the tool set on the context is the result, code and details included.
    seen: list[tuple[float | None, bool]] = []

    async def execute(args: EchoArgs, context: ToolContext) -> str:
        left = context.seconds_left(0.1)
        seen.append((context.timeout, left is not None and 0 < left <= 0.4))
        context.timeout_error = ToolError(
            "sleepy gave up waiting for the upstream", ErrorCode.TOOL_TIMEOUT, details={"n": 1}
        )
        await anyio.sleep_forever()
        return "late"

    t = tool(name="sleepy", description="", parameters=EchoArgs, execute=execute)
    with anyio.fail_after(60):
        result = await invoke_tool(t, {"text": "x"}, timeout=0.5)
    assert (result.error_code, result.error, result.details) == (
        ErrorCode.TOOL_TIMEOUT,
        "sleepy gave up waiting for the upstream",
        {"n": 1},
    )
    assert seen == [(0.5, True)]


async def test_a_context_without_a_timeout_has_no_time_left() -> None:
    def execute(args: EchoArgs, context: ToolContext) -> str:
        return f"{context.timeout} {context.deadline} {context.seconds_left(1)}"

    t = tool(name="plain", description="", parameters=EchoArgs, execute=execute)
    result = await invoke_tool(t, {"text": "x"})
    assert result.content == "None None None"


@pytest.mark.parametrize(
    ("arguments", "kind"),
    [
        ("[1]", "an array"),
        ([1], "an array"),
        ('"path"', "a string"),
        ("5", "a number"),
        ("2.5", "a number"),
        ("true", "a boolean"),
        ("null", "null"),
    ],
)
def test_arguments_that_are_json_but_no_object_are_named_so(
    tmp_path: Path, arguments: object, kind: str
) -> None:
    # A model reads this: JSON's names for the type, and the tool's arguments, never the
    # Python class pydantic would name.
    read_file = {t.name: t for t in workspace_tools(tmp_path)}["read_file"]
    result = invoke_tool_sync(read_file, arguments)
    assert result.error_code is ErrorCode.INVALID_ARGUMENTS
    assert result.error == (
        f"Invalid arguments for read_file: the arguments are {kind}, not an object of named "
        "arguments (the arguments are: path, offset, limit)"
    ), result.error


def test_an_argument_that_should_be_an_object_is_named_in_json_words(tmp_path: Path) -> None:
    edit_file = {t.name: t for t in workspace_tools(tmp_path)}["edit_file"]
    result = invoke_tool_sync(edit_file, {"path": "a.py", "edits": ["x", 5, None, [1]]})
    assert result.error_code is ErrorCode.INVALID_ARGUMENTS
    assert result.error == (
        "Invalid arguments for edit_file:\n"
        "- edits.0: Input should be an object, not a string\n"
        "- edits.1: Input should be an object, not a number\n"
        "- edits.2: Input should be an object, not null\n"
        "- edits.3: Input should be an object, not an array"
    ), result.error
