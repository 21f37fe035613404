"""OpenAI's hosted-format shell tools served by ours: ``shell`` (Responses API) by the
persistent ``shell`` tool, and the legacy ``local_shell`` by ``run_command``.

``shell``: a ``shell_call`` item carries ``action: {commands, timeout_ms?,
max_output_length?}``. Each command is one call of our ``shell`` tool (through a
:data:`CallFunction`, so a :class:`ToolSession`'s policy and step record apply), in order,
in the one persistent shell (a ``cd`` carries over to the next command); ``timeout_ms``
applies to each command. The answer is a ``shell_call_output`` item with one
``{stdout, stderr, outcome}`` per command, ``outcome`` ``{"type": "exit", "exit_code"}``
or ``{"type": "timeout"}`` (a timeout kills the shell; the commands after it run in a new
one), and ``max_output_length`` passed back as given: each command's stdout and stderr
together are cut to that many characters, keeping head and tail. A command that could not
run (a refused call, an invalid command) is exit code 126 with the reason on stderr. Our
notes (the file that holds the whole output, the shell moved back to the root) end stderr,
marked ``[workspace-tools]``, kept whole within ``max_output_length`` when they take at
most half of it: a cut output's note is what says where the rest is.

``local_shell``: a ``local_shell_call`` item's ``action: {type: "exec", command: [argv],
env, working_directory?, timeout_ms?, user?}`` runs as one ``run_command`` call (the argv
quoted, ``env`` as assignments before it); the answer is a ``local_shell_call_output`` item whose
``output`` is the JSON text ``{"output": ..., "metadata": {"exit_code", "duration_seconds"}}``
(Codex's shape); a timeout is exit code 124, its output starting ``command timed out after
N milliseconds``. ``user`` other than the current one is refused.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from workspace_tools._errors import ErrorCode
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
from workspace_tools.session._pipeline import format_validation_error

#: Exit code of a command that could not run (the shell's "cannot execute").
NOT_RUN_EXIT_CODE = 126
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: Exit code of a command that timed out (Codex's, coreutils timeout's).
TIMEOUT_EXIT_CODE = 124


class ShellAction(BaseModel):
    """A ``shell_call`` item's ``action`` as the Responses API defines it; an item that does
    not fit is answered with exit code 126 and what is wrong, never run in part."""

    model_config = ConfigDict(extra="ignore")

    commands: list[str] = Field(min_length=1)
    timeout_ms: int | None = Field(None, gt=0)
    max_output_length: int | None = Field(None, ge=0)


class LocalShellAction(BaseModel):
    """A ``local_shell_call`` item's ``action`` (``type`` ``exec``); ``command`` is an argv."""

    model_config = ConfigDict(extra="ignore")

    command: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    working_directory: str | None = None
    timeout_ms: int | None = Field(None, gt=0)
    user: str | None = None


def openai_shell_tool() -> dict[str, Any]:
    """The ``tools`` entry (``FunctionShellToolParam``) for a local shell."""
    return {"type": "shell", "environment": {"type": "local"}}


def openai_local_shell_tool() -> dict[str, Any]:
    """The ``tools`` entry (``LocalShellParam``) of the legacy local shell."""
    return {"type": "local_shell"}


async def call_openai_shell(
    item: Mapping[str, Any] | Any, shell_tool: Tool[Any], call: CallFunction | None = None
) -> dict[str, Any]:
    """Run every command of a ``shell_call`` item (a dict, or the SDK's
    ``ResponseFunctionShellToolCall``) with ``shell_tool`` (the ``shell`` tool
    of a :class:`ShellSession`) and return the ``shell_call_output`` item.

    ``call`` runs each call (default :func:`invoke_call`); pass ``session.call`` for a
    :class:`ToolSession`'s policy and step record.
    """
    runner = call or invoke_call()
    try:
        data = item_object(item, "shell_call", "call_id and action")
        call_id = item_id(data, "shell_call", "call_id", "id")
    except ValueError as exc:
        return _refused("", str(exc))
    try:
        action = ShellAction.model_validate(item_field(data, "action", "shell_call", "commands"))
    except ValueError as exc:  # pydantic's ValidationError is one
        if isinstance(exc, ValidationError):
            return _refused(call_id, format_validation_error("shell_call", exc))
        return _refused(call_id, str(exc))
    limit = action.max_output_length
    outputs = []
    for index, command in enumerate(action.commands):
        arguments: dict[str, Any] = {"command": command}
        if action.timeout_ms is not None:
            arguments["timeout"] = seconds_of_ms(action.timeout_ms)
        result = await runner(shell_tool, arguments, f"{call_id}:{index}", None)
        outputs.append(_shell_output(result, limit))
    answer: dict[str, Any] = {"type": "shell_call_output", "call_id": call_id, "output": outputs}
    if limit is not None:
        answer["max_output_length"] = limit
    return answer


