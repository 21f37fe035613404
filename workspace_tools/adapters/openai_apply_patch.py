"""OpenAI's ``apply_patch`` formats executed by this package's ``apply_patch`` tool.

Two ways a model sends a patch:

- **The Responses API's built-in tool** ``{"type": "apply_patch"}``
  (:func:`openai_apply_patch_tool`). The model emits ``apply_patch_call`` items, each with one
  ``operation``: ``create_file`` (``path``, ``diff`` of ``+`` lines), ``update_file``
  (``path``, V4A ``diff``: ``@@`` anchors and `` ``/``-``/``+`` lines) or ``delete_file``
  (``path``). :func:`apply_patch_call_arguments` turns one into the arguments of our tool
  (an envelope of one operation); the result goes back as an ``apply_patch_call_output``
  item (:func:`apply_patch_call_output`: ``status`` ``completed`` or ``failed``, ``output``
  the text the model reads).
- **A custom (freeform) tool** taking the whole ``*** Begin Patch`` envelope, constrained by
  a Lark grammar, as Codex declares it (:func:`openai_apply_patch_custom_tool`). Its
  ``custom_tool_call`` items carry the patch in ``input``
  (:func:`custom_tool_call_arguments`); the result goes back as a
  ``custom_tool_call_output`` item (:func:`custom_tool_call_output`).

Both run as calls of the ``apply_patch`` tool (:mod:`workspace_tools.tools.apply_patch`):
the same pipeline, matching, atomicity and results as any other call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from workspace_tools._errors import ErrorCode, ToolError, json_kind_phrase
from workspace_tools._tool import Tool
from workspace_tools.adapters._common import (
    QUOTED_SPANS,
    CallFunction,
    Finished,
    invoke_call,
    item_id,
    item_object,
    model_text,
)
from workspace_tools.text._patch_parse import (
    ADD,
    BEGIN,
    DELETE,
    END,
    END_OF_FILE,
    UPDATE,
    PatchSyntaxError,
    parse_patch,
    parse_v4a_create,
)

_OPERATION_KINDS = {"create_file": "add", "update_file": "update", "delete_file": "delete"}

APPLY_PATCH_GRAMMAR = r"""
start: begin operation+ end
begin: "*** Begin Patch" LF
end: "*** End Patch" LF?
operation: add | delete | update
add: "*** Add File: " path LF added*
delete: "*** Delete File: " path LF
update: "*** Update File: " path LF move? chunk*
move: "*** Move to: " path LF
chunk: anchor* line+ end_of_file?
anchor: "@@" LF | "@@ " TEXT LF
added: "+" TEXT? LF
line: /[ +-]/ TEXT? LF
end_of_file: "*** End of File" LF
path: TEXT
TEXT: /[^\n]+/
LF: "\n"
"""
"""The Lark grammar of the patch envelope, for a custom tool's ``format``."""

CUSTOM_TOOL_DESCRIPTION = """\
Use the `apply_patch` tool to edit files. Send the patch as plain text (not JSON):

*** Begin Patch
*** Update File: path/to/file.py
@@ def example():
-    old line
+    new line
*** End Patch

Operations: `*** Add File: <path>` (every line of the file prefixed with +),
`*** Delete File: <path>`, `*** Update File: <path>` (optionally followed by
`*** Move to: <new path>`), with chunks of context (' '), removed ('-') and added ('+')
lines, about 3 lines of context around each change, and `@@ <line>` naming a line the chunk
comes after when the context is not unique. Paths are relative. The whole patch applies or
nothing does."""


def openai_apply_patch_tool() -> dict[str, Any]:
    """The Responses API entry of the built-in ``apply_patch`` tool (``ApplyPatchToolParam``)."""
    return {"type": "apply_patch"}


def openai_apply_patch_custom_tool(name: str = "apply_patch") -> dict[str, Any]:
    """A Responses API custom tool (``CustomToolParam``) taking the patch envelope as
    freeform text constrained by :data:`APPLY_PATCH_GRAMMAR`."""
    return {
        "type": "custom",
        "name": name,
        "description": CUSTOM_TOOL_DESCRIPTION,
        "format": {"type": "grammar", "syntax": "lark", "definition": APPLY_PATCH_GRAMMAR},
    }


