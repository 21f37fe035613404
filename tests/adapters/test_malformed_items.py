"""Every adapter's parsing of a provider's item, given an item that is valid JSON but of the
wrong shape: no object at all, an id that is no string, an input or action that is no
object. Each gets the provider's own failed shape (checked against the SDK's types) naming
what is wrong, never an exception, and nothing runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from anthropic.types import ToolResultBlockParam
from openai.types.responses import ResponseInputItemParam

from tests.adapters._sdk import sdk_valid
from workspace_tools import ErrorCode, ToolError, ToolResult, invoke_tool_sync, workspace_tools
from workspace_tools.adapters.anthropic_bash import call_anthropic_bash
from workspace_tools.adapters.openai_apply_patch import (
    apply_patch_call_arguments,
    custom_tool_call_arguments,
    invoke_apply_patch_call,
    invoke_custom_tool_call,
)
from workspace_tools.adapters.openai_shell import call_local_shell, call_openai_shell

# Valid JSON that is no object, as a client's decoder hands it over, with the words each
# refusal uses for it: its JSON type as a sentence says it, for the item as for a field.
NOT_OBJECTS = [
    ([1, 2], "an array", "an array"),
    ("[1, 2]", "a string", "a string"),
    (7, "a number", "a number"),
    (2.5, "a number", "a number"),
    (True, "a boolean", "a boolean"),
    (None, "null", "null"),
]


class Recorder:
    """A call function that records the calls it is asked to run and runs none."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def __call__(self, tool: Any, arguments: Any, call_id: str, on_update: Any) -> Any:
        self.calls.append((call_id, arguments))
        raise AssertionError(f"ran a call with {arguments!r}")


def run(function: Any, *args: Any) -> dict[str, Any]:
    async def bounded() -> dict[str, Any]:
        with anyio.fail_after(30):
            return await function(*args)  # type: ignore[no-any-return]

    return anyio.run(bounded)


