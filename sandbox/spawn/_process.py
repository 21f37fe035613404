"""Running one command through a supervisor: streamed, capped output; timeout; tree stop."""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import selectors
import signal
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Protocol

import anyio
import anyio.to_thread

from sandbox._errors import SandboxError
from sandbox.spawn._capture import NOTHING_CAPTURED, CapturedOutput, OutputBuffer
from sandbox.spawn._client import Launcher, SpawnRefused, Supervisor
from sandbox.spawn._jobs import (
    CommandExited,
    CommandJob,
    Message,
    StartFailed,
    StopTree,
    TreeDone,
    encode_job,
)
from sandbox.spawn._wire import Channel

#: ``on_output(stream, chunk)``: ``stream`` is ``"stdout"`` or ``"stderr"``, ``chunk`` the
#: bytes just read. Called on the event loop; it must not block.
OnOutput = Callable[[str, bytes], None]

_READ_SIZE = 64 * 1024

#: Seconds a command's caller waits for its end alone, its output left in the pipes (see
#: :func:`run_process`): a command that ends within them costs one wake-up, whatever it
#: printed. One that fills a pipe (64 KiB on Linux) sooner waits for the rest of them. The
#: supervisor reports a command still running then (``StillRunning``), so that the caller
#: sets no timer for them.
QUIET_SECONDS = 0.02

#: A tree that ended with nothing left running to stop (frozen: one shared by every job).
_NOTHING_STOPPED = TreeDone(None)

#: What :func:`run_process` raises for a command stopped by its launcher's close.
CLOSED_DURING_COMMAND = "the sandbox was closed while the command ran; it was stopped"


@dataclass(frozen=True)
class ProcessResult:
    """How a command ended.

    Attributes:
        exit_code: the exit status, or 128 + N when signal N killed it (the shell's
            convention); ``None`` when it was stopped while it ran (it timed out, or its
            sandbox was closed): it has no exit code of its own then.
        signal: the name of the signal that killed it (``"SIGKILL"``), or ``None``.
        timed_out: the timeout expired and the tree was stopped.
        stdout: what was kept of standard output, with its byte count.
        stderr: the same for standard error.
        duration_ms: wall time from start to the end of the whole tree, in milliseconds.
        stopped_processes: how many processes the command left running (background jobs,
            daemons) were stopped once it had exited; 0 after a timeout, whose stop
            covers the command itself.
        stopped_names: the distinct program names (``argv[0]``'s last component) of at
            most three of them, e.g. ``("python3", "sleep")``.
        refused_forks: how many times a process of the command could not start another
            (``fork``, ``clone``, a thread) because the cgroup capping its processes was
            full: the kernel's own count (the ``max`` line of ``pids.events``); 0 where
            no cgroup caps the command.
    """

    exit_code: int | None
    signal: str | None
    timed_out: bool
    stdout: CapturedOutput
    stderr: CapturedOutput
    duration_ms: float
    stopped_processes: int = 0
    stopped_names: tuple[str, ...] = ()
    refused_forks: int = 0


def decode_status(status: int | None) -> tuple[int | None, str | None]:
    """A wait status (waitpid(2)) as ``(exit code, signal name)``; ``128 + N`` for a
    signal N."""
    if status is None:
        return None, None
    code = os.waitstatus_to_exitcode(status)
    if code >= 0:
        return code, None
    return 128 - code, signal_name(-code)


