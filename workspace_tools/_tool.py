"""Tool definitions and the context a running tool gets."""

from __future__ import annotations

import functools
import inspect
import re
import threading
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools._output import ToolPresentation

if TYPE_CHECKING:
    from sandbox import Sandbox
    from workspace_tools.workspace import Workspace

ArgsT = TypeVar("ArgsT", bound=BaseModel)

PresentationSpec = ToolPresentation | Callable[[Any], ToolPresentation | None] | None
Execute = Callable[[Any, "ToolContext"], Any | Awaitable[Any]]
CacheKey = Callable[[Any], Hashable | None]
"""Of a call's validated arguments: a fingerprint of what the call reads, equal for two calls
exactly while what they read is unchanged; ``None``: do not cache this call."""
NamedPaths = Callable[[Any], Iterable[str]]
"""Of a call's validated arguments: the workspace paths the call names (as given, relative to
the root): the files whose content hashes a sandboxed call carries and hands back."""


class ToolContext:
    """What a running tool gets besides its arguments.

    Attributes:
        call_id: the id of this call (the provider's tool-call id when there is one).
        tool_name: the name of the tool being run.

        deadline: when the call times out, in ``time.monotonic()`` seconds, or ``None``.
        timeout: the call's timeout in seconds (what ``deadline`` was set from), or ``None``.
        timeout_error: what the result says when the call's timeout fires before the tool
            reports a timeout of its own: a tool that knows more than "timed out" (what it
            was doing, why it may take long) sets it before the long step, or as the
            cancellation leaves it (run_command: with the output so far). ``None``: the
            plain ``TOOL_TIMEOUT`` message.
        workspace: the :class:`~workspace_tools.workspace.Workspace` the tool works on (its
            :attr:`Tool.workspace`), or ``None``. A tool's ``execute`` can be a plain
            module-level function that takes everything from ``(args, context)``: in a
            sandbox child this is a copy of the caller's workspace made from its settings,
            holding the content hashes of the files the call names (:attr:`Tool.paths`),
            and what the call records there is handed back to the caller's.
        runner: what runs the tool's commands and keeps what its calls share (its
            :attr:`Tool.runner`): run_command's ``CommandRunner``, the shell and process
            tools' ``ShellSession``; ``None`` for other tools.

    A tool that can stop its own work stops it :meth:`seconds_left` before the deadline and
    reports its own timeout (with what it had done); the call's timeout is the backstop.

    :meth:`update` reports progress. It is a plain method, safe to call from the tool's task
    or from a worker thread, as often as the tool likes. Updates are for people watching;
    nothing of them reaches the model. Updates after the call ended are dropped.

    Cancellation: when the call times out or is cancelled, :func:`invoke_tool` returns at
    once (``TOOL_TIMEOUT``) and marks the context :attr:`cancelled`. An async tool is
    interrupted at its next ``await``. A sync tool runs in a worker thread, which Python
    cannot stop: it runs on to its end, and its result is dropped. What it changes after
    the timeout still happens, unless it asks: :meth:`check_cancelled` between steps, and
    :meth:`committing` around the step that makes its change (a rename, a commit), which
    refuses to start once the call was cancelled and holds off the cancellation while the
    step runs. The built-in ``write_file`` and ``edit_file`` commit that way, so nothing
    of a timed-out call lands afterwards; ``run_command`` kills its process tree. A tool
    run in a sandbox is stopped with its child process.
    """

    def __init__(
        self,
        call_id: str,
        tool_name: str,
        emit: Callable[[Any, Any, ToolPresentation | None], None] | None = None,
        *,
        deadline: float | None = None,
        timeout: float | None = None,
        workspace: Workspace | None = None,
        runner: Any = None,
    ) -> None:
        self.call_id = call_id
        self.tool_name = tool_name
        self.deadline = deadline
        self.timeout = timeout
        self.workspace = workspace
        self.runner = runner
        self.timeout_error: ToolError | None = None
        self._emit = emit
        self._lock = threading.Lock()
        self._open = emit is not None
        self._commit_lock = threading.Lock()
        self._cancelled = False
        self._ended = False  # set once, by close(); a plain flag is all its readers need

    def need_workspace(self) -> Workspace:
        """:attr:`workspace`, for a tool that cannot work without one.

        Raises:
            ToolError: ``TOOL_ERROR`` when the tool was built without a workspace.
        """
        if self.workspace is None:
            raise ToolError(
                f"{self.tool_name} has no workspace to work on: build it with "
                "workspace_tools(root), or give tool(..., workspace=...)",
                ErrorCode.TOOL_ERROR,
            )
        return self.workspace

    def seconds_left(self, margin: float = 0.0) -> float | None:
        """Seconds from now until :attr:`deadline` less ``margin`` (never below 0), or
        ``None`` without a deadline: how long a tool's own step may run so that it ends,
        and reports its own timeout, before the call's timeout fires."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic() - margin)

    @property
    def ended(self) -> bool:
        """Whether the call is over (returned, timed out or cancelled): a sync tool still
        running in its abandoned worker thread should stop what it started."""
        return self._ended

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
        self._ended = True

    @property
    def cancelled(self) -> bool:
        """True once the call timed out or was cancelled: its result will be dropped, and
        the tool should change nothing more."""
        return self._cancelled

    def check_cancelled(self) -> None:
        """Raise when the call was cancelled; a long sync tool calls it between steps.

        Raises:
            ToolError: ``ABORTED`` once :attr:`cancelled`.
        """
        if self._cancelled:
            raise ToolError(
                f"The {self.tool_name} call was cancelled (it timed out or was aborted); "
                "it stopped before its next change",
                ErrorCode.ABORTED,
            )

    @contextmanager
    def committing(self) -> Iterator[None]:
        """Guard the step that makes a tool's change: ``with context.committing(): rename``.

        Raises :class:`ToolError` (``ABORTED``) instead of entering once the call was
        cancelled; while the block runs, a cancellation waits for it (:meth:`cancel`
        blocks), so the change lands whole before the timeout is reported or not at all.
        Keep the block short and never ``await`` inside it.
        """
        with self._commit_lock:
            self.check_cancelled()
            yield

    def cancel(self) -> None:
        """Mark the call cancelled (:func:`invoke_tool` does it on a timeout or a
        cancellation). Waits for a :meth:`committing` block that is running; none starts
        after it returns."""
        with self._commit_lock:
            self._cancelled = True


@dataclass(frozen=True)
class ToolState:
    """State a custom tool keeps in the caller's process between calls, which a call run in
    a sandbox child must be given and must hand back: the child is another process, which
    has only what the call carries. A tool over a workspace needs none for the workspace's
    content hashes and per-file locks: it declares :attr:`Tool.workspace` and
    :attr:`Tool.paths` instead.

    Its ``restore`` and ``changes`` cross to the child with the call (by reference when
    importable, else by value: they must pickle, see ``sandbox.Sandbox.call``).

    Attributes:
        snapshot: ``() -> S`` in the caller before the call; ``S`` pickles.
        restore: ``(S) -> None`` in the child, before the call runs.
        changes: ``(S) -> C`` in the child after the call: what it changed since ``S``.
        apply: ``(C) -> None`` in the caller, after the call.
        lock: ``(args) -> threading.Lock | None``: the lock a call with ``args`` takes in
            process (a file's), held in the caller around the sandboxed call so that calls
            on one file still run one after another; ``None`` when calls take none.
        snapshot_for: ``(args) -> S``, used instead of ``snapshot`` when given: only the
            part a call with these validated arguments needs (the file tools: the hashes
            of the files it names), so that what a call carries does not grow with all
            the state there is.
    """

    snapshot: Callable[[], Any]
    restore: Callable[[Any], None]
    changes: Callable[[Any], Any]
    apply: Callable[[Any], None]
    lock: Callable[[Any], threading.Lock | None] | None = None
    snapshot_for: Callable[[Any], Any] | None = None


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
        workspace: the :class:`~workspace_tools.workspace.Workspace` the tool works on,
            given to ``execute`` as :attr:`ToolContext.workspace`; it crosses into a
            sandbox child as its settings (root and options).
        paths: a :data:`NamedPaths`: the workspace files a call names. A call run in a
            sandbox carries their content hashes (for staleness checks) into the child and
            hands back those the call changed. ``None``: the call carries none.
        locks_paths: a call takes the per-file lock of each file it names
            (:meth:`FileStates.lock`), so calls that change one file run one after
            another; a sandboxed call's locks are held in the caller around it.
        runner: what runs the tool's commands and keeps what its calls share, given to
            ``execute`` as :attr:`ToolContext.runner` (run_command's ``CommandRunner``, the
            shell and process tools' ``ShellSession``); ``None``: none.
        state: what a call run in a sandbox must carry in and out besides the workspace's
            hashes (see :class:`ToolState`).
        cache_key: for a read-only tool, a :data:`CacheKey`: a session serves a repeated
            identical call from its earlier result while the key is unchanged. ``None``
            (default): never cached. The workspace tools that read set it (the file's content hash,
            the stat of the tree).
        invalidates_cache: a call may change what other calls read, so a session forgets
            its cached results before running it; ``None`` (default): when not ``read_only``.
        sandbox: run every call's ``execute`` in a child of this :class:`sandbox.Sandbox`
            (no progress updates), unless the call names its own sandbox.
        stateless: ``execute`` keeps no state of its own between calls (what it keeps
            lives in its workspace's caches, validated by each file's stat on every call):
            a sandbox may run its calls one after another in one long-lived confined
            process instead of a fresh child each (``Sandbox.call(...,
            reuse_process=True)``). False (default): a fresh child per call. The built-in
            file tools declare it.
        commands_only: ``execute`` acts outside this process only through its
            :attr:`runner`: the commands it runs and what it keeps of them (run_command,
            the shell and process tools declare it). With a sandbox, a call runs in
            process with the runner's ``in_sandbox(sandbox, workspace)`` as its runner,
            which runs the commands in that sandbox, each with every protection of the
            sandbox, rather than in a sandbox child that would start command processes
            of its own for every call; ``in_sandbox`` may give ``None`` (the call then
            runs in a child of the sandbox) or raise a :class:`ToolError` (the result).
            False (default): a sandboxed call's ``execute`` runs in a sandbox child.
        preempt: what a call must do at once, even while it waits behind the calls ahead
            of it (a :class:`~workspace_tools.ToolSession` runs its calls one after
            another, an MCP server's checkpoints its writing calls): called with the
            validated arguments on the event loop, so it must not block, and only for a
            call the session's policy allows outright; the call then runs in its turn.
            The shell's stops the shell for a ``restart``, so that a restart ends the
            command it would wait behind. ``None`` (default): nothing.
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
    cache_key: CacheKey | None = None
    invalidates_cache: bool | None = None
    sandbox: Sandbox | None = None
    workspace: Workspace | None = None
    paths: NamedPaths | None = None
    locks_paths: bool = False
    runner: Any = None
    stateless: bool = False
    commands_only: bool = False
    preempt: Callable[[Any], None] | None = None

    @property
    def invalidates(self) -> bool:
        """Whether a call may change what other calls read (see ``invalidates_cache``)."""
        if self.invalidates_cache is None:
            return not self.read_only
        return self.invalidates_cache

    @functools.cached_property
    def is_async(self) -> bool:
        """Whether ``execute`` is a coroutine function (else a sync tool, run in a worker
        thread); found once per tool."""
        return inspect.iscoroutinefunction(self.execute)

    @functools.cached_property
    def argument_names(self) -> frozenset[str] | None:
        """The names an argument may have (the fields of ``parameters`` and their
        aliases), or ``None`` when ``parameters`` takes any (``extra="allow"``); found once
        per tool."""
        if self.parameters.model_config.get("extra") == "allow":
            return None
        fields = self.parameters.model_fields
        return frozenset(fields) | {f.alias for f in fields.values() if f.alias}

    @functools.cached_property
    def output_names(self) -> frozenset[str] | None:
        """The keys structured content may have (the fields of ``output_schema`` and their
        aliases) when its schema says no other may appear (``extra="forbid"``, JSON Schema's
        ``additionalProperties: false``), else ``None``: a schema that does not forbid them
        describes content with more keys too; found once per tool."""
        schema = self.output_schema
        if schema is None or schema.model_config.get("extra") != "forbid":
            return None
        fields = schema.model_fields
        return frozenset(fields) | {f.alias for f in fields.values() if f.alias}

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
    cache_key: CacheKey | None = None,
    invalidates_cache: bool | None = None,
    sandbox: Sandbox | None = None,
    workspace: Workspace | None = None,
    paths: NamedPaths | None = None,
    locks_paths: bool = False,
    runner: Any = None,
    stateless: bool = False,
    commands_only: bool = False,
    preempt: Callable[[Any], None] | None = None,
) -> Tool[ArgsT]:
    """Define a :class:`Tool` (the arguments are its attributes).

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
        cache_key=cache_key,
        invalidates_cache=invalidates_cache,
        sandbox=sandbox,
        workspace=workspace,
        paths=paths,
        locks_paths=locks_paths,
        runner=runner,
        stateless=stateless,
        commands_only=commands_only,
        preempt=preempt,
    )


def path_argument(args: Any) -> tuple[str]:
    """The :data:`NamedPaths` of a tool whose calls name one file, ``args.path``."""
    return (args.path,)


def placeholder_args(tool: Tool[Any], given: Any = None) -> BaseModel:
    """Unvalidated arguments for presenting a call whose arguments did not validate: the
    fields of ``given`` (a dict) the model has, ``None`` for absent required ones, the
    defaults for the rest."""
    fields = tool.parameters.model_fields
    known = {k: v for k, v in given.items() if k in fields} if isinstance(given, dict) else {}
    required = {name: None for name, field in fields.items() if field.is_required()}
    return tool.parameters.model_construct(**{**required, **known})