def _item(item: Any, what: str, fields: str) -> dict[str, Any]:
    """``item`` as a dict (:func:`item_object`); one that is no object is
    ``INVALID_ARGUMENTS``."""
    try:
        return item_object(item, what, fields)
    except ValueError as exc:
        raise ToolError(str(exc), ErrorCode.INVALID_ARGUMENTS) from None


def _lines(text: str) -> str:
    return text if text.endswith("\n") or not text else text + "\n"


def apply_patch_call_arguments(item: Any) -> dict[str, Any]:
    """The arguments of our ``apply_patch`` tool for an ``apply_patch_call`` item (a dict or
    the SDK's ``ResponseApplyPatchToolCall``): an envelope holding its one operation.

    A ``create_file`` diff's lines are ``+`` and the text; an ``update_file`` diff is V4A
    chunks. Neither may overwrite: creating an existing file is refused by the tool. The
    item is one operation on one path, so the envelope must hold exactly that: a path
    with a line break, or a diff with a line that would start another operation (``***
    Delete File: ...``, ``*** Move to: ...``), is refused rather than run.

    Raises:
        ToolError: ``INVALID_ARGUMENTS`` for an item that is no object, one without a known
            operation or path (or a path that is not text), a ``create_file`` or
            ``update_file`` without a diff, a path the envelope cannot hold, a
            ``create_file`` diff with a line that is not ``+``, or a diff that would change
            more than the operation's one file.
    """
    operation = _item(item, "apply_patch_call", "call_id and operation").get("operation")
    if operation is None:
        operation = {}
    if not isinstance(operation, Mapping):
        raise ToolError(
            f"The apply_patch_call's operation is {json_kind_phrase(operation)}, not an object "
            "with type, path and diff",
            ErrorCode.INVALID_ARGUMENTS,
        )
    kind, path = operation.get("type"), operation.get("path")
    if path is not None and not isinstance(path, str):
        raise ToolError(
            f"The apply_patch_call's path is {json_kind_phrase(path)}, not text",
            ErrorCode.INVALID_ARGUMENTS,
        )
    if not path:
        raise ToolError("The apply_patch_call names no path", ErrorCode.INVALID_ARGUMENTS)
    if path != path.strip() or "\n" in path or "\r" in path:
        raise ToolError(
            f"The path {path!r} starts or ends with whitespace or holds a line break, which "
            "a patch cannot name; give the file's path alone",
            ErrorCode.INVALID_ARGUMENTS,
        )
    diff = operation.get("diff")
    if diff is None and kind in ("create_file", "update_file"):
        # Not taken as empty: a create_file would make an empty file of a call that
        # lost its content on the way.
        raise ToolError(
            f"The apply_patch_call's {kind} operation has no diff",
            ErrorCode.INVALID_ARGUMENTS,
        )
    diff = "" if diff is None else diff
    if not isinstance(diff, str):
        raise ToolError(
            f"The apply_patch_call's diff is {json_kind_phrase(diff)}, not text",
            ErrorCode.INVALID_ARGUMENTS,
        )
    if kind == "create_file":
        try:
            parse_v4a_create(diff, path)  # every line '+': said here, not as a bad header
        except PatchSyntaxError as exc:
            raise ToolError(exc.message, ErrorCode.INVALID_ARGUMENTS) from None
        body = f"{ADD}{path}\n{_lines(diff)}"
    elif kind == "update_file":
        body = f"{UPDATE}{path}\n{_lines(diff)}"
    elif kind == "delete_file":
        body = f"{DELETE}{path}\n"
    else:
        raise ToolError(
            f"Unknown apply_patch operation {kind!r}; expected create_file, update_file or "
            "delete_file",
            ErrorCode.INVALID_ARGUMENTS,
        )
    patch = f"{BEGIN}\n{body}{END}\n"
    _refuse_other_operations(patch, kind, path, diff)
    return {"patch": patch}


