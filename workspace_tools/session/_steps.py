"""The record a session keeps: one step per call, a trace of timed events, a terminal summary."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from workspace_tools._errors import ErrorCode
from workspace_tools._output import ToolPresentation
from workspace_tools._result import utf8_safe
from workspace_tools.session._checkpoints import ChangedFile
from workspace_tools.session._encodable import Encodable
from workspace_tools.session._policy import Decision

SkipReason = Literal["policy", "confirmation", "missing"]


class Step(Encodable):
    """What one call did (SPEC section 5).

    Attributes:
        index: position in the session, from 0.
        tool: the tool name the model called.
        input: the validated arguments as JSON; the arguments as given when they did not
            validate (a skipped ``missing`` or a failed call).
        result: exactly the text the model read.
        skipped: nothing ran (``skip_reason`` says why).
        skip_reason: ``policy`` (a rule denied it), ``confirmation`` (declined when asked)
            or ``missing`` (required arguments absent).
        denied_by: the name of the policy rule behind a ``policy`` or ``confirmation`` skip.
        cached: served from an earlier identical call; nothing ran.
        failed: the call ended in an error (the tool raised, invalid arguments, a timeout, an
            unknown tool); ``result`` carries the message. Effects of earlier steps stay.
        changed_files: in a session with checkpoints, what a step whose tool can write
            created, changed and deleted (a command's changes too), in path order; ``None``
            for a step without a checkpoint.
    """

    index: int
    tool: str
    input: Any = None
    result: str
    skipped: bool = False
    skip_reason: SkipReason | None = None
    denied_by: str | None = None
    cached: bool = False
    failed: bool = False
    changed_files: list[ChangedFile] | None = None


class _TraceEvent(Encodable):
    step: int
    call_id: str
    at_ms: float = Field(description="milliseconds since the session started")


class CallEvent(_TraceEvent):
    """A call arrived; ``presentation`` is the tool's for the call's arguments."""

    type: Literal["call"] = "call"
    tool: str
    presentation: ToolPresentation | None = None


class PolicyEvent(_TraceEvent):
    """The policy decided; ``rule`` is the rule that did (``default`` when none applied)."""

    type: Literal["policy"] = "policy"
    decision: Decision
    rule: str


class ConfirmEvent(_TraceEvent):
    """The confirmation callback answered after ``ms`` milliseconds."""

    type: Literal["confirm"] = "confirm"
    approved: bool
    reason: str | None = None
    ms: float


class CacheEvent(_TraceEvent):
    """The call was served from step ``from_step``."""

    type: Literal["cache"] = "cache"
    from_step: int


class ToolRunEvent(_TraceEvent):
    """The tool ran for ``ms`` milliseconds; ``error_code`` when it failed."""

    type: Literal["tool"] = "tool"
    ms: float
    error_code: ErrorCode | None = None


TraceEvent = Annotated[
    CallEvent | PolicyEvent | ConfirmEvent | CacheEvent | ToolRunEvent,
    Field(discriminator="type"),
]

StepState = Literal["ran", "failed", "cached", "denied", "declined", "missing"]


class StepSummary(Encodable):
    """One row of a step list: what to draw for a call."""

    index: int
    label: str
    detail: str | None = None
    icon: str | None = None
    state: StepState
    note: str | None = Field(None, description="the rule that denied or declined the call")


def step_state(step: Step) -> StepState:
    """The one word a list shows for ``step``."""
    if step.skip_reason == "policy":
        return "denied"
    if step.skip_reason == "confirmation":
        return "declined"
    if step.skip_reason == "missing":
        return "missing"
    if step.cached:
        return "cached"
    return "failed" if step.failed else "ran"


class SessionRecord(Encodable):
    """Everything a session did, in order; round-trips through JSON."""

    steps: list[Step] = Field(default_factory=list)
    trace: list[TraceEvent] = Field(default_factory=list)

    def summary(self) -> list[StepSummary]:
        """The steps as rows (label and detail from the call's presentation, else the name)."""
        presentations = {e.step: e.presentation for e in self.trace if isinstance(e, CallEvent)}
        rows = []
        for step in self.steps:
            shown = presentations.get(step.index)
            rows.append(
                StepSummary(
                    index=step.index,
                    label=shown.label if shown else step.tool,
                    detail=shown.detail if shown else None,
                    icon=shown.icon if shown else None,
                    state=step_state(step),
                    note=step.denied_by,
                )
            )
        return rows

    def render(self) -> str:
        """The summary as aligned columns: index, label, state, the detail on one line (cut
        at 60 characters), and ``[rule]`` for a denied or declined call."""
        rows = self.summary()
        if not rows:
            return ""
        label_width = max(len(row.label) for row in rows)
        state_width = max(len(row.state) for row in rows)
        lines = []
        for row in rows:
            detail = _one_line(row.detail or "")
            rule = f"  [{row.note}]" if row.note else ""
            line = f"{row.index:>3}  {row.label:<{label_width}}  {row.state:<{state_width}}  "
            lines.append(f"{line}{detail}{rule}".rstrip())
        return "\n".join(lines)


def _one_line(text: str, limit: int = 60) -> str:
    flat = " ".join(utf8_safe(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
