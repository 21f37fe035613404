"""Error codes and the exception a tool raises for a failure the model should read."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any


class ErrorCode(str, Enum):
    """Why a tool call failed. The value is the wire form (``"NOT_FOUND"``).

    A caller branches on the code; the model reads only the message. ``DISK_FULL``: a
    write found no space left on the device or a disk quota exceeded (the file is left as
    it was); ``FILE_TOO_LARGE`` is for a size over a limit of the tool or the process.
    ``WORKSPACE_UNAVAILABLE``: a remote workspace (an HTTP server, a Ray actor) could not be
    reached, or the connection or the actor was lost during the call, which may or may not
    have run.
    """

    INVALID_ARGUMENTS = "INVALID_ARGUMENTS"
    TOOL_TIMEOUT = "TOOL_TIMEOUT"
    TOOL_ERROR = "TOOL_ERROR"
    ABORTED = "ABORTED"
    NOT_FOUND = "NOT_FOUND"
    OUTSIDE_WORKSPACE = "OUTSIDE_WORKSPACE"
    IS_A_DIRECTORY = "IS_A_DIRECTORY"
    NOT_A_DIRECTORY = "NOT_A_DIRECTORY"
    BINARY_FILE = "BINARY_FILE"
    FILE_TOO_LARGE = "FILE_TOO_LARGE"
    DISK_FULL = "DISK_FULL"
    ENCODING_ERROR = "ENCODING_ERROR"
    NO_MATCH = "NO_MATCH"
    AMBIGUOUS_MATCH = "AMBIGUOUS_MATCH"
    STALE_FILE = "STALE_FILE"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    SANDBOX_UNAVAILABLE = "SANDBOX_UNAVAILABLE"
    SANDBOX_ERROR = "SANDBOX_ERROR"
    WORKSPACE_UNAVAILABLE = "WORKSPACE_UNAVAILABLE"

    def __str__(self) -> str:
        return self.value


class ToolError(Exception):
    """A recoverable failure whose message the model reads ("file not found").

    Args:
        message: text for the model; say what went wrong and what to do instead.
        code: the :class:`ErrorCode` the application sees; ``TOOL_ERROR`` by default.
        details: optional JSON value for the application (a timed-out command's partial
            output counts, say); it lands in ``ToolResult.details``.
    """

    def __init__(
        self, message: str, code: ErrorCode = ErrorCode.TOOL_ERROR, *, details: Any = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = ErrorCode(code)
        self.details = details

    def __reduce__(self) -> tuple[Any, ...]:
        # Keeps code and details when the error crosses a process boundary (sandbox): by
        # its class alone, which is all a sandboxed call's outcome may name.
        return (type(self), (self.message, self.code), {"details": self.details})


ECHO_LIMIT = 200
"""Most characters of a caller's value an error message or a log line quotes."""


def echoed(value: object, limit: int = ECHO_LIMIT) -> str:
    """``value`` (a string, or any value as ``str``) quoted for an error message or a log
    line: its ``repr`` when it has at most ``limit`` characters, else the ``repr`` of its
    first ``limit`` characters with ``…`` before the closing quote and its length after
    (``'xxx…' (100,000 characters)``). A name or an argument a caller sent may be any
    size; echoing it whole would flood the message, the model's context and the logs."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return repr(text)
    shown = repr(text[:limit])
    return f"{shown[:-1]}…{shown[-1]} ({len(text):,} characters)"


_LOG10_2 = 0.30102999566398120


def shown_number(value: int, limit: int = ECHO_LIMIT) -> str:
    """An integer a caller sent, for a message: whole when it has at most ``limit``
    digits, else its first ``limit`` digits, ``…`` and its count of digits (``100…
    (5,001 digits)``). JSON's integers have no bound, and ``str`` refuses one past 4,300
    digits (``sys.get_int_max_str_digits``), so no message formats one as it is."""
    magnitude = abs(value)
    # The digits of 2**(b-1) <= magnitude < 2**b: this estimate, or one more.
    digits = int((max(magnitude.bit_length(), 1) - 1) * _LOG10_2) + 1
    if magnitude >= 10**digits:
        digits += 1
    if digits <= limit:
        return str(value)
    head = magnitude // 10 ** (digits - limit)
    return f"{'-' if value < 0 else ''}{head}… ({digits:,} digits)"


PATH_ECHO_LIMIT = 8192
"""Most characters of a path an error message shows: twice ``PATH_MAX``, so a path any file
system could take, or one just over its limit, shows whole."""


def clipped(text: str, limit: int = PATH_ECHO_LIMIT) -> str:
    """``text`` as it is when it has at most ``limit`` characters, else its first ``limit``
    followed by ``… (N characters)`` (for a path in a message, shown unquoted)."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def json_kind(value: object) -> str:
    """The JSON type of a parsed JSON value (``object``, ``array``, ``string``,
    ``number``, ``boolean``, ``null``), as a message to a model names it; a value of no
    JSON type by its Python type's name."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, (list, tuple)):
        return "array"
    return "string" if isinstance(value, str) else type(value).__name__


def json_kind_phrase(value: object) -> str:
    """:func:`json_kind` as a sentence says it: ``an array``, ``a string``, ``null``."""
    kind = json_kind(value)
    return _WITH_ARTICLE.get(kind, kind)


_WITH_ARTICLE = {
    "object": "an object",
    "array": "an array",
    "string": "a string",
    "number": "a number",
    "boolean": "a boolean",
}

#: pydantic's error types whose message names a Python type where the input was JSON,
#: and the JSON type that was expected.
_EXPECTED_JSON = {
    "model_type": "an object",
    "model_attributes_type": "an object",
    "dict_type": "an object",
    "list_type": "an array",
    "tuple_type": "an array",
    "set_type": "an array",
    "frozen_set_type": "an array",
    "none_required": "null",
}


def json_error_message(error: Mapping[str, Any]) -> str:
    """The message of one pydantic validation error (an item of ``errors()``) in JSON's
    words: pydantic names Python's types ("a valid dictionary or instance of Edit", "a
    valid list", "None"), which a model, that wrote JSON, never saw
    (``Input should be an array, not a string``); other messages as they are."""
    expected = _EXPECTED_JSON.get(error["type"])
    if expected is None or "input" not in error:
        return str(error["msg"])
    return f"Input should be {expected}, not {json_kind_phrase(error['input'])}"
