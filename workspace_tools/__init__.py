"""Ready-made file, search and command tools for coding agents, and the model to define more.

The public API is what ``__all__`` lists; everything in underscore modules is private.
"""

from ._confirm import (
    Confirmation,
    ConfirmationForm,
    ConfirmationRequest,
    confirmation_from_elicitation,
)
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
from ._fingerprint import file_fingerprint, tree_fingerprint
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
from ._policy import (
    ArgumentCondition,
    Policy,
    PolicyDecision,
    PolicyRule,
    add_policy_arguments,
    check_policy,
    parse_policy_flag,
    policy_from_arguments,
    policy_from_flags,
)
from ._result import ToolResult, ToolUpdate
from ._session import ToolSession
from ._steps import SessionRecord, Step, StepSummary, TraceEvent
from ._tool import Tool, ToolContext, ToolState, tool
from .tools import TOOL_NAMES, workspace_tools
from .workspace import Workspace, WorkspaceOptions

__version__ = "0.1.0"

__all__ = [
    "TOOL_NAMES",
    "ArgumentCondition",
    "Confirmation",
    "ConfirmationForm",
    "ConfirmationRequest",
    "ErrorCode",
    "FilePart",
    "ImagePart",
    "Policy",
    "PolicyDecision",
    "PolicyRule",
    "SessionRecord",
    "Step",
    "StepSummary",
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
    "ToolSession",
    "ToolState",
    "ToolUpdate",
    "ToolUpdateEvent",
    "TraceEvent",
    "Workspace",
    "WorkspaceOptions",
    "add_policy_arguments",
    "check_policy",
    "confirmation_from_elicitation",
    "file_fingerprint",
    "file_part",
    "image_part",
    "invoke_tool",
    "invoke_tool_sync",
    "is_tool_output",
    "parse_policy_flag",
    "parse_tool_event",
    "policy_from_arguments",
    "policy_from_flags",
    "result_event",
    "text_part",
    "tool",
    "tool_content",
    "tool_output",
    "tool_output_content",
    "tree_fingerprint",
    "update_event",
    "workspace_tools",
]
