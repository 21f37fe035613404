"""The background processes of one session: started, read, written to, stopped, listed,
and all stopped with the session. At most ``max_running`` run at once."""

from __future__ import annotations

import itertools
import shlex
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sandbox import Sandbox
from workspace_tools._errors import ErrorCode, ToolError, echoed
from workspace_tools.shell._area import remove_file, restore_area
from workspace_tools.shell._output import OutputLog
from workspace_tools.shell._runner import STOP_WAIT, RunningProcess, stdin_script

ProcessState = Literal["running", "exited", "stopped", "timed_out", "failed"]
"""``running``; ``exited`` by itself (its exit code says how); ``stopped`` by a stop or the
session's end; ``timed_out`` at its own timeout; ``failed`` to start."""

#: Ended processes kept for listing and reading; the oldest beyond it are forgotten.
KEPT_ENDED = 64


@dataclass(frozen=True)
class ProcessInfo:
    """One background process as a listing shows it.

    Attributes:
        id: the handle (``p1``, ``p2``, ...).
        command: the shell command it runs.
        state: see :data:`ProcessState`.
        exit_code: its exit status (128 + N for signal N) once it exited by itself; else
            ``None``.
        output_bytes, output_lines: what it has printed so far (both streams).
        unread_bytes: printed since the last read.
        output_file: the file holding its whole output (up to the cap).
        seconds: how long it has run (until it ended), in seconds.
        stdin_open: whether its stdin can still be written to.
    """

    id: str
    command: str
    state: ProcessState
    exit_code: int | None
    output_bytes: int
    output_lines: int
    unread_bytes: int
    output_file: Path
    seconds: float
    stdin_open: bool


class BackgroundProcess:
    """One process of the registry: its tree, its output log, and how it ended."""

    def __init__(self, id_: str, command: str, log: OutputLog) -> None:
        self.id = id_
        self.command = command
        self.log = log
        self.started = time.monotonic()
        self.ended: float | None = None
        self.process: RunningProcess | None = None

    @property
    def state(self) -> ProcessState:
        """The process's :data:`ProcessState` now."""
        process = self.process
        if process is None or process.error is not None:
            return "failed"
        if not process.done:
            return "running"
        if process.stopped:
            return "stopped"
        if process.result is not None and process.result.timed_out:
            return "timed_out"
        return "exited"

    @property
    def exit_code(self) -> int | None:
        """The exit status once it exited by itself, else ``None``."""
        process = self.process
        if self.state != "exited" or process is None or process.result is None:
            return None
        return process.result.exit_code

    def info(self) -> ProcessInfo:
        """A snapshot for listings."""
        total, lines, unread = self.log.totals()
        end = self.ended if self.ended is not None else time.monotonic()
        return ProcessInfo(
            id=self.id,
            command=self.command,
            state=self.state,
            exit_code=self.exit_code,
            output_bytes=total,
            output_lines=lines,
            unread_bytes=unread,
            output_file=self.log.file,
            seconds=round(end - self.started, 3),
            stdin_open=self.process is not None and self.process.stdin_open,
        )

    def _ended(self, _: RunningProcess) -> None:
        self.ended = time.monotonic()
        self.log.end()


class ProcessRegistry:
    """Starts and keeps a session's background processes.

    Args:
        sandbox: where they run (the layers and limits of ``run_command``).
        shell: the shell that runs each command (``shell -c``).
        area: the session's output area: logs and stdin FIFOs go there.
        env: the environment of a new process, read at its start.
        max_running: most processes running at once.
        file_bytes: most bytes of a process's output kept in its log file.
        unread_bytes: memory for output not yet read, per process (head and tail).
    """

    def __init__(
        self,
        sandbox: Sandbox,
        shell: str,
        area: Path,
        env: Callable[[], Mapping[str, str]],
        *,
        max_running: int,
        file_bytes: int,
        unread_bytes: int,
    ) -> None:
        self._sandbox = sandbox
        self._shell = shell
        self._area = area
        self._env = env
        self.max_running = max_running
        self._file_bytes = file_bytes
        self._unread_bytes = unread_bytes
        self._lock = threading.Lock()
        self._processes: dict[str, BackgroundProcess] = {}
        self._ids = itertools.count(1)
        self._closed = False

    def start(self, command: str, cwd: str, timeout: float | None) -> BackgroundProcess:
        """Start ``command`` (``shell -c``) in the absolute directory ``cwd`` and return at
        once; ``timeout`` seconds (``None``: none) before its tree is stopped.

        Raises:
            ToolError: ``TOOL_ERROR`` when ``max_running`` processes run already, or the
                session is closed; ``SANDBOX_ERROR`` when it could not be started.
        """
        with self._lock:
            if self._closed:
                raise ToolError("The session is closed; no process can start", ErrorCode.ABORTED)
            running = [p.id for p in self._processes.values() if p.state == "running"]
            if len(running) >= self.max_running:
                raise ToolError(
                    f"{len(running)} background processes are running, the most this session "
                    f"allows ({', '.join(running)}); stop one with stop_process first",
                    ErrorCode.TOOL_ERROR,
                )
            id_ = f"p{next(self._ids)}"
            try:
                restore_area(self._area)  # a command may have removed it
                log = OutputLog(self._area / f"{id_}.log", self._file_bytes, self._unread_bytes)
            except OSError as exc:
                raise ToolError(
                    f"Could not start {shlex.quote(command)}: its log file in "
                    f"{self._area.name} cannot be made ({exc.strerror or exc})",
                    ErrorCode.SANDBOX_ERROR,
                ) from None
            entry = BackgroundProcess(id_, command, log)
            script = stdin_script(self._area / f"{id_}.stdin") + command
            try:
                entry.process = RunningProcess(
                    self._sandbox,
                    [self._shell, "-c", script],
                    cwd=cwd,
                    env=self._env(),
                    stdin_fifo=self._area / f"{id_}.stdin",
                    on_output=lambda _, chunk: log.feed(chunk),
                    on_exit=entry._ended,
                    timeout=timeout,
                )
            except OSError as exc:
                log.end()
                raise ToolError(
                    f"Could not start {shlex.quote(command)}: {exc.strerror or exc}",
                    ErrorCode.SANDBOX_ERROR,
                ) from None
            self._processes[id_] = entry
            self._forget_old()
            return entry

    def get(self, id_: str) -> BackgroundProcess:
        """The process with handle ``id_``.

        Raises:
            ToolError: ``NOT_FOUND``, naming the handles there are.
        """
        with self._lock:
            entry = self._processes.get(id_)
            known = ", ".join(self._processes) or "none"
        if entry is None:
            raise ToolError(
                f"No background process {echoed(id_)}; the session's processes are: {known}",
                ErrorCode.NOT_FOUND,
            )
        return entry

    def list(self) -> list[ProcessInfo]:
        """Every process kept, oldest first."""
        with self._lock:
            entries = list(self._processes.values())
        return [entry.info() for entry in entries]

    def close(self) -> None:
        """Stop every process and wait until each tree is gone; start no other."""
        with self._lock:
            self._closed = True
            entries = list(self._processes.values())
        for entry in entries:
            if entry.process is not None:
                entry.process.stop(wait=None)  # all at once, then wait for each
        for entry in entries:
            if entry.process is not None:
                entry.process.stop(STOP_WAIT)

    def _forget_old(self) -> None:
        ended = [p for p in self._processes.values() if p.state != "running"]
        for entry in ended[: max(0, len(ended) - KEPT_ENDED)]:
            del self._processes[entry.id]
            remove_file(entry.log.file)
