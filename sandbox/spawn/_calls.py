"""Running Python callables in sandboxed children: warm workers the spawn server forks.

**One origin.** Every call is served by a warm worker that the spawn server forks
(``WantCallWorker``, :func:`serve_calls`), a clean single-threaded interpreter: it takes
the caller's ``sys.path`` and working directory, applies the sandbox's setup once
(:func:`enter_calls`: session, environment, limits, mount namespace, Landlock, seccomp:
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

**The worker's children.** A worker keeps one child forked ahead, set up (session,
subreaper, nested domain) and waiting on the worker's socket; that child takes the next
call (a pickle, and the write end of a result pipe), reports its pid, runs the call and
writes its pickled outcome to the pipe, while the worker forks the next one. The worker
reports each child's wait status once it reaped it. It is single-threaded, so its forks
are safe and cost only the fork: fork(2) itself, without Python's at-fork hooks
(``_hookless_fork``; ``random`` is reseeded in each child). It runs under ``SCHED_BATCH``
(its children under the caller's policy again), so that forking the next child does not
preempt the call running on its core. Its heap is frozen for the collector
(``gc.freeze``) once set up, so that a child's collections do not copy its pages.

**What a child writes.** Every page a child writes is a page copied from the worker
(Python writes an object's reference count to read it), and freed again when it exits: a
few microseconds each, the larger part of a fresh child's cost. So the worker prepares
what each child does before its call, once: the nested domain's ruleset and the system
call that enters it (``landlock.prepare_nest``), the C functions of its start bound
(:func:`_child_start`: death signal, ``random``'s reseed, signal handling, session,
subreaper), the scheduling parameter; and the children's path raises no exception and
makes no helper object where a plain call does (an empty pipe is not read, ``waitpid`` is
C's, a request is read with one receive, one that names no kept object is a plain
pickle, :data:`_PLAIN_FLAG`; a tool's plain value is not looked up among the awaitables'
abstract classes): an exception alone copies dozens of pages.

**Pages copied ahead.** A child writes hundreds of pages of the memory it shares with the
worker (reference counts, allocations), each copied on its first write. A call's child
lists the pages it wrote (``_prefault.learn``: the first call of a worker, then one in
16); the worker gives that hint to each child it forks, which copies those pages while it
waits (the call before its own runs on the other core, or the caller is between calls)
and stops when its call comes (``_prefault``).

**Isolation between calls.** Each call runs in its own fork of the worker and ends with it
(``_kill_leftovers``), so nothing a call changes in memory reaches the next call's result.
Under Landlock the call's child also enters a Landlock domain nested in the worker's
(``landlock.nest``): it can neither signal nor ptrace the worker, so it cannot tamper with
what later calls are forked from (at the portable level, as everywhere there, this is no
security boundary). The worker is let go (SIGKILL with its whole tree, awaited) after any
call that did not deliver a result (a crash, a timeout, a cancellation), and when it died.

**Stateless calls.** A call that declares it keeps no state of its own between calls
(``reuse``: a built-in tool's ``execute``, whose only state is its workspace's caches,
validated by each file's stat) goes to a worker of a second kind (``CallSetup.reuse``)
whose one child runs such calls one after another (:func:`_serve_with_one_child`,
:func:`_reused_child`): no fork, exit and copied pages per call, and the workspace's
caches stay warm in it. That child is set up as a fresh one (session, subreaper, nested
domain) and the wire is the same (request, ``S``, result, ``E`` when it ends). Per call it
stops what the call left running before delivering, and grants the call its share of the
limits (:class:`_Budget`): the worker's hard CPU and address-space limits are caps of
twice the limit, the soft ones are set before each call at what the child used plus the
limit; it exits to be replaced by the worker when the next call could not get its whole
share below the caps, or when a call left a thread running. A worker of this kind also
serves a call with a cgroup of its own (one call, then it is let go).

**What a worker knows.** A worker holds the modules the calls named when it was started
and, for each object passed to calls whose class says it may be kept that way
(``sandbox_by_reference = True``: a workspace, a command runner), one copy made from its
pickle (a workspace: from its settings), shared by its children: a call naming an object
that pickles the same gets that copy, by reference. Its caches start empty (the worker runs
no call) and what a fresh child fills ends with it. What a call names that its worker
lacks (new since the worker started) goes ahead of the call as a message of its own
(:func:`_learn_frame`): the child waiting for a call sees it and exits, leaving it to the
worker (:func:`_to_learn`), which imports those modules and makes those objects, confined
as at its start (:func:`_learn`), then forks the child that takes the call; so each is
imported or made once per worker, not once per call (a worker holds at most
:data:`_KEPT_SIZE` objects, the oldest let go first). The one child of a worker of reused
children takes that message itself and holds what it says, keeping its warm caches. A
call its child cannot load (a module the worker cannot import, as when ``sys.path``
changed since it started) gets one new worker, then a clear error.
"""

from __future__ import annotations

