"""shell: a command in the session's persistent shell, where the working directory,
exported variables and functions live on between calls."""

from __future__ import annotations

from functools import partial

import anyio
import anyio.to_thread
from pydantic import BaseModel, Field, field_validator

from sandbox import SandboxError
from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools._output import ToolPresentation, tool_output
from workspace_tools._tool import Tool, ToolContext, tool
from workspace_tools.shell import CommandOutcome, ShellTurn, StreamView
from workspace_tools.tools._command_output import (
    HEAD_BYTES,
    TAIL_BYTES,
    ProgressBatcher,
    model_view,
    not_utf8,
    not_utf8_note,
    sandbox_note,
)
from workspace_tools.tools._shell_session import ShellSession, session_of
from workspace_tools.tools.run_command import OutputSoFar, command_text, so_far, time_limit


class ShellArgs(BaseModel):
    """Run a command in the persistent shell, or restart the shell."""

    command: str | None = Field(None, description="Shell command; required unless restart is true")
    restart: bool = Field(
        False,
        description=(
            "Kill the shell and everything it started, then start a new one at the "
            "workspace root (before command, if one is given)"
        ),
    )
    timeout: float | None = Field(
        None,
        gt=0,
        description=(
            "Seconds before the command is stopped; the shell and everything it started "
            "are then killed (default: the workspace's command_timeout, 120)"
        ),
    )

    @field_validator("command")
    @classmethod
    def _writable(cls, value: str | None) -> str | None:
        return None if value is None else command_text(value)


class ShellContent(BaseModel):
    """What the model reads: the exit code, each stream (head and tail when long), and
    notes on what happened to the shell or where the whole output is."""

    exit_code: int
    stdout: str
    stderr: str
    notes: list[str] = Field(default_factory=list)


class ShellDetails(BaseModel):
    """For the application.

    ``exit_code`` is 128 + N for signal N, ``None`` after a timeout or a bare restart;
    ``cwd`` is the shell's working directory afterwards (relative to the root when inside
    it, else absolute; ``None`` when unknown); ``*_file`` the output file of a stream that
    was cut, relative to the root; ``duration_ms`` wall time in milliseconds.
    """

    command: str | None
    exit_code: int | None
    duration_ms: float
    timed_out: bool = False
    shell_exited: bool = False
    restarted: bool = False
    left_root: bool = False
    cwd: str | None = None
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    stdout_lines: int = 0
    stderr_lines: int = 0
    stdout_file: str | None = None
    stderr_file: str | None = None
    truncated: bool = False


class ShellTimeoutDetails(ShellDetails):
    """Details of a command that timed out, with what each stream printed until then."""

    stdout: str
    stderr: str


#: What the model reads after a bare restart (the words of Anthropic's reference tool).
RESTARTED = "The shell was restarted."


async def execute(args: ShellArgs, context: ToolContext) -> object:
    """Run a ``shell`` call on ``context.runner``'s persistent shell (a :class:`ShellSession`)."""
    session = session_of(context)
    workspace = session.workspace
    grace = session.sandbox.limits.grace_seconds
    if args.restart:
        await anyio.to_thread.run_sync(session.shell.restart)
        if args.command is None:
            details = ShellDetails(command=None, exit_code=None, duration_ms=0, restarted=True)
            content = ShellContent(exit_code=0, stdout="", stderr="", notes=[RESTARTED])
            return tool_output(content, details=details)
    if args.command is None:
        raise ToolError("command is required unless restart is true", ErrorCode.INVALID_ARGUMENTS)
    timeout = args.timeout or workspace.options.command_timeout
    limit, by_call = time_limit(timeout, context, grace)
    if by_call and context.timeout is not None:
        when = f"the call's timeout of {context.timeout:g} s"
    else:
        when = f"{timeout:g} s"
    shell = session.shell
    batcher = None
    if session.reports_progress and context.reports_progress:
        batcher = ProgressBatcher(lambda content, details: context.update(content, details))
    # With a call's timeout, what the command printed is kept here too: should that
    # timeout fire first (the command waits behind another call's, or the shell is slow
    # to die), its error still says what happened and holds the output so far.
    kept = None if context.deadline is None else OutputSoFar(HEAD_BYTES + TAIL_BYTES)
    feed = batcher.feed if batcher else None
    if kept is not None:
        feed = kept.feed if feed is None else kept.then(feed)
    turn = ShellTurn()
    run = partial(shell.run, args.command, limit, feed, turn)
    try:
        # In a worker thread, abandoned on cancellation: giving the turn up kills the
        # shell when the command runs in it (which ends the thread), else the command
        # never runs and the command it waited behind goes on.
        in_thread = partial(anyio.to_thread.run_sync, run, abandon_on_cancel=True)
        outcome = await (batcher.flushing(in_thread) if batcher else in_thread())
    except anyio.get_cancelled_exc_class():
        turn.give_up()  # a command that ran is in an unknown state: the next gets a new shell
        if kept is not None:
            # Only the call's timeout fires before the command's own limit is told.
            fired = (
                when if context.timeout is None else f"the call's timeout of {context.timeout:g} s"
            )
            context.timeout_error = _backstop_error(args.command, kept, turn.began, fired)
        raise
    except SandboxError as exc:
        raise ToolError(f"The shell could not run: {exc}", ErrorCode.SANDBOX_ERROR) from None
    return _result(session, args, outcome, when)


