"""Anthropic tool use: tool definitions and ``tool_result`` blocks, as plain dicts.

The dicts are the request shapes of the ``anthropic`` SDK (``ToolParam`` and
``ToolResultBlockParam``, https://docs.anthropic.com/en/docs/build-with-claude/tool-use);
building them needs no SDK. A failed call sets ``is_error``; images travel as base64
``image`` blocks inside the result.
"""

from __future__ import annotations

from typing import Any

from workspace_tools._output import ImagePart
from workspace_tools._tool import Tool
from workspace_tools.adapters._common import Finished, model_parts


def anthropic_tool(tool: Tool[Any]) -> dict[str, Any]:
    """A tool definition: ``{"name", "description", "input_schema"}``."""
    return {
        "name": tool.name,
        "description": tool.description,
        "input_schema": tool.input_schema(),
    }


def anthropic_tool_result(result: Finished) -> dict[str, Any]:
    """The ``tool_result`` content block answering the ``tool_use`` block ``result.call_id``
    (``result`` a :class:`ToolResult`, or a :class:`ToolHistoryEntry` from a transcript).

    Text-only content is a string; media content is a list of ``text`` and ``image`` blocks.
    ``is_error`` is set for a failed call, whose content is the error message.
    """
    parts = model_parts(result)
    content: str | list[dict[str, Any]]
    if all(isinstance(p, str) for p in parts):
        content = "\n".join(p for p in parts if isinstance(p, str))
    else:
        content = [
            {
                "type": "image",
                "source": {"type": "base64", "media_type": p.media_type, "data": p.data},
            }
            if isinstance(p, ImagePart)
            else {"type": "text", "text": p}
            for p in parts
            if p  # the API refuses empty text blocks
        ]
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": result.call_id,
        "content": content,
    }
    if result.is_error:
        block["is_error"] = True
    return block
