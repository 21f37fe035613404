"""What every adapter needs: the model's view of a result, a tool's static presentation, the
call function that runs calls, and the ImportError that names a missing extra."""

from __future__ import annotations

import math
import re
import shlex
import sys
from collections.abc import Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from workspace_tools._errors import json_kind_phrase
from workspace_tools._history import ToolHistoryEntry
from workspace_tools._output import FilePart, ImagePart, TextPart, ToolContent, ToolPresentation
from workspace_tools._result import ToolResult, truncate_text, utf8_safe
from workspace_tools._tool import Tool, placeholder_args
from workspace_tools.session._pipeline import OnUpdate, invoke_tool

DISTRIBUTION = "agent-workspace-tools"


def extra_requirements(extra: str) -> list[str]:
    """The requirements (``mcp<2,>=1.30``) that this package's ``extra`` adds, from its
    installed metadata; empty when it is not installed (a source tree on ``sys.path``).
    Markers beyond ``extra == "..."`` are not evaluated (this package's extras have none)."""
    try:
        requires = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    marker = re.compile(rf"""\s*extra\s*==\s*(['"]){re.escape(extra)}\1\s*""")
    found = []
    for requirement in requires:
        spec, _, condition = requirement.partition(";")
        if marker.fullmatch(condition):
            found.append(spec.strip())
    return found


def missing_extra(module: str, extra: str) -> ImportError:
    """The ImportError an adapter raises when its SDK ``module`` is absent. Its message is a
    command that installs what is missing into the running Python, wherever this package
    came from (it is not on the public index, so ``agent-workspace-tools[extra]`` would not
    resolve): the extra's requirements from the installed metadata, or, for a source tree,
    an editable install of that tree with the extra."""
    requirements = extra_requirements(extra)
    if requirements:
        target = " ".join(shlex.quote(r) for r in requirements)
    else:
        tree = Path(__file__).resolve().parents[2]
        target = "-e " + shlex.quote(f"{tree}[{extra}]")
    command = f"{shlex.quote(sys.executable)} -m pip install {target}"
    return ImportError(f"{module} is not installed; install it with: {command}")


Finished = ToolResult | ToolHistoryEntry
"""A finished call as the result adapters convert: fresh, or rebuilt from a transcript."""


def model_parts(finished: Finished) -> list[str | ImagePart]:
    """What the model reads of a finished call, in order: text pieces and images.

    A failed call is its error message. Media content (:class:`ToolContent`) keeps its
    images for providers that accept them and describes file parts in text
    (``[report.pdf: application/pdf, 12.3 KB]``); each text is cut to the result limit.
    Any other content is :meth:`ToolResult.model_text`, a single text. A transcript entry is
    the text the model read then; its metadata never takes part.
    """
    if isinstance(finished, ToolHistoryEntry):
        return [finished.model_text]
    if finished.is_error or not isinstance(finished.content, ToolContent):
        return [finished.model_text()]
    limit = finished.max_result_length
    parts: list[str | ImagePart] = []
    for part in finished.content.parts:
        if isinstance(part, ImagePart):
            parts.append(part)
        elif isinstance(part, TextPart):
            parts.append(truncate_text(part.text, limit))
        elif isinstance(part, FilePart):
            parts.append(ToolContent(parts=[part]).describe())
    return parts


#: What a message quotes, never reworded when an adapter puts a message in its format's terms:
#: a repr-quoted text (a line of the file, a character) and a numbered line of the file
#: shown whole.
QUOTED_SPANS = (
    r"(?<!\w)'(?:[^'\\\n]|\\.)*'(?!\w)"  # an apostrophe (the file's) opens no quote
    r'|(?<!\w)"(?:[^"\\\n]|\\.)*"(?!\w)'
    r"|(?m:^ *\d+[\t:|].*$)"
)


def model_text(finished: Finished) -> str:
    """What the model reads of a finished call as one text (images described in text)."""
    if isinstance(finished, ToolHistoryEntry):
        return finished.model_text
    return finished.model_text()


