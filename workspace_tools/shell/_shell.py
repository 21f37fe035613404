"""A persistent shell: one shell process whose working directory, variables and functions
live on from one command to the next.

Each command is written to the shell's stdin as a few lines of script: the command itself,
quoted, is ``eval``-ed with stdin from ``/dev/null`` (so it never reads the commands that
follow), then the shell prints a trailer on stdout (its exit status and ``$PWD``) and one on
stderr. Both trailers carry a nonce drawn for that command only: nothing the command prints
can end it early, since it cannot know the nonce. The command is over when both trailers
arrived; output after a trailer (a job the command left running in the background) is given
to the next command.

A command that hits its timeout, or whose call is cancelled, takes the whole shell down (its
whole tree, jobs started with ``&`` and detached processes included): the next command
starts a new shell at the workspace root. So does a command that ends the shell (``exit``).

A command that ends with the shell's working directory outside the workspace root is
reported as such, and the shell is moved back to the root before the next command runs.

In bash, the shell keeps copies of its own stdout and stderr (descriptors
:data:`SAVED_FDS`; bash sets them aside while a command runs and brings them back after
it, so that not even a command that uses those numbers itself can lose them) and puts
them back as stdout and stderr after each command: a command that redirects or closes the
shell's streams for good (``exec >file``, ``exec 2>/dev/null``, ``exec >&-``) does so until
it ends, and its trailers still arrive.
"""

from __future__ import annotations

import os
import secrets
import shlex
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sandbox import Sandbox, SandboxError
from workspace_tools.shell._area import remove_file, restore_area
from workspace_tools.shell._output import StreamCapture, StreamView
from workspace_tools.shell._runner import STOP_WAIT, RunningProcess, stdin_script
from workspace_tools.shell._turn import ShellTurn, TurnGivenUp

#: ``on_output(stream, chunk)`` for the command that runs, from the shell's thread.
OnCommandOutput = Callable[[str, bytes], None]

#: Output printed between two commands (by a background job) kept for the next one.
BETWEEN_BYTES = 64 * 1024
#: Output files of the latest commands kept; older ones are removed as new ones come.
KEPT_FILES = 32
#: Where bash keeps its own stdout and stderr between commands (high, so that no command's
#: descriptor of its own is likely to be one of them).
SAVED_FDS = (61, 62)


@dataclass(frozen=True)
class CommandOutcome:
    """How one command in the persistent shell ended.

    Attributes:
        exit_code: its exit status (128 + N for signal N); the shell's own status when the
            command ended the shell; ``None`` when it timed out.
        timed_out: the timeout passed; the shell and its whole tree were killed.
        shell_exited: the shell ended with this command (``exit``, a signal).
        stopped: the shell was killed while the command ran (:meth:`PersistentShell.restart`
            or :meth:`~PersistentShell.close` from another thread, or its sandbox closed:
            ``sandbox_closed``); ``exit_code`` is ``None``.
        stdout, stderr: what was kept of each stream (see :class:`StreamView`).
        cwd: the shell's real working directory after the command (absolute), or ``None``
            when unknown (the shell is gone, or ``$PWD`` was unset).
        left_root: ``cwd`` is outside the workspace root; the shell goes back to the root
            before the next command.
        duration_ms: wall time in milliseconds.
        refused_forks: how many forks the cap on the shell's processes refused while the
            command ran (a cgroup's count; 0 where none caps them).
    """

    exit_code: int | None
    timed_out: bool
    shell_exited: bool
    stopped: bool
    stdout: StreamView
    stderr: StreamView
    cwd: str | None
    left_root: bool
    duration_ms: float
    sandbox_closed: bool = False
    refused_forks: int = 0


