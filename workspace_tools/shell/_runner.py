"""A long-lived process run through a :class:`sandbox.Sandbox`, outliving the call that
started it: its own thread and event loop, a stdin the caller writes to, and a stop that
takes its whole tree down.

The process is started with ``Sandbox.run`` exactly as ``run_command`` starts a command
(the same supervisor, layers and limits; a new session; the whole tree stopped, detached
processes included), so a shell or a background process gets the protections a command
gets. ``Sandbox.run`` gives a command ``/dev/null`` as stdin; a process here reads its
stdin from a FIFO in the session's output area instead (it opens it first thing), which
this side holds open for writing until :meth:`RunningProcess.close_stdin` (read-write until
the process holds it, write-only after, so that a write once the process and all it
started closed their stdin fails with ``EPIPE`` rather than fill a pipe nobody reads).
When this process dies, however it dies, the supervisor sees its socket close and kills
the tree.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import anyio

from sandbox import ProcessResult, Sandbox, SandboxError
from workspace_tools.shell._area import open_fifo, remove_file

#: ``on_output(stream, chunk)``: ``stream`` is ``"stdout"`` or ``"stderr"``.
OnOutput = Callable[[str, bytes], None]

#: Seconds a stop waits for the tree to be gone (the sandbox's grace, then SIGKILL).
STOP_WAIT = 30.0


class RunningProcess:
    """One process tree started in ``sandbox``, served by a thread of its own.

    Args:
        sandbox: where it runs (its layers, limits and grace apply).
        argv: the command; it must open ``stdin_fifo`` as its stdin first thing (see
            :func:`stdin_script`).
        cwd, env: as for :meth:`Sandbox.run`.
        stdin_fifo: the FIFO made here and held open for writing.
        on_output: receives ``(stream, chunk)`` in this process's thread.
        on_exit: called once, in that thread, when no process of the tree is left.
        timeout: seconds before the tree is stopped; ``None``: never.

    Raises:
        OSError: the FIFO could not be made.
    """

    def __init__(
        self,
        sandbox: Sandbox,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        stdin_fifo: Path,
        on_output: OnOutput,
        on_exit: Callable[[RunningProcess], None],
        timeout: float | None = None,
    ) -> None:
        self._stdin: int | None = open_fifo(stdin_fifo)
        self.stdin_fifo = stdin_fifo
        self._stdin_lock = threading.Lock()
        # Once the process holds the FIFO, stdin is this side's write end only, so that a
        # write finds out when no reader is left (EPIPE) instead of filling a pipe nobody
        # reads: see :meth:`write`.
        self._write_only = False
        #: The process (and all it started) closed its stdin: nothing reads what is written.
        self.stdin_gone = False
        self.result: ProcessResult | None = None
        #: Why the process could not run (a :class:`SandboxError`), or ``None``.
        self.error: BaseException | None = None
        #: A stop was asked for (:meth:`stop`): the tree was killed, not ended by itself.
        self.stopped = False
        self._sandbox = sandbox
        self._argv = list(argv)
        self._cwd = cwd
        self._env = dict(env)
        self._on_output = on_output
        self._on_exit = on_exit
        self._timeout = math.inf if timeout is None else timeout
        self._done = threading.Event()
        # Where a cgroup caps the tree: how many forks it has refused so far.
        self._fork_counter: Callable[[], int] | None = None
        # A byte on this pipe asks the process's event loop to stop the tree (any thread
        # may write it; anyio before 4.11 has no way into a foreign thread's loop).
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._wake_lock = threading.Lock()  # the pipe is closed once, never written after
        self._wake_open = True
        self._thread = threading.Thread(target=self._main, name="workspace-tools-process")
        self._thread.daemon = True  # the supervisor ends the tree if this process exits
        self._thread.start()

    @property
    def done(self) -> bool:
        """No process of the tree is left (or it never started)."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until :attr:`done`, at most ``timeout`` seconds; whether it is."""
        return self._done.wait(timeout)

    def write(self, data: bytes | memoryview) -> int:
        """Write ``data`` to the process's stdin without blocking; the bytes written (fewer
        when the pipe is full because the process does not read).

        Raises:
            BrokenPipeError: stdin was closed, by this side or (:attr:`stdin_gone`) by the
                process and everything it started.
        """
        with self._stdin_lock:  # never a write to a descriptor closed (and reused) meanwhile
            if self._stdin is None:
                raise BrokenPipeError("stdin is closed")
            try:
                self._drop_read_end()
                return os.write(self._stdin, data)
            except BlockingIOError:
                return 0
            except OSError as exc:
                if exc.errno not in (errno.EPIPE, errno.ENXIO):
                    raise
                self.stdin_gone = True
                os.close(self._stdin)
                self._stdin = None
                raise BrokenPipeError("the process closed its stdin") from None

    def _drop_read_end(self) -> None:
        """Once the process holds the FIFO (its :func:`ready_file` exists), swap this side's
        read-write descriptor for a write-only one: a FIFO with no reader left then fails a
        write with ``EPIPE``. Opening write-only with no reader fails with ``ENXIO``."""
        if self._write_only or self._stdin is None:
            return
        if not ready_file(self.stdin_fifo).exists():
            return
        flags = os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC
        writer = os.open(self.stdin_fifo, flags)  # ENXIO: no reader (raised to write)
        os.close(self._stdin)
        self._stdin = writer
        self._write_only = True

    def write_all(self, data: bytes, timeout: float) -> int:
        """Write ``data`` to stdin, waiting while the pipe is full, at most ``timeout``
        seconds; the bytes written (fewer when the process did not read them in time, or
        ended).

        Raises:
            BrokenPipeError: stdin was closed.
        """
        deadline = time.monotonic() + timeout
        view = memoryview(data)
        while view:
            view = view[self.write(view) :]
            left = deadline - time.monotonic()
            if view and (left <= 0 or self.done):
                break
            if view:
                self._done.wait(min(left, 0.005))  # the pipe is full: let the process read
        return len(data) - len(view)

    def close_stdin(self, wait: float = STOP_WAIT) -> None:
        """Close this side of stdin: the process reads end of file once it read the rest.

        A FIFO drops what it holds when its last descriptor closes: until the process has
        opened it (it says so with :func:`ready_file`), this waits, up to ``wait`` seconds
        or until the process ended."""
        deadline = time.monotonic() + wait
        ready = ready_file(self.stdin_fifo)
        while not ready.exists() and not self.done and time.monotonic() < deadline:
            self._done.wait(0.01)
        with self._stdin_lock:
            if self._stdin is not None:
                os.close(self._stdin)
                self._stdin = None

    @property
    def stdin_open(self) -> bool:
        """Whether :meth:`write` can still write."""
        return self._stdin is not None

    def _count_forks_with(self, counter: Callable[[], int]) -> None:
        self._fork_counter = counter

    def refused_forks(self) -> int:
        """How many forks the cap on the tree's processes has refused so far: the kernel's
        count where a cgroup caps them (``Sandbox.run``'s ``on_fork_counter``), the final
        one once the tree is gone; 0 where none does."""
        if self.result is not None:
            return self.result.refused_forks
        counter = self._fork_counter
        return 0 if counter is None else counter()

    def stop(self, wait: float | None = STOP_WAIT) -> bool:
        """Stop the whole tree (SIGTERM, the sandbox's grace, SIGKILL) and wait up to
        ``wait`` seconds (``None``: not at all) for it to be gone; whether it is."""
        if not self._done.is_set():
            self.stopped = True
            with self._wake_lock:
                if self._wake_open:
                    with contextlib.suppress(BlockingIOError):  # a byte is there already
                        os.write(self._wake_w, b"x")
        if wait is None:
            return self._done.is_set()
        return self._done.wait(wait)

    def _main(self) -> None:
        try:
            anyio.run(self._serve)
        finally:
            with self._wake_lock:
                self._wake_open = False
                os.close(self._wake_r)
                os.close(self._wake_w)
            self.close_stdin(wait=0)
            for path in (self.stdin_fifo, ready_file(self.stdin_fifo)):
                remove_file(path)
            self._done.set()
            self._on_exit(self)

    async def _serve(self) -> None:
        async with anyio.create_task_group() as group:

            async def stop_when_asked() -> None:
                await anyio.wait_readable(self._wake_r)  # type: ignore[attr-defined]
                group.cancel_scope.cancel()

            group.start_soon(stop_when_asked)
            try:
                self.result = await self._sandbox.run(
                    self._argv,
                    cwd=self._cwd,
                    env=self._env,
                    on_output=self._on_output,
                    timeout=self._timeout,
                    on_fork_counter=self._count_forks_with,
                )
            except SandboxError as exc:
                self.error = exc
            except OSError as exc:  # the spawn server could not be reached
                self.error = SandboxError(str(exc))
            finally:
                group.cancel_scope.cancel()


def stdin_script(fifo: Path) -> str:
    """The first lines of a shell script that takes ``fifo`` as its stdin and then says so
    by creating :func:`ready_file` (a builtin redirection: no process is started)."""
    return f"exec 0<{shlex.quote(str(fifo))} || exit 126\n: >{shlex.quote(str(ready_file(fifo)))}\n"


def ready_file(fifo: Path) -> Path:
    """The file a process creates once it holds ``fifo`` open as its stdin."""
    return fifo.with_name(fifo.name + ".ready")
