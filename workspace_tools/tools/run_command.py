"""run_command: a shell command in the workspace, with streamed output and a hard timeout."""

from __future__ import annotations

import contextlib
import os
import stat
import time
import weakref
from collections.abc import Callable
from typing import Any

import anyio
from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)

from sandbox import (
    CapturedOutput,
    ProcessResult,
    Sandbox,
    SandboxError,
)
from sandbox.spawn._capture import OutputBuffer
from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools._output import ToolOutput, ToolPresentation
from workspace_tools._tool import Tool, ToolContext, tool
from workspace_tools.tools._command_output import (
    ProgressBatcher,
    model_view,
    not_utf8,
    not_utf8_note,
    sandbox_note,
    stopped_note,
)
from workspace_tools.tools._command_runner import (
    CommandRunner,
    shell_on,
    working_dir_changed,
)
from workspace_tools.workspace import Workspace
from workspace_tools.workspace._files import open_dir, os_error, stat_below
from workspace_tools.workspace._near_miss import not_found_hint

#: Where a workspace keeps its run_command runners (``Workspace.kept``).
_RUNNERS_KEY = "run_command.runners"


class RunCommandArgs(BaseModel):
    """Run a shell command in the workspace."""

    command: str = Field(description="Shell command, run with bash -c")
    cwd: str = Field(".", description="Working directory, relative to the workspace root")
    timeout: float | None = Field(
        None,
        gt=0,
        description=(
            "Seconds before the command and everything it started are killed "
            "(default: the workspace's command_timeout, 120)"
        ),
    )

    @field_validator("command")
    @classmethod
    def _encodable(cls, value: str) -> str:
        return command_text(value)


def command_text(value: str) -> str:
    """``value`` unless no command line can hold it: a NUL or a lone surrogate from JSON.

    Raises:
        ValueError: naming the character.
    """
    # A lone surrogate from JSON (\ud800) has no bytes; one that stands for a byte of a
    # non-UTF-8 file name (\udcff, surrogateescape) does, and is passed on as that byte.
    # A NUL ends a C string: bash would run a command cut there, exec refuses it.
    if "\0" in value:
        raise ValueError("contains a NUL character, which no command line can hold")
    if value.isascii():
        return value  # no surrogate: os.fsencode, a Python function, is not needed
    try:
        os.fsencode(value)
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end]
        raise ValueError(f"contains {bad!r}, a character no command line can hold") from None
    return value