class _Trailer:
    """Splits one stream of a command into its output and the trailer that ends it.

    The output is passed on as it comes, but for the last bytes that could be the start
    of the trailer's marker (held until the next chunk tells)."""

    def __init__(self, marker: bytes, fields: bool) -> None:
        self._marker = marker
        self._fields = fields  # a second marker closes "status NUL pwd"
        self._pending = b""
        self.found = False
        self.value: bytes | None = None

    def feed(self, chunk: bytes) -> tuple[bytes, bytes]:
        """``(output, after)``: the command's output in ``chunk`` and what followed the
        trailer (only once :attr:`found`)."""
        data = self._pending + chunk
        if self.value is None:
            at = data.find(self._marker)
            if at < 0:
                keep = _partial_marker(data, self._marker)
                self._pending = data[len(data) - keep :]
                return data[: len(data) - keep], b""
            output, data = data[:at], data[at + len(self._marker) :]
            self.value = b""
        else:
            output = b""
        if not self._fields:
            self.found, self._pending = True, b""
            return output, data
        end = data.find(self._marker)
        if end < 0:
            self._pending = data
            return output, b""
        self.value, self.found, self._pending = data[:end], True, b""
        return output, data[end + len(self._marker) :]

    def rest(self) -> bytes:
        """Bytes held back when the stream ended without a trailer: output after all."""
        pending, self._pending = self._pending, b""
        return pending if self.value is None else b""


def _partial_marker(data: bytes, marker: bytes) -> int:
    """Length of the longest end of ``data`` that is a start of ``marker``."""
    for size in range(min(len(data), len(marker) - 1), 0, -1):
        if marker.startswith(data[-size:]):
            return size
    return 0


class _Command:
    """The command that runs: its trailers, captures and completion."""

    def __init__(
        self,
        nonce: str,
        stdout: StreamCapture,
        stderr: StreamCapture,
        on_output: OnCommandOutput | None,
    ) -> None:
        marker = f"\x1e{nonce}\x1e".encode()
        self.trailers = {"stdout": _Trailer(marker, True), "stderr": _Trailer(marker, False)}
        self.captures = {"stdout": stdout, "stderr": stderr}
        self.on_output = on_output
        self.finished = threading.Event()

    def feed(self, stream: str, chunk: bytes) -> bytes:
        """Take ``chunk`` of ``stream``; returns what came after its trailer."""
        output, after = self.trailers[stream].feed(chunk)
        self._emit(stream, output)
        if all(t.found for t in self.trailers.values()):
            self.finished.set()
        return after

    def flush(self) -> None:
        """The shell is gone: what each stream held back was output."""
        for stream, trailer in self.trailers.items():
            self._emit(stream, trailer.rest())

    def _emit(self, stream: str, output: bytes) -> None:
        if output:
            self.captures[stream].feed(output)
            if self.on_output is not None:
                self.on_output(stream, output)