def _refused(call_id: str, why: str) -> dict[str, Any]:
    """The ``shell_call_output`` of a call that did not run: ``why`` as its stderr."""
    refused = {
        "stdout": "",
        "stderr": why,
        "outcome": {"type": "exit", "exit_code": NOT_RUN_EXIT_CODE},
    }
    return {"type": "shell_call_output", "call_id": call_id, "output": [refused]}


def _shell_output(result: ToolResult, limit: int | None) -> dict[str, Any]:
    details = result.details
    if result.is_error and result.error_code == ErrorCode.TOOL_TIMEOUT:
        stdout = getattr(details, "stdout", "")
        stderr = getattr(details, "stderr", "")
        outcome: dict[str, Any] = {"type": "timeout"}
    elif result.is_error:
        stdout, stderr = "", model_text(result)
        outcome = {"type": "exit", "exit_code": NOT_RUN_EXIT_CODE}
    else:
        content = result.content
        stdout, stderr = content["stdout"], content["stderr"]
        notes = "\n".join(f"[workspace-tools] {note}" for note in content["notes"])
        outcome = {"type": "exit", "exit_code": content["exit_code"]}
        if limit is not None and notes and len(notes) + 1 <= limit // 2:
            # The notes first, whole: the rest of the room goes to the streams.
            stdout, stderr = _fit(stdout, stderr, limit - len(notes) - 1)
            return {"stdout": stdout, "stderr": _ending(stderr, notes), "outcome": outcome}
        stderr = _ending(stderr, notes)
    if limit is not None:
        stdout, stderr = _fit(stdout, stderr, limit)
    return {"stdout": stdout, "stderr": stderr, "outcome": outcome}


def _ending(stderr: str, notes: str) -> str:
    """``stderr`` with ``notes`` on a line of their own after it."""
    if not notes:
        return stderr
    return f"{stderr}\n{notes}" if stderr else notes


