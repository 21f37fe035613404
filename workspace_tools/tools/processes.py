"""Background processes: start_process, read_process_output, write_process_stdin,
stop_process and list_processes, over a :class:`ShellSession`'s registry.

A process runs ``bash -c COMMAND`` in its own process tree, under the session's sandbox,
until it exits, its own timeout passes, it is stopped, or the session ends. Its output
(stdout and stderr interleaved as they arrive) goes to a log file in the session's output
area that ``read_file`` pages through; ``read_process_output`` returns what came since the
last read (head and tail when long), waiting for some when asked to.
"""

from __future__ import annotations

import dataclasses
import os
from functools import partial
from typing import Any

import anyio
import anyio.to_thread
from pydantic import BaseModel, Field, field_validator

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools._output import ToolPresentation, tool_output
from workspace_tools._tool import Tool, ToolContext, tool
from workspace_tools.shell import BackgroundProcess, ProcessInfo, ProcessState, RunningProcess
from workspace_tools.tools._command_output import model_view
from workspace_tools.tools._shell_session import ShellSession, session_of
from workspace_tools.tools.run_command import _open_working_dir, command_text

#: Most seconds read_process_output waits for output.
MAX_WAIT = 300.0
#: Most seconds write_process_stdin waits for a process to read what fills its pipe.
WRITE_WAIT = 10.0


class StartProcessArgs(BaseModel):
    """Start a command in the background and return its handle at once."""

    command: str = Field(description="Shell command, run with bash -c")
    cwd: str = Field(".", description="Working directory, relative to the workspace root")
    timeout: float | None = Field(
        None,
        gt=0,
        description="Seconds before it and everything it started are stopped (default: none)",
    )

    @field_validator("command")
    @classmethod
    def _writable(cls, value: str) -> str:
        return command_text(value)


class ProcessArgs(BaseModel):
    """Name a background process."""

    id: str = Field(description="The process's handle from start_process (p1, p2, ...)")


class ReadOutputArgs(ProcessArgs):
    """Read a background process's output since the last read."""

    wait: float = Field(
        0,
        ge=0,
        le=MAX_WAIT,
        description=(
            "Seconds to wait for new output when there is none yet (returns as soon as "
            "some arrives or the process ends)"
        ),
    )


class WriteStdinArgs(ProcessArgs):
    """Write to a background process's stdin."""

    input: str = Field(description="Text to write (add \\n to end a line)")
    close: bool = Field(False, description="Close stdin afterwards (the process reads EOF)")


class NoArgs(BaseModel):
    """No arguments."""


class ProcessView(BaseModel):
    """A background process as the model reads it.

    ``exit_code`` is set once it exited by itself (128 + N for signal N); ``output_file``
    holds its whole output (stdout and stderr as they came), relative to the root.
    """

    id: str
    command: str
    state: ProcessState
    exit_code: int | None
    output_bytes: int
    output_lines: int
    unread_bytes: int
    output_file: str
    seconds: float


class ProcessOutputContent(BaseModel):
    """New output of a background process (head and tail when long) and its state."""

    id: str
    state: ProcessState
    exit_code: int | None
    output: str
    new_bytes: int
    total_bytes: int
    total_lines: int
    output_file: str


class WriteContent(BaseModel):
    """How much of the input reached the process."""

    id: str
    written_bytes: int
    stdin_open: bool


class ProcessList(BaseModel):
    """Every background process of the session, oldest first."""

    processes: list[ProcessView]
    running: int
    max_running: int


def _view(session: ShellSession, info: ProcessInfo) -> ProcessView:
    # The listing's fields but stdin_open, with the output file relative to the root.
    fields = dataclasses.asdict(info) | {"output_file": session.rel(info.output_file)}
    del fields["stdin_open"]
    return ProcessView(**fields)


def _output(session: ShellSession, entry: BackgroundProcess) -> ProcessOutputContent:
    new = entry.log.read()
    text, _ = model_view(new.captured, "output")
    return ProcessOutputContent(
        id=entry.id,
        state=entry.state,
        exit_code=entry.exit_code,
        output=text,
        new_bytes=new.captured.total_bytes,
        total_bytes=new.total_bytes,
        total_lines=new.total_lines,
        output_file=session.rel(entry.log.file),
    )


async def start(args: StartProcessArgs, context: ToolContext) -> object:
    """Run a ``start_process`` call on ``context.runner`` (a :class:`ShellSession`)."""
    session = session_of(context)
    workspace = session.workspace
    # Checked as run_command checks its cwd (confined, a directory); the process gets
    # its path, which stays valid for as long as it runs.
    rel, fd = _open_working_dir(workspace, args.cwd)
    os.close(fd)
    cwd = str(workspace.root / rel)
    entry = await anyio.to_thread.run_sync(session.processes.start, args.command, cwd, args.timeout)
    return tool_output(_view(session, entry.info()), details=entry.info())


async def read(args: ReadOutputArgs, context: ToolContext) -> object:
    """Run a ``read_process_output`` call on ``context.runner`` (a :class:`ShellSession`)."""
    session = session_of(context)
    entry = session.processes.get(args.id)
    if args.wait:
        wait = args.wait
        left = context.seconds_left(margin=0.5)
        if left is not None:
            wait = min(wait, left)
        await anyio.to_thread.run_sync(partial(entry.log.wait, wait), abandon_on_cancel=True)
    return tool_output(_output(session, entry), details=entry.info())


