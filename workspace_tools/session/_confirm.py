"""Asking a person about a call: the request, the answer, and running the callback.

An MCP server answers a session's ``ask`` by elicitation (MCP revision 2025-06-18, form
mode) when the client declared the ``elicitation`` capability, and declines with a reason
otherwise: ``workspace_tools.adapters.mcp.elicitation_confirm`` builds that callback.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio.to_thread
from pydantic import BaseModel, ConfigDict

from workspace_tools._output import ToolPresentation

logger = logging.getLogger("workspace_tools")


class ConfirmationRequest(BaseModel):
    """What a confirmation callback is asked about: one call a policy rule wants confirmed.

    Attributes:
        call_id: the call's id.
        tool: the tool name.
        arguments: the validated arguments as JSON.
        presentation: the tool's presentation for these arguments (label, icon, detail).
        read_only: the tool's ``read_only`` flag.
        rule: the name of the rule that asked.
    """

    model_config = ConfigDict(frozen=True)

    call_id: str
    tool: str
    arguments: dict[str, Any]
    presentation: ToolPresentation | None = None
    read_only: bool
    rule: str

    def prompt(self) -> str:
        """A question for a person: the call as a step list shows it, then what to decide.

        ``Run command: rm -rf build`` / ``Allow this run_command call? (policy rule
        '--ask run_command')``; without a presentation the arguments are shown as JSON.
        """
        shown = self.presentation
        if shown is not None:
            head = f"{shown.label}: {shown.detail}" if shown.detail else shown.label
        else:
            head = f"{self.tool} {self.arguments}"
        return f"{head}\nAllow this {self.tool} call? (policy rule '{self.rule}')"


class Confirmation(BaseModel):
    """A confirmation callback's answer: approve or decline, with a reason the model reads
    when declined."""

    model_config = ConfigDict(frozen=True)

    approved: bool
    reason: str | None = None


ConfirmCallback = Callable[
    [ConfirmationRequest], Confirmation | bool | Awaitable[Confirmation | bool]
]


async def ask(callback: ConfirmCallback, request: ConfirmationRequest) -> Confirmation:
    """Run ``callback`` (sync in a worker thread, so it may block on a prompt; async in the
    caller's loop); a callback that raises declines, naming the error, and so does one
    that answers with anything but a :class:`Confirmation` or a ``bool`` (``"yes"``,
    ``None``): an answer that is not clearly an approval is not one."""
    try:
        if inspect.iscoroutinefunction(callback):
            answer = await callback(request)
        else:
            answer = await anyio.to_thread.run_sync(callback, request)
            if inspect.isawaitable(answer):
                answer = await answer
    except Exception as exc:
        logger.exception(
            "confirmation callback raised for %s call %s", request.tool, request.call_id
        )
        return Confirmation(approved=False, reason=f"the confirmation failed ({exc})")
    if isinstance(answer, bool):
        return Confirmation(approved=answer)
    if isinstance(answer, Confirmation):
        return answer
    kind = type(answer).__name__
    logger.error(
        "confirmation callback returned %s for %s call %s", kind, request.tool, request.call_id
    )
    reason = f"the confirmation callback returned {kind}, not a Confirmation or a bool"
    return Confirmation(approved=False, reason=reason)