class PersistentShell:
    """One shell process at a time, started on the first command (and again after a
    timeout, a restart or an ``exit``), in ``root``.

    Args:
        sandbox: where the shell runs (the same layers and limits as ``run_command``).
        shell: the shell's path (bash; ``sh`` works too).
        root: the workspace root, the shell's first working directory.
        area: a directory of the session's output area for FIFOs and output files.
        env: the shell's environment, read when a shell starts.
        memory_bytes: bytes of each stream a command keeps in memory (head and tail).
        file_bytes: most bytes of a stream kept in its output file.

    :meth:`run` runs one command at a time; a second caller waits for the first.
    """

    def __init__(
        self,
        sandbox: Sandbox,
        shell: str,
        root: Path,
        area: Path,
        env: Callable[[], Mapping[str, str]],
        *,
        memory_bytes: int,
        file_bytes: int,
    ) -> None:
        self._sandbox = sandbox
        self._shell = shell
        self._root = root
        self._real_root = os.path.realpath(root)
        self._area = area
        self._env = env
        self._memory = memory_bytes
        self._file_cap = file_bytes
        self._builtin = "builtin " if os.path.basename(shell).startswith("bash") else ""
        self._lock = threading.Lock()
        self._state = threading.Lock()
        self._process: RunningProcess | None = None
        self._current: _Command | None = None
        self._between: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self._back_to_root = False
        self._count = 0
        self._files: list[Path] = []
        self._closed = False

    @property
    def running(self) -> bool:
        """Whether a shell process is alive now."""
        process = self._process
        return process is not None and not process.done

    def run(
        self,
        command: str,
        timeout: float,
        on_output: OnCommandOutput | None = None,
        turn: ShellTurn | None = None,
    ) -> CommandOutcome:
        """Run ``command`` in the shell (starting one if none runs) and wait for it, at most
        ``timeout`` seconds; blocks, so an event loop calls it from a worker thread.
        ``turn``: the caller's place in line, which it may give up from another thread.

        Raises:
            SandboxError: the shell could not be started.
            RuntimeError: the shell was closed.
            TurnGivenUp: ``turn`` was given up before the command was handed over.
        """
        with self._lock:
            started = time.perf_counter()
            if turn is not None and turn.given_up:
                raise TurnGivenUp  # gave up while waiting: start no shell for it
            process = self._ensure_started()
            if turn is None:
                return self._run(command, timeout, on_output, process, started)
            if not turn.take(process):
                raise TurnGivenUp
            try:
                return self._run(command, timeout, on_output, process, started)
            finally:
                turn.leave()

    def _run(
        self,
        command: str,
        timeout: float,
        on_output: OnCommandOutput | None,
        process: RunningProcess,
        started: float,
    ) -> CommandOutcome:
        """:meth:`run` once the shell is the caller's (its lock held)."""
        self._count += 1
        nonce = secrets.token_hex(16)
        base = self._area / f"shell-{self._count}"
        command_ = _Command(
            nonce,
            StreamCapture(self._memory, base.with_suffix(".stdout"), self._file_cap),
            StreamCapture(self._memory, base.with_suffix(".stderr"), self._file_cap),
            on_output,
        )
        with self._state:
            for stream, held in self._between.items():
                command_.captures[stream].feed(bytes(held))
                held.clear()
            self._current = command_
        script = self._script(command, nonce)
        deadline = time.monotonic() + timeout
        refused_before = process.refused_forks()
        written = process.write_all(script, timeout) == len(script)
        finished = written and self._wait(command_, process, deadline)
        timed_out = not finished and not process.done
        # Before a stop, which ends the cgroup that counts them (a race with the shell's
        # own end at worst loses the count, never makes one up).
        refused = max(0, process.refused_forks() - refused_before)
        if timed_out:
            process.stop(STOP_WAIT)
        with self._state:
            self._current = None
            if not command_.finished.is_set():
                command_.flush()
        return self._outcome(command_, process, timed_out, started, refused)

    def _wait(self, command: _Command, process: RunningProcess, deadline: float) -> bool:
        """Wait for the command's trailers or the shell's end; whether the trailers came."""
        while not command.finished.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or process.done:
                return command.finished.is_set()
            command.finished.wait(min(left, 0.05) if not process.done else 0)
        return True

    def _outcome(
        self,
        command: _Command,
        process: RunningProcess,
        timed_out: bool,
        started: float,
        refused_forks: int,
    ) -> CommandOutcome:
        stdout = command.captures["stdout"].close()
        stderr = command.captures["stderr"].close()
        self._keep_files(stdout.file, stderr.file)
        trailer = command.trailers["stdout"].value
        ended = not command.finished.is_set()
        sandbox_closed = False
        if ended and not timed_out:
            process.wait(STOP_WAIT)
            if process.error is not None:
                if getattr(process.error, "result", None) is None:
                    raise process.error  # the shell could not run at all
                # Its sandbox was closed under it (the error holds how the shell ended):
                # the command was stopped with its tree, and what it printed is here.
                sandbox_closed = True
        stopped = ended and not timed_out and (process.stopped or sandbox_closed)
        cwd: str | None = None
        exit_code: int | None
        if not ended and trailer is not None:
            status, _, pwd = trailer.partition(b"\0")
            exit_code = int(status or b"0")
            cwd = os.path.realpath(os.fsdecode(pwd)) if pwd else None
        elif timed_out or stopped or process.result is None:
            exit_code = None
        else:
            exit_code = process.result.exit_code
        left_root = cwd is not None and not _inside(cwd, self._real_root)
        if left_root:
            self._back_to_root = True
        return CommandOutcome(
            exit_code=exit_code,
            timed_out=timed_out,
            shell_exited=ended and not timed_out and not stopped,
            stopped=stopped,
            stdout=stdout,
            stderr=stderr,
            cwd=cwd,
            left_root=left_root,
            duration_ms=(time.perf_counter() - started) * 1000,
            sandbox_closed=sandbox_closed,
            refused_forks=refused_forks,
        )

    def _keep_files(self, *files: Path | None) -> None:
        """Remember the output files of a command; remove those beyond :data:`KEPT_FILES`
        (the disk a long session uses stays bounded)."""
        self._files += [file for file in files if file is not None]
        while len(self._files) > KEPT_FILES:
            remove_file(self._files.pop(0))

    def _script(self, command: str, nonce: str) -> bytes:
        b = self._builtin
        lines = []
        if self._back_to_root:
            lines.append(f"{b}cd -- {shlex.quote(str(self._root))} || exit 126")
            self._back_to_root = False
        # After the command's text, one line (read whole before it runs: ``set -v`` shows
        # none of it) runs the command with the tracing it asked for earlier, then, hidden
        # from tracing, keeps its status and tracing and turns tracing off again; in bash
        # it also puts the shell's saved streams back (see the module's text).
        out, err = SAVED_FDS
        hide, put_back = (f" {out}>&- {err}>&-", f"exec 1>&{out} 2>&{err}; ") if b else ("", "")
        steps = [
            f'{b}eval "${{__wt_tracing-}}$__wt_command" </dev/null{hide}',
            "{ __wt_status=$?; __wt_tracing=; "
            f"case $- in *x*) __wt_tracing='{b}set -x; ';; esac; "
            f'case $- in *v*) __wt_tracing="${{__wt_tracing}}{b}set -v; ";; esac; '
            f"{b}set +xv; }} 2>/dev/null",
            f"{put_back}{b}printf '\\036%s\\036%d\\000%s\\036%s\\036' {nonce} "
            f'"$__wt_status" "$PWD" {nonce}',
            f"{b}printf '\\036%s\\036' {nonce} >&2",
        ]
        lines += [
            f"__wt_command={shlex.quote(command)}",
            "; ".join(steps),
            "",
        ]
        return os.fsencode("\n".join(lines))

    def _ensure_started(self) -> RunningProcess:
        if self._closed:
            raise RuntimeError("the shell session is closed")
        process = self._process
        if process is not None and not process.done:
            return process
        self._back_to_root = False
        self._count += 1
        restore_area(self._area)  # a command may have removed it (git clean -fdx)
        fifo = self._area / f"shell-{self._count}.stdin"
        body = f"exec {shlex.quote(self._shell)} -s"
        if self._builtin:
            out, err = SAVED_FDS
            body = f"exec {out}>&1 {err}>&2\nexec {shlex.quote(self._shell)} --noprofile --norc -s"
        process = RunningProcess(
            self._sandbox,
            [self._shell, "-c", stdin_script(fifo) + body],
            cwd=str(self._root),
            env=self._env(),
            stdin_fifo=fifo,
            on_output=self._on_output,
            on_exit=lambda _: None,
        )
        if process.error is not None:
            raise process.error
        if process.done and process.result is None:
            raise SandboxError("the shell could not be started")
        self._process = process
        return process

    def _on_output(self, stream: str, chunk: bytes) -> None:
        with self._state:
            command = self._current
            if command is not None and not command.finished.is_set():
                chunk = command.feed(stream, chunk)
            if chunk:
                held = self._between[stream]
                held += chunk[: max(0, BETWEEN_BYTES - len(held))]

    def restart(self) -> None:
        """Kill the shell and its whole tree; the next command starts a new one at the root.
        Waits until the tree is gone. A command running meanwhile (another thread's
        :meth:`run`) ends at once, :attr:`CommandOutcome.stopped`: a restart is the way out
        of a command that hangs, never a wait for its timeout."""
        self.kill_now()
        with self._lock:
            self._kill()

    def kill_now(self) -> None:
        """Ask the shell's tree to stop without waiting (a cancelled call: the command's
        thread may still hold the lock; the command then ends as the shell did)."""
        process = self._process
        if process is not None:
            process.stop(wait=None)

    def close(self) -> None:
        """Kill the shell and its tree and start no other; waits until the tree is gone."""
        self._closed = True
        self.kill_now()
        with self._lock:
            self._kill()

    def _kill(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.stop(STOP_WAIT)
        with self._state:
            for held in self._between.values():
                held.clear()


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")
