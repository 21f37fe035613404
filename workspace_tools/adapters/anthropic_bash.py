"""Anthropic's ``bash_20250124`` tool (name ``bash``) served by the ``shell`` tool.

The model sends ``{"command": ...}`` or ``{"restart": true}``; the client owns one
persistent shell. Each ``tool_use`` becomes one call of our ``shell`` tool (through a
:data:`CallFunction`: a :class:`ToolSession`'s ``call`` applies its policy and records a
step), and its result the ``tool_result`` block the API expects (``ToolResultBlockParam``):

- a command's stdout, then its stderr, then ``[exit code: N]`` when it is not 0, then our
  notes (where the whole output is; the shell moved back to the root); ``is_error`` only
  when the command could not run or the shell is gone;
- a bare restart: ``tool has been restarted.`` (the reference implementation's words);
- a timeout: ``is_error``, our message (the shell was killed and the next command starts a
  new one) and the output so far;
- the shell ended by the command: ``is_error``, ``bash has exited with returncode N``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workspace_tools._result import ToolResult
from workspace_tools._tool import Tool
from workspace_tools.adapters._common import (
    CallFunction,
    invoke_call,
    item_field,
    item_id,
    item_object,
    model_text,
    seconds_of_ms,
)

#: The tool definition: the API knows its schema and description.
BASH_TOOL_TYPE = "bash_20250124"
BASH_TOOL_NAME = "bash"
RESTARTED_TEXT = "tool has been restarted."


def anthropic_bash_tool() -> dict[str, Any]:
    """The ``tools`` entry (``ToolBash20250124Param``): ``{"type": "bash_20250124",
    "name": "bash"}``."""
    return {"type": BASH_TOOL_TYPE, "name": BASH_TOOL_NAME}


def bash_arguments(tool_input: Mapping[str, Any]) -> dict[str, Any]:
    """Our ``shell`` tool's arguments for a ``bash`` tool_use ``input``: ``command`` and
    ``restart`` as given, ``timeout_ms`` (the managed agents' bash,
    ``agent_toolset_20260401``) as ``timeout`` in seconds; unknown keys are passed on so
    that validation names them."""
    arguments = dict(tool_input)
    timeout_ms = arguments.pop("timeout_ms", None)
    if timeout_ms is not None:
        number = isinstance(timeout_ms, (int, float)) and not isinstance(timeout_ms, bool)
        # Not a number: passed on as it is, for validation to refuse.
        arguments["timeout"] = seconds_of_ms(timeout_ms) if number else timeout_ms
    return arguments


def anthropic_bash_result(result: ToolResult) -> dict[str, Any]:
    """The ``tool_result`` block for a finished ``shell`` call (see the module docstring)."""
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": result.call_id}
    details = result.details
    if result.is_error:
        block["content"] = model_text(result)
        block["is_error"] = True
        return block
    content = result.content
    if getattr(details, "restarted", False) and getattr(details, "command", "") is None:
        block["content"] = RESTARTED_TEXT
        return block
    pieces = [content["stdout"]] if content["stdout"] else []
    if content["stderr"]:
        pieces.append(content["stderr"])
    if getattr(details, "shell_exited", False):
        pieces.append(f"bash has exited with returncode {content['exit_code']}")
        block["is_error"] = True
    elif content["exit_code"] != 0:
        pieces.append(f"[exit code: {content['exit_code']}]")
    pieces.extend(content["notes"])
    block["content"] = "\n".join(piece.rstrip("\n") for piece in pieces) or "(no output)"
    return block


async def call_anthropic_bash(
    tool_use: Mapping[str, Any] | Any, shell_tool: Tool[Any], call: CallFunction | None = None
) -> dict[str, Any]:
    """Run a ``bash`` ``tool_use`` block (``{"id", "input", ...}``, or the SDK's
    ``ToolUseBlock``) with ``shell_tool``
    (the ``shell`` tool of a :class:`ShellSession`) and return its ``tool_result`` block.

    ``call`` runs the call (default :func:`invoke_call`); pass ``session.call`` for a
    :class:`ToolSession`'s policy and step record.
    """
    runner = call or invoke_call()
    try:
        block = item_object(tool_use, "bash tool_use", "id and input")
        use_id = item_id(block, "bash tool_use", "id")
    except ValueError as exc:
        # Nothing to run, and no id to answer to: an error the caller's loop can show.
        return {"type": "tool_result", "tool_use_id": "", "content": str(exc), "is_error": True}
    try:
        given = item_field(block, "input", "bash tool_use", "command or restart")
    except ValueError as exc:
        return {"type": "tool_result", "tool_use_id": use_id, "content": str(exc), "is_error": True}
    result = await runner(shell_tool, bash_arguments(given), use_id, None)
    return anthropic_bash_result(result)
