"""The names of ``workspace_tools`` for type checkers, and the lazy loader's map of which
module holds each (``lazy_loader.attach_stub``: relative imports only)."""

from ._errors import ErrorCode, ToolError
from ._events import (
    ToolCallEndEvent,
    ToolCallStartEvent,
    ToolEvent,
    ToolResultEvent,
    ToolUpdateEvent,
    parse_tool_event,
)
from ._history import ToolHistoryEntry
from ._output import (
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
from ._result import ToolResult, ToolUpdate
from ._tool import Tool, ToolContext, ToolState, tool
from .session._confirm import Confirmation, ConfirmationRequest
from .session._pipeline import invoke_tool, invoke_tool_sync
from .session._policy import ArgumentCondition, Policy, PolicyRule
from .session._session import ToolSession
from .session._steps import SessionRecord
from .tools import ShellSession, shell_tools, workspace_tools
from .workspace import Workspace, WorkspaceOptions

__version__: str

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