def tool_presentation(tool: Tool[Any]) -> ToolPresentation | None:
    """The part of the tool's presentation that does not depend on arguments: its label and
    icon (``detail`` is dropped), or ``None`` when it has none.

    A presentation function is called with placeholder arguments (defaults, ``None`` for
    required fields): label and icon are fixed per tool, only the detail follows the
    arguments. A function that cannot cope with the placeholders gives ``None``.
    """
    spec = tool.presentation
    if spec is not None and not isinstance(spec, ToolPresentation):
        try:
            spec = spec(placeholder_args(tool))
        except Exception:
            return None
    if not isinstance(spec, ToolPresentation):
        return None
    return ToolPresentation(label=spec.label, icon=spec.icon)


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data (pydantic models dumped in JSON mode) that encodes as
    UTF-8: lone surrogates (file names that are not UTF-8) are escaped (``utf8_safe``)."""
    if isinstance(value, BaseModel):
        return utf8_safe(value.model_dump(mode="json"))
    return utf8_safe(to_jsonable_python(value))


def item_object(item: Any, what: str, fields: str) -> dict[str, Any]:
    """A provider's item (a tool_use block, a shell_call) as a dict: its JSON data, a
    pydantic model (the SDK's type) dumped.

    Raises:
        ValueError: it is no object; the message names ``what`` it should be and its
            ``fields`` (``The bash tool_use is string, not an object with id and input``).
    """
    try:
        data = jsonable(item)
    except ValueError:  # pydantic's PydanticSerializationError: no JSON data in it
        data = None
    if not isinstance(data, dict):
        raise ValueError(f"The {what} is {json_kind_phrase(item)}, not an object with {fields}")
    return data


def item_id(data: dict[str, Any], what: str, *keys: str) -> str:
    """The id of a provider's item (:func:`item_object`'s dict): the first of ``keys`` it
    carries (neither absent, ``null`` nor empty), which must be a string, as every provider
    sends it.

    Raises:
        ValueError: no such key, or its value is no string
            (``The shell_call's call_id is number, not a string``).
    """
    for key in keys:
        value = data.get(key)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise ValueError(f"The {what}'s {key} is {json_kind_phrase(value)}, not a string")
        return value
    raise ValueError(f"The {what} has no {keys[0]}")


def item_field(data: dict[str, Any], key: str, what: str, fields: str) -> dict[str, Any]:
    """The field ``key`` of a provider's item that must be an object (a ``tool_use``'s
    ``input``, a ``shell_call``'s ``action``): ``{}`` when absent or ``null``.

    Raises:
        ValueError: it is no object (``The shell_call's action is array, not an object
            with commands``).
    """
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(
            f"The {what}'s {key} is {json_kind_phrase(value)}, not an object with {fields}"
        )
    return value


def seconds_of_ms(milliseconds: float) -> float:
    """A timeout in milliseconds as seconds; one past what a float holds (JSON's integers
    have no bound) is no limit, ``inf``, as the tools take it."""
    try:
        return milliseconds / 1000
    except OverflowError:
        return math.inf


CallFunction = Callable[[Tool[Any], dict[str, Any], str, OnUpdate | None], Awaitable[ToolResult]]
"""``async call(tool, arguments, call_id, on_update) -> ToolResult``: how an adapter runs a
call. The default is :func:`invoke_call`; a session with a policy or a cache can stand in."""


def invoke_call(sandbox: Any = None) -> CallFunction:
    """A :data:`CallFunction` that runs each call with :func:`invoke_tool` (in ``sandbox``
    when one is given, else in the tool's own :attr:`Tool.sandbox`, if any)."""

    async def call(
        tool: Tool[Any], arguments: dict[str, Any], call_id: str, on_update: OnUpdate | None
    ) -> ToolResult:
        return await invoke_tool(
            tool, arguments, call_id=call_id, on_update=on_update, sandbox=sandbox
        )

    return call