def _refuse_other_operations(patch: str, kind: str, path: str, diff: str) -> None:
    """Refuse an envelope that holds more than the item's one operation on ``path``: a
    diff line such as ``*** Delete File: other`` would otherwise run as a second one."""
    try:
        ops = parse_patch(patch)
    except PatchSyntaxError:
        return  # the tool reports it, as for any malformed patch
    if [(op.kind, op.path, op.move_to) for op in ops] == [(_OPERATION_KINDS[kind], path, None)]:
        return
    header = next(
        (
            line.strip()
            for line in diff.splitlines()
            if line.lstrip().startswith("***") and line.strip() != END_OF_FILE
        ),
        "",
    )
    raise ToolError(
        f"The {kind} diff for {path!r} holds the line {header!r}, which would start another "
        "operation; an apply_patch_call changes its one file: send each other change as an "
        "apply_patch_call of its own",
        ErrorCode.INVALID_ARGUMENTS,
    )


def apply_patch_call_output(result: Finished) -> dict[str, Any]:
    """The ``apply_patch_call_output`` input item answering ``result`` (a :class:`ToolResult`
    or a :class:`ToolHistoryEntry`): ``status`` ``failed`` with the error text for a failed
    call, in the item's terms (see :func:`in_operation_terms`), else ``completed`` with the
    summary of what changed."""
    text = model_text(result)
    return {
        "type": "apply_patch_call_output",
        "call_id": result.call_id,
        "status": "failed" if result.is_error else "completed",
        "output": in_operation_terms(text) if result.is_error else text,
    }


#: Our patch format's words for what an ``apply_patch_call`` names otherwise: the model never
#: saw the envelope, so a message speaks of its operations and its diff. Applied in order,
#: outside what a message quotes of the file.
_OPERATION_TERMS: tuple[tuple[str, str], ...] = (
    (
        r"change it with update_file, or set allow_overwrite to replace it",
        "change it with update_file, or remove it with delete_file before creating it anew",
    ),
    (r"\bAdd File\b", "create_file"),
    (r"\bUpdate File\b", "update_file"),
    (r"\bDelete File\b", "delete_file"),
    (
        r"\bNo file was changed: correct this part and send the whole patch again\.",
        "No file was changed: correct the operation and send the apply_patch_call again.",
    ),
    (
        r"\bNo file was changed: send the patch again without that chunk, if it holds "
        r"anything else\.",
        "No file was changed: send the apply_patch_call again without that chunk, if its "
        "diff holds anything else.",
    ),
)

#: The envelope's lines before an operation's diff: ``*** Begin Patch`` and its header.
_ENVELOPE_LINES = 2
#: How the patch parser's messages begin.
_PARSE_ERROR = "invalid patch:"


def _diff_line(match: re.Match[str]) -> str:
    line = int(match.group(1)) - _ENVELOPE_LINES
    return f"diff line {line}" if line >= 1 else "the start of the diff"


def in_operation_terms(message: str) -> str:
    """``message``, an ``apply_patch`` error about the envelope an ``apply_patch_call`` was
    run in, in the item's own terms: ``create_file``/``update_file``/``delete_file`` for the
    patch's ``Add File``/``Update File``/``Delete File`` headers (quoted or not), line numbers
    of the operation's ``diff`` for the envelope's patch lines, and the operation, not the
    whole patch, to send again. What the message quotes of the file stays as it is."""
    message = message.replace("'*** Update File:'", "update_file")
    message = message.replace("'*** Add File:'", "create_file")
    # A parse error counts every line it names in the envelope; an apply error, only its
    # "patch line" (its other lines are the file's and the chunk's).
    parsed = message.startswith(_PARSE_ERROR)
    if parsed:
        message = "invalid diff:" + message[len(_PARSE_ERROR) :]
    numbered = r"\bline (\d+)" if parsed else r"\bpatch line (\d+)"
    parts = re.split(f"({QUOTED_SPANS})", message)
    for index in range(0, len(parts), 2):  # between the quoted spans
        part = re.sub(numbered, _diff_line, parts[index])
        for ours, theirs in _OPERATION_TERMS:
            part = re.sub(ours, theirs, part)
        parts[index] = part
    return "".join(parts)


