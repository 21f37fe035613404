"""Running a Python callable in a forked child and getting its result back.

A fork carries the callable as it is (a closure over a workspace, an open connection),
so nothing needs to be picklable but the result; only the pipes it copied are closed in the
child (:func:`_close_inherited_pipes` says why). Forks are made from a worker thread, so
that the child's only thread has no event loop running and can start its own for an
async callable.

To keep a fork off a call's path, :class:`ForkedCaller` forks one child ahead of need,
already set up, waiting for its call. That child holds the callables the caller had used
by then (a fork copies them); a call naming them travels as a pickle whose references to
those callables are resolved in the child. A call it cannot serve that way (a callable
new since the fork, an argument that does not pickle) forks a child of its own. The child
forked ahead sees the caller's memory as it was after the previous call.

Forking a process that runs other threads copies their locks in whatever state they are:
a lock held at that instant stays held in the child. The child here does only its own
work and exits; a child that deadlocks on such a lock is stopped by the timeout like any
other.
"""

from __future__ import annotations

import contextlib
import faulthandler
import inspect
import io
import os
import pickle
import selectors
import signal
import stat
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread

from sandbox._errors import SandboxError
from sandbox.spawn._forking import fork_in_threaded_process
from sandbox.spawn._process import signal_name
from sandbox.spawn._tree import descendants

#: A callable with its positional and keyword arguments.
Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]

_READ_SIZE = 256 * 1024
#: Callables remembered for children forked ahead; the oldest are forgotten first.
_REGISTRY_SIZE = 256


@dataclass
class _Child:
    pid: int
    result_fd: int
    request_fd: int | None = None
    known: frozenset[int] = field(default_factory=frozenset)


