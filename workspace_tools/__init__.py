"""Ready-made file, search and command tools for coding agents, and the model to define more.

The public API is what ``__all__`` lists; everything in underscore modules is private. It
covers defining a tool (``tool``, ``ToolContext``, ``tool_output``, ``tool_content`` and
its parts, ``ToolPresentation``, ``ToolError``, ``ErrorCode``, ``ToolState``), invoking one
(``invoke_tool``, ``invoke_tool_sync``, ``ToolResult``, ``ToolUpdate``), the eight tools
(``workspace_tools``, ``Workspace``, ``WorkspaceOptions``), the persistent shell and
background processes (``ShellSession``, ``shell_tools``), sessions of calls
(``ToolSession``, ``Policy``, ``PolicyRule``, ``ArgumentCondition``, ``ConfirmationRequest``,
``Confirmation``, ``SessionRecord``), and streams and transcripts of calls (the ``Tool*Event``
models, ``parse_tool_event``, ``ToolHistoryEntry``). The command line and its policy flags
are in :mod:`workspace_tools.cli._main`, the MCP elicitation form in
:mod:`workspace_tools.adapters.mcp`.
"""

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools._events import (
    ToolCallEndEvent,
    ToolCallStartEvent,
    ToolEvent,
    ToolResultEvent,
    ToolUpdateEvent,
    parse_tool_event,
)
from workspace_tools._history import ToolHistoryEntry
from workspace_tools._output import (
    ToolContent,
    ToolOutput,
    ToolPresentation,
    file_part,
    image_part,
    is_tool_output,
    text_part,
    tool_content,
    tool_output,
    tool_output_content,
)
from workspace_tools._result import ToolResult, ToolUpdate
from workspace_tools._tool import Tool, ToolContext, ToolState, tool
from workspace_tools.session._confirm import Confirmation, ConfirmationRequest
from workspace_tools.session._pipeline import invoke_tool, invoke_tool_sync
from workspace_tools.session._policy import ArgumentCondition, Policy, PolicyRule
from workspace_tools.session._session import ToolSession
from workspace_tools.session._steps import SessionRecord
from workspace_tools.tools import ShellSession, shell_tools, workspace_tools
from workspace_tools.workspace import Workspace, WorkspaceOptions

__version__ = "0.1.0"

__all__ = [
    "ArgumentCondition",
    "Confirmation",
    "ConfirmationRequest",
    "ErrorCode",
    "Policy",
    "PolicyRule",
    "SessionRecord",
    "ShellSession",
    "Tool",
    "ToolCallEndEvent",
    "ToolCallStartEvent",
    "ToolContent",
    "ToolContext",
    "ToolError",
    "ToolEvent",
    "ToolHistoryEntry",
    "ToolOutput",
    "ToolPresentation",
    "ToolResult",
    "ToolResultEvent",
    "ToolSession",
    "ToolState",
    "ToolUpdate",
    "ToolUpdateEvent",
    "Workspace",
    "WorkspaceOptions",
    "file_part",
    "image_part",
    "invoke_tool",
    "invoke_tool_sync",
    "is_tool_output",
    "parse_tool_event",
    "shell_tools",
    "text_part",
    "tool",
    "tool_content",
    "tool_output",
    "tool_output_content",
    "workspace_tools",
]
