"""Ready-made file, search and command tools for coding agents, and the model to define more.

The public API is what ``__all__`` lists; everything in underscore modules is private.
"""

from ._errors import ErrorCode, ToolError
from ._events import (
    ToolCallEndEvent,
    ToolCallStartEvent,
    ToolEvent,
    ToolResultEvent,
    ToolUpdateEvent,
    parse_tool_event,
    result_event,
    update_event,
)
from ._history import ToolCallMetadata, ToolHistoryEntry
from ._invoke import invoke_tool, invoke_tool_sync
from ._output import (
    FilePart,
    ImagePart,
    TextPart,
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
from ._tool import Tool, ToolContext, tool
from .tools import TOOL_NAMES, workspace_tools
from .workspace import Workspace, WorkspaceOptions

__all__ = [
    "TOOL_NAMES",
    "ErrorCode",
    "FilePart",
    "ImagePart",
    "TextPart",
    "Tool",
    "ToolCallEndEvent",
    "ToolCallMetadata",
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
    "result_event",
    "text_part",
    "tool",
    "tool_content",
    "tool_output",
    "tool_output_content",
    "update_event",
    "workspace_tools",
]
