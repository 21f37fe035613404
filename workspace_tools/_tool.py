"""Tool definitions and the context a running tool gets."""

from __future__ import annotations

import re
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from ._output import ToolPresentation

ArgsT = TypeVar("ArgsT", bound=BaseModel)

PresentationSpec = ToolPresentation | Callable[[Any], ToolPresentation | None] | None
Execute = Callable[[Any, "ToolContext"], Any | Awaitable[Any]]


class ToolContext:
    """What a running tool gets besides its arguments.

    Attributes:
        call_id: the id of this call (the provider's tool-call id when there is one).
        tool_name: the name of the tool being run.

        deadline: when the call times out, in ``time.monotonic()`` seconds, or ``None``.

    :meth:`update` reports progress. It is a plain method, safe to call from the tool's task
    or from a worker thread, as often as the tool likes. Updates are for people watching;
    nothing of them reaches the model. Updates after the call ended are dropped.
    """

    def __init__(
        self,
        call_id: str,
        tool_name: str,
        emit: Callable[[Any, Any, ToolPresentation | None], None] | None = None,
        *,
        deadline: float | None = None,
    ) -> None:
        self.call_id = call_id
        self.tool_name = tool_name
        self.deadline = deadline
        self._emit = emit
        self._lock = threading.Lock()
        self._open = emit is not None
        self._ended = threading.Event()

    @property
    def ended(self) -> bool:
        """Whether the call is over (returned, timed out or cancelled): a sync tool still
        running in its abandoned worker thread should stop what it started."""
        return self._ended.is_set()

    @property
    def reports_progress(self) -> bool:
        """False when nobody listens (no callback, or the call runs in a sandbox)."""
        return self._open

    def update(
        self,
        content: Any = None,
        details: Any = None,
        presentation: ToolPresentation | None = None,
    ) -> None:
        """Report progress: partial ``content``, ``details`` and an updated ``presentation``."""
        # The lock makes close() a barrier: once it returns, no callback is running or will run.
        with self._lock:
            if self._open and self._emit is not None:
                self._emit(content, details, presentation)

    def close(self) -> None:
        """End the call: later updates are dropped, and :attr:`ended` turns true."""
        with self._lock:
            self._open = False
        self._ended.set()


@dataclass(frozen=True)
class ToolState:
    """State a tool keeps in the caller's process between calls (a workspace's content
    hashes for staleness checks and its per-file locks), which a call run in a sandbox
    child must be given and must hand back: the child's memory is a copy, forked earlier.

    Build it once per tool: its callables are passed to the child by reference, which
    needs the same objects on every call.

    Attributes:
        snapshot: ``() -> S`` in the caller before the call; ``S`` pickles.
        restore: ``(S) -> None`` in the child, before the call runs.
        changes: ``(S) -> C`` in the child after the call: what it changed since ``S``.
        apply: ``(C) -> None`` in the caller, after the call.
        lock: ``(args) -> threading.Lock | None``: the lock a call with ``args`` takes in
            process (a file's), held in the caller around the sandboxed call so that calls
            on one file still run one after another; ``None`` when calls take none.
    """

    snapshot: Callable[[], Any]
    restore: Callable[[Any], None]
    changes: Callable[[Any], Any]
    apply: Callable[[Any], None]
    lock: Callable[[Any], threading.Lock | None] | None = None


@dataclass(frozen=True)
class Tool(Generic[ArgsT]):
    """A tool a model can call. Build one with :func:`tool`.

    Attributes:
        name: the name the model calls (``^[a-zA-Z0-9_-]{1,64}$``).
        description: what the tool does, for the model.
        parameters: pydantic model class of the arguments; its JSON Schema is what a model sees.
        execute: ``execute(args, context)``, sync or async; returns content or a ToolOutput.
        presentation: a :class:`ToolPresentation` or a function of the validated arguments.
        output_schema: pydantic model class describing ``content`` (not the ToolOutput).
        timeout: seconds before the call is cancelled, or ``None``.
        read_only: the tool never changes anything.
        state: what a call run in a sandbox must carry in and out (see :class:`ToolState`).
    """

    name: str
    description: str
    parameters: type[ArgsT]
    execute: Execute
    presentation: PresentationSpec = None
    output_schema: type[BaseModel] | None = None
    timeout: float | None = None
    read_only: bool = False
    state: ToolState | None = None

    def input_schema(self) -> dict[str, Any]:
        """JSON Schema of the arguments (draft 2020-12, as pydantic emits it)."""
        return self.parameters.model_json_schema()

    def output_json_schema(self) -> dict[str, Any] | None:
        """JSON Schema of the content, or ``None`` when the tool declares none."""
        return None if self.output_schema is None else self.output_schema.model_json_schema()

    def present(self, args: ArgsT | None) -> ToolPresentation | None:
        """The tool's presentation for ``args``; ``None`` if it has none or its function raised."""
        spec = self.presentation
        if spec is None or isinstance(spec, ToolPresentation):
            return spec
        if args is None:
            return None
        try:
            return spec(args)
        except Exception:
            # A broken presentation must never fail the call it decorates.
            return None


def tool(
    *,
    name: str,
    description: str,
    parameters: type[ArgsT],
    execute: Execute,
    presentation: PresentationSpec = None,
    output_schema: type[BaseModel] | None = None,
    timeout: float | None = None,
    read_only: bool = False,
    state: ToolState | None = None,
) -> Tool[ArgsT]:
    """Define a :class:`Tool`.

    Raises:
        ValueError: the name is not 1-64 characters of ``[a-zA-Z0-9_-]``, or ``parameters``
            is not a pydantic model class.
    """
    if not re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name):
        raise ValueError(f"tool name must match [a-zA-Z0-9_-]{{1,64}}, got {name!r}")
    if not (isinstance(parameters, type) and issubclass(parameters, BaseModel)):
        raise ValueError("parameters must be a pydantic model class")
    return Tool(
        name=name,
        description=description,
        parameters=parameters,
        execute=execute,
        presentation=presentation,
        output_schema=output_schema,
        timeout=timeout,
        read_only=read_only,
        state=state,
    )
