"""The outcome of one call and the progress updates before it."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from workspace_tools._errors import ErrorCode
from workspace_tools._output import ToolContent, ToolPresentation

DEFAULT_MAX_RESULT_LENGTH = 50_000


def content_text(content: Any) -> str:
    """Serialise content as the model reads it.

    A string is itself; :class:`ToolContent` is described in text (images as
    ``[image/png, 1.2 KB]``); ``None`` is empty; any other value is compact JSON.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, ToolContent):
        return content.describe()
    if isinstance(content, BaseModel):
        return content.model_dump_json()
    return json.dumps(content, ensure_ascii=False, separators=(",", ":"), default=str)


def utf8_safe(value: Any) -> Any:
    """``value`` (a string, or JSON data holding strings) with every lone surrogate written
    as its escape text (``\\udcff``), so that it encodes as UTF-8.

    Lone surrogates are how Python holds the bytes of a file name that is not UTF-8
    (``bad\\xff.txt``); sent as they are, they fail every UTF-8 encoder (a JSON-RPC reply,
    a pydantic dump). The escape reads as the same JSON string, so a model that sends the
    name back in a JSON argument names the same file.
    """
    if isinstance(value, str):
        if not _SURROGATE.search(value):
            return value
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {utf8_safe(k): utf8_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [utf8_safe(v) for v in value]
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")


def truncate_text(text: str, limit: int) -> str:
    """Cut ``text`` to at most ``limit`` characters, the marker included, with lone
    surrogates escaped (:func:`utf8_safe`).

    The marker ends the text: ``[truncated: showing 49,950 of 100,000 characters]``. A limit
    too short for the marker gives the first ``limit`` characters alone.
    """
    text = utf8_safe(text)
    if len(text) <= limit:
        return text
    total = len(text)
    keep = limit
    # The marker's own length depends on how much is kept; two passes settle it.
    for _ in range(2):
        marker = f"\n[truncated: showing {keep:,} of {total:,} characters]"
        keep = max(0, limit - len(marker))
    cut = text[:keep] + f"\n[truncated: showing {keep:,} of {total:,} characters]"
    # A limit shorter than the marker leaves no room to say so: plain text at the limit.
    return cut if len(cut) <= limit else text[:limit]


class ToolUpdate(BaseModel):
    """One progress report of a running call (never shown to the model)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    call_id: str
    name: str
    content: Any = None
    details: Any = None
    presentation: ToolPresentation | None = None


class ToolResult(BaseModel):
    """The outcome of one call.

    ``content`` is what the model reads, before truncation; ``details`` and ``presentation``
    are for the application. For a failed call ``error`` is the message the model reads and
    ``error_code`` the :class:`ErrorCode`. ``duration_ms`` is wall time in milliseconds.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    call_id: str
    name: str
    arguments: Any = None
    content: Any = None
    details: Any = None
    presentation: ToolPresentation | None = None
    error: str | None = None
    error_code: ErrorCode | None = None
    duration_ms: float = 0.0
    max_result_length: int = DEFAULT_MAX_RESULT_LENGTH

    @model_serializer(mode="wrap")
    def _encodable(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        # JSON must encode as UTF-8: a path that is not UTF-8 (lone surrogates) is escaped.
        data = handler(self)
        return utf8_safe(data) if info.mode_is_json() else data

    @property
    def is_error(self) -> bool:
        """Whether the call failed."""
        return self.error is not None

    def model_text(self) -> str:
        """Exactly the text the model reads: the error message, or the content serialised and
        cut to ``max_result_length`` characters with a marker."""
        if self.error is not None:
            return truncate_text(self.error, self.max_result_length)
        return truncate_text(content_text(self.content), self.max_result_length)