def bash_error(use_id: str, text: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": use_id, "content": text, "is_error": True}


@pytest.mark.parametrize(("value", "outer", "kind"), NOT_OBJECTS)
def test_a_bash_tool_use_of_the_wrong_shape_is_an_error_result(
    value: Any, outer: str, kind: str
) -> None:
    recorder = Recorder()
    cases = [
        (value, bash_error("", f"The bash tool_use is {outer}, not an object with id and input")),
        (
            {"id": "t1", "input": value},
            bash_error(
                "t1", f"The bash tool_use's input is {kind}, not an object with command or restart"
            ),
        ),
        (
            {"id": value, "input": {"command": "echo hi"}},
            bash_error("", f"The bash tool_use's id is {kind}, not a string"),
        ),
    ]
    if value is None:  # an absent input is no command: the shell tool says so
        cases = [cases[0], (cases[2][0], bash_error("", "The bash tool_use has no id"))]
    elif isinstance(value, str):  # a string is an id
        cases = cases[:2]
    for tool_use, expected in cases:
        block = run(call_anthropic_bash, tool_use, None, recorder)
        assert block == expected, tool_use
        assert sdk_valid(ToolResultBlockParam, block)
    assert recorder.calls == []


def shell_refusal(call_id: str, text: str) -> dict[str, Any]:
    outcome = {"type": "exit", "exit_code": 126}
    return {
        "type": "shell_call_output",
        "call_id": call_id,
        "output": [{"stdout": "", "stderr": text, "outcome": outcome}],
    }


@pytest.mark.parametrize(("value", "outer", "kind"), NOT_OBJECTS)
def test_a_shell_call_of_the_wrong_shape_is_a_failed_output(
    value: Any, outer: str, kind: str
) -> None:
    recorder = Recorder()
    cases = [
        (
            value,
            shell_refusal("", f"The shell_call is {outer}, not an object with call_id and action"),
        ),
        (
            {"call_id": value, "action": {"commands": ["echo hi"]}},
            shell_refusal("", f"The shell_call's call_id is {kind}, not a string"),
        ),
        (
            {"call_id": "c1", "action": value},
            shell_refusal("c1", f"The shell_call's action is {kind}, not an object with commands"),
        ),
    ]
    if value is None:
        cases = [
            cases[0],
            (cases[1][0], shell_refusal("", "The shell_call has no call_id")),
            (
                cases[2][0],
                shell_refusal(
                    "c1", "Invalid arguments for shell_call:\n- commands: Field required"
                ),
            ),
        ]
    if isinstance(value, str):  # a string is a call_id
        del cases[1]
    for item, expected in cases:
        answer = run(call_openai_shell, item, None, recorder)
        assert answer == expected, item
        assert sdk_valid(ResponseInputItemParam, answer)
    assert recorder.calls == []


def local_refusal(call_id: str, text: str) -> dict[str, Any]:
    payload = {"output": text, "metadata": {"exit_code": 126, "duration_seconds": 0.0}}
    return {
        "type": "local_shell_call_output",
        "id": call_id,
        "output": json.dumps(payload),
        "status": "completed",
    }


@pytest.mark.parametrize(("value", "outer", "kind"), NOT_OBJECTS)
def test_a_local_shell_call_of_the_wrong_shape_is_an_output(
    tmp_path: Path, value: Any, outer: str, kind: str
) -> None:
    recorder = Recorder()
    cases = [
        (
            value,
            local_refusal(
                "", f"The local_shell_call is {outer}, not an object with call_id and action"
            ),
        ),
        (
            {"call_id": value, "action": {"type": "exec", "command": ["ls"]}},
            local_refusal("", f"The local_shell_call's call_id is {kind}, not a string"),
        ),
        (
            {"call_id": "c1", "action": value},
            local_refusal(
                "c1", f"The local_shell_call's action is {kind}, not an object with command"
            ),
        ),
    ]
    if value is None:
        cases = [
            cases[0],
            (cases[1][0], local_refusal("", "The local_shell_call has no call_id")),
            (
                cases[2][0],
                local_refusal(
                    "c1", "Invalid arguments for local_shell_call:\n- command: Field required"
                ),
            ),
        ]
    if isinstance(value, str):  # a string is a call_id
        del cases[1]
    for item, expected in cases:
        answer = run(call_local_shell, item, None, tmp_path, recorder)
        assert answer == expected, item
        assert sdk_valid(ResponseInputItemParam, answer)
    assert recorder.calls == []


@pytest.mark.parametrize(("value", "outer", "kind"), NOT_OBJECTS)
def test_an_apply_patch_call_of_the_wrong_shape_is_a_failed_output(
    value: Any, outer: str, kind: str
) -> None:
    recorder = Recorder()
    operation = {"type": "delete_file", "path": "x.txt"}
    cases = [
        (value, "", f"The apply_patch_call is {outer}, not an object with call_id and operation"),
        (
            {"call_id": value, "operation": operation},
            "",
            f"The apply_patch_call's call_id is {kind}, not a string",
        ),
    ]
    if value is None:
        cases[1] = (cases[1][0], "", "The apply_patch_call has no call_id")
    elif isinstance(value, str):  # a string is a call_id
        del cases[1]
    for item, call_id, text in cases:
        answer = run(invoke_apply_patch_call, None, item, recorder)
        expected = {
            "type": "apply_patch_call_output",
            "call_id": call_id,
            "status": "failed",
            "output": text,
        }
        assert answer == expected, item
        assert sdk_valid(ResponseInputItemParam, answer)
    with pytest.raises(ToolError) as caught:
        apply_patch_call_arguments(value)
    assert (caught.value.code, caught.value.message) == (ErrorCode.INVALID_ARGUMENTS, cases[0][2])
    assert recorder.calls == []


@pytest.mark.parametrize(("value", "outer", "kind"), NOT_OBJECTS)
def test_a_custom_tool_call_of_the_wrong_shape_is_an_error_output(
    value: Any, outer: str, kind: str
) -> None:
    recorder = Recorder()
    not_text = (
        f"The custom_tool_call's input is {kind}, not text: send the whole patch, from "
        "*** Begin Patch to *** End Patch, as the input"
    )
    if value is None:
        not_text = "The custom_tool_call has no input"
    cases = [(value, "", f"The custom_tool_call is {outer}, not an object with call_id and input")]
    if not isinstance(value, str):  # a string is the patch, and a call_id
        cases.append(
            ({"type": "custom_tool_call", "call_id": "ct1", "input": value}, "ct1", not_text)
        )
        no_id = f"The custom_tool_call's call_id is {kind}, not a string"
        if value is None:
            no_id = "The custom_tool_call has no call_id"
        cases.append(({"call_id": value, "input": "*** Begin Patch\n*** End Patch\n"}, "", no_id))
    for item, call_id, text in cases:
        answer = run(invoke_custom_tool_call, None, item, recorder)
        expected = {
            "type": "custom_tool_call_output",
            "call_id": call_id,
            "output": f"Error: {text}",
        }
        assert answer == expected, item
        assert sdk_valid(ResponseInputItemParam, answer)
    for item, _, text in cases[:2]:
        with pytest.raises(ToolError) as caught:
            custom_tool_call_arguments(item)
        assert (caught.value.code, caught.value.message) == (ErrorCode.INVALID_ARGUMENTS, text)
    assert recorder.calls == []


def test_a_well_formed_custom_tool_call_runs_the_patch(tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("a\n")
    patcher = next(t for t in workspace_tools(tmp_path) if t.name == "apply_patch")
    item = {
        "type": "custom_tool_call",
        "call_id": "ct1",
        "name": "apply_patch",
        "input": "*** Begin Patch\n*** Update File: x.txt\n@@\n-a\n+b\n*** End Patch\n",
    }
    answer = run(invoke_custom_tool_call, patcher, item)
    assert answer == {
        "type": "custom_tool_call_output",
        "call_id": "ct1",
        "output": "Success. Updated the following files:\nM x.txt",
    }
    assert (tmp_path / "x.txt").read_text() == "b\n"


def test_a_text_editor_input_of_the_wrong_shape_is_invalid_arguments(tmp_path: Path) -> None:
    from workspace_tools.adapters.anthropic_text_editor import text_editor_tool

    editor = text_editor_tool(tmp_path)
    for value, _, _ in NOT_OBJECTS:
        if value is None:
            continue  # no input: the missing fields are named
        result: ToolResult = invoke_tool_sync(editor, value, call_id="t1")
        assert result.error_code == ErrorCode.INVALID_ARGUMENTS, (value, result.error)