def build(session: ShellSession) -> Tool[ShellArgs]:
    """The ``shell`` tool over ``session``'s persistent shell."""
    return tool(
        name="shell",
        description=(
            "Run a command in a persistent bash shell in the workspace: the working "
            "directory, exported variables and functions carry over to the next call. stdin "
            "is empty; long output keeps its head and tail, and the whole of it is kept in "
            "a file you can read with read_file. At the timeout the shell and everything it "
            "started are killed and the next command starts a new shell at the workspace "
            "root; restart does that on purpose. A command that leaves the shell outside the "
            "workspace is reported and the shell moved back to the workspace root. For "
            "servers and watchers use start_process."
        ),
        parameters=ShellArgs,
        execute=execute,
        presentation=lambda a: ToolPresentation(
            label="Shell", icon="terminal", detail=a.command or "restart"
        ),
        output_schema=ShellContent,
        workspace=session.workspace,
        runner=session,
        commands_only=True,
        preempt=partial(_stop_for_restart, session),
    )


def _stop_for_restart(session: ShellSession, args: ShellArgs) -> None:
    """A restart stops the shell at once, not when its call's turn comes: the command it
    would wait behind (in a session, or an MCP server's line of writing calls) is the one
    it is there to end. The call restarts the shell again in its turn."""
    if args.restart and not session.closed:
        session.shell.kill_now()


def stream_view(session: ShellSession, view: StreamView, name: str) -> tuple[str, list[str]]:
    """What the model reads of one stream, and a note naming the file of the whole
    stream when it was cut."""
    text, _ = model_view(view.captured, name)
    notes = []
    if view.file is not None:
        kept = ""
        if view.file_bytes < view.captured.total_bytes:
            kept = f" (its first {view.file_bytes:,} bytes)"
        notes.append(
            f"The whole {name} ({view.lines:,} lines, {view.captured.total_bytes:,} bytes) is "
            f"in {session.rel(view.file)}{kept}; page through it with read_file."
        )
    return text, notes


def _backstop_error(command: str, kept: OutputSoFar, began: bool, when: str) -> ToolError:
    """The ``TOOL_TIMEOUT`` error of a call whose timeout fired before the command's own
    limit ended it (``when``: which timeout, in words): ``began``, its command ran and its
    shell was killed; else it waited behind another call's command for the whole time and
    never ran, and that command goes on."""
    result = kept.result()
    stdout, _ = model_view(result.stdout, "stdout")
    stderr, _ = model_view(result.stderr, "stderr")
    details = ShellTimeoutDetails(
        command=command,
        exit_code=None,
        duration_ms=result.duration_ms,
        timed_out=True,
        stdout_bytes=result.stdout.total_bytes,
        stderr_bytes=result.stderr.total_bytes,
        stdout=stdout,
        stderr=stderr,
    )
    if began:
        words = (
            f"Command timed out after {when}; the shell and every process it started were "
            "killed. The next command starts a new shell at the workspace root."
        )
    else:
        words = (
            f"Command timed out after {when} before it ran: the shell was busy with "
            "another call's command all that time. This command did not run; the shell and "
            "its state are as that command leaves them."
        )
    return ToolError(f"{words}{so_far(stdout, stderr)}", ErrorCode.TOOL_TIMEOUT, details=details)


