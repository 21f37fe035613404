"""Running Python callables in sandboxed children: warm workers the spawn server forks.

**One origin.** Every call is served by a warm worker that the spawn server forks
(``WantCallWorker``, ``_call_worker.serve_calls``), a clean single-threaded interpreter: it takes
the caller's ``sys.path`` and working directory, applies the sandbox's setup once
(``_call_worker.enter_calls``: session, environment, limits, mount namespace, Landlock, seccomp:
about 2 ms) and, once confined, imports the modules the calls name and makes the objects
they keep (below), so that its children import nothing. Nothing of the caller's memory is
there. A call crosses as a pickle made by ``cloudpickle`` (:class:`_CallPickler`): what
can be imported goes by reference (module-level functions and classes, a built-in tool's
``execute``) and is seen as the worker imported it; what cannot (a closure, a lambda, a
function of ``__main__``) goes by value, with exactly the values it captures or names.
What does not pickle at all (a lock, a socket, an open file, a generator) is refused
before anything runs (:class:`sandbox.UnpicklableCall`, naming it).

**Workers per configuration.** The workers of one configuration are pooled (at most
:data:`POOL_SIZE` idle ones kept): a call takes an idle one, or waits for a new one (the
first call, or one while the others are busy, under the call's own timeout). Where a
call is sure to come (tools bound to a sandbox), one worker is started ahead, in a thread
(:meth:`CallWorkers.start_ahead`), holding what those calls name; the first call waits for
it rather than starting another. A call that must join a cgroup of its own gets a worker
of its own (``once``), let go after it.

**The worker's side.** What runs in a worker and its children (their set-up, the
children forked ahead, the pages copied ahead, the reused child of stateless calls, what
a worker holds) is ``sandbox.spawn._call_worker``, which the spawn server imports
without this module.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import marshal
import os
import pickle
import select
import signal
import socket
import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
import cloudpickle

from sandbox._errors import SandboxError, UnpicklableCall
from sandbox.spawn._call_worker import (
    _IMPORTING,
    _KEPT_SIZE,
    _LEARN_FLAG,
    _PLAIN_FLAG,
    _READ_SIZE,
    _REPORT,
    _trim,
)
from sandbox.spawn._jobs import CallSetup, WantCallWorker
from sandbox.spawn._process import signal_name
from sandbox.spawn._results import load_outcome
from sandbox.spawn._tree import (
    descendants,
    session_tree,
)

#: Starts a warm worker from the spawn server: its socket, pid and pidfd (or ``None``).
#: (``sandbox.spawn._client.Launcher.call_worker``.)
SpawnWorker = Callable[[WantCallWorker], tuple[socket.socket, int, "int | None"]]


#: A callable with its positional and keyword arguments.
Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]


#: Idle workers kept per kind (a fresh child per call, one reused child).
POOL_SIZE = 4


#: Seconds between two looks at the worker's reports while a call's result is awaited.
_REPORTS_EVERY = 0.05


#: Seconds between two looks at a call's tree while it is given its grace to end.
_STOP_LOOKS_EVERY = 0.02


#: Modules and kept objects a worker is asked to hold, at most (the latest count).
_PRELOAD_SIZE = 256


#: Seconds a worker let go may take to be gone.
_GONE_WAIT = 10.0


@dataclass(eq=False)
class _Worker:
    """The caller's side of a warm worker the spawn server forked: ``modules``, the modules
    it imported, and ``kept``, the pickles of the objects it keeps, oldest first (at its
    start, and told since: ``_call_worker._learn``, which keeps the same order and bound);
    ``pidfd``, a pidfd of it (the server, its parent, reaps it)."""

    pid: int
    sock: socket.socket
    modules: set[str] = field(default_factory=set)
    kept: dict[bytes, None] = field(default_factory=dict)
    #: Its one child runs the calls one after another (``CallSetup.reuse``).
    reuse: bool = False
    pidfd: int | None = None
    #: Report bytes read but not yet consumed.
    reports: bytearray = field(default_factory=bytearray)
    #: ``S`` reports still to come for calls that ended before theirs was read.
    owed_starts: int = 0
    #: Pids of earlier calls' children whose ``E`` is still to come.
    earlier: set[int] = field(default_factory=set)


class CallWorkers:
    """Runs callables in sandboxed children of warm workers the spawn server forks (see
    the module docstring).

    Args:
        setup: gives what a worker does first (session, limits, confinement:
            ``_call_worker.enter_calls``), as it is now; an exception that raises there is each of
            its calls' exception. Asked once per worker.
        spawn: starts a warm worker from the spawn server.
        once: every call gets a worker of its own, let go after it (a call that must
            join a cgroup of its own: ``setup`` names it).
    """

    def __init__(
        self, setup: Callable[[], CallSetup], spawn: SpawnWorker, *, once: bool = False
    ) -> None:
        self._setup = setup
        self._spawn = spawn
        self._once = once
        self._lock = threading.Lock()
        #: Idle workers by kind (``reuse``), and every worker there is, idle or busy.
        self._idle: dict[bool, list[_Worker]] = {False: [], True: []}
        self._workers: set[_Worker] = set()
        #: What a worker is to hold: modules to import, pickles of objects to keep.
        self._preload: dict[str, None] = {}
        self._kept: dict[bytes, None] = {}
        #: How the call pickler treats each type (``_kind_of``), across calls.
        self._kinds: dict[type, int] = {}
        #: Per kind (``reuse``): set once the worker started ahead of the calls
        #: (:meth:`start_ahead`) is in the pool, or its start failed.
        self._ahead: dict[bool, threading.Event] = {}
        self._closed = False
        self.owner = os.getpid()

    async def call(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        grace: float,
        reuse: bool = False,
        timeout: float | None = None,
        start_within: float | None = None,
        on_taken: Callable[[], None] | None = None,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` (awaited when it returns an awaitable) in a child;
        return its result or raise its exception.

        ``reuse``: the call keeps no state of its own between calls, so it may run in the
        long-lived child of a worker that runs such calls one after another (see the
        module docstring); else in a fresh child.

        ``timeout``: seconds the call may run, counted from when a child of a worker took
        it (its start report, seen within :data:`_REPORTS_EVERY`), not while a worker is
        taken or started for it; then its tree is stopped and ``TimeoutError`` raised.
        ``start_within``: seconds until a child takes it (an idle worker's at once; a new
        worker's once it set up and imported what the calls name), else ``SandboxError``
        and nothing ran. ``on_taken``: called when the call is seen taken.

        Cancelling the call stops the child and everything it started (SIGTERM, ``grace``
        seconds, SIGKILL).

        Raises:
            UnpicklableCall: ``fn`` or an argument cannot be pickled (nothing ran).
            SandboxError: the child died by a signal (the message and ``.signal`` name
                it, e.g. SIGSEGV) or exited without a result; no worker could be started,
                or none took the call within ``start_within``; the call cannot be loaded
                in a worker started for it; the call was started by a module's code at
                import, in a worker importing it for calls.
            TimeoutError: ``timeout`` passed once the call was taken.
            Exception: whatever ``fn`` raised (re-created from its pickle).
        """
        if _IMPORTING.get():
            raise SandboxError(
                "a sandboxed call was started by a module's code while a sandbox's process "
                "imported that module to run a call: each process that imports it would "
                "start another. Start the module's calls under "
                '`if __name__ == "__main__":` or from a function.'
            )
        request, needs = self._pickle(fn, args, kwargs)
        kind = True if self._once else reuse
        fresh_tried = False
        while True:
            start_by = None if start_within is None else time.monotonic() + start_within
            try:
                with anyio.fail_after(start_within):
                    worker = await self._take(kind, fresh=fresh_tried)
            except TimeoutError:
                raise SandboxError(_not_started(start_within)) from None
            try:
                return await self._serve(worker, request, needs, grace, timeout, start_by, on_taken)
            except _NotTaken:
                raise SandboxError(_not_started(start_within)) from None
            except (_WorkerGone, _Unservable) as exc:
                # Nothing ran. A worker that died before it took the call, or one whose
                # child could not load it (started with another sys.path): one more try
                # on a worker started for this call.
                if fresh_tried:
                    raise SandboxError(_unserved(fn, exc)) from None
                fresh_tried = True

    def start_ahead(self, calls: tuple[Call, ...], reuse: bool = False) -> threading.Event | None:
        """Start one worker (``reuse``: whose one child runs the calls one after another)
        ahead of the calls, in a thread of its own, holding what ``calls`` name (each
        pickled, never run; one that does not pickle is left out); it waits in the pool
        for the first call, which waits for it rather than starting another. Returns at
        once: the event set when it is in the pool or could not be started (silently: a
        call then starts its own and reports its own error); ``None`` when one is there
        or on its way already."""
        with self._lock:
            if self._closed or self._once or reuse in self._ahead or self._workers:
                return None
            ahead = self._ahead[reuse] = threading.Event()

        def start() -> None:
            try:
                with contextlib.suppress(Exception):  # the first call reports its own
                    for fn, args, kwargs in calls:
                        with contextlib.suppress(UnpicklableCall):
                            self._pickle(fn, args, kwargs)
                    self._give_back(self._start(reuse), healthy=True)
            finally:
                ahead.set()

        threading.Thread(target=start, name="sandbox-calls-ahead", daemon=True).start()
        return ahead

    def _pickle(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[bytes, tuple[str | bytes, ...]]:
        """The call as its request (:class:`_CallPickler`) and what a worker should hold
        for it (the modules it names, the pickles of the objects it keeps); that is noted
        for the workers started later too.

        Raises:
            UnpicklableCall: naming the part that does not pickle and why.
        """
        buffer = io.BytesIO()
        pickler = _CallPickler(buffer, self._kinds)
        try:
            pickler.dump((fn, args, kwargs))
        except Exception as exc:
            raise _unpicklable(fn, args, kwargs, self._kinds, exc) from None
        with self._lock:
            for wanted, new in ((self._preload, pickler.modules), (self._kept, pickler.kept)):
                for key in new:
                    wanted.pop(key, None)  # type: ignore[call-overload]
                    wanted[key] = None  # type: ignore[index]
            for wanted, size in ((self._preload, _PRELOAD_SIZE), (self._kept, _KEPT_SIZE)):
                while len(wanted) > size:
                    del wanted[next(iter(wanted))]  # type: ignore[call-overload]
        return buffer.getvalue(), (*pickler.modules, *pickler.kept)

    async def _take(self, reuse: bool, fresh: bool = False) -> _Worker:
        """An idle worker for a call, taken out of the pool: for a call that keeps no
        state (``reuse``) one whose child is reused (or, while those there are all busy,
        one forking a child per call), else one forking a child per call; ``fresh``, or
        none idle: one started for it, waited for in a thread so that the event loop
        goes on (a wait cancelled lets the worker go when its start is over). A worker
        being started ahead of the calls (:meth:`start_ahead`) is waited for first."""
        if not fresh and not self._once:
            ahead = self._ahead.get(reuse)
            if ahead is not None and not ahead.is_set():
                await anyio.to_thread.run_sync(ahead.wait, abandon_on_cancel=True)
            with self._lock:
                if self._idle[reuse]:
                    return self._idle[reuse].pop()
                if reuse and self._idle[False] and any(w.reuse for w in self._workers):
                    return self._idle[False].pop()
        started: list[_Worker] = []
        try:
            await anyio.to_thread.run_sync(lambda: started.append(self._start(reuse)))
        except BaseException:
            for worker in started:
                self._give_back(worker, healthy=True)
            raise
        return started[0]

    async def _serve(
        self,
        worker: _Worker,
        request: bytes,
        needs: tuple[str | bytes, ...],
        grace: float,
        timeout: float | None = None,
        start_by: float | None = None,
        on_taken: Callable[[], None] | None = None,
    ) -> Any:
        """Run ``request`` on ``worker`` (taken out of the pool) and give it back; what
        the call ``needs`` that the worker lacks, the worker is told to hold first;
        ``timeout``, ``start_by`` and ``on_taken`` as :func:`_run_on_worker` takes them."""
        try:
            plain = not any(isinstance(need, bytes) for need in needs)
            lacking = _lacking(worker, needs)
            data, status = await _run_on_worker(
                worker, request, grace, lacking, plain, timeout, start_by, on_taken
            )
            healthy = data is not None  # else orphans of the call may be left with it
        except BaseException:
            self._give_back(worker, healthy=False)
            raise
        try:
            if data is None and self._closed:
                raise SandboxError("the sandbox was closed while the call ran; it was stopped")
            return _outcome(data, status)
        except _Unservable:
            healthy = False  # it lacks what this process has: let it go
            raise
        finally:
            self._give_back(worker, healthy)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (a closed object starts no worker)."""
        return self._closed

    def close(self) -> None:
        """Stop the warm workers (SIGKILL, with the call each may be running)."""
        with self._lock:
            self._closed = True
            ahead = list(self._ahead.values())
        # A worker being started ahead is let go once it started (closed: not pooled),
        # before the caller stops the spawn server that started it.
        for event in ahead:
            event.wait(_GONE_WAIT)
        with self._lock:
            idle = [worker for pool in self._idle.values() for worker in pool]
            busy = [worker for worker in self._workers if worker not in idle]
            self._workers.clear()
            self._idle = {False: [], True: []}
        for worker in idle:
            _discard(worker)
        # A worker running a call (in another thread) is killed, not let go: its call still
        # reads its socket, and lets it go (_give_back) as the call ends, at once now.
        for worker in busy:
            _kill(worker)

    def _give_back(self, worker: _Worker, healthy: bool) -> None:
        """After a call on ``worker``: back in the pool if ``healthy`` and there is room,
        else let go."""
        with self._lock:
            pool = self._idle[worker.reuse]
            keep = (
                healthy
                and worker in self._workers
                and not self._once
                and not self._closed
                and len(pool) < POOL_SIZE
            )
            if keep:
                pool.append(worker)
            else:
                self._workers.discard(worker)
        if not keep:
            _discard(worker)

    def _start(self, reuse: bool) -> _Worker:
        """A new worker from the spawn server (``reuse``: whose one child runs the calls
        one after another), with what the calls named so far, counted among the workers
        (taken: the caller gives it back).

        Raises:
            SandboxError: the spawn server could not be started or reached, or this
                object is closed.
        """
        with self._lock:
            if self._closed:
                raise SandboxError("the sandbox was closed")
            preload, kept = tuple(self._preload), tuple(self._kept)
        setup = dataclasses.replace(self._setup(), reuse=reuse)
        try:
            sock, pid, pidfd = self._spawn(WantCallWorker(setup, preload, kept))
        except OSError as exc:
            raise SandboxError(f"cannot start the sandbox's worker process: {exc}") from None
        worker = _Worker(pid, sock, set(preload), dict.fromkeys(kept), reuse=reuse, pidfd=pidfd)
        with self._lock:
            closed = self._closed
            if not closed:
                self._workers.add(worker)
        if closed:
            _discard(worker)
            raise SandboxError("the sandbox was closed")
        return worker


def _kill(worker: _Worker) -> None:
    """SIGKILL a worker and the call it may be running (its descriptors stay open)."""
    with contextlib.suppress(OSError):
        tree = descendants(worker.pid)
        if worker.pidfd is None:
            # The spawn server reaps it: without a pidfd its pid is signalled, and at
            # once, before it could be another's.
            os.kill(worker.pid, signal.SIGKILL)
        else:
            signal.pidfd_send_signal(worker.pidfd, signal.SIGKILL)
        for pid in tree:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _discard(worker: _Worker) -> None:
    """Let a worker go: SIGKILL it and the call it may be running; wait until it is gone,
    and close its descriptors. Called once a worker, by whoever holds it (a call, or
    :meth:`CallWorkers.close` for an idle one)."""
    _kill(worker)
    worker.sock.close()
    if worker.pidfd is not None:
        # poll, not select: a caller with many workspaces holds descriptors numbered past
        # select's FD_SETSIZE (1,024).
        waiting = select.poll()
        waiting.register(worker.pidfd, select.POLLIN)
        waiting.poll(_GONE_WAIT * 1000)
        os.close(worker.pidfd)


class _WorkerGone(Exception):
    """The worker died before it started the call: the call may run elsewhere."""


class _NotTaken(Exception):
    """No child took the call in the time a worker has to start: nothing of it ran."""


def _not_started(seconds: float | None) -> str:
    return (
        f"the sandbox could not start a worker for the call within {seconds:g} s "
        "(SandboxLimits.start_seconds); nothing ran"
    )


def _lacking(worker: _Worker, needs: tuple[str | bytes, ...]) -> tuple[str | bytes, ...]:
    """What of ``needs`` (module names, pickles of kept objects) ``worker`` does not hold."""
    modules, kept = worker.modules, worker.kept
    return tuple(
        need
        for need in needs
        if (need not in modules if isinstance(need, str) else need not in kept)
    )


def _told(worker: _Worker, lacking: tuple[str | bytes, ...]) -> None:
    """Note that ``worker`` holds ``lacking`` now, as ``_call_worker._hold`` keeps it (at most
    :data:`_KEPT_SIZE` kept objects, the oldest let go first)."""
    for need in lacking:
        if isinstance(need, str):
            worker.modules.add(need)
        else:
            worker.kept[need] = None
    _trim(worker.kept)


def _learn_frame(lacking: tuple[str | bytes, ...]) -> bytes:
    """The message that tells a worker to hold ``lacking`` (``_call_worker._learn``): the length
    with :data:`_LEARN_FLAG` set, then the modules and the pickles, marshalled."""
    modules = tuple(need for need in lacking if isinstance(need, str))
    kept = tuple(need for need in lacking if isinstance(need, bytes))
    data = marshal.dumps((modules, kept))
    return (len(data) | _LEARN_FLAG).to_bytes(8, "big") + data


async def _run_on_worker(
    worker: _Worker,
    request: bytes,
    grace: float,
    lacking: tuple[str | bytes, ...] = (),
    plain: bool = False,
    timeout: float | None = None,
    start_by: float | None = None,
    on_taken: Callable[[], None] | None = None,
) -> tuple[Any, Any]:
    """Send ``request`` to ``worker`` and collect its child's outcome: ``(result bytes,
    None)`` once the result is complete, else ``(None, wait status or None)``. Cancelled,
    it stops the call's tree first (the caller then lets the worker go). What the call
    needs that the worker lacks (``lacking``) goes first, for the worker to hold from now
    on (``_call_worker._learn``). ``plain``: the request names no kept object (:data:`_PLAIN_FLAG`).
    ``timeout``: seconds from the child's start report (the call taken) to its result;
    ``start_by``: the ``time.monotonic()`` by which a child must have taken the call;
    ``on_taken()`` is called when its start report is seen.

    Raises:
        _WorkerGone: the worker died before it started the call.
        _NotTaken: no child took the call by ``start_by``.
        TimeoutError: ``timeout`` passed since the call was taken (its tree is stopped).
    """
    result_r, result_w = os.pipe()
    sock = worker.sock
    try:
        if lacking:
            sock.sendall(_learn_frame(lacking))
            _told(worker, lacking)
        frame = (len(request) | (_PLAIN_FLAG if plain else 0)).to_bytes(8, "big") + request
        # One message, so that the child wakes once, with the whole of a small request.
        sent = socket.send_fds(sock, [frame], [result_w])
        sock.sendall(frame[sent:])
    except OSError:
        os.close(result_r)
        raise _WorkerGone() from None
    finally:
        os.close(result_w)
    os.set_blocking(result_r, False)
    sock.setblocking(False)
    received = bytearray()
    call = _Reports(worker)
    finished = False
    run_by: float | None = None
    taken = False
    try:
        result_open = True
        while True:
            if result_open and _read_available(result_r, received):
                result_open = False
            if len(received) >= 8 and int.from_bytes(received[:8], "big") > RESULT_BYTES:
                raise SandboxError(
                    f"the sandboxed call's result is {int.from_bytes(received[:8], 'big'):,} "
                    f"bytes, over the {RESULT_BYTES:,} bytes a result may have; it was "
                    "stopped"
                )
            if _complete(received):
                finished = True
                return bytes(received[8:]), None
            if not call.gone:
                call.read()
            if call.status is not None:
                _read_available(result_r, received)  # all it wrote is in the pipe now
                finished = True
                return (bytes(received[8:]), None) if _complete(received) else (None, call.status)
            if call.gone and not result_open:
                if call.pid is None:
                    raise _WorkerGone()
                finished = True
                return None, None
            # The time limit counts from the call's start report; until then the wait for
            # the worker (its setup, its imports) is bounded by start_by.
            end = start_by
            if call.pid is not None:
                if not taken:
                    taken = True
                    if timeout is not None:
                        run_by = time.monotonic() + timeout
                    if on_taken is not None:
                        on_taken()
                end = run_by
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise _NotTaken() if call.pid is None else TimeoutError()
            if result_open:
                # The result's pipe alone: the child's report as it takes the call would
                # wake this task in the middle of every call, to preempt the call on its
                # core. The pipe's end of file says that the child ended; the reports are
                # read then, and every _REPORTS_EVERY seconds, for a child that ended
                # leaving a process that holds the pipe open.
                with anyio.move_on_after(
                    _REPORTS_EVERY if left is None else min(left, _REPORTS_EVERY)
                ):
                    await anyio.wait_readable(result_r)
            else:
                with anyio.move_on_after(left):
                    await anyio.wait_readable(sock)
    finally:
        if not finished:
            with anyio.CancelScope(shield=True):
                await call.stop(grace)
        call.finish()
        os.close(result_r)
        sock.setblocking(True)


class _Reports:
    """The worker's reports about one call: its child's pid (``S``, sent by the child),
    then its wait status (``E``, sent by the worker). Reports of earlier calls that
    ended before theirs were read come in between; they are told apart by pid."""

    def __init__(self, worker: _Worker) -> None:
        self._worker = worker
        self._skip_starts, worker.owed_starts = worker.owed_starts, 0
        self.pid: int | None = None
        self.status: int | None = None
        #: No more reports will come (end of file), or the child that was to take this
        #: call died before it took it (its request may be left for the next one).
        self.gone = False

    def read(self) -> bool:
        """Read the reports there are; False once ``gone``."""
        worker = self._worker
        try:
            while chunk := worker.sock.recv(_READ_SIZE):
                worker.reports += chunk
            self.gone = True
        except BlockingIOError:
            pass
        except OSError:
            self.gone = True
        while len(worker.reports) >= _REPORT.size:
            kind, pid, status = _REPORT.unpack_from(worker.reports)
            del worker.reports[: _REPORT.size]
            if kind == b"S" and self._skip_starts:
                self._skip_starts -= 1
                worker.earlier.add(pid)
            elif kind == b"S":
                self.pid = pid
            elif pid == self.pid:
                self.status = status
            elif pid in worker.earlier:
                worker.earlier.discard(pid)
            else:
                self.gone = True
        return not self.gone

    def finish(self) -> None:
        """The call is over: reports still to come for it belong to an earlier call now."""
        worker = self._worker
        if self.pid is None:
            worker.owed_starts = self._skip_starts + 1
        else:
            worker.owed_starts = self._skip_starts
            if self.status is None:
                worker.earlier.add(self.pid)

    async def stop(self, grace: float) -> None:
        """Stop the call's tree as a command's is stopped (``_tree.stop_tree``): SIGTERM
        with SIGCONT (a stopped process acts on SIGTERM only once continued), up to
        ``grace`` seconds for the whole tree to end, then SIGSTOP and SIGKILL of what is
        left. The tree is looked at again and again (:func:`session_tree`): a process
        joining it is signalled too, and one the worker adopted once the child died is
        still part of it (the worker, a subreaper, is let go with what it holds)."""
        if not self.gone:
            self.read()  # the child's pid, when it took the call since the last look
        pid = self.pid
        if pid is None:
            return  # not started, or the worker is gone with it: letting it go stops it
        tree = session_tree(pid, set())
        signalled: set[int] = set()
        end = time.monotonic() + grace
        while True:
            # Each process once: a second SIGTERM could cut its cleanup short.
            fresh = tree - signalled
            # The child and its process group only when the look saw nothing (no /proc):
            # the group besides the list would signal its members twice.
            targets = fresh if signalled or fresh else {-pid, pid}
            for sig in (signal.SIGTERM, signal.SIGCONT):
                _signal_all(targets, sig)
            signalled |= fresh
            left = end - time.monotonic()
            if not tree or left <= 0:
                break
            # Woken by the worker's report of the child's end, else looked at again soon.
            with anyio.move_on_after(min(left, _STOP_LOOKS_EVERY)):
                if self.gone:
                    await anyio.sleep(_STOP_LOOKS_EVERY)
                else:
                    await anyio.wait_readable(self._worker.sock)
            if not self.gone:
                self.read()
            tree = session_tree(pid, tree)
        # Stopped first, so that nothing forks between listing the tree and killing it.
        _signal_tree(tree, pid, signal.SIGSTOP)
        _signal_tree(tree | session_tree(pid, tree), pid, signal.SIGKILL)


#: What a worker holds for a call that returns an awaitable (the modules it runs it with).
_EVENT_LOOP = dict.fromkeys(("asyncio", "anyio"))

#: How :class:`_CallPickler` treats an object, by its type.
_PLAIN, _GLOBAL, _KEPT = 0, 1, 2


def _kind_of(cls: type) -> int:
    if issubclass(cls, (types.FunctionType, types.BuiltinFunctionType, type)):
        return _GLOBAL  # by reference when importable (noted for the worker), else by value
    if getattr(cls, "sandbox_by_reference", False) is True:
        return _KEPT
    return _PLAIN


class _CallPickler(cloudpickle.Pickler):
    """Pickles a call for a warm worker: ``cloudpickle``'s way (what can be imported by
    reference, a closure, a lambda or ``__main__``'s function by value), noting the
    modules named (``modules``: the worker imports them once), and an object whose class
    sets ``sandbox_by_reference`` as ``("kept", its own pickle)`` (noted in ``kept``):
    the worker keeps one copy of each such pickle, made once, for its children. ``kinds``
    caches each type's treatment (:func:`_kind_of`) across picklers: this runs for every
    object of every call."""

    def __init__(self, file: io.BytesIO, kinds: dict[type, int], top: Any = None) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.modules: dict[str, None] = {}
        self.kept: dict[bytes, None] = {}
        self._kinds = kinds
        self._top = top

    def persistent_id(self, obj: Any) -> Any:
        cls = type(obj)
        kind = self._kinds.get(cls)
        if kind is None:
            kind = self._kinds[cls] = _kind_of(cls)
        if kind == _PLAIN:
            return None
        if kind == _GLOBAL:
            module = getattr(obj, "__module__", None)
            if isinstance(module, str) and module != "__main__":
                self.modules[module] = None
            if cls is types.FunctionType and inspect.iscoroutinefunction(obj):
                # Its awaitable is run by anyio on asyncio in the child
                # (``_call_worker._run``), which the worker imports only for such calls.
                self.modules.update(_EVENT_LOOP)
            return None
        if self._top is not None:
            return None  # within a kept object: pickled with it
        buffer = io.BytesIO()
        inner = _CallPickler(buffer, self._kinds, top=obj)
        inner.dump(obj)
        self.modules.update(inner.modules)
        data = buffer.getvalue()
        self.kept[data] = None
        return ("kept", data)


def _unpicklable(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    kinds: dict[type, int],
    exc: Exception,
) -> UnpicklableCall:
    """The error for a call that did not pickle (``exc``): it names the first part of it
    that does not pickle alone (the callable, a positional or a keyword argument)."""
    parts: list[tuple[str, Any]] = [("the callable", fn)]
    parts += [(f"argument {i + 1}", value) for i, value in enumerate(args)]
    parts += [(f"argument {name!r}", value) for name, value in kwargs.items()]
    for label, value in parts:
        try:
            _CallPickler(io.BytesIO(), kinds).dump(value)
        except Exception as part_exc:
            part, exc = f"{label} ({_describe(value)})", part_exc
            break
    else:
        part = "the call"
    return UnpicklableCall(_describe(fn), part, f"{type(exc).__name__}: {exc}")


def _describe(obj: Any) -> str:
    """A short name for what a call carries: a function's qualified name, else its type's."""
    name = getattr(obj, "__qualname__", None)
    if isinstance(name, str) and callable(obj):
        return name
    return f"a {type(obj).__qualname__}"


def _unserved(fn: Callable[..., Any], exc: Exception) -> str:
    """Why a call ran on no worker: the worker died before it took it, or the call cannot
    be loaded there (``_Unservable``, what loading it raised)."""
    if isinstance(exc, _Unservable):
        return (
            f"{_describe(fn)} cannot be loaded in the sandbox's process ({exc}): what it "
            "names by reference must be importable from sys.path (a function defined in "
            "another function or in __main__ goes by value)"
        )
    return "the sandbox's worker process ended before the call started, twice"


#: The most bytes a call's pickled outcome may have: the caller holds it, twice while it
#: is loaded, whatever the call's own memory limit (a child may stream what it never held).
RESULT_BYTES = 512 << 20


def _complete(received: bytearray) -> bool:
    return len(received) >= 8 and len(received) - 8 >= int.from_bytes(received[:8], "big")


def _read_available(fd: int, received: bytearray) -> bool:
    """Read what ``fd`` has; True at end of file."""
    try:
        while chunk := os.read(fd, _READ_SIZE):
            received += chunk
    except BlockingIOError:
        return False
    return True


def _signal_tree(tree: set[int], pid: int, sig: int) -> None:
    """Send ``sig`` to ``tree``, to the call's child ``pid`` and to its process group."""
    _signal_all({*tree, -pid, pid}, sig)


def _signal_all(targets: set[int], sig: int) -> None:
    for target in targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(target, sig)


def _outcome(data: bytes | None, status: int | None) -> Any:
    if data is None:
        if status is not None and os.WIFSIGNALED(status):
            name = signal_name(os.WTERMSIG(status))
            raise SandboxError(f"the sandboxed call was killed by {name}", signal=name)
        if status is None:
            raise SandboxError(
                "the sandboxed call ended without a result: its warm worker was killed, "
                "and the call with it"
            )
        code = os.waitstatus_to_exitcode(status)
        raise SandboxError(f"the sandboxed call exited (status {code}) without a result")
    kind, value = load_outcome(data)
    if kind == "error":
        raise value
    if kind == "unservable":
        raise _Unservable(value)
    return value


class _Unservable(Exception):
    """A worker's child could not load the call; nothing of it ran."""