def signal_name(number: int) -> str:
    """``SIGSEGV`` for 11; ``signal 99`` for a number Python does not name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class _Job:
    """The caller's side of one job on a supervisor's channel."""

    def __init__(self, channel: Channel) -> None:
        self._channel = channel
        #: The channel's descriptor.
        self.fd = channel.fileno()
        self.exit_status: int | None = None
        self.exited = False
        self.done = False
        #: Every message of this job was read: the supervisor can take the next job.
        self.clean = True
        #: Why the command could not start, if it could not.
        self.error: str | None = None
        #: It could not because no new process could be made (``StartFailed.refused``).
        self.refused = False
        #: What the supervisor stopped after the command had exited (``TreeDone``).
        self.stopped = _NOTHING_STOPPED

    def has_exited(self) -> bool:
        """:attr:`exited`, as a condition for :meth:`_Streams.serve_until`."""
        return self.exited

    def is_done(self) -> bool:
        """:attr:`done`, as a condition for :meth:`_Streams.serve_until`."""
        return self.done

    def poll(self) -> Message | None:
        """The next message if one is waiting, else None."""
        message = self._channel.poll()
        if message is None:
            try:
                open_ = self._channel.fill(wait=False)
            except BlockingIOError:
                return None
            except OSError:
                open_ = False
            if not open_:
                return self._closed()
            message = self._channel.poll()
            if message is None:
                return None
        if isinstance(message, StartFailed):
            self.error, self.exited, self.done = message.error, True, True
            self.refused = message.refused
        elif isinstance(message, CommandExited):
            self.exit_status, self.exited = message.status, True
        elif isinstance(message, TreeDone):
            self.done, self.stopped = True, message
            if not self.exited and message.status is not None:
                self.exit_status, self.exited = message.status, True
        return message

    def _closed(self) -> Message:
        self.clean = False
        if self.exited:
            self.done = True
            return TreeDone(self.exit_status)
        raise SandboxError("the sandbox supervisor exited unexpectedly")

    def request_stop(self, grace: float) -> None:
        """Ask the supervisor to stop every process of the tree (SIGTERM, ``grace``
        seconds, SIGKILL), unless the tree is already gone; ``done`` follows."""
        while not self.done and self.poll() is not None:
            pass  # "done" may already be waiting: then no stop request is needed
        if not self.done:
            with contextlib.suppress(OSError):
                self._channel.send(StopTree(grace))


async def run_process(
    launcher: Launcher,
    job: CommandJob,
    *,
    on_output: OnOutput | None = None,
    timeout: float | None = None,
    grace: float = 1.0,
    drain: float = 0.2,
    output_bytes: int = 1024 * 1024,
) -> ProcessResult:
    """Run the command ``job`` describes and wait until no process of its tree is left.

    Args:
        launcher: the spawn server connection to start it through.
        job: the command, its environment, limits and layers.
        on_output: receives each chunk of output as it is read.
        timeout: seconds before the tree is stopped; the result says ``timed_out``.
        grace: seconds between SIGTERM and SIGKILL when the tree is stopped.
        drain: seconds output is still read after the command exited while another process
            keeps a pipe open; then that process is stopped.
        output_bytes: bytes of each stream kept (head and tail).

    Cancelling the call stops the tree too, before the cancellation goes on.

    Raises:
        SandboxError: the command could not be started.
        SpawnRefused: no new process could be made for it (the limit on processes or
            memory): an ``OSError`` whose words say to try again with fewer at once.
    """
    started = time.perf_counter()
    limits = job.limits
    supervisor = launcher.try_acquire(limits) or await _acquire(launcher, limits)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    # An environment the supervisor already has is not sent again (CommandJob.env).
    env = job.env
    # Our copies of the write ends stay open until the command's exit is reported (see
    # sandbox.spawn._server): the pipes end only then, and a short command wakes this task
    # once, for "done", with its output and the end of file ready once they are closed.
    writers = [out_w, err_w]
    # Everything the wait needs is set up before the job goes out (see below).
    try:
        os.set_blocking(out_r, False)
        os.set_blocking(err_r, False)
        watch = _Job(supervisor)
        streams = _Streams(watch, out_r, err_r, output_bytes, on_output)
    except BaseException:
        _close_all([out_r, out_w, err_r, err_w])
        launcher.release(limits, supervisor)  # no job went out: it is as it was
        raise
    sent = False

    def send() -> None:
        nonlocal sent
        encoded = encode_job(job, with_env=env != supervisor.env, quiet_seconds=QUIET_SECONDS)
        supervisor.send_encoded(encoded, writers)
        sent = True
        supervisor.job_sent()
        supervisor.env = env

    try:
        deadline = _deadline(timeout)
        # The usual command ends within moments: its caller waits for the job's channel
        # alone for that long (QUIET_SECONDS), so that output does not wake it once per
        # write, and wakes once, for "done", with the output waiting in the pipes; the
        # supervisor ends that wait for a command that runs longer ("running"), so that no
        # timer is set here, unless the timeout comes first. The job goes out once that wait
        # is armed: the supervisor, then the command, may take this process's core at once,
        # and should find this task asleep.
        soon = deadline if timeout is not None and timeout < QUIET_SECONDS else None
        woke = await _wait_readable(watch.fd, soon, then=send)
        timed_out = False
        if woke and streams.ended_at_once(writers):
            # Stopped by a close asked for before its exit was seen: that exit is the stop's.
            stopped_running = supervisor.stopped_by_close
        else:
            timed_out = not await streams.serve_until(watch.has_exited, deadline)
            stopped_running = timed_out or supervisor.stopped_by_close
            _close_all(writers)
            if not timed_out and not streams.drained:
                # Most often at end of file now that the command's tree is gone: then no
                # wait (nor its timer) is needed, nor a look at the selector first.
                streams.read_now()
                if not streams.drained:
                    await streams.serve_until(streams.is_drained, _deadline(drain))
            watch.request_stop(grace)
            await streams.serve_until(watch.is_done)
            if not streams.drained:
                # The tree is gone; only a process outside it could still hold a pipe.
                await streams.serve_until(streams.is_drained, _deadline(drain))
        closed = supervisor.job_over()
        if watch.error is not None:
            raise SpawnRefused(watch.error) if watch.refused else SandboxError(watch.error)
    finally:
        try:
            if sent and not watch.done:
                # A supervisor that is gone has nothing left to stop: its error is already
                # on its way out. One that got no job whole stops what it started at end
                # of file, below.
                with (
                    anyio.CancelScope(shield=True),
                    anyio.move_on_after(grace + 5),
                    contextlib.suppress(SandboxError),
                ):
                    watch.request_stop(grace)
                    await streams.serve_until(watch.is_done)
        finally:
            _close_all(writers)
            streams.close()
            os.close(out_r)
            os.close(err_r)
            if sent and watch.done and watch.clean:
                launcher.release(limits, supervisor)
            else:
                launcher.forget(supervisor)
                supervisor.close()  # end of file: the supervisor stops what is left, and exits
    exit_code, killed_by = decode_status(watch.exit_status)
    if stopped_running:
        exit_code, stopped = None, _NOTHING_STOPPED
    else:
        stopped = watch.stopped
    # Made without the frozen dataclass's __init__ (an object.__setattr__ a field): its
    # fields are all given here, and nothing is checked after them.
    result = object.__new__(ProcessResult)
    result.__dict__.update(
        exit_code=exit_code,
        signal=killed_by,
        timed_out=timed_out,
        stdout=streams.captured(out_r),
        stderr=streams.captured(err_r),
        duration_ms=(time.perf_counter() - started) * 1000,
        stopped_processes=stopped.stopped,
        stopped_names=stopped.stopped_names,
        refused_forks=0,
    )
    if closed:
        # Stopped by Launcher.close (the sandbox's close), not by this call: an error, as
        # a Python call the sandbox is closed under is one, with the output so far.
        raise SandboxError(CLOSED_DURING_COMMAND, killed_by, result)
    return result


async def _acquire(launcher: Launcher, limits: Hashable) -> Supervisor:
    """A supervisor from ``launcher``, waited for in a thread, when another thread holds
    it or the process's one spawn server (serving another sandbox's request, a call
    worker's start): the event loop, which may serve many workspaces, goes on meanwhile.
    One got after a cancellation is handed back unused."""
    got: list[Supervisor] = []
    try:
        await anyio.to_thread.run_sync(lambda: got.append(launcher.acquire(limits)))
    except RuntimeError:
        if got:
            raise
        # No thread could be started (the limit on processes counts threads): waited for
        # here then.
        return launcher.acquire(limits)
    except BaseException:
        for supervisor in got:
            launcher.release(limits, supervisor)
        raise
    return got[0]


def _close_all(fds: list[int]) -> None:
    """Close ``fds`` and empty the list, so that a second call closes nothing."""
    while fds:
        os.close(fds.pop())


def _deadline(seconds: float | None) -> float | None:
    """The ``time.monotonic()`` (asyncio's and anyio's clock) ``seconds`` from now."""
    return None if seconds is None else time.monotonic() + seconds


class _Streams:
    """What the caller waits on for one job, served by one task: both output pipes (read
    into their buffers, and handed to ``on_output``) and the job's channel.

    They sit behind one descriptor, an epoll (Linux) or kqueue (macOS) selector that is
    readable when one of them is: a task per pipe would cost more than a short command.
    It is made on first need: a command over at the caller's first wake-up needs none.
    """

    def __init__(
        self,
        job: _Job,
        out_fd: int,
        err_fd: int,
        output_bytes: int,
        on_output: OnOutput | None,
    ) -> None:
        self._job = job
        self._job_fd = job.fd
        #: The pipes not at their end yet, stdout first (a dict: read in that order).
        self._pipes = dict.fromkeys((out_fd, err_fd))
        self._names = {out_fd: "stdout", err_fd: "stderr"}
        self._output_bytes = output_bytes
        # Each pipe's buffer (``output_bytes`` kept), made with its first output: most
        # commands' stderr, and many a command's stdout, never have any.
        self._buffers: dict[int, OutputBuffer] = {}
        self._on_output = on_output
        self._ready: _Readiness | None = None
        #: Descriptors done with but still registered: taken out only before another wait
        #: (the selector is closed at the end with them in it), and ignored meanwhile.
        self._finished: list[int] = []

    def _selector(self) -> _Readiness:
        """The selector, made the first time it is needed, watching the pipes not at their
        end yet and the job's channel while the job is not done."""
        ready = self._ready
        if ready is None:
            fds = (*self._pipes, *(() if self._job.done else (self._job_fd,)))
            ready = self._ready = _readiness(fds)
            self._finished.clear()  # none of them is in it
        return ready

    def ended_at_once(self, writers: list[int]) -> bool:
        """Whether the job is over and its output all read, seen from its channel's next
        message alone: the command's whole tree is gone ("done"), so ``writers`` (our
        write ends, closed here then) were the pipes' last writers and each is read to end
        of file. A command's usual end, at the first wake-up after the job was sent; else
        what was read is kept and :meth:`serve_until` goes on from there.

        Raises:
            SandboxError: the supervisor went away before the command exited.
        """
        job = self._job
        # Every message read with the first is taken: "running" and "done" may come in
        # one read, and the socket, read empty, would not wake a wait for the second.
        while not job.done and job.poll() is not None:
            pass
        if not job.done:
            return False
        self._finished.append(self._job_fd)
        _close_all(writers)
        # What each pipe holds now is all the tree wrote: a pipe's capacity at most (64 KiB
        # on Linux, one read), then its end.
        self.read_now()
        return not self._pipes

    @property
    def drained(self) -> bool:
        """Both pipes reached end of file."""
        return not self._pipes

    def is_drained(self) -> bool:
        """:attr:`drained`, as a condition for :meth:`serve_until`."""
        return not self._pipes

    async def serve_until(
        self, finished: Callable[[], bool], deadline: float | None = None
    ) -> bool:
        """Read output and job messages as they come until ``finished()`` is true (True) or
        ``deadline`` (``time.monotonic()`` seconds) passes first (False).

        Raises:
            SandboxError: the supervisor went away before the command exited.
        """
        while not finished():
            self.serve_ready()
            if finished():
                return True
            ready = self._selector()
            while self._finished:
                ready.unregister(self._finished.pop())
            if not await _wait_readable(ready.fileno(), deadline):
                return False
        return True

    def serve_ready(self) -> None:
        """Read the output and the job messages waiting now, without waiting.

        Raises:
            SandboxError: the supervisor went away before the command exited.
        """
        for fd in self._selector().ready():
            if fd == self._job_fd:
                if not self._job.done:
                    self._serve_job()
            elif fd in self._pipes:
                self._read(fd)

    def read_now(self) -> None:
        """Read what each pipe holds now, and its end of file when its writers are gone:
        at most two reads a pipe (a process outside the tree may still be writing), without
        waiting and without asking the selector first."""
        for fd in list(self._pipes):
            if self._read(fd):
                self._read(fd)

    def _serve_job(self) -> None:
        while not self._job.done and self._job.poll() is not None:
            pass
        if self._job.done:
            self._finished.append(self._job_fd)

    def _read(self, fd: int) -> bool:
        """Read what pipe ``fd`` has (once); whether it gave anything."""
        try:
            chunk = os.read(fd, _READ_SIZE)
        except BlockingIOError:
            return False
        if not chunk:
            self._finished.append(fd)
            del self._pipes[fd]
            return False
        buffer = self._buffers.get(fd)
        if buffer is None:
            buffer = self._buffers[fd] = OutputBuffer(self._output_bytes)
        buffer.feed(chunk)
        if self._on_output is not None:
            self._on_output(self._names[fd], chunk)
        return True

    def captured(self, fd: int) -> CapturedOutput:
        """What was kept of pipe ``fd``'s output so far, with its byte count."""
        buffer = self._buffers.get(fd)
        return NOTHING_CAPTURED if buffer is None else buffer.snapshot()

    def close(self) -> None:
        """Release the selector, if one was made (the descriptors it watches stay open)."""
        if self._ready is not None:
            self._ready.close()