def _result(session: ShellSession, args: ShellArgs, outcome: CommandOutcome, when: str) -> object:
    stdout, stdout_notes = stream_view(session, outcome.stdout, "stdout")
    stderr, stderr_notes = stream_view(session, outcome.stderr, "stderr")
    cwd = outcome.cwd
    if cwd is not None and not outcome.left_root:
        cwd = session.rel(session.workspace.root / cwd)
    details = ShellDetails(
        command=args.command,
        exit_code=outcome.exit_code,
        duration_ms=outcome.duration_ms,
        timed_out=outcome.timed_out,
        shell_exited=outcome.shell_exited,
        restarted=args.restart,
        left_root=outcome.left_root,
        cwd=cwd,
        stdout_bytes=outcome.stdout.captured.total_bytes,
        stderr_bytes=outcome.stderr.captured.total_bytes,
        stdout_lines=outcome.stdout.lines,
        stderr_lines=outcome.stderr.lines,
        stdout_file=None if outcome.stdout.file is None else session.rel(outcome.stdout.file),
        stderr_file=None if outcome.stderr.file is None else session.rel(outcome.stderr.file),
        truncated=outcome.stdout.file is not None or outcome.stderr.file is not None,
    )
    notes = [*stdout_notes, *stderr_notes]
    streams = (("stdout", stdout, outcome.stdout), ("stderr", stderr, outcome.stderr))
    shown = [n for n, text, view in streams if "\ufffd" in text and not_utf8(view.captured)]
    if shown:
        notes.append(f"{not_utf8_note(shown)}.")
    if outcome.stopped:  # a restart from another call, the session's or sandbox's close
        extra = "".join(f"\n{note}" for note in notes)
        code = ErrorCode.ABORTED
        if outcome.sandbox_closed:
            words = (
                "The sandbox was closed while this command ran; the command and every "
                "process it started were stopped."
            )
            code = ErrorCode.SANDBOX_ERROR
        elif session.closed:
            words = (
                "The shell session was closed while this command ran; the command and every "
                "process it started were killed."
            )
        else:
            words = (
                "The shell was restarted while this command ran; the command and every "
                "process it started were killed. The next command starts a new shell at the "
                "workspace root."
            )
        raise ToolError(
            f"{words}{extra}{so_far(stdout, stderr)}",
            code,
            details=ShellTimeoutDetails(**dict(details), stdout=stdout, stderr=stderr),
        )
    note = sandbox_note(
        session.given_sandbox,
        outcome.exit_code,
        stdout,
        stderr,
        refused_forks=outcome.refused_forks,
    )
    if note is not None:
        notes.append(f"{note}.")
    if outcome.timed_out or outcome.exit_code is None:
        # The files go with the killed shell's output: keep them named.
        words = (
            f"Command timed out after {when}; the shell and every process it started "
            "were killed. The next command starts a new shell at the workspace root."
        )
        partial_details = ShellTimeoutDetails(**dict(details), stdout=stdout, stderr=stderr)
        extra = "".join(f"\n{note}" for note in notes)
        raise ToolError(
            f"{words}{extra}{so_far(stdout, stderr)}",
            ErrorCode.TOOL_TIMEOUT,
            details=partial_details,
        )
    if args.restart:
        notes.insert(0, "The shell was restarted before this command.")
    if outcome.left_root:
        notes.append(
            f"The command left the shell in {outcome.cwd}, outside the workspace; the shell "
            "was moved back to the workspace root."
        )
    if outcome.shell_exited:
        notes.append(
            f"The shell exited with code {outcome.exit_code}; the next command starts a new "
            "shell at the workspace root."
        )
    content = ShellContent(exit_code=outcome.exit_code, stdout=stdout, stderr=stderr, notes=notes)
    return tool_output(content, details=details)
