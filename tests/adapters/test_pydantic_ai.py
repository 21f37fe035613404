"""The pydantic-ai adapter: whole agent loops offline, scripted with FunctionModel."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_core import to_jsonable_python

from tests.adapters._custom_server import TOOLS
from tests.adapters._scripted import scripted, tool_returns
from workspace_tools import ToolPresentation, ToolUpdate, workspace_tools
from workspace_tools._history import ToolCallMetadata
from workspace_tools.adapters.pydantic_ai import workspace_toolset
from workspace_tools.cli._demo import sample_project

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # pydantic-ai runs agents on asyncio only


async def test_agent_gets_tool_definitions_with_schemas() -> None:
    captured: list[AgentInfo] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        captured.append(info)
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(respond), toolsets=[workspace_toolset(TOOLS)])
    await agent.run("hi")
    definitions = {d.name: d for d in captured[0].function_tools}
    assert list(definitions) == [t.name for t in TOOLS]
    for item in TOOLS:
        assert definitions[item.name].description == item.description
        assert definitions[item.name].parameters_json_schema == item.input_schema()
        assert definitions[item.name].sequential is (not item.read_only)


async def test_results_keep_model_text_apart_from_metadata() -> None:
    updates: list[ToolUpdate] = []
    agent = Agent(
        scripted([("count_sync", {"n": 2})]),
        toolsets=[workspace_toolset(TOOLS, on_update=updates.append)],
    )
    run = await agent.run("count")
    [part] = tool_returns(run.all_messages())
    assert part.tool_call_id == "call_0"
    assert part.content == '{"total":2}'
    assert part.outcome == "success"
    assert isinstance(part.metadata, ToolCallMetadata)
    assert part.metadata.details == {"n": 2}
    assert part.metadata.presentation == ToolPresentation(label="Count", icon="hash", detail="2")
    assert [(u.call_id, u.content) for u in updates] == [("call_0", "line 1"), ("call_0", "line 2")]
    assert run.output == "done"


async def test_tool_error_is_a_failed_return_the_model_reads() -> None:
    agent = Agent(scripted([("fail", {})]), toolsets=[workspace_toolset(TOOLS)])
    run = await agent.run("fail")
    [part] = tool_returns(run.all_messages())
    assert part.outcome == "failed"
    assert part.content == "no such thing"
    assert run.output == "done"


async def test_invalid_arguments_ask_the_model_to_retry() -> None:
    agent = Agent(
        scripted([("count_sync", {"n": "many"}), ("count_sync", {"n": 1})]),
        toolsets=[workspace_toolset(TOOLS)],
    )
    run = await agent.run("count")
    retried, returned = [
        part
        for m in run.all_messages()
        if isinstance(m, ModelRequest)
        for part in m.parts
        if isinstance(part, (ToolReturnPart, RetryPromptPart))
    ]
    # Recent pydantic-ai records a retry as a ToolReturnPart with outcome "retried"; the
    # releases still installable on Python 3.10 as a RetryPromptPart. Both reach the model.
    assert retried.tool_call_id == "call_0"
    assert isinstance(retried, RetryPromptPart) or retried.outcome == "retried"
    assert retried.content == (
        "Invalid arguments for count_sync:\n"
        "- n: Input should be a valid integer, unable to parse string as an integer"
    )
    assert (returned.tool_call_id, returned.outcome) == ("call_1", "success")
    assert returned.content == '{"total":1}'


async def test_agent_reads_edits_and_runs_the_tests_on_the_sample_project(
    tmp_path: Path,
) -> None:
    root = tmp_path / "project"
    shutil.copytree(sample_project(), root)
    calls = [
        ("read_file", {"path": "inventory/stock.py"}),
        (
            "edit_file",
            {
                "path": "inventory/stock.py",
                "old_text": "sum(item.price for item in items)",
                "new_text": "sum(item.price * item.quantity for item in items)",
            },
        ),
        ("run_command", {"command": "python3 -m unittest"}),
    ]
    agent = Agent(scripted(calls), toolsets=[workspace_toolset(workspace_tools(root))])
    run = await agent.run("fix the failing test")
    read, edit, command = tool_returns(run.all_messages())
    assert [p.outcome for p in (read, edit, command)] == ["success"] * 3
    assert "sum(item.price for item in items)" in read.content
    details = to_jsonable_python(edit.metadata.details)
    assert (details["additions"], details["deletions"], details["replacements"]) == (1, 1, 1)
    assert '"exit_code":0' in command.content
    assert (
        "return sum(item.price * item.quantity for item in items)\n"
        in (root / "inventory" / "stock.py").read_text()
    )