import _random
import _signal
import _socket
import contextlib
import ctypes
import dataclasses
import errno
import faulthandler
import functools
import gc
import importlib
import inspect
import io
import marshal
import math
import os
import pickle
import resource
import select
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
import types
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
import cloudpickle

from sandbox._errors import SandboxError, UnpicklableCall
from sandbox._limits import address_space_bytes, apply_rlimits
from sandbox.layers import landlock
from sandbox.layers._plan import apply_child_layers
from sandbox.layers._syscall import libc
from sandbox.spawn import _prefault
from sandbox.spawn._jobs import CallSetup, WantCallWorker
from sandbox.spawn._process import signal_name
from sandbox.spawn._tree import (
    PR_SET_CHILD_SUBREAPER,
    PR_SET_PDEATHSIG,
    become_subreaper,
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

_READ_SIZE = 256 * 1024
#: Seconds between two looks at the worker's reports while a call's result is awaited.
_REPORTS_EVERY = 0.05
#: Seconds between two looks at a call's tree while it is given its grace to end.
_STOP_LOOKS_EVERY = 0.02
#: Worker to caller: ``(kind, pid, wait status)``; kind ``S``: forked the call's child,
#: ``E``: reaped it.
_REPORT = struct.Struct("!cii")
#: Modules and kept objects a worker is asked to hold, at most (the latest count).
_PRELOAD_SIZE = 256
_KEPT_SIZE = 16
#: Seconds a worker let go may take to be gone.
_GONE_WAIT = 10.0
#: Set in a message's length: the message tells the worker what to hold (:func:`_learn`),
#: it carries no call.
_LEARN_FLAG = 1 << 63
#: Set in a request's length: the call names no kept object, so its child loads it as a
#: plain pickle (no unpickler of its own made: a fresh child copies fewer pages).
_PLAIN_FLAG = 1 << 62


#: Set while a worker or its child imports what calls name (:func:`_importing`): a call
#: started then is that module's own code, run at import, which would start a worker that
#: imports it again, and so on (:meth:`CallWorkers.call` refuses it).
_IMPORTING: ContextVar[bool] = ContextVar("importing_for_calls", default=False)


@dataclass(eq=False)
class _Worker:
    """The caller's side of a warm worker the spawn server forked: ``modules``, the modules
    it imported, and ``kept``, the pickles of the objects it keeps, oldest first (at its
    start, and told since: :func:`_learn`, which keeps the same order and bound);
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
            :func:`enter_calls`), as it is now; an exception that raises there is each of
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


def enter_calls(setup: CallSetup, prepare: Callable[[], None] | None = None) -> None:
    """Set up this process for Python calls as ``setup`` says: its own session, subreaper,
    default signal handling, /dev/null stdin, the environment, limits and layers; then
    ``prepare()`` (a spawned worker's imports), then the address-space limit, on top of
    the memory this process has by then.

    Raises:
        OSError: a limit or layer could not be applied.
    """
    _enter_child(dict(setup.env))
    rlimits = list(setup.rlimits)
    cpu = _budget(setup).cpu_seconds if setup.reuse else None
    if cpu is not None:
        rlimits = [(name, value) for name, value in rlimits if name != "RLIMIT_CPU"]
        # A reused child's calls each get ``cpu`` seconds more (``_Budget.grant``); a
        # second more in the cap keeps that soft limit below it, so that passing it is
        # SIGXCPU (the hard limit's SIGKILL is for a call that ignores SIGXCPU).
        _limit(resource.RLIMIT_CPU, cpu, _REUSE_CAP * cpu + 1)
    apply_rlimits(rlimits)
    if setup.layers or setup.cgroup:
        apply_child_layers(setup.layers, setup.confinement, setup.cgroup)
    if prepare is not None:
        prepare()
    if setup.memory_bytes is not None:
        base, memory = address_space_bytes(), setup.memory_bytes
        if setup.reuse:
            _limit(resource.RLIMIT_AS, base + memory, base + _REUSE_CAP * memory)
        else:
            apply_rlimits([("RLIMIT_AS", base + memory)])


#: A reused child's CPU and address-space limits are hard caps of this many times the
#: limit (on top of its address space once set up; a second more of CPU); the child is
#: replaced once the next call could not get the whole limit below them.
_REUSE_CAP = 2


@dataclass(frozen=True)
class _Budget:
    """What each call of a reused child may spend: ``cpu_seconds`` of CPU time and
    ``memory_bytes`` of address space on top of what the child has when the call starts
    (``None``: no such limit)."""

    cpu_seconds: int | None
    memory_bytes: int | None

    def grant(self) -> None:
        """Before a call: the soft limits at what the child has used plus a call's share,
        under the hard caps (past the soft CPU limit the kernel sends SIGXCPU, which ends
        the child; past the address-space one an allocation fails).

        Raises:
            OSError: the kernel refused a limit.
        """
        if self.cpu_seconds is not None:
            _limit(resource.RLIMIT_CPU, _cpu_used() + self.cpu_seconds)
        if self.memory_bytes is not None:
            _limit(resource.RLIMIT_AS, address_space_bytes() + self.memory_bytes)

    def left(self) -> bool:
        """After a call: whether the next one still gets the whole of each limit below
        the hard caps (else the child is replaced)."""
        for which, used, share in (
            (resource.RLIMIT_CPU, _cpu_used, self.cpu_seconds),
            (resource.RLIMIT_AS, address_space_bytes, self.memory_bytes),
        ):
            if share is None:
                continue
            cap = resource.getrlimit(which)[1]
            if cap != resource.RLIM_INFINITY and used() + share >= cap:
                return False
        return True


def _budget(setup: CallSetup) -> _Budget:
    cpu = dict(setup.rlimits).get("RLIMIT_CPU")
    return _Budget(None if cpu is None else int(cpu), setup.memory_bytes)


def _cpu_used() -> int:
    """CPU seconds this process has used, rounded up (``RLIMIT_CPU``'s unit)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return math.ceil(usage.ru_utime + usage.ru_stime)


def _limit(which: int, soft: int, cap: int | None = None) -> None:
    """Set the soft limit ``which`` to ``soft`` and its hard limit to ``cap`` (``None``:
    kept), neither above the hard limit there is (only a privileged process may raise it)."""
    _, hard = resource.getrlimit(which)
    if cap is not None and (hard == resource.RLIM_INFINITY or cap < hard):
        hard = cap
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(which, (soft, hard))


def _enter_child(env: dict[str, str]) -> None:
    """The portable level for a call's process: own session, default signal handling,
    /dev/null stdin, the allowlisted environment."""
    os.setsid()
    become_subreaper()
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.environ.clear()
    os.environ.update(env)
    # The caller's process may have cached its temp dir; the child's is TMPDIR's.
    tempfile.tempdir = None


def _nest(setup: CallSetup) -> Callable[[], Callable[[], None]] | None:
    return landlock.prepare_nest if setup.nest else None


def serve_calls(
    setup: CallSetup, preload: tuple[str, ...], kept: tuple[bytes, ...], sock: socket.socket
) -> None:
    """A warm worker forked by the spawn server (``WantCallWorker``): the caller's
    ``sys.path`` and working directory, then :func:`_worker_main` with ``preload``
    imported and the objects pickled in ``kept`` made, once it is set up (confined: the
    imports run no code outside the sandbox). Never returns."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the server ignores its children's ends
    # The caller's path first, then this interpreter's own (its standard library, where
    # the caller's is another interpreter's that this user may not read).
    sys.path[:] = [*setup.path, *(path for path in sys.path if path not in setup.path)]
    with contextlib.suppress(OSError):
        os.chdir(setup.cwd)
    # The caller's __main__ is not this process's (the server's boot); what a call has of
    # it comes by value.
    sys.modules["__main__"] = types.ModuleType("__main__")
    copies: dict[bytes, Any] = {}

    def prepare() -> None:
        _hold(preload, kept, copies)

    gc.enable()  # the server runs without its collector; the calls run with it
    reuse = _budget(setup) if setup.reuse else None
    entered = functools.partial(enter_calls, setup, prepare)
    _worker_main(entered, _nest(setup), copies, sock, reuse)


def _worker_main(
    setup: Callable[[], None],
    nest: Callable[[], Callable[[], None]] | None,
    copies: dict[bytes, Any],
    sock: socket.socket,
    reuse: _Budget | None = None,
) -> None:
    """The warm worker: set up once, then keep one child forked ahead that waits for the
    next call on the socket; fork the next as soon as it took one; report each child's
    end (``E``) until the caller hangs up. Its own only: adopted orphans of a call that
    did not deliver are reaped silently (the caller lets this worker go after such a call).
    With ``reuse`` (each call's share of the limits), its one child runs the calls one
    after another instead (:func:`_serve_with_one_child`). ``nest`` prepares, once set
    up, what each child calls to enter its nested domain (``landlock.prepare_nest``)."""
    try:
        # A crash here is reported by the caller (SandboxError naming the signal); a fault
        # handler would only print a second, alarming dump.
        faulthandler.disable()
        enter: Callable[[], None] | None = None
        try:
            setup()
            # The ruleset made once here: each child makes one system call to enter it.
            enter = None if nest is None else nest()
            failed: BaseException | None = None
        except BaseException as exc:
            failed = exc
        # The heap the children share with this worker stays shared: the collector, run
        # in a child, would otherwise touch (and so copy) every page of it.
        gc.freeze()
        if reuse is not None:
            _serve_with_one_child(sock, enter, copies, failed, reuse)
            return
        took_r, took_w = os.pipe()
        wake_r, wake_w = os.pipe()
        # Hints of the pages a call writes (``_prefault``): from a call's child that
        # learned them to the worker, and from the worker to the child waiting.
        learned_r, learned_w = os.pipe()
        given_r, given_w = os.pipe()
        for fd in (took_r, wake_r, wake_w, learned_r, learned_w, given_r, given_w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        prefault = failed is None and _prefault.supported()
        hint: bytes | None = None
        #: The hint's runs in this worker's private writable memory, planned once: each
        #: child forked since has these mappings, and copies the runs without looking.
        planned: list[tuple[int, int]] = []
        hinted: int | None = None  # the waiting child the hint was given to
        since_learned = 0  # calls taken since the hint was learned
        # The last child found its call waiting as soon as it was set up: calls come back
        # to back, with no idle core for a copy ahead. The next is forked without hint or
        # learning then: it would copy nothing ahead, and what it did write of its own
        # (and a learning child's scan) would only add to the work each call waits on.
        late = False
        mine: set[int] = set()
        waiting: int | None = None
        start = _child_start(os.getpid())
        back = _yield_to_calls()
        fork = _hookless_fork()
        # Made once: a child asks with one C call whether its call is there already.
        call_there = _poll_now(sock.fileno())
        while True:
            if waiting is None:
                ahead = prefault and not late
                learn = ahead and (hint is None or since_learned >= _LEARN_EVERY)
                waiting = fork()  # this process runs no other thread
                if waiting == 0:
                    start()
                    for fd in (took_r, wake_r, wake_w, learned_r, given_w):
                        os.close(fd)
                    hints = (given_r if ahead else None, learned_w if learn else None)
                    _call_child(
                        sock, enter, copies, failed, took_w, hints, planned, back, call_there
                    )
                mine.add(waiting)
                if hint is not None or not ahead:
                    hinted = waiting  # forked with the hint planned, or to go without
            if hint is not None and hinted != waiting:
                # The child copies them while the call before its own runs (on the other
                # core), or in the gap after it; it stops when its call comes.
                with contextlib.suppress(OSError):
                    os.write(given_w, hint)  # at most PIPE_BUF bytes: whole or not at all
                hinted = waiting
            # Each descriptor read only when select says it holds something: an empty read
            # raises, and an exception touches dozens of pages, each a copy after a fork.
            ready = select.select([took_r, wake_r, learned_r], [], [])[0]
            if wake_r in ready:
                _read_ready(wake_r)
            if learned_r in ready:
                learned = _prefault.latest(_read_ready(learned_r))
                if learned is not None:
                    hint, since_learned = learned, 0
                    planned = _prefault.plan(_prefault.parse(hint))
            # Reaped first, then the took byte read: a child that took its call and ended
            # meanwhile wrote the byte before it ended, so it is never taken for one that
            # died waiting (and replaced twice, leaving two children reading requests).
            ended = _reaped()
            took = b""
            if took_r in ready or (ended and _readable(took_r)):
                took = _read_ready(took_r)
            if took:
                waiting = None  # one child waits at a time: the byte is its
                since_learned += 1
                late = took.endswith(_LATE)
            for pid, status in ended:
                if pid not in mine:
                    continue
                mine.discard(pid)
                if pid == waiting:
                    waiting = None  # killed from outside while waiting, or it left
                    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
                    if code == _NO_MORE_CALLS:
                        return
                    if code == _LEARN:
                        # It took no call: the next child is forked holding more (and
                        # reseeds the generator of a random module imported now).
                        if not _learn(sock, copies, failed):
                            return
                        start = _child_start(os.getpid())
                        if hint is not None:
                            planned = _prefault.plan(_prefault.parse(hint))  # new mappings
                        continue
                sock.sendall(_REPORT.pack(b"E", pid, status))
    except OSError:
        return
    finally:
        with contextlib.suppress(BaseException):
            _kill_leftovers()
        os._exit(0)


def _serve_with_one_child(
    sock: socket.socket,
    nest: Callable[[], None] | None,
    copies: dict[bytes, Any],
    failed: BaseException | None,
    budget: _Budget,
) -> None:
    """The loop of a worker whose one child runs the calls one after another
    (:func:`_reused_child`): fork it, and when it ends report its end (``E``) and fork
    the next, until one meets end of file (the caller hung up)."""
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    start = _child_start(os.getpid())
    fork = _hookless_fork()
    child: int | None = None
    while True:
        if child is None:
            child = fork()  # this process runs no other thread
            if child == 0:
                start()
                os.close(wake_r)
                os.close(wake_w)
                _reused_child(sock, nest, copies, failed, budget)
        select.select([wake_r], [], [])
        _read_ready(wake_r)
        for pid, status in _reaped():
            if pid != child:
                continue  # an orphan of a call that did not deliver
            child = None
            if os.WIFEXITED(status) and os.WEXITSTATUS(status) == _NO_MORE_CALLS:
                return
            sock.sendall(_REPORT.pack(b"E", pid, status))


def _reused_child(
    sock: socket.socket,
    nest: Callable[[], None] | None,
    copies: dict[bytes, Any],
    failed: BaseException | None,
    budget: _Budget,
) -> None:
    """A worker's one child that runs the calls one after another: its own session,
    subreaper and nested domain, set up once; then for each call from ``sock``: report its
    pid (``S``), give it its share of the limits (``budget``), run it, stop what it left
    running and deliver, as a fresh child does; then put back the environment and working
    directory it had. It exits to be replaced when the next call could not get the whole
    of each limit below the hard caps, or when a call left a thread running; it ends by a
    signal when a call crashes it or passes its CPU share."""
    code = _NO_MORE_CALLS
    try:
        failed = _set_up_child(nest, failed)
        env = dict(os.environ)
        cwd = os.getcwd()
        while True:
            if _to_learn(sock):
                # This child stays (its caches are warm) and holds what the worker lacks.
                if not _learn(sock, copies, failed):
                    return
                continue
            received = _receive_call(sock)
            if received is None:
                return
            data, result_w, plain = received
            sock.sendall(_REPORT.pack(b"S", os.getpid(), 0))
            outcome = _outcome_of(data, plain, copies, failed, budget.grant)
            _deliver(outcome, result_w)
            os.close(result_w)
            del data, outcome  # nothing of a call is kept for the next
            if os.environ != env:
                os.environ.clear()
                os.environ.update(env)
            with contextlib.suppress(OSError):
                os.chdir(cwd)
            if not budget.left() or not _threads_ended():
                code = _RENEWED
                return
    finally:
        os._exit(code)


def _threads_ended(timeout: float = 0.05) -> bool:
    """Whether no thread but this one runs, waiting up to ``timeout`` seconds for those
    a call left to end (a thread reaping a process the call forked ends at once)."""
    end = time.monotonic() + timeout
    for thread in threading.enumerate():
        if thread is not threading.current_thread():
            thread.join(max(0.0, end - time.monotonic()))
            if thread.is_alive():
                return False
    return True


def _to_learn(sock: socket.socket) -> bool:
    """Whether the next message on ``sock`` tells the worker what to hold (it is left
    there for the worker, :func:`_learn`); waits for a message."""
    try:
        first = sock.recv(1, socket.MSG_PEEK)
    except OSError:
        return False  # the next read says what it is
    return bool(first) and first[0] & 0x80 != 0


def _learn(sock: socket.socket, copies: dict[bytes, Any], failed: BaseException | None) -> bool:
    """In a worker, between calls: read the message that tells it to hold more (the modules
    a call names and the pickles of the objects it keeps, new since the worker started:
    :func:`_learn_frame`), import those modules and make those objects, as at its start
    and as confined, so that its later children hold them (in the one child of a worker
    of reused children: that child, which runs the later calls); nothing when the set-up
    failed (``failed``: the calls fail with that). False at end of file."""
    header = _receive_exactly(sock, 8)
    if header is None:
        return False
    data = _receive_exactly(sock, int.from_bytes(header, "big") & ~_LEARN_FLAG)
    if data is None:
        return False
    if failed is not None:
        return True
    try:
        modules, kept = marshal.loads(data)
    except (ValueError, EOFError, TypeError):
        return True  # not the caller's message: the calls load what they need themselves
    _hold(modules, kept, copies)
    gc.freeze()  # as at the start: the children's collections leave these pages shared
    return True


def _hold(modules: tuple[str, ...], kept: tuple[bytes, ...], copies: dict[bytes, Any]) -> None:
    """Import ``modules`` and make one copy of each object pickled in ``kept`` (into
    ``copies``, newest last, at most :data:`_KEPT_SIZE`: the caller's :func:`_told` keeps
    the same); what fails, a call that needs it meets itself (``None``: not held)."""
    importing = _IMPORTING.set(True)
    try:
        for name in modules:
            with contextlib.suppress(Exception):
                importlib.import_module(name)
    finally:
        _IMPORTING.reset(importing)
    for data in kept:
        copies.pop(data, None)
        try:
            copies[data] = pickle.loads(data)
        except Exception:
            copies[data] = None
    _trim(copies)


def _receive_call(sock: socket.socket) -> tuple[bytes, int, bool] | None:
    """The next request on ``sock``, the write end of its result pipe and whether the
    request is a plain pickle (:data:`_PLAIN_FLAG`); ``None`` at end of file (the caller
    hung up) or on a malformed request."""
    # recvmsg rather than socket.recv_fds, which imports array on every call.
    header, ancillary, _, _ = sock.recvmsg(8, _ONE_FD)
    # A loop and a cast, not a comprehension and an iterator: in a fresh child each object
    # made is a page more copied.
    fds: list[int] = []
    for level, kind, fields in ancillary:
        if (level, kind) == _RIGHTS:
            fds += memoryview(fields[: len(fields) - len(fields) % _FD.size]).cast("i")
    rest = _receive_exactly(sock, 8 - len(header)) if 0 < len(header) < 8 else b""
    size = int.from_bytes(header + (rest or b""), "big")
    data = None
    if len(fds) == 1 and rest is not None:
        data = _receive_exactly(sock, size & ~_PLAIN_FLAG)
    if data is None:
        for fd in fds:
            os.close(fd)
        return None
    return data, fds[0], bool(size & _PLAIN_FLAG)


#: ``socket.close`` without the Python method around it, for a child about to run its call
#: (which exits, never to use the object again): fewer pages copied.
_close_socket = _socket.socket.close

#: A descriptor in ``SCM_RIGHTS`` ancillary data, and the space of one.
_FD = struct.Struct("i")
_ONE_FD = socket.CMSG_LEN(_FD.size) if hasattr(socket, "CMSG_LEN") else 0
_RIGHTS = (socket.SOL_SOCKET, getattr(socket, "SCM_RIGHTS", 1))


def _hookless_fork() -> Callable[[], int]:
    """``fork`` for the worker's children: fork(2) without Python's at-fork hooks, where
    that is sound (Linux, an interpreter with a GIL), else :func:`os.fork`.

    The hooks (``threading``'s, ``logging``'s, ``random``'s, a library's) cost a child
    about 0.6 ms and 200 copied pages, for nothing: they reset what other threads may
    have held or started at a fork, and the worker runs no other thread. The one that
    matters for each child, ``random``'s reseed, is done by :func:`_reseeder`'s.
    glibc's ``fork`` still makes its own state (malloc's locks) safe in the child; the
    interpreter's lock stays with the one thread, which the child has too.

    Raises (the returned callable):
        OSError: the fork failed (EAGAIN: a process limit).
    """
    if not sys.platform.startswith("linux"):
        return os.fork
    if not getattr(sys, "_is_gil_enabled", lambda: True)():
        return os.fork  # a free-threaded interpreter must see its forks
    try:
        raw = ctypes.PyDLL(None, use_errno=True).fork  # PyDLL: the GIL stays held
    except (OSError, AttributeError):
        return os.fork
    raw.restype = ctypes.c_int
    raw.argtypes = []

    def fork() -> int:
        pid = raw()
        if pid < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return int(pid)

    return fork


def _child_start(worker: int) -> Callable[[], None]:
    """What each child of the worker ``worker`` (this process) does first, prepared here
    once (and again after the worker imported more: :func:`_learn`): it dies with the
    worker (``PR_SET_PDEATHSIG``: a worker killed from outside must not leave a child
    that takes a call), and exits at once when the worker is gone already; reseeds
    ``random`` (:func:`_reseeder`); gives SIGCHLD its default action and no wakeup fd
    (the worker's); and becomes a session of its own and the subreaper of what its call
    starts. Each page a child writes is a page copied from the worker, so the C
    functions are bound here and take plain ints: no ``ctypes`` lookups and none of
    ``signal``'s enum conversions (``_signal``), which cost a child several times the
    system calls themselves."""
    prctl = ctypes.CDLL(None, use_errno=True)["prctl"] if sys.platform == "linux" else None
    kill, child_ended, default = int(signal.SIGKILL), int(signal.SIGCHLD), int(signal.SIG_DFL)
    reseed = _reseeder()
    setsid, getppid = os.setsid, os.getppid

    def start() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, kill, 0, 0, 0)
        if getppid() != worker:
            os._exit(0)
        if reseed is not None:
            reseed()
        _signal.set_wakeup_fd(-1)
        _signal.signal(child_ended, default)
        setsid()
        if prctl is not None:
            prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    return start


def _reseeder() -> Callable[[], None] | None:
    """What does ``random``'s at-fork hook's work in a child (``Random.seed()``: from the
    system's entropy), so that a child's ``random`` numbers are not its siblings'
    (:func:`_hookless_fork` runs no hook): the C type's own ``seed`` bound to the shared
    generator, whose Gaussian held is dropped here (the worker draws no numbers, so its
    children start without one); ``None`` when ``random`` is not imported (a child that
    imports it seeds it then). The hook's Python method, or looking the generator up in
    each child, costs a child several times the seed itself, in pages copied."""
    module = sys.modules.get("random")
    shared = getattr(module, "_inst", None)
    if isinstance(shared, _random.Random):
        shared.gauss_next = None
        return functools.partial(_random.Random.seed, shared)
    return None if module is None else module.seed


def _yield_to_calls() -> Callable[[], None] | None:
    """Put this worker under ``SCHED_BATCH`` when it runs under ``SCHED_OTHER``: woken
    (a child took its call, another ended), it then does not preempt the call running
    on its core to fork the next child, which would hold that call up by the fork's
    time. Returns what a child calls to run under ``SCHED_OTHER`` again (its parameter
    made here, once), or ``None`` when the policy is unchanged."""
    param = os.sched_param(0)
    try:
        if os.sched_getscheduler(0) != os.SCHED_OTHER:
            return None  # the caller's own choice: kept for the calls too
        os.sched_setscheduler(0, os.SCHED_BATCH, param)
    except (AttributeError, OSError):
        return None  # not Linux, or refused (a seccomp filter): the calls wait a little

    def back() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_OTHER, param)
        except OSError:
            return  # the worker could: so can its child

    return back


def _reaped() -> list[tuple[int, int]]:
    """``(pid, wait status)`` of every child that ended, reaped."""
    ended = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended.append((pid, status))


def _read_ready(fd: int) -> bytes:
    """What the non-blocking pipe ``fd`` holds, read once (a pipe holds at most 64 KiB:
    no hint, took byte or wakeup pipe here ever holds that much), for a pipe that
    ``select`` said is readable; ``b""`` at end of file, or when it held nothing after
    all."""
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return b""


def _poll_now(fd: int) -> Callable[[], list[tuple[int, int]]]:
    """What says, with one C call, whether ``fd`` can be read now (a list, empty when
    not): :func:`_readable` with its poll object made here, once."""
    waiting = select.poll()
    waiting.register(fd, select.POLLIN)
    return functools.partial(waiting.poll, 0)


def _readable(fd: int) -> bool:
    """Whether ``fd`` can be read now (``poll``, which raises nothing when it cannot, and
    takes descriptors of any number)."""
    waiting = select.poll()
    waiting.register(fd, select.POLLIN)
    return bool(waiting.poll(0))


#: The exit code of a worker's child that met end of file instead of a call.
_NO_MORE_CALLS = 3
#: The exit code of a reused child that is to be replaced (``_reused_child``).
_RENEWED = 4
#: The exit code of a worker's child that met a message telling the worker what to hold
#: (:func:`_learn`), left for the worker to read.
_LEARN = 5
#: The byte a child writes as it takes its call when the call was there as soon as the
#: child was set up (``b"t"`` otherwise): the worker forks the next without hint then.
_LATE = b"l"
#: A call's child learns the pages it wrote (``_prefault.learn``, about a millisecond)
#: for the first call of a worker and after this many more.
_LEARN_EVERY = 16


def _call_child(
    sock: socket.socket,
    nest: Callable[[], None] | None,
    copies: dict[bytes, Any],
    failed: BaseException | None,
    took_w: int,
    hints: tuple[int | None, int | None],
    planned: list[tuple[int, int]],
    back: Callable[[], None] | None,
    call_there: Callable[[], list[tuple[int, int]]],
) -> None:
    """A worker's child: its own session, subreaper and nested domain, set up before its
    call comes; while it waits, the pages of the hint the worker had planned when it forked
    it (``planned``) are copied, then those of a hint the worker gives it later
    (``hints[0]``); then take one call from ``sock``, tell the worker (``took_w``) and the
    caller (``S``, its pid), let both go (the call must read no later request), run it,
    deliver, and, asked to (``hints[1]``), tell the worker which pages it wrote. It runs
    under the caller's scheduling policy again (``back``), when the worker left it
    (``_yield_to_calls``). ``call_there()`` is not empty when a call waits on ``sock``
    (:func:`_poll_now`)."""
    code = 0
    given_r, learned_w = hints
    try:
        failed = _set_up_child(nest, failed)
        if back is not None:
            back()
        # Set up, with its call there already: the calls come back to back.
        late = bool(call_there())
        inherited = _prefault.mappings() if learned_w is not None and not late else []
        if given_r is not None and not late:
            _prefault_while_waiting(sock, given_r, planned)
        if _to_learn(sock):
            code = _LEARN
            return
        received = _receive_call(sock)
        if received is None:
            code = _NO_MORE_CALLS
            return
        data, result_w, plain = received
        if given_r is not None:
            # Before the took byte, after which the worker gives the next child its hint.
            if _readable(given_r):
                _read_ready(given_r)
            os.close(given_r)
        os.write(took_w, _LATE if late else b"t")
        os.close(took_w)
        sock.sendall(_REPORT.pack(b"S", os.getpid(), 0))
        _close_socket(sock)
        _deliver(_outcome_of(data, plain, copies, failed), result_w)
        if learned_w is not None and not late:
            with contextlib.suppress(OSError):
                os.write(learned_w, _prefault.learn(inherited))  # <= PIPE_BUF bytes: whole
    finally:
        os._exit(code)


def _set_up_child(
    nest: Callable[[], None] | None, failed: BaseException | None
) -> BaseException | None:
    """A worker's child's own set-up, fresh or reused, after its start (its own session
    and subreaper: :func:`_child_start`): the nested domain (``nest``). Returns what the
    child's calls fail with: ``failed`` (the worker's set-up), else what ``nest`` raised,
    else ``None``."""
    if failed is None and nest is not None:
        try:
            nest()
        except BaseException as exc:
            return exc
    return failed


def _outcome_of(
    data: bytes,
    plain: bool,
    copies: dict[bytes, Any],
    failed: BaseException | None,
    grant: Callable[[], None] | None = None,
) -> tuple[str, Any]:
    """The outcome of the call ``data`` requests (``plain``: :data:`_PLAIN_FLAG`, else
    naming objects kept in ``copies``): ``failed`` when the child could not be set up;
    ``unservable`` when it cannot be loaded here (nothing ran: the caller runs it in a
    child of its own); an error when its limits cannot be granted (``grant``, a reused
    child's); else what running it gave."""
    if failed is not None:
        return ("error", failed)
    importing = _IMPORTING.set(True)  # what the call names may be imported now
    try:
        call = pickle.loads(data) if plain else _load_request(data, copies)
    except BaseException as exc:
        return ("unservable", f"{type(exc).__name__}: {exc}")
    finally:
        _IMPORTING.reset(importing)
    if grant is not None:
        try:
            grant()
        except OSError as exc:
            return ("error", SandboxError(f"cannot limit the call: {exc}"))
    return _run(*call)


def _prefault_while_waiting(
    sock: socket.socket, given_r: int, planned: list[tuple[int, int]]
) -> None:
    """Until a call comes on ``sock``: copy the ``planned`` pages, then those of each hint
    the worker gives."""
    _prefault.populate(planned, sock.fileno())
    while True:
        ready, _, _ = select.select([sock, given_r], [], [])
        if sock in ready:
            return
        data = _read_ready(given_r)
        if not data:
            return  # the worker is gone: the socket says so too
        _prefault.populate(_prefault.plan(_prefault.parse(data)), sock.fileno())


def _deliver(outcome: tuple[str, Any], result_w: int) -> None:
    # try rather than contextlib.suppress here and on the children's path: no object made,
    # no Python code run, so no pages of them copied.
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    # Before the result: once the caller has it, nothing of the call may be left.
    _kill_leftovers()
    result = _dumps(outcome)
    try:
        _write_all(result_w, len(result).to_bytes(8, "big") + result)
    except OSError:
        return  # the caller is gone


def _receive_exactly(sock: socket.socket, size: int) -> bytes | None:
    """``size`` bytes from ``sock`` (blocking), or ``None`` at end of file first."""
    # Mostly all of it at once (MSG_WAITALL returns less only at end of file or on a
    # signal): no buffer grown, no second copy.
    data = sock.recv(min(size, _READ_SIZE), socket.MSG_WAITALL)
    if len(data) == size:
        return data
    buffer = bytearray(data)
    while len(buffer) < size:
        chunk = sock.recv(min(_READ_SIZE, size - len(buffer)))
        if not chunk:
            return None
        buffer += chunk
    return bytes(buffer)


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
    """Note that ``worker`` holds ``lacking`` now, as :func:`_hold` keeps it (at most
    :data:`_KEPT_SIZE` kept objects, the oldest let go first)."""
    for need in lacking:
        if isinstance(need, str):
            worker.modules.add(need)
        else:
            worker.kept[need] = None
    _trim(worker.kept)


def _trim(kept: dict[bytes, Any]) -> None:
    while len(kept) > _KEPT_SIZE:
        del kept[next(iter(kept))]


def _learn_frame(lacking: tuple[str | bytes, ...]) -> bytes:
    """The message that tells a worker to hold ``lacking`` (:func:`_learn`): the length
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
    on (:func:`_learn`). ``plain``: the request names no kept object (:data:`_PLAIN_FLAG`).
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


def _run(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, Any]:
    try:
        value = fn(*args, **kwargs)
        if type(value) not in _NEVER_AWAITED and inspect.isawaitable(value):
            value = anyio.run(_await, value)
        return ("ok", value)
    except BaseException as exc:
        return ("error", exc)


#: Types whose instances are no awaitables: a call's value of one of them skips
#: ``inspect.isawaitable``'s walk through the abstract base classes, which writes (and so
#: copies) dozens of pages in a fresh child. (A tool call's value is a tuple.)
_NEVER_AWAITED = frozenset({type(None), bool, int, float, str, bytes, tuple, list, dict})


async def _await(value: Awaitable[Any]) -> Any:
    return await value


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


class _CallUnpickler(pickle.Unpickler):
    """Loads a request in a worker's child: a kept object is the worker's copy (else one
    made here from its pickle)."""

    def __init__(self, file: io.BytesIO, kept: dict[bytes, Any]):
        super().__init__(file)
        self._kept = kept

    def persistent_load(self, pid: Any) -> Any:
        copy = self._kept.get(pid[1])
        return copy if copy is not None else pickle.loads(pid[1])


def _load_request(data: bytes, kept: dict[bytes, Any]) -> Any:
    return _CallUnpickler(io.BytesIO(data), kept).load()


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
    while True:
        while (reaped := _reap_any()) > 0:
            pass
        if reaped < 0:
            return
        for pid in descendants(os.getpid()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.001)


#: C's waitpid, bound once (in a worker: before it forks the children that call it).
_WAITPID = libc().waitpid if os.name == "posix" else None


def _reap_any() -> int:
    """``waitpid(-1, WNOHANG)``: the pid reaped, 0 while children are left running, -1
    when there is none; C's, which says "none" as -1 (ECHILD) where ``os.waitpid`` raises
    ``ChildProcessError``, an exception that copies dozens of pages in a fresh child (the
    common case: the call left nothing)."""
    reaped: int = _WAITPID(-1, None, _WNOHANG)
    if reaped >= 0:
        return reaped
    return -1 if _get_errno() == errno.ECHILD else 0


_WNOHANG, _get_errno = getattr(os, "WNOHANG", 1), ctypes.get_errno


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
    kind, value = pickle.loads(data)
    if kind == "error":
        raise value
    if kind == "unservable":
        raise _Unservable(value)
    return value


class _Unservable(Exception):
    """A worker's child could not load the call; nothing of it ran."""