def _fit(stdout: str, stderr: str, limit: int) -> tuple[str, str]:
    """Both streams cut to ``limit`` characters together: stderr gets up to half, stdout
    the rest (and stderr what stdout leaves); each keeps its head and tail."""
    limit = max(0, limit)
    if len(stdout) + len(stderr) <= limit:
        return stdout, stderr
    err_room = min(len(stderr), limit // 2)
    out_room = min(len(stdout), limit - err_room)
    err_room = min(len(stderr), limit - out_room)
    return _cut(stdout, out_room), _cut(stderr, err_room)


def _cut(text: str, room: int) -> str:
    """``text`` in ``room`` characters: head, a marker counting what it leaves out, tail
    (the head alone when the marker does not fit)."""
    if len(text) <= room:
        return text
    keep = room
    for _ in range(3):  # the count's width changes the marker's length, rarely twice
        marker = f"\n[... {len(text) - keep:,} characters left out ...]\n"
        keep = room - len(marker)
    if keep < 2:
        return text[:room]
    marker = f"\n[... {len(text) - keep:,} characters left out ...]\n"
    keep = room - len(marker)
    head, tail = keep - keep // 2, keep // 2
    return text[:head] + marker + (text[-tail:] if tail else "")


async def call_local_shell(
    item: Mapping[str, Any] | Any,
    run_command_tool: Tool[Any],
    root: str | os.PathLike[str],
    call: CallFunction | None = None,
) -> dict[str, Any]:
    """Run a ``local_shell_call`` item (a dict, or the SDK's ``LocalShellCall``) with
    ``run_command_tool`` in the workspace ``root`` and return the ``local_shell_call_output``
    item (see the module docstring)."""
    runner = call or invoke_call()
    try:
        item = item_object(item, "local_shell_call", "call_id and action")
        call_id = item_id(item, "local_shell_call", "call_id", "id")
    except ValueError as exc:
        return _local_output({"call_id": ""}, str(exc), NOT_RUN_EXIT_CODE, 0.0)
    try:
        action = LocalShellAction.model_validate(
            item_field(item, "action", "local_shell_call", "command")
        )
    except ValueError as exc:  # pydantic's ValidationError is one
        if isinstance(exc, ValidationError):
            exc = ValueError(format_validation_error("local_shell_call", exc))
        return _local_output(item, str(exc), NOT_RUN_EXIT_CODE, 0.0)
    argv: Sequence[str] = action.command
    env: Mapping[str, str] = action.env
    timeout_ms = action.timeout_ms
    user = action.user
    if user and user != _current_user():
        text = f"running as user {user!r} is not supported; commands run as {_current_user()}"
        return _local_output(item, text, NOT_RUN_EXIT_CODE, 0.0)
    bad = [name for name in env if not _NAME.fullmatch(name)]
    if bad:
        text = f"environment variable name {bad[0]!r} is not valid: letters, digits and _ only"
        return _local_output(item, text, NOT_RUN_EXIT_CODE, 0.0)
    # Assignments before the command: the shell sets them for that command only.
    command = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), shlex.join(argv)])
    arguments: dict[str, Any] = {"command": command}
    if action.working_directory:
        arguments["cwd"] = _relative(action.working_directory, Path(root))
    if timeout_ms is not None:
        arguments["timeout"] = seconds_of_ms(timeout_ms)
    result = await runner(run_command_tool, arguments, call_id, None)
    seconds = result.duration_ms / 1000
    details = result.details
    if result.is_error and result.error_code == ErrorCode.TOOL_TIMEOUT:
        if timeout_ms is None:  # the workspace's own command_timeout applied
            workspace = run_command_tool.workspace
            limit = workspace.options.command_timeout if workspace is not None else seconds
            timeout_ms = round(limit * 1000)
        text = f"command timed out after {timeout_ms} milliseconds\n" + _joined(
            getattr(details, "stdout", ""), getattr(details, "stderr", "")
        )
        return _local_output(item, text, TIMEOUT_EXIT_CODE, seconds)
    if result.is_error:
        return _local_output(item, model_text(result), NOT_RUN_EXIT_CODE, seconds)
    content = result.content
    text = _joined(content["stdout"], content["stderr"])
    if content.get("note"):  # what the command left running was stopped
        text = _joined(text, f"[workspace-tools] {content['note']}\n")
    return _local_output(item, text, content["exit_code"], seconds)


def _joined(stdout: str, stderr: str) -> str:
    if stdout and stderr and not stdout.endswith("\n"):
        return f"{stdout}\n{stderr}"
    return stdout + stderr


def _relative(directory: str, root: Path) -> str:
    """A working directory as ``run_command`` takes it: relative to the root (an absolute
    one outside it stays absolute, and is refused there)."""
    if not os.path.isabs(directory):
        return directory
    return os.path.relpath(directory, root) if _inside(directory, root) else directory


def _inside(path: str, root: Path) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base.rstrip("/") + "/")


def _current_user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def _local_output(
    item: Mapping[str, Any], text: str, exit_code: int, seconds: float
) -> dict[str, Any]:
    payload = {
        "output": text,
        "metadata": {"exit_code": exit_code, "duration_seconds": round(seconds, 1)},
    }
    return {
        "type": "local_shell_call_output",
        "id": str(item.get("call_id") or item.get("id") or ""),
        "output": json.dumps(payload, ensure_ascii=False),
        "status": "completed",
    }
