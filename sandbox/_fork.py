"""Running a Python callable in a forked child and getting its result back.

A fork carries the callable as it is (a closure over a workspace, an open connection),
so nothing needs to be picklable but the result. The fork is made from a worker thread,
so that the child's only thread has no event loop running and can start its own for an
async callable.

Forking a process that runs other threads copies their locks in whatever state they
are: a lock held at that instant stays held in the child. The child here does only its
own work and exits; a child that deadlocks on such a lock is stopped by the timeout like
any other.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import pickle
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread

from ._errors import SandboxError
from ._process import signal_name
from ._tree import descendants

_READ_SIZE = 256 * 1024


async def call_in_child(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    setup: Callable[[], None],
    grace: float,
) -> Any:
    """Run ``fn(*args, **kwargs)`` (awaited when it returns an awaitable) in a forked child
    that first calls ``setup()``; return its result or raise its exception.

    Cancelling the call stops the child and everything it started (SIGTERM, ``grace``
    seconds, SIGKILL).

    Raises:
        SandboxError: the child died by a signal (the message and ``.signal`` name it,
            e.g. SIGSEGV) or exited without a result.
        Exception: whatever ``fn`` raised (re-created from its pickle).
    """
    read_fd, write_fd = os.pipe()
    try:
        pid = await anyio.to_thread.run_sync(_fork, fn, args, kwargs, setup, read_fd, write_fd)
    finally:
        os.close(write_fd)
    os.set_blocking(read_fd, False)
    received = bytearray()
    status: int | None = None
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read_into, read_fd, received)
            status = await _wait_exit(pid)
            tg.cancel_scope.cancel()
        # The child has exited: all it wrote is in the pipe now.
        _read_available(read_fd, received)
    finally:
        if status is None:
            with anyio.CancelScope(shield=True):
                await _stop(pid, grace)
        os.close(read_fd)
    return _outcome(bytes(received), status)


def _fork(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    setup: Callable[[], None],
    read_fd: int,
    write_fd: int,
) -> int:
    pid = os.fork()
    if pid != 0:
        return pid
    try:
        os.close(read_fd)
        try:
            setup()
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = anyio.run(_await, value)
            outcome: tuple[str, Any] = ("ok", value)
        except BaseException as exc:
            outcome = ("error", exc)
        _write_all(write_fd, _dumps(outcome))
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        _kill_leftovers()
    finally:
        os._exit(0)


async def _await(value: Awaitable[Any]) -> Any:
    return await value


def _dumps(outcome: tuple[str, Any]) -> bytes:
    try:
        return pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        kind, value = outcome
        if kind == "error":
            described = f"{type(value).__name__}: {value}"
            return pickle.dumps(("error", RuntimeError(described)))
        return pickle.dumps(
            ("error", RuntimeError(f"the sandboxed call's result cannot be sent back: {exc}"))
        )


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _kill_leftovers() -> None:
    """Processes the call started and left running belong to the call: they end with it.

    The child is a subreaper (see ``setup``), so with no child left there is no
    descendant left either, and the common case costs one ``waitpid``.
    """
    me = os.getpid()
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] != 0:
                pass
        except ChildProcessError:
            return
        for pid in descendants(me):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.001)


async def _read_into(fd: int, received: bytearray) -> None:
    while True:
        try:
            chunk = os.read(fd, _READ_SIZE)
        except BlockingIOError:
            await anyio.wait_readable(fd)
            continue
        if not chunk:
            return
        received += chunk


def _read_available(fd: int, received: bytearray) -> None:
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, _READ_SIZE):
            received += chunk


async def _wait_exit(pid: int) -> int:
    """The child's wait status, once it exited (pidfd on Linux, a waiting thread elsewhere)."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        _, status = await anyio.to_thread.run_sync(os.waitpid, pid, 0, abandon_on_cancel=True)
        return status
    try:
        await anyio.wait_readable(pidfd)
    finally:
        os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    return status


async def _stop(pid: int, grace: float) -> None:
    """SIGTERM the child's tree, wait up to ``grace`` seconds, SIGKILL what is left, reap.

    The tree is listed before the child can die: its orphans would be reparented out of
    reach (the caller is not a subreaper).
    """
    tree = set(descendants(pid))
    _signal(tree, pid, signal.SIGTERM)
    with anyio.move_on_after(grace):
        await _wait_exit(pid)
    tree.update(descendants(pid))
    # Stopped first, so that nothing forks between listing the tree and killing it.
    _signal(tree, pid, signal.SIGSTOP)
    _signal(tree | set(descendants(pid)), pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _signal(tree: set[int], pid: int, sig: int) -> None:
    for target in (*tree, -pid, pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(target, sig)


def _outcome(data: bytes, status: int | None) -> Any:
    if status is not None and os.WIFSIGNALED(status):
        name = signal_name(os.WTERMSIG(status))
        raise SandboxError(f"the sandboxed call was killed by {name}", signal=name)
    if not data:
        code = os.waitstatus_to_exitcode(status) if status is not None else None
        raise SandboxError(f"the sandboxed call exited (status {code}) without a result")
    kind, value = pickle.loads(data)
    if kind == "error":
        raise value
    return value