class RunCommandContent(BaseModel):
    """What the model reads: the exit code and each stream (head and tail when long), and
    a ``note`` on what happened beyond the command's own output, present only when there
    is one: the processes it left running that were stopped when it ended (see
    :func:`stopped_note`), and what a failed command's output shows of its sandbox's
    network-off or process cap (see :func:`sandbox_note`). The declared output schema is
    this model's, so it lists ``note`` as optional."""

    exit_code: int
    stdout: str
    stderr: str
    note: str | None = Field(
        None,
        description=(
            "Present only when processes the command left running were stopped, or when "
            "a failure came from the sandbox's network-off or process cap"
        ),
    )

    @model_serializer(mode="wrap")
    def _without_absent_note(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Absent, not null: a result without a note has exactly the three streams' keys.
        data: dict[str, Any] = handler(self)
        if data.get("note") is None:
            data.pop("note", None)
        return data


class RunCommandDetails(BaseModel):
    """For the application: true byte counts and timing.

    ``exit_code`` is 128 + N when signal N killed the command, ``None`` on timeout;
    ``duration_ms`` is wall time in milliseconds; ``truncated`` says the model saw only
    the head and tail of a stream; ``stopped_processes`` counts the processes the command
    left running (``&``, ``nohup``, daemons) that were stopped when it ended, and
    ``stopped_names`` names a few of them (program names, at most three).
    """

    command: str
    exit_code: int | None
    duration_ms: float
    timed_out: bool
    stdout_bytes: int
    stderr_bytes: int
    truncated: bool
    stopped_processes: int = 0
    stopped_names: list[str] = Field(default_factory=list)


class RunCommandTimeoutDetails(RunCommandDetails):
    """Details of a command that timed out: the counts and timing, and what each stream
    had printed until then (head and tail, as the model reads it)."""

    stdout: str
    stderr: str


async def execute(args: RunCommandArgs, context: ToolContext) -> object:
    """Run a ``run_command`` call on ``context.workspace`` with ``context.runner`` (a
    :class:`CommandRunner`)."""
    workspace = context.need_workspace()
    commands = context.runner
    if not isinstance(commands, CommandRunner):
        raise ToolError(
            "run_command has no command runner: build it with run_command.build(workspace)",
            ErrorCode.TOOL_ERROR,
        )
    if commands.closed:
        commands.closed = False
        _kept_runner(workspace, commands)  # so that the workspace's next close stops it
    root_fd = commands.open_root(workspace) if args.cwd == "." else None
    if root_fd is not None:
        # open_root saw it linked: _run_in's check is made.
        rel, cwd_fd, linked = ".", root_fd, True
    else:
        rel, cwd_fd = _open_working_dir(workspace, args.cwd)
        linked = False
    try:
        return await _run_in(workspace, commands, args, context, rel, cwd_fd, linked)
    finally:
        os.close(cwd_fd)


async def _run_in(
    workspace: Workspace,
    commands: CommandRunner,
    args: RunCommandArgs,
    context: ToolContext,
    rel: str,
    cwd_fd: int,
    linked: bool,
) -> object:
    """Run the call in the directory ``cwd_fd`` (shown as ``rel``); ``linked``: its fstat
    since it was opened found it still linked in its parent."""
    runner, by_path, shells = commands.runner, commands.by_path, commands.shells
    # The command starts in the directory this process opened, named by a link to the
    # open fd: chdir through /proc/PID/fd/N enters the very directory opened, whatever
    # its path has become since (a directory swapped for a link out of the root).
    # bubblewrap changes directory inside its own PID namespace, where that link does
    # not exist: it gets the path, and the sandbox checks the directory it entered
    # against the descriptor's identity.
    cwd = str(workspace.root / rel) if by_path else f"/proc/{os.getpid()}/fd/{cwd_fd}"
    if not linked and os.fstat(cwd_fd).st_nlink == 0:
        raise working_dir_changed(rel)  # removed since it was opened: a chdir would still enter it
    timeout = args.timeout or workspace.options.command_timeout
    limit, by_call = time_limit(timeout, context, runner.limits.grace_seconds)
    env = commands.env(workspace)
    path = env.get("PATH", os.defpath)
    shell = shells.get(path) or shells.setdefault(path, shell_on(path))
    argv = [shell, "-c", args.command]
    # With a call's timeout, what the command printed is kept here too: should that
    # timeout fire while the tree is still being stopped (a loaded machine), the run's
    # result, which holds it, never comes, and the call's backstop tells it instead.
    so_far = None if context.deadline is None else OutputSoFar(runner.limits.output_bytes)
    try:
        if commands.reports_progress and context.reports_progress:
            batcher = ProgressBatcher(lambda content, details: context.update(content, details))
            feed = batcher.feed if so_far is None else so_far.then(batcher.feed)
            result = await batcher.flushing(
                lambda: runner.run(
                    argv, cwd=cwd, cwd_fd=cwd_fd, env=env, timeout=limit, on_output=feed
                )
            )
        else:
            on_output = None if so_far is None else so_far.feed
            result = await runner.run(
                argv, cwd=cwd, cwd_fd=cwd_fd, env=env, timeout=limit, on_output=on_output
            )
    except anyio.get_cancelled_exc_class():
        if so_far is not None:
            # Before the command's own limit, only the call's timeout can have stopped it.
            cut = by_call or so_far.seconds() < limit
            words = _timeout_words(timeout, cut, context)
            context.timeout_error = _timeout_error(
                args.command, so_far.result(), words, commands.sandbox
            )
        raise
    except SandboxError as exc:
        if exc.result is not None:  # the sandbox was closed while the command ran
            raise _closed(args.command, exc.result, commands.sandbox is None) from None
        if repr(cwd) not in str(exc):
            raise
        raise working_dir_changed(rel) from None  # the start failed on the working directory
    return _result(
        args.command,
        result,
        lambda: _timeout_words(timeout, by_call, context),
        commands.sandbox,
    )


def build(workspace: Workspace, sandbox: Sandbox | None = None) -> Tool[RunCommandArgs]:
    """The ``run_command`` tool over ``workspace``.

    Args:
        workspace: where commands run (``cwd`` is confined to its root).
        sandbox: run commands in this sandbox (see :class:`CommandRunner`).
    """
    return tool(
        name="run_command",
        description=(
            "Run a shell command (bash -c) in the workspace and return its exit code, "
            "stdout and stderr. stdin is empty; long output keeps its head and tail. "
            "The command and everything it started are killed at the timeout, and whatever "
            "it started in the background (&, nohup, setsid) is stopped when it ends (the "
            "result's note says so): a server or watcher needs start_process where that "
            "tool is offered."
        ),
        parameters=RunCommandArgs,
        execute=execute,
        presentation=lambda a: ToolPresentation(
            label="Run command", icon="terminal", detail=a.command
        ),
        output_schema=RunCommandContent,
        workspace=workspace,
        runner=_kept_runner(workspace, CommandRunner(sandbox)),
        commands_only=True,
    )


class _Runners:
    """The command runners of a workspace's run_command tools, which
    ``Workspace.close`` closes (each stopping the commands it runs)."""

    def __init__(self) -> None:
        self._runners: weakref.WeakSet[CommandRunner] = weakref.WeakSet()

    def add(self, runner: CommandRunner) -> None:
        self._runners.add(runner)

    def close(self) -> None:
        for runner in list(self._runners):
            runner.close()


def _kept_runner(workspace: Workspace, runner: CommandRunner) -> CommandRunner:
    """``runner``, among those ``workspace``'s close closes."""
    workspace.kept(_RUNNERS_KEY, _Runners).add(runner)
    return runner


def _open_working_dir(workspace: Workspace, path: str) -> tuple[str, int]:
    """The working directory ``path`` as results show it and an fd of it, opened from the
    root one component at a time without following a symlink (the caller closes it).

    Raises:
        ToolError: ``NOT_FOUND``, ``NOT_A_DIRECTORY``, ``OUTSIDE_WORKSPACE`` (a directory on
            its way became a symlink), or another code of :func:`os_error`.
    """
    if path == ".":
        # The default, the root itself: while its real path is still the root's, nothing
        # else needs resolving, and it is opened as the general path below would open it.
        # Should either fail, the general path says why.
        root = str(workspace.root)
        with contextlib.suppress(OSError):
            if os.path.realpath(root) == root:
                return ".", open_dir(root, "")
    resolved = workspace.resolve(path)
    real = str(resolved.real)
    try:
        mode = stat_below(workspace.root, resolved.real).st_mode
    except (FileNotFoundError, NotADirectoryError):
        hint = not_found_hint(str(workspace.root), path)
        raise ToolError(
            f"Working directory not found: {resolved.rel}{hint}", ErrorCode.NOT_FOUND
        ) from None
    except OSError as exc:
        raise os_error(exc, resolved.rel) from None
    if not stat.S_ISDIR(mode):
        raise ToolError(
            f"Working directory is not a directory: {resolved.rel}", ErrorCode.NOT_A_DIRECTORY
        )
    rel = workspace.rel(real)
    try:
        fd = open_dir(str(workspace.root), "" if rel == "." else rel)
    except (FileNotFoundError, NotADirectoryError):
        raise working_dir_changed(resolved.rel) from None
    except OSError as exc:
        raise os_error(exc, resolved.rel) from None
    return resolved.rel, fd


def time_limit(timeout: float, context: ToolContext, grace: float) -> tuple[float, bool]:
    """Seconds a command (run_command's, the shell's) may run, and whether the call's
    timeout sets them rather than the command's own ``timeout``: the command is stopped
    early enough before the call's deadline (its tree stopped, or the shell killed, within
    the sandbox's ``grace``) that it reports its own timeout, with the output so far,
    rather than the call's bare one."""
    left = context.seconds_left()
    if left is None:
        return timeout, False
    cut = left - min(grace + 0.5, left / 3)
    return (cut, True) if cut < timeout else (timeout, False)


def _timeout_words(timeout: float, by_call: bool, context: ToolContext) -> str:
    """The start of a timeout message: which timeout ran out, and that the tree is gone."""
    if by_call and context.timeout is not None:
        when = f"after the call's timeout of {context.timeout:g} s"
    else:
        when = f"after {timeout:g} s"
    return f"Command timed out {when}; it and every process it started were killed."


def _closed(command: str, result: ProcessResult, own_runner: bool) -> ToolError:
    """The ``SANDBOX_ERROR`` of a command whose runner was closed while it ran (its whole
    tree was stopped), holding the output so far. ``own_runner``: the workspace's own
    runner, closed with the workspace or its session, which the message names so that no
    model takes its commands for sandboxed; else the sandbox the tool was given."""
    details, stdout, stderr = _details(command, result)
    closed = "workspace" if own_runner else "sandbox"
    return ToolError(
        f"The {closed} was closed while the command ran; it and every process it started "
        f"were stopped.{so_far(stdout, stderr)}",
        ErrorCode.SANDBOX_ERROR,
        details=RunCommandTimeoutDetails(**dict(details), stdout=stdout, stderr=stderr),
    )


def so_far(stdout: str, stderr: str) -> str:
    """How the text of a stopped command's error ends: each stream's output so far (the
    model's view of it) under its heading; a stream that wrote nothing is left out, heading
    and all."""
    text = f"\nstdout so far:\n{stdout}" if stdout else ""
    return f"{text}\nstderr so far:\n{stderr}" if stderr else text


def _details(command: str, result: ProcessResult) -> tuple[RunCommandDetails, str, str]:
    """The details of ``result`` and its streams as the model reads them (head and tail)."""
    stdout, stdout_cut = model_view(result.stdout, "stdout")
    stderr, stderr_cut = model_view(result.stderr, "stderr")
    # Validated constructors: with pydantic-core they cost less than model_construct,
    # which runs in Python.
    details = RunCommandDetails(
        command=command,
        exit_code=result.exit_code,
        duration_ms=result.duration_ms,
        timed_out=result.timed_out,
        stdout_bytes=result.stdout.total_bytes,
        stderr_bytes=result.stderr.total_bytes,
        truncated=stdout_cut or stderr_cut,
        stopped_processes=result.stopped_processes,
        stopped_names=list(result.stopped_names),
    )
    return details, stdout, stderr


def _timeout_error(
    command: str, result: ProcessResult, words: str, box: Sandbox | None
) -> ToolError:
    """The ``TOOL_TIMEOUT`` error of a command that timed out in ``box`` (or in none):
    ``words`` (see :func:`_timeout_words`), the sandbox's note on what its output shows
    (:func:`sandbox_note`), then the output so far, which its details hold too."""
    details, stdout, stderr = _details(command, result)
    note = sandbox_note(box, None, stdout, stderr, refused_forks=result.refused_forks)
    if note is not None:
        words = f"{words}\n{note}."
    return ToolError(
        f"{words}{so_far(stdout, stderr)}",
        ErrorCode.TOOL_TIMEOUT,
        details=RunCommandTimeoutDetails(**dict(details), stdout=stdout, stderr=stderr),
    )


class OutputSoFar:
    """Each stream's output as a command prints it, head and tail as its sandbox keeps
    them (``cap`` bytes a stream), handed on to progress when asked (:meth:`then`)."""

    def __init__(self, cap: int) -> None:
        self._streams = {"stdout": OutputBuffer(cap), "stderr": OutputBuffer(cap)}
        self._started = time.perf_counter()
        self._then: Callable[[str, bytes], None] | None = None

    def then(self, then: Callable[[str, bytes], None]) -> Callable[[str, bytes], None]:
        """``feed``, each chunk handed on to ``then`` as well."""
        self._then = then
        return self.feed

    def feed(self, stream: str, chunk: bytes) -> None:
        """``on_output`` of the command's run."""
        self._streams[stream].feed(chunk)
        if self._then is not None:
            self._then(stream, chunk)

    def seconds(self) -> float:
        """Seconds since the command was about to start."""
        return time.perf_counter() - self._started

    def result(self) -> ProcessResult:
        """The result of a command stopped now, with what it printed so far."""
        return ProcessResult(
            exit_code=None,
            signal=None,
            timed_out=True,
            stdout=self._streams["stdout"].snapshot(),
            stderr=self._streams["stderr"].snapshot(),
            duration_ms=self.seconds() * 1000,
        )


def _result(
    command: str, result: ProcessResult, timed_out: Callable[[], str], box: Sandbox | None
) -> object:
    """The call's value, or its ``TOOL_TIMEOUT`` error beginning with ``timed_out()`` and
    holding the output so far; ``box``: the sandbox the command ran in, or ``None``."""
    if result.timed_out or result.exit_code is None:
        raise _timeout_error(command, result, timed_out(), box)
    details, stdout, stderr = _details(command, result)
    # The content as the JSON data RunCommandContent dumps to (``note`` only when there
    # is one): the call checks it against that schema without a model made and dumped.
    content: dict[str, Any] = {"exit_code": result.exit_code, "stdout": stdout, "stderr": stderr}
    notes = []
    if result.stopped_processes:
        notes.append(stopped_note(result.stopped_processes, result.stopped_names))
    if result.exit_code or result.refused_forks:
        note = sandbox_note(
            box, result.exit_code, stdout, stderr, refused_forks=result.refused_forks
        )
        if note is not None:
            notes.append(note)
    # Only text with U+FFFD can hide bytes that were not UTF-8: no decode for the rest.
    shown = [n for n, t, c in _streams(result, stdout, stderr) if "\ufffd" in t and not_utf8(c)]
    if shown:
        notes.append(not_utf8_note(shown))
    if notes:
        content["note"] = ". ".join(notes)
    return ToolOutput(content=content, details=details)


def _streams(
    result: ProcessResult, stdout: str, stderr: str
) -> tuple[tuple[str, str, CapturedOutput], ...]:
    return (("stdout", stdout, result.stdout), ("stderr", stderr, result.stderr))