async def write(args: WriteStdinArgs, context: ToolContext) -> object:
    """Run a ``write_process_stdin`` call on ``context.runner`` (a :class:`ShellSession`)."""
    session = session_of(context)
    entry = session.processes.get(args.id)
    process = entry.process
    if process is None or process.done:
        raise ToolError(
            f"Process {entry.id} is {entry.state}; its stdin takes no more input",
            ErrorCode.TOOL_ERROR,
        )
    data = args.input.encode("utf-8", errors="surrogateescape")
    try:
        written = await anyio.to_thread.run_sync(
            partial(_write, process, data, args.close, context.seconds_left(margin=0.5))
        )
    except BrokenPipeError:
        if process.stdin_gone:
            message = (
                f"Process {entry.id} closed its stdin (it reads no more input); nothing more "
                "was written. Read its output with read_process_output"
            )
        else:
            message = f"The stdin of process {entry.id} was closed; it takes no more input"
        raise ToolError(message, ErrorCode.TOOL_ERROR) from None
    if written < len(data):
        raise ToolError(
            f"Only {written:,} of {len(data):,} bytes reached process {entry.id}: it is "
            "not reading its stdin (its pipe is full)",
            ErrorCode.TOOL_TIMEOUT,
        )
    content = WriteContent(id=entry.id, written_bytes=written, stdin_open=process.stdin_open)
    return tool_output(content, details=entry.info())


async def stop(args: ProcessArgs, context: ToolContext) -> object:
    """Run a ``stop_process`` call on ``context.runner`` (a :class:`ShellSession`)."""
    session = session_of(context)
    entry = session.processes.get(args.id)
    if entry.process is not None:
        await anyio.to_thread.run_sync(entry.process.stop)
    return tool_output(_output(session, entry), details=entry.info())


async def listing(args: NoArgs, context: ToolContext) -> object:
    """Run a ``list_processes`` call on ``context.runner`` (a :class:`ShellSession`)."""
    session = session_of(context)
    infos = session.processes.list()
    content = ProcessList(
        processes=[_view(session, info) for info in infos],
        running=sum(info.state == "running" for info in infos),
        max_running=session.max_processes,
    )
    return tool_output(content, details=infos)


def build(session: ShellSession) -> list[Tool[Any]]:
    """The five process tools over ``session``'s registry, in the order of
    ``PROCESS_TOOL_NAMES``."""

    def shown(label: str, icon: str) -> Any:
        return lambda a: ToolPresentation(
            label=label, icon=icon, detail=getattr(a, "command", None) or getattr(a, "id", None)
        )

    # Every process tool works on the session's workspace and registry.
    of_session = partial(tool, workspace=session.workspace, runner=session, commands_only=True)
    return [
        of_session(
            name="start_process",
            description=(
                "Start a shell command (bash -c) in the background, such as a dev server or "
                "a watcher, and return its id at once. Read its output with "
                "read_process_output, write to its stdin with write_process_stdin, stop it "
                "with stop_process. It and everything it starts are stopped at its timeout, "
                "by stop_process, or when the session ends."
            ),
            parameters=StartProcessArgs,
            execute=start,
            presentation=shown("Start process", "play"),
            output_schema=ProcessView,
        ),
        of_session(
            name="read_process_output",
            description=(
                "Output a background process printed since the last read (stdout and "
                "stderr as they came; head and tail when long), its state and exit code. "
                "wait: seconds to wait for new output when there is none yet. The whole "
                "output is in output_file, for read_file."
            ),
            parameters=ReadOutputArgs,
            execute=read,
            presentation=shown("Read process output", "terminal"),
            output_schema=ProcessOutputContent,
            read_only=True,
        ),
        of_session(
            name="write_process_stdin",
            description=("Write text to a background process's stdin; close: true ends its input."),
            parameters=WriteStdinArgs,
            execute=write,
            presentation=shown("Write to process", "keyboard"),
            output_schema=WriteContent,
        ),
        of_session(
            name="stop_process",
            description=(
                "Stop a background process and everything it started (SIGTERM, then "
                "SIGKILL); returns its unread output and how it ended."
            ),
            parameters=ProcessArgs,
            execute=stop,
            presentation=shown("Stop process", "stop"),
            output_schema=ProcessOutputContent,
        ),
        of_session(
            name="list_processes",
            description=(
                "The session's background processes: id, command, state (running, exited, "
                "stopped, timed_out, failed), exit code and output counts."
            ),
            parameters=NoArgs,
            execute=listing,
            presentation=ToolPresentation(label="List processes", icon="list"),
            output_schema=ProcessList,
            read_only=True,
        ),
    ]


def _write(process: RunningProcess, data: bytes, close: bool, timeout: float | None) -> int:
    """Write ``data``, waiting up to ``timeout`` seconds (:data:`WRITE_WAIT` at most) while
    the pipe is full, then close stdin if asked and all went out; the bytes written."""
    limit = WRITE_WAIT if timeout is None else min(timeout, WRITE_WAIT)
    written = process.write_all(data, limit)
    if close and written == len(data):
        process.close_stdin(limit)
    return written
