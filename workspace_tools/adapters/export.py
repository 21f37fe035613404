"""Tool definitions in each provider's format, as JSON data (``workspace-tools schema``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workspace_tools._tool import Tool
from workspace_tools.adapters.anthropic import anthropic_tool
from workspace_tools.adapters.openai import openai_chat_tool, openai_responses_tool


def tool_definitions(tools: Sequence[Tool[Any]], format: str) -> list[dict[str, Any]]:
    """The definitions of ``tools`` for ``format``.

    Formats: ``mcp`` (``tools/list`` entries; needs the ``mcp`` extra), ``openai`` (Chat
    Completions, strict), ``openai-responses`` (Responses API, strict), ``anthropic``.

    Raises:
        ValueError: an unknown format.
        ImportError: ``mcp`` without the ``mcp`` SDK installed.
    """
    if format == "mcp":
        from workspace_tools.adapters.mcp import mcp_tool

        return [
            mcp_tool(t).model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools
        ]
    if format == "openai":
        return [openai_chat_tool(t) for t in tools]
    if format == "openai-responses":
        return [openai_responses_tool(t) for t in tools]
    if format == "anthropic":
        return [anthropic_tool(t) for t in tools]
    raise ValueError(f"unknown format {format!r}; choose mcp, openai, openai-responses, anthropic")
