"""Hand tools to a pydantic-ai ``Agent`` (https://ai.pydantic.dev/toolsets/).

Each tool becomes a pydantic-ai tool with the same name, description and argument schema.
A call returns a ``ToolReturn``: ``return_value`` is what the model reads
(:meth:`ToolResult.model_text`, or text and images for media content) and ``metadata`` a
:class:`ToolCallMetadata` (details, presentation, duration) the application reads from the
message history and the model never sees. A failed call raises ``ModelRetry`` for invalid
arguments (the model corrects them, within the agent's retry budget) and ``ToolFailed``
otherwise (the model reads the message and adapts). Tools that write run alone
(``sequential``), so an edit never overlaps a read or a command.

Example::

    from pydantic_ai import Agent
    from workspace_tools import workspace_tools
    from workspace_tools.adapters.pydantic_ai import workspace_toolset

    agent = Agent("openai:gpt-5", toolsets=[workspace_toolset(workspace_tools("."))])
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from workspace_tools._errors import ErrorCode
from workspace_tools._history import ToolCallMetadata
from workspace_tools._output import ImagePart
from workspace_tools._result import ToolResult
from workspace_tools._tool import Tool
from workspace_tools.adapters._common import CallFunction, invoke_call, missing_extra, model_parts
from workspace_tools.session._pipeline import OnUpdate

try:
    from pydantic_ai import BinaryContent, ModelRetry, RunContext, ToolFailed, ToolReturn
    from pydantic_ai import Tool as AgentTool
    from pydantic_ai.toolsets import FunctionToolset
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise missing_extra("pydantic_ai", "pydantic-ai") from exc


def tool_return(result: ToolResult) -> ToolReturn:
    """The ``ToolReturn`` of a successful ``result``: model view apart from metadata."""
    parts = model_parts(result)
    value: Any = (
        parts[0]
        if len(parts) == 1 and isinstance(parts[0], str)
        else [
            BinaryContent(data=p.to_bytes(), media_type=p.media_type)
            if isinstance(p, ImagePart)
            else p
            for p in parts
        ]
    )
    metadata = ToolCallMetadata(
        details=result.details,
        presentation=result.presentation,
        error_code=result.error_code,
        duration_ms=result.duration_ms,
    )
    return ToolReturn(return_value=value, metadata=metadata)


def agent_tool(
    tool: Tool[Any], *, call: CallFunction | None = None, on_update: OnUpdate | None = None
) -> AgentTool[Any]:
    """``tool`` as a pydantic-ai ``Tool``.

    Args:
        tool: the tool to expose.
        call: how a call runs; :func:`invoke_call` (no sandbox) by default.
        on_update: receives the call's progress updates (pydantic-ai has no channel for them).
    """
    run = call or invoke_call()

    async def function(ctx: RunContext[Any], **arguments: Any) -> ToolReturn:
        call_id = ctx.tool_call_id or f"call_{uuid.uuid4().hex[:24]}"
        result = await run(tool, arguments, call_id, on_update)
        if result.error is None:
            return tool_return(result)
        if result.error_code is ErrorCode.INVALID_ARGUMENTS:
            raise ModelRetry(result.error)
        raise ToolFailed(result.error)

    return AgentTool.from_schema(
        function,
        name=tool.name,
        description=tool.description,
        json_schema=tool.input_schema(),
        takes_ctx=True,
        sequential=not tool.read_only,
    )


def workspace_toolset(
    tools: Sequence[Tool[Any]],
    *,
    call: CallFunction | None = None,
    on_update: OnUpdate | None = None,
) -> FunctionToolset[Any]:
    """A pydantic-ai ``FunctionToolset`` of ``tools``; pass it as ``Agent(toolsets=[...])``.

    ``call`` and ``on_update`` as in :func:`agent_tool`.
    """
    return FunctionToolset([agent_tool(t, call=call, on_update=on_update) for t in tools])
