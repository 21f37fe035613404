"""OpenAI function calling: tool definitions and tool-result messages, as plain dicts.

The dicts are the request shapes of the ``openai`` SDK (``ChatCompletionFunctionToolParam``,
``ChatCompletionToolMessageParam``, the Responses API's ``FunctionToolParam`` and
``function_call_output`` item); building them needs no SDK.

Strict mode (https://platform.openai.com/docs/guides/structured-outputs#supported-schemas,
the default) makes the model's arguments always match the schema. Its rules: every object
sets ``additionalProperties: false`` and lists every property in ``required``. A field that
defaults to ``None`` stays nullable, so the model passes ``null``; a field with another
default must be given, and the model passes the default itself.

OpenAI has no error flag on a tool result: a failed call's text starts with ``Error:``.
"""

from __future__ import annotations

import copy
from typing import Any

from workspace_tools._output import ImagePart
from workspace_tools._tool import Tool
from workspace_tools.adapters._common import Finished, model_parts, model_text

_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")


def strict_json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` that OpenAI's strict mode accepts (rules in the module docstring).

    ``$ref`` with sibling keywords (a field description next to a reference) is inlined,
    since strict mode takes a bare ``$ref`` only.
    """
    root = copy.deepcopy(schema)
    return _make_strict(root, root)


def _resolve_ref(root: dict[str, Any], ref: str) -> dict[str, Any]:
    if not ref.startswith("#/"):
        raise ValueError(f"only local $ref values are supported, got {ref!r}")
    node: Any = root
    for key in ref[2:].split("/"):
        node = node[key]
    return copy.deepcopy(node)


def _make_strict(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node and len(node) > 1:
        target = _resolve_ref(root, node.pop("$ref"))
        node = {**target, **node}
    for key in _SUBSCHEMA_MAPS:
        if isinstance(node.get(key), dict):
            node[key] = {name: _make_strict(sub, root) for name, sub in node[key].items()}
    for key in _SUBSCHEMA_LISTS:
        if isinstance(node.get(key), list):
            node[key] = [_make_strict(sub, root) for sub in node[key]]
    if isinstance(node.get("items"), dict):
        node["items"] = _make_strict(node["items"], root)
    if node.get("type") == "object":
        node.setdefault("additionalProperties", False)
    if isinstance(node.get("properties"), dict):
        node["required"] = list(node["properties"])
    if "default" in node and node["default"] is None:
        del node["default"]
    if isinstance(node.get("allOf"), list) and len(node["allOf"]) == 1:
        node = {**node.pop("allOf")[0], **node}
    return node


def openai_parameters(tool: Tool[Any], *, strict: bool = True) -> dict[str, Any]:
    """The JSON Schema of ``tool``'s arguments as OpenAI reads it (strict or as pydantic
    emits it)."""
    schema = tool.input_schema()
    return strict_json_schema(schema) if strict else schema


def openai_chat_tool(tool: Tool[Any], *, strict: bool = True) -> dict[str, Any]:
    """A Chat Completions tool: ``{"type": "function", "function": {name, description,
    parameters, strict}}``."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": openai_parameters(tool, strict=strict),
            "strict": strict,
        },
    }


def openai_responses_tool(tool: Tool[Any], *, strict: bool = True) -> dict[str, Any]:
    """A Responses API tool: ``{"type": "function", name, description, parameters, strict}``."""
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": openai_parameters(tool, strict=strict),
        "strict": strict,
    }


def _text(finished: Finished, text: str) -> str:
    return f"Error: {text}" if finished.is_error else text


def openai_chat_message(result: Finished) -> dict[str, Any]:
    """The Chat Completions ``role: tool`` message for ``result`` (a :class:`ToolResult`, or a
    :class:`ToolHistoryEntry` when rebuilding messages from a transcript).

    Tool messages take text only: images are described (``[image/png, 1.2 KB]``).
    """
    return {
        "role": "tool",
        "tool_call_id": result.call_id,
        "content": _text(result, model_text(result)),
    }


def openai_responses_output(result: Finished) -> dict[str, Any]:
    """The Responses API ``function_call_output`` input item for ``result`` (a
    :class:`ToolResult` or a :class:`ToolHistoryEntry`).

    Text-only content is a string; media content is a list of ``input_text`` and
    ``input_image`` (a ``data:`` URL) items.
    """
    parts = model_parts(result)
    output: str | list[dict[str, Any]]
    if all(isinstance(p, str) for p in parts):
        output = _text(result, "\n".join(p for p in parts if isinstance(p, str)))
    else:
        output = [
            {"type": "input_image", "image_url": f"data:{p.media_type};base64,{p.data}"}
            if isinstance(p, ImagePart)
            else {"type": "input_text", "text": p}
            for p in parts
        ]
    return {"type": "function_call_output", "call_id": result.call_id, "output": output}