async def invoke_apply_patch_call(
    tool: Tool[Any], item: Any, call: CallFunction | None = None
) -> dict[str, Any]:
    """Run one ``apply_patch_call`` item with ``tool`` (our ``apply_patch``) and return its
    ``apply_patch_call_output`` item. ``call`` runs the call (default :func:`invoke_call`;
    a session's call function adds its policy, confirmation and steps).

    A malformed item becomes a ``failed`` output, as any failed call: one that is no object
    or whose ``call_id`` is no string answers to the call id ``""``."""
    try:
        data = item_object(item, "apply_patch_call", "call_id and operation")
        call_id = item_id(data, "apply_patch_call", "call_id", "id")
    except ValueError as exc:
        return _failed("", str(exc))
    try:
        arguments = apply_patch_call_arguments(data)
    except ToolError as exc:
        return _failed(call_id, exc.message)
    result = await (call or invoke_call())(tool, arguments, call_id, None)
    return apply_patch_call_output(result)


def _failed(call_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "apply_patch_call_output",
        "call_id": call_id,
        "status": "failed",
        "output": text,
    }


def custom_tool_call_arguments(item: Any) -> dict[str, Any]:
    """The arguments of our ``apply_patch`` tool for a ``custom_tool_call`` item (a dict or the
    SDK's ``ResponseCustomToolCall``): its ``input`` is the patch.

    Raises:
        ToolError: ``INVALID_ARGUMENTS`` for an item that is no object, or whose ``input``
            is absent or no text (a list, a number, ``null``): the message says which.
    """
    data = _item(item, "custom_tool_call", "call_id and input")
    patch = data.get("input")
    if patch is None:
        raise ToolError("The custom_tool_call has no input", ErrorCode.INVALID_ARGUMENTS)
    if not isinstance(patch, str):
        raise ToolError(
            f"The custom_tool_call's input is {json_kind_phrase(patch)}, not text: send the whole "
            "patch, from *** Begin Patch to *** End Patch, as the input",
            ErrorCode.INVALID_ARGUMENTS,
        )
    return {"patch": patch}


async def invoke_custom_tool_call(
    tool: Tool[Any], item: Any, call: CallFunction | None = None
) -> dict[str, Any]:
    """Run one ``custom_tool_call`` item of the custom tool
    :func:`openai_apply_patch_custom_tool` declares with ``tool`` (our ``apply_patch``) and
    return its ``custom_tool_call_output`` item (:func:`custom_tool_call_output`). ``call``
    runs the call (default :func:`invoke_call`; a session's call function adds its policy,
    confirmation and steps).

    A malformed item becomes an ``Error:`` output naming what is wrong, as any failed call:
    one that is no object or whose ``call_id`` is no string answers to the call id ``""``."""
    try:
        data = item_object(item, "custom_tool_call", "call_id and input")
        call_id = item_id(data, "custom_tool_call", "call_id")
    except ValueError as exc:
        return _custom_failed("", str(exc))
    try:
        arguments = custom_tool_call_arguments(data)
    except ToolError as exc:
        return _custom_failed(call_id, exc.message)
    result = await (call or invoke_call())(tool, arguments, call_id, None)
    return custom_tool_call_output(result)


def _custom_failed(call_id: str, text: str) -> dict[str, Any]:
    return {"type": "custom_tool_call_output", "call_id": call_id, "output": f"Error: {text}"}


def custom_tool_call_output(result: Finished) -> dict[str, Any]:
    """The ``custom_tool_call_output`` input item answering ``result``; a failed call's text
    starts with ``Error:``, as OpenAI tool results carry no error flag."""
    text = model_text(result)
    return {
        "type": "custom_tool_call_output",
        "call_id": result.call_id,
        "output": f"Error: {text}" if result.is_error else text,
    }