class ForkedCaller:
    """Runs callables in forked children prepared by ``setup`` (called in each child
    before the call: session, limits, confinement).

    Args:
        setup: prepares a child; an exception it raises is the call's exception.
        warm: keep a child forked ahead of need.
    """

    def __init__(self, setup: Callable[[], None], *, warm: bool = True) -> None:
        self._setup = setup
        self._warm = warm
        self._lock = threading.Lock()
        self._registry: dict[int, Any] = {}
        self._ahead: _Child | None = None
        self._forker: threading.Thread | None = None
        self._wanted = threading.Event()
        self._closed = False
        #: Children that delivered their result and are exiting; reaped later.
        self._exiting: list[int] = []
        self.owner = os.getpid()

    async def call(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], grace: float
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` (awaited when it returns an awaitable) in a child;
        return its result or raise its exception.

        Cancelling the call stops the child and everything it started (SIGTERM, ``grace``
        seconds, SIGKILL).

        Raises:
            SandboxError: the child died by a signal (the message and ``.signal`` name
                it, e.g. SIGSEGV) or exited without a result.
            Exception: whatever ``fn`` raised (re-created from its pickle).
        """
        self._reap()
        child = self._take_ahead(fn, args, kwargs)
        if child is None:
            child = await anyio.to_thread.run_sync(self._fork, (fn, args, kwargs))
        self._remember(fn, *args, *kwargs.values())
        try:
            data, status = await _collect(child, grace)
            if status is None:
                with self._lock:
                    self._exiting.append(child.pid)
        finally:
            self._fork_ahead()
        return _outcome(data, status)

    def close(self) -> None:
        """Let the child forked ahead go (it exits on end of file)."""
        with self._lock:
            child, self._ahead = self._ahead, None
            self._closed = True
        self._wanted.set()
        if child is not None:
            _discard(child)
        self._reap(block=True)

    def _reap(self, block: bool = False) -> None:
        with self._lock:
            pids, self._exiting = self._exiting, []
        for pid in pids:
            try:
                done, _ = os.waitpid(pid, 0 if block else os.WNOHANG)
            except ChildProcessError:
                continue
            if not done:
                with self._lock:
                    self._exiting.append(pid)

    def _remember(self, *objects: Any) -> None:
        with self._lock:
            for obj in objects:
                if callable(obj) and not isinstance(obj, type):
                    self._registry.pop(id(obj), None)
                    self._registry[id(obj)] = obj
            while len(self._registry) > _REGISTRY_SIZE:
                del self._registry[next(iter(self._registry))]

    def _take_ahead(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> _Child | None:
        with self._lock:
            child, self._ahead = self._ahead, None
            registry = dict(self._registry)
        if child is None:
            return None
        request = _dump_request((fn, args, kwargs), registry, child.known)
        if request is None:
            # A child that misses callables used since its fork would miss them forever:
            # let it go, so the next one forked ahead holds them. One that knows them all
            # (the call failed on an argument that does not pickle) stays for a later call.
            stale = not child.known.issuperset(registry)
            with self._lock:
                if self._ahead is None and not stale:
                    self._ahead, child = child, None
            if child is not None:
                _discard(child)
            return None
        assert child.request_fd is not None
        try:
            # Length first: other forks may hold copies of this pipe, so no end of file.
            _write_all(child.request_fd, len(request).to_bytes(8, "big") + request)
        except OSError:
            _discard(child)  # it died while waiting (killed from outside)
            return None
        os.close(child.request_fd)
        child.request_fd = None
        return child

    def _fork_ahead(self) -> None:
        if not self._warm or os.getpid() != self.owner:
            return
        with self._lock:
            if self._ahead is not None or not self._registry or self._closed:
                return
            if self._forker is None:
                # A thread of its own: the fork must not wait for, nor hold up, the
                # caller's event loop (it takes the GIL while the caller waits on I/O).
                self._forker = threading.Thread(target=self._fork_ahead_loop, daemon=True)
                self._forker.start()
        self._wanted.set()

    def _fork_ahead_loop(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            with self._lock:
                if self._closed:
                    return
                if self._ahead is not None:
                    continue
            child = self._fork(None)
            with self._lock:
                if self._ahead is None and not self._closed:
                    self._ahead, child = child, None
            if child is not None:  # closed meanwhile: this one is not needed
                _discard(child)

    def _fork(self, call: Call | None) -> _Child:
        """Fork a child: for ``call``, or (``None``) one that waits for a pickled call."""
        with self._lock:
            registry = dict(self._registry)
        result_r, result_w = os.pipe()
        request_r, request_w = os.pipe() if call is None else (-1, -1)
        pid = fork_in_threaded_process()  # the module docstring says why the child is safe
        if pid == 0:
            _child_main(self._setup, call, registry, request_r, request_w, result_r, result_w)
        os.close(result_w)
        if call is not None:
            return _Child(pid, result_r)
        os.close(request_r)
        return _Child(pid, result_r, request_w, frozenset(registry))


def _discard(child: _Child) -> None:
    """Let a child forked ahead go unused: SIGKILL (it runs nothing yet), reap."""
    if child.request_fd is not None:
        os.close(child.request_fd)
    os.close(child.result_fd)
    with contextlib.suppress(ProcessLookupError):
        os.kill(child.pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(child.pid, 0)


def _child_main(
    setup: Callable[[], None],
    call: Call | None,
    registry: dict[int, Any],
    request_r: int,
    request_w: int,
    result_r: int,
    result_w: int,
) -> None:
    try:
        # A crash here is reported by the parent (SandboxError naming the signal); a fault
        # handler inherited from the caller would only print a second, alarming dump.
        faulthandler.disable()
        os.close(result_r)
        if request_w >= 0:
            os.close(request_w)
        _close_inherited_pipes(keep={request_r, result_w})
        try:
            setup()
            failed: BaseException | None = None
        except BaseException as exc:
            failed = exc
        if call is None:
            size = int.from_bytes(_read_exactly(request_r, 8), "big")
            call = _load_request(_read_exactly(request_r, size), registry)
        if failed is not None:
            outcome: tuple[str, Any] = ("error", failed)
        else:
            outcome = _run(*call)
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        # Before the result: once the caller has it, nothing of the call may be left.
        _kill_leftovers()
        result = _dumps(outcome)
        _write_all(result_w, len(result).to_bytes(8, "big") + result)
    finally:
        os._exit(0)


def _close_inherited_pipes(keep: set[int]) -> None:
    """Close the pipes the fork copied from the caller, but ``keep``.

    Other threads of the caller may be starting a subprocess or a sandboxed call at the
    instant of the fork: they wait for end of file on a pipe (``subprocess``'s exec-status
    pipe, a child's output) whose write end this copy would hold until the child exits,
    which for a child forked ahead is until its call comes. Descriptors of other kinds
    (files, sockets) stay, so a callable over an open connection still works.
    """
    try:
        fds = [int(name) for name in os.listdir("/dev/fd")]
    except OSError:
        return
    for fd in fds:
        if fd in keep or fd <= 2:
            continue
        with contextlib.suppress(OSError):
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.close(fd)


def _run(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, Any]:
    try:
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            value = anyio.run(_await, value)
        return ("ok", value)
    except BaseException as exc:
        return ("error", exc)


async def _await(value: Awaitable[Any]) -> Any:
    return await value


class _RefPickler(pickle.Pickler):
    """Pickles the callables a child already holds as references to them."""

    def __init__(self, file: io.BytesIO, registry: dict[int, Any], known: frozenset[int]):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._registry = registry
        self._known = known

    def persistent_id(self, obj: Any) -> int | None:
        key = id(obj)
        if key in self._known and self._registry.get(key) is obj:
            return key
        return None


class _RefUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, registry: dict[int, Any]):
        super().__init__(file)
        self._registry = registry

    def persistent_load(self, pid: Any) -> Any:
        return self._registry[pid]


def _dump_request(call: Any, registry: dict[int, Any], known: frozenset[int]) -> bytes | None:
    buffer = io.BytesIO()
    try:
        _RefPickler(buffer, registry, known).dump(call)
    except Exception:
        return None  # something the child does not hold and cannot be pickled
    return buffer.getvalue()


def _load_request(data: bytes, registry: dict[int, Any]) -> Any:
    return _RefUnpickler(io.BytesIO(data), registry).load()


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


def _read_exactly(fd: int, size: int) -> bytes:
    """``size`` bytes from ``fd``; exits the child at end of file (let go unused)."""
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, min(_READ_SIZE, size - len(data)))
        if not chunk:
            os._exit(0)
        data += chunk
    return bytes(data)


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


async def _collect(child: _Child, grace: float) -> Any:
    """Read the child's result; stop it when cancelled. Returns ``(result bytes or None,
    wait status or None)``: the result once complete (the child then only exits, and is
    reaped later), else the status the child exited with."""
    os.set_blocking(child.result_fd, False)
    received = bytearray()
    status: int | None = None
    complete = False
    try:
        try:
            pidfd = os.pidfd_open(child.pid)
        except (AttributeError, OSError):
            pidfd = None
        if pidfd is None:
            status, complete = await _collect_with_tasks(child, received)
        else:
            try:
                status, complete = await _collect_with_pidfd(child, pidfd, received)
            finally:
                os.close(pidfd)
    finally:
        if status is None and not complete:
            with anyio.CancelScope(shield=True):
                await _stop(child.pid, grace)
        os.close(child.result_fd)
    return (bytes(received[8:]) if complete else None), status


async def _collect_with_pidfd(
    child: _Child, pidfd: int, received: bytearray
) -> tuple[int | None, bool]:
    """Linux: the result pipe and the child's pidfd behind one epoll, served by this task
    alone (a task group with a task for each costs more than a short call)."""
    selector = selectors.DefaultSelector()
    try:
        selector.register(child.result_fd, selectors.EVENT_READ)
        selector.register(pidfd, selectors.EVENT_READ)
        while True:
            ready = {key.fd for key, _ in selector.select(0)}
            # The result first: a child that wrote it whole and exited has succeeded.
            if child.result_fd in ready and _read_available(child.result_fd, received):
                selector.unregister(child.result_fd)
            if _complete(received):
                return None, True
            if pidfd in ready:
                _, status = os.waitpid(child.pid, 0)
                _read_available(child.result_fd, received)  # all it wrote is in the pipe now
                return status, _complete(received)
            await anyio.wait_readable(selector.fileno())  # type: ignore[attr-defined]
    finally:
        selector.close()


async def _collect_with_tasks(child: _Child, received: bytearray) -> tuple[int | None, bool]:
    """Elsewhere: a task reads the result while this one waits for the exit."""
    status: int | None = None
    complete = False
    async with anyio.create_task_group() as tg:

        async def read_result() -> None:
            nonlocal complete
            await _read_into(child.result_fd, received)
            complete = _complete(received)
            if complete:
                tg.cancel_scope.cancel()

        tg.start_soon(read_result)
        status = await _wait_exit(child.pid)
        _read_available(child.result_fd, received)
        complete = _complete(received)
        tg.cancel_scope.cancel()
    return status, complete


def _complete(received: bytearray) -> bool:
    return len(received) >= 8 and len(received) - 8 >= int.from_bytes(received[:8], "big")


async def _read_into(fd: int, received: bytearray) -> None:
    """Read until the length-prefixed result is complete, or end of file."""
    while not _complete(received):
        try:
            chunk = os.read(fd, _READ_SIZE)
        except BlockingIOError:
            await anyio.wait_readable(fd)
            continue
        if not chunk:
            return
        received += chunk


def _read_available(fd: int, received: bytearray) -> bool:
    """Read what ``fd`` has; True at end of file."""
    try:
        while chunk := os.read(fd, _READ_SIZE):
            received += chunk
    except BlockingIOError:
        return False
    return True


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


def _outcome(data: bytes | None, status: int | None) -> Any:
    if data is None:
        if status is not None and os.WIFSIGNALED(status):
            name = signal_name(os.WTERMSIG(status))
            raise SandboxError(f"the sandboxed call was killed by {name}", signal=name)
        code = os.waitstatus_to_exitcode(status) if status is not None else None
        raise SandboxError(f"the sandboxed call exited (status {code}) without a result")
    kind, value = pickle.loads(data)
    if kind == "error":
        raise value
    return value
