"""Session records that dump to JSON as UTF-8 whatever file names they hold."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, SerializationInfo, SerializerFunctionWrapHandler, model_serializer

from workspace_tools._result import utf8_safe


class Encodable(BaseModel):
    """A model whose JSON dump encodes as UTF-8 whatever it holds: a file name that is not
    UTF-8 (lone surrogates, in arguments, presentations, changed files) is written as its
    escape text (``\\udcff``), as :class:`~workspace_tools.ToolResult` writes it, so
    ``model_dump_json()`` never raises ``PydanticSerializationError`` over a name."""

    @model_serializer(mode="wrap")
    def _encodable(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        data = handler(self)
        return utf8_safe(data) if info.mode_is_json() else data