async def _wait_readable(
    fd: int, deadline: float | None = None, then: Callable[[], None] | None = None
) -> bool:
    """Wait until ``fd`` is readable (True) or ``deadline`` (``time.monotonic()``
    seconds) passes (False); ``then()`` is called once the wait is armed, before this task
    sleeps (a request whose answer wakes it: the work of arming the wait is done while
    the answerer has not yet taken a core from this process). On asyncio, a reader
    callback and a timer resolving a future, at a fraction of the cost of
    ``anyio.wait_readable`` in a ``move_on_after`` scope (anyio adds an event, a cancel
    scope, their bookkeeping and checks; a command's caller waits here once or twice)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # another event loop library (trio)
        return await _anyio_wait_readable(fd, deadline, then)
    ready = loop.create_future()

    def wake(readable: bool) -> None:
        # The loop calls this on each pass while the descriptor stays readable.
        if not ready.done():
            ready.set_result(readable)

    try:
        loop.add_reader(fd, wake, True)
    except NotImplementedError:  # a loop without readers (Windows' proactor)
        return await _anyio_wait_readable(fd, deadline, then)
    # call_later: a loop's own clock need not be time.monotonic() (uvloop's is not).
    timer = None
    try:
        if deadline is not None:
            timer = loop.call_later(deadline - time.monotonic(), wake, False)
        if then is not None:
            then()
        readable = await ready
    finally:
        loop.remove_reader(fd)
        if timer is not None:
            timer.cancel()
    # A descriptor that stays readable wakes the task before a due timer does: the
    # deadline is checked here too, as a cancel scope would have cancelled this wait.
    return bool(readable) and (deadline is None or time.monotonic() < deadline)


async def _anyio_wait_readable(
    fd: int, deadline: float | None, then: Callable[[], None] | None = None
) -> bool:
    """:func:`_wait_readable` through anyio (any event loop library)."""
    with anyio.move_on_after(None if deadline is None else deadline - time.monotonic()):
        if then is not None:
            then()
        await anyio.wait_readable(fd)  # type: ignore[attr-defined]
        return True
    return False


class _Readiness(Protocol):
    """Descriptors watched for reading behind one descriptor of its own (made watching
    those it is given)."""

    def unregister(self, fd: int) -> None: ...
    def ready(self) -> list[int]: ...
    def fileno(self) -> int: ...
    def close(self) -> None: ...


class _Epoll:
    """:class:`_Readiness` on a bare epoll (Linux): ``selectors``' bookkeeping (a key
    object per descriptor, a mapping, a tuple per event) costs more than the system calls
    on a short command's path."""

    def __init__(self, fds: tuple[int, ...]) -> None:
        self._epoll = epoll = select.epoll()
        for fd in fds:
            epoll.register(fd, select.EPOLLIN)

    def unregister(self, fd: int) -> None:
        self._epoll.unregister(fd)

    def ready(self) -> list[int]:
        """Descriptors readable now (or at end of file, or in error), without waiting."""
        return [fd for fd, _ in self._epoll.poll(0)]

    def fileno(self) -> int:
        return self._epoll.fileno()

    def close(self) -> None:
        self._epoll.close()


class _Selector:
    """:class:`_Readiness` on the platform's ``selectors.DefaultSelector`` (kqueue on
    macOS)."""

    def __init__(self, fds: tuple[int, ...]) -> None:
        self._selector = selectors.DefaultSelector()
        for fd in fds:
            self._selector.register(fd, selectors.EVENT_READ)

    def unregister(self, fd: int) -> None:
        self._selector.unregister(fd)

    def ready(self) -> list[int]:
        """Descriptors readable now, without waiting."""
        return [key.fd for key, _ in self._selector.select(0)]

    def fileno(self) -> int:
        return self._selector.fileno()  # type: ignore[attr-defined]

    def close(self) -> None:
        self._selector.close()


def _readiness(fds: tuple[int, ...]) -> _Readiness:
    return _Epoll(fds) if hasattr(select, "epoll") else _Selector(fds)
