"""Running Python callables in sandboxed children: warm workers per sandbox configuration.

**Two origins, one worker.** A warm worker applies the sandbox's setup once
(:func:`enter_calls`: session, environment, limits, mount namespace, Landlock, seccomp:
about 2 ms) and then serves calls one after another (:func:`_worker_main`, the same loop
whichever process forked it). A call whose callable and arguments pickle by import
(module-level functions and classes, a built-in tool's ``execute``, a workspace as its
settings; nothing of ``__main__``) goes to a worker that the spawn server forks
(``WantCallWorker``, :func:`serve_calls`): it takes the caller's ``sys.path`` and working
directory, and, once set up and confined, imports the modules the calls name and makes the
objects they keep (below), so that its children import nothing. Nothing of the caller's
memory is there: a call sees the modules as they are imported, not as the caller changed
them. Any other call (a closure, a lambda, a ``__main__`` function, a module this worker
cannot import: its child says so before anything runs, and the call runs again as a
closure does) needs the caller's memory, so its worker is a fork of the caller (from a
thread of its own, so that the caller's event loop does not wait for it).

**The worker's children.** A worker keeps one child forked ahead, set up (session,
subreaper, nested domain) and waiting on the worker's socket; that child takes the next
call (a pickle, and the write end of a result pipe), reports its pid, runs the call and
writes its pickled outcome to the pipe, while the worker forks the next one. The worker
reports each child's wait status once it reaped it. It is single-threaded, so its forks
are safe and cost only the fork: fork(2) itself, without Python's at-fork hooks, which ran
when the worker was forked and would cost each child more than its call
(``_hookless_fork``; ``random`` is reseeded in each child). It runs under ``SCHED_BATCH``
(its children under the caller's policy again), so that forking the next child does not
preempt the call running on its core. Its heap is frozen for the collector
(``gc.freeze``) once set up, so that a child's collections do not copy its pages.

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
security boundary). The worker is replaced (SIGKILL with its whole tree, reaped) after any
call that did not deliver a result (a crash, a timeout, a cancellation), and when it died.

**Stateless calls.** A call that declares it keeps no state of its own between calls
(``reuse``: a built-in tool's ``execute``, whose only state is its workspace's caches,
validated by each file's stat) and pickles by import goes to a second spawned worker
(``CallSetup.reuse``) whose one child runs such calls one after another
(:func:`_serve_with_one_child`, :func:`_reused_child`): no fork, exit and copied pages per
call, and the workspace's caches stay warm in it. That child is set up as a fresh one
(session, subreaper, nested domain) and the wire is the same (request, ``S``, result,
``E`` when it ends). Per call it stops what the call left running before delivering, and
grants the call its share of the limits (:class:`_Budget`): the worker's hard CPU and
address-space limits are caps of twice the limit, the soft ones are set before each call
at what the child used plus the limit; it exits to be replaced by the worker when the
next call could not get its whole share below the caps, or when a call left a thread
running. A call that did not deliver replaces the worker, as for any call.

**What a worker knows.** A worker forked from the caller holds the callables the caller
had used when it was forked, and the long-lived objects passed to calls whose class says
they may be shared that way (``sandbox_by_reference = True``: a workspace, with its
stat-validated caches); a call naming them travels as a pickle whose references to those
objects are resolved in the worker (elsewhere such an object pickles as it would anyway).
A spawned worker holds the modules the calls named and, for each such object, one copy
made from its pickle (a workspace: from its settings), shared by its children: a call
naming an object that pickles the same gets that copy, its caches as warm as the worker's
(which runs no call: they start empty, and what a child fills ends with it). A worker
that lacks what a call names (a callable new since the fork; a module, or an object with
another pickle, new to the spawned worker) is replaced by one that has it, started in the
background. A call no worker can serve at once (none there yet, the worker busy with
another call, an argument that does not pickle, a call that must join a cgroup of its
own) runs in a child forked from the caller for it alone (the cold path, as the worker
itself is forked). A call served by a worker forked from the caller sees the caller's
memory as it was when the worker was forked.

Forking a process that runs other threads copies their locks in whatever state they are:
a lock held at that instant stays held in the copy, and a worker lives on. The worker's
own code takes no lock of the caller's; a call that deadlocks on such a lock is stopped by
the timeout like any other, and its worker replaced. The file tools' per-file locks are
fresh in every call's child (``FileStates.restore``).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import faulthandler
import functools
import gc
import importlib
import inspect
import io
import math
import os
import pickle
import resource
import select
import selectors
import signal
import socket
import stat
import struct
import sys
import tempfile
import threading
import time
import types
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread

from sandbox._errors import SandboxError
from sandbox._limits import address_space_bytes, apply_rlimits
from sandbox.layers import landlock
from sandbox.layers._plan import apply_child_layers
from sandbox.spawn import _prefault
from sandbox.spawn._forking import fork_in_threaded_process
from sandbox.spawn._jobs import CallSetup, WantCallWorker
from sandbox.spawn._process import signal_name
from sandbox.spawn._tree import become_subreaper, descendants, die_with_parent

#: Starts a warm worker from the spawn server: its socket, pid and pidfd (or ``None``).
#: (``sandbox.spawn._client.Launcher.call_worker``.)
SpawnWorker = Callable[[WantCallWorker], tuple[socket.socket, int, "int | None"]]

#: A callable with its positional and keyword arguments.
Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]

_READ_SIZE = 256 * 1024
#: Callables remembered for workers; the oldest are forgotten first.
_REGISTRY_SIZE = 256
#: Seconds between two looks at the worker's reports while a call's result is awaited.
_REPORTS_EVERY = 0.05
#: Worker to caller: ``(kind, pid, wait status)``; kind ``S``: forked the call's child,
#: ``E``: reaped it.
_REPORT = struct.Struct("!cii")
#: Modules and kept objects a spawned worker is asked to hold, at most (the latest count).
_PRELOAD_SIZE = 256
_KEPT_SIZE = 16
#: Seconds a worker let go may take to be gone.
_GONE_WAIT = 10.0


@dataclass
class _Child:
    """A child forked from the caller for one call (the cold path)."""

    pid: int
    result_fd: int


@dataclass
class _Worker:
    """The caller's side of a warm worker: forked from the caller (``known``: the ids of
    the callables and kept objects it holds), or by the spawn server (``spawned``;
    ``known``: the modules it imported and the pickles of the objects it keeps; ``pidfd``,
    the server being its parent)."""

    pid: int
    sock: socket.socket
    known: frozenset[int | str | bytes] = field(default_factory=frozenset)
    spawned: bool = False
    #: Its one child runs the calls one after another (``CallSetup.reuse``).
    reuse: bool = False
    pidfd: int | None = None
    busy: bool = False
    #: Report bytes read but not yet consumed.
    reports: bytearray = field(default_factory=bytearray)
    #: ``S`` reports still to come for calls that ended before theirs was read.
    owed_starts: int = 0
    #: Pids of earlier calls' children whose ``E`` is still to come.
    earlier: set[int] = field(default_factory=set)


class CallWorkers:
    """Runs callables in sandboxed children: through a warm worker (see the module
    docstring) or, when none can serve a call, in a child forked for that call.

    Args:
        setup: gives what the process calls run in does first (session, limits,
            confinement: :func:`enter_calls`), as it is now; an exception that raises
            there is each call's exception. Asked once per worker, and for each cold child.
        warm: keep warm workers; False: every call forks its own child (a call that must
            join a cgroup of its own).
        spawn: starts a warm worker from the spawn server, for the calls that pickle by
            import; ``None``: every warm worker is a fork of the caller.
    """

    def __init__(
        self,
        setup: Callable[[], CallSetup],
        *,
        warm: bool = True,
        spawn: SpawnWorker | None = None,
    ) -> None:
        self._setup = setup
        self._warm = warm
        self._spawn = spawn
        self._lock = threading.Lock()
        self._registry: dict[int, Any] = {}
        self._worker: _Worker | None = None
        self._spawned: _Worker | None = None
        #: The spawned worker whose one child serves the calls that keep no state.
        self._reusing: _Worker | None = None
        #: Which spawned workers the calls asked for: a fresh child per call, one reused.
        self._want_fresh = False
        self._want_reuse = False
        #: What a spawned worker is to hold: modules to import, pickles of objects to keep.
        self._preload: dict[str, None] = {}
        self._kept: dict[bytes, None] = {}
        #: Callables a spawned worker could not load (held, so that their ids stay theirs).
        self._unservable: dict[int, Any] = {}
        #: How the pickler for spawned workers treats each type (``_kind_of``).
        self._kinds: dict[type, int] = {}
        self._forker: threading.Thread | None = None
        self._wanted = threading.Event()
        self._closed = False
        #: Children that delivered their result and are exiting; reaped later.
        self._exiting: list[int] = []
        self.owner = os.getpid()

    async def call(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        grace: float,
        reuse: bool = False,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` (awaited when it returns an awaitable) in a child;
        return its result or raise its exception.

        ``reuse``: the call keeps no state of its own between calls, so when it pickles by
        import it may run in the long-lived child of a spawned worker that runs such calls
        one after another (see the module docstring); else in a fresh child, as any call.

        Cancelling the call stops the child and everything it started (SIGTERM, ``grace``
        seconds, SIGKILL).

        Raises:
            SandboxError: the child died by a signal (the message and ``.signal`` name
                it, e.g. SIGSEGV) or exited without a result.
            Exception: whatever ``fn`` raised (re-created from its pickle).
        """
        self._reap()
        call: Call = (fn, args, kwargs)
        by_import = self._by_import(call, reuse)
        if by_import is not None:
            spawned = self._take_spawned(reuse)
            if spawned is None:
                try:
                    return await self._call_cold(call, grace)
                finally:
                    self._refresh()
            if reuse and not spawned.reuse:
                self._refresh()  # the worker whose child is reused, when it is not there
            try:
                return await self._serve(spawned, by_import, call, grace)
            except _Unservable:
                # Its child could not load the call (a module that this process has and
                # the worker cannot import): nothing ran; it runs as a closure does.
                with self._lock:
                    self._unservable[id(fn)] = fn
                    while len(self._unservable) > _REGISTRY_SIZE:
                        del self._unservable[next(iter(self._unservable))]
        worker, request = self._take_worker(fn, args, kwargs)
        self._remember(fn, *args, *kwargs.values())
        if worker is None:
            try:
                return await self._call_cold(call, grace)
            finally:
                self._refresh()
        assert request is not None
        try:
            return await self._serve(worker, request, call, grace)
        except _Unservable:
            return await self._call_cold(call, grace)

    async def _serve(self, worker: _Worker, request: bytes, call: Call, grace: float) -> Any:
        """Run ``request`` (``call`` pickled for ``worker``) on ``worker``, taken busy."""
        try:
            data, status = await _run_on_worker(worker, request, grace)
            healthy = data is not None  # else orphans of the call may be left with it
        except _WorkerGone:
            # Killed from outside (or, at the portable level, by an earlier call) before it
            # started this one: the call runs on its own.
            self._give_back(worker, healthy=False)
            return await self._call_cold(call, grace)
        except BaseException:
            self._give_back(worker, healthy=False)
            raise
        self._give_back(worker, healthy)
        return _outcome(data, status)

    async def _call_cold(self, call: Call, grace: float) -> Any:
        child = await anyio.to_thread.run_sync(self._fork_cold, call)
        data, status = await _collect(child, grace)
        if status is None:
            with self._lock:
                self._exiting.append(child.pid)
        return _outcome(data, status)

    def close(self) -> None:
        """Stop the warm workers (SIGKILL, with the call each may be running), after a
        worker being started is there."""
        with self._lock:
            workers = [w for w in (self._worker, self._spawned, self._reusing) if w is not None]
            self._worker = self._spawned = self._reusing = None
            self._closed = True
            forker = self._forker
        self._wanted.set()
        if forker is not None and forker is not threading.current_thread():
            # A fork in flight would hold copies of descriptors opened meanwhile (a
            # subprocess's exec-status pipe) until it closed them: let it finish first.
            forker.join()
        for worker in workers:
            _discard(worker)
        self._reap(block=True)

    def _by_import(self, call: Call, reuse: bool) -> bytes | None:
        """``call`` pickled for a spawned worker, when one may serve it: everything in it
        pickles by value or by import (not ``__main__``'s), the objects whose class sets
        ``sandbox_by_reference`` as references to the worker's copy made from their pickle
        (see :class:`_ImportPickler`). What the worker should hold for it is noted, and
        which worker it asks for (``reuse``: the one whose child is reused)."""
        if self._spawn is None or not self._warm or os.getpid() != self.owner:
            return None
        fn = call[0]
        if self._unservable.get(id(fn)) is fn:
            return None
        buffer = io.BytesIO()
        pickler = _ImportPickler(buffer, self._kinds)
        try:
            pickler.dump(call)
        except Exception:
            return None  # a closure, a lambda, __main__'s, or what does not pickle at all
        with self._lock:
            if reuse:
                self._want_reuse = True
            else:
                self._want_fresh = True
            for wanted, new in ((self._preload, pickler.modules), (self._kept, pickler.kept)):
                for key in new:
                    wanted.pop(key, None)  # type: ignore[call-overload]
                    wanted[key] = None  # type: ignore[index]
            for wanted, size in ((self._preload, _PRELOAD_SIZE), (self._kept, _KEPT_SIZE)):
                while len(wanted) > size:
                    del wanted[next(iter(wanted))]  # type: ignore[call-overload]
        return buffer.getvalue()

    def _take_spawned(self, reuse: bool) -> _Worker | None:
        """An idle spawned worker, marked busy: for a call that keeps no state (``reuse``)
        the one whose child is reused, else (or when that one is busy or not there yet) the
        one forking a child per call; ``None`` when there is none."""
        with self._lock:
            for worker in (self._reusing, self._spawned) if reuse else (self._spawned,):
                if worker is not None and not worker.busy:
                    worker.busy = True
                    return worker
            return None

    def _take_worker(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[_Worker | None, bytes | None]:
        """The idle warm worker forked from here, marked busy, with the pickled call it can
        serve; ``(None, None)`` when there is none or it cannot serve this call."""
        with self._lock:
            worker = self._worker
            if worker is None or worker.busy or os.getpid() != self.owner:
                return None, None
            worker.busy = True
            registry = dict(self._registry)
        request = _dump_request((fn, args, kwargs), registry, worker.known)
        if request is None:
            with self._lock:
                worker.busy = False
            return None, None
        return worker, request

    def _give_back(self, worker: _Worker, healthy: bool) -> None:
        """After a call on ``worker``: keep it if ``healthy`` and still the one in use,
        else let it go (a new one is started in the background)."""
        with self._lock:
            worker.busy = False
            if worker.reuse:
                if self._reusing is worker:
                    if healthy:
                        return
                    self._reusing = None
            elif worker.spawned:
                if self._spawned is worker:
                    if healthy:
                        return
                    self._spawned = None
            elif self._worker is worker:
                if healthy:
                    return
                self._worker = None
        _discard(worker)
        self._refresh()

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
                if _by_reference(obj):
                    self._registry.pop(id(obj), None)
                    self._registry[id(obj)] = obj
            while len(self._registry) > _REGISTRY_SIZE:
                del self._registry[next(iter(self._registry))]

    def _missing(self) -> tuple[bool, bool, bool]:
        """Whether a worker is to be started (called with the lock held): from the spawn
        server, forking a child per call and reusing one, each when the calls asked for it
        (none there, or the one there lacks what the calls name); from this process (the
        same, for the callables used since its fork)."""

        def lacks(spawned: _Worker | None) -> bool:
            return (
                spawned is None
                or not spawned.known.issuperset(self._preload)
                or not spawned.known.issuperset(self._kept)
            )

        can_spawn = self._spawn is not None and bool(self._preload)
        fresh = can_spawn and self._want_fresh and lacks(self._spawned)
        reuse = can_spawn and self._want_reuse and lacks(self._reusing)
        worker = self._worker
        fork = bool(self._registry) and (
            worker is None or not worker.known.issuperset(self._registry)
        )
        return fresh, reuse, fork

    def _refresh(self) -> None:
        """Start a new worker in the background when one is missing or misses what the
        calls name (see :meth:`_missing`)."""
        if not self._warm or os.getpid() != self.owner:
            return
        with self._lock:
            if self._closed or not any(self._missing()):
                return
            if self._forker is None:
                # A thread of its own: the fork must not wait for, nor hold up, the
                # caller's event loop (it takes the GIL while the caller waits on I/O).
                self._forker = threading.Thread(target=self._fork_worker_loop, daemon=True)
                self._forker.start()
        self._wanted.set()

    def _fork_worker_loop(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            with self._lock:
                if self._closed:
                    return
                fresh, reuse, fork = self._missing()
                registry = dict(self._registry)
                preload, kept = tuple(self._preload), tuple(self._kept)
            if fresh:
                self._install(self._spawn_worker(preload, kept, reuse=False))
            if reuse:
                self._install(self._spawn_worker(preload, kept, reuse=True))
            if fork:
                self._install(self._fork_worker(registry))

    def _install(self, worker: _Worker | None) -> None:
        """Put ``worker`` in use in place of the one of its origin (let go, unless busy:
        then it finishes its call and is let go after it, see :meth:`_give_back`)."""
        if worker is None:
            return
        with self._lock:
            old: _Worker | None = worker
            if not self._closed:
                if worker.reuse:
                    old, self._reusing = self._reusing, worker
                elif worker.spawned:
                    old, self._spawned = self._spawned, worker
                else:
                    old, self._worker = self._worker, worker
            if old is not None and old.busy:
                old = None
        if old is not None:
            _discard(old)

    def _spawn_worker(
        self, preload: tuple[str, ...], kept: tuple[bytes, ...], reuse: bool
    ) -> _Worker | None:
        """A worker from the spawn server (``reuse``: whose one child runs the calls one
        after another); ``None`` when the server cannot give one (the calls then go as
        closures do, from now on)."""
        assert self._spawn is not None
        setup = dataclasses.replace(self._setup(), reuse=reuse)
        try:
            sock, pid, pidfd = self._spawn(WantCallWorker(setup, preload, kept))
        except OSError:
            with self._lock:
                self._spawn = None
            return None
        known = frozenset((*preload, *kept))
        return _Worker(pid, sock, known, spawned=True, pidfd=pidfd, reuse=reuse)

    def _fork_worker(self, registry: dict[int, Any]) -> _Worker:
        setup = self._setup()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = fork_in_threaded_process()  # the module docstring says why the child is safe
        if pid == 0:
            ours.close()
            _worker_main(functools.partial(enter_calls, setup), _nest(setup), registry, theirs)
        theirs.close()
        return _Worker(pid, ours, frozenset(registry))

    def _fork_cold(self, call: Call) -> _Child:
        """Fork a child for ``call`` alone: it sets itself up, runs it and exits."""
        setup = self._setup()
        result_r, result_w = os.pipe()
        pid = fork_in_threaded_process()  # the module docstring says why the child is safe
        if pid == 0:
            try:
                faulthandler.disable()
                os.close(result_r)
                _close_inherited_pipes(keep={result_w})
                try:
                    enter_calls(setup)
                    outcome = _run(*call)
                except BaseException as exc:
                    outcome = ("error", exc)
                _deliver(outcome, result_w)
            finally:
                os._exit(0)
        os.close(result_w)
        return _Child(pid, result_r)


def _discard(worker: _Worker) -> None:
    """Let a worker go: SIGKILL it and the call it may be running; wait until it is gone."""
    with contextlib.suppress(OSError):
        tree = descendants(worker.pid)
        if worker.pidfd is None:
            _signal(set(tree), worker.pid, signal.SIGKILL)
        else:
            # The spawn server reaps it: once it is gone, its pid may be another's.
            signal.pidfd_send_signal(worker.pidfd, signal.SIGKILL)
            for pid in tree:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
    worker.sock.close()
    if worker.pidfd is not None:
        select.select([worker.pidfd], [], [], _GONE_WAIT)
        os.close(worker.pidfd)
        return
    with contextlib.suppress(ChildProcessError):
        os.waitpid(worker.pid, 0)


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


def _nest(setup: CallSetup) -> Callable[[], None] | None:
    return landlock.nest if setup.nest else None


def serve_calls(
    setup: CallSetup, preload: tuple[str, ...], kept: tuple[bytes, ...], sock: socket.socket
) -> None:
    """A warm worker forked by the spawn server (``WantCallWorker``): the caller's
    ``sys.path`` and working directory, then :func:`_worker_main` with ``preload``
    imported and the objects pickled in ``kept`` made, once it is set up (confined: the
    imports run no code outside the sandbox). Never returns."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the server ignores its children's ends
    sys.path[:] = setup.path
    with contextlib.suppress(OSError):
        os.chdir(setup.cwd)
    # The caller's __main__ is not this process's (the server's boot): a call that names
    # something of it cannot be loaded here, and runs as a closure does.
    sys.modules["__main__"] = types.ModuleType("__main__")
    registry: dict[Any, Any] = {}

    def prepare() -> None:
        for name in preload:
            with contextlib.suppress(Exception):
                importlib.import_module(name)
        for data in kept:
            with contextlib.suppress(Exception):
                registry[data] = pickle.loads(data)

    gc.enable()  # the server runs without its collector; the calls run with it
    reuse = _budget(setup) if setup.reuse else None
    entered = functools.partial(enter_calls, setup, prepare)
    _worker_main(entered, _nest(setup), registry, sock, reuse)


def _worker_main(
    setup: Callable[[], None],
    nest: Callable[[], None] | None,
    registry: dict[Any, Any],
    sock: socket.socket,
    reuse: _Budget | None = None,
) -> None:
    """The warm worker: set up once, then keep one child forked ahead that waits for the
    next call on the socket; fork the next as soon as it took one; report each child's
    end (``E``) until the caller hangs up. Its own only: adopted orphans of a call that
    did not deliver are reaped silently (the caller lets this worker go after such a call).
    With ``reuse`` (each call's share of the limits), its one child runs the calls one
    after another instead (:func:`_serve_with_one_child`)."""
    try:
        # A crash here is reported by the parent (SandboxError naming the signal); a fault
        # handler inherited from the caller would only print a second, alarming dump.
        faulthandler.disable()
        _close_inherited_pipes(keep={sock.fileno()})
        try:
            setup()
            failed: BaseException | None = None
        except BaseException as exc:
            failed = exc
        # The heap the children share with this worker stays shared: the collector, run
        # in a child, would otherwise touch (and so copy) every page of it.
        gc.freeze()
        if reuse is not None:
            _serve_with_one_child(sock, nest, registry, failed, reuse)
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
        mine: set[int] = set()
        waiting: int | None = None
        worker = os.getpid()
        policy = _yield_to_calls()
        fork = _hookless_fork()
        while True:
            if waiting is None:
                learn = prefault and (hint is None or since_learned >= _LEARN_EVERY)
                waiting = fork()  # this process runs no other thread
                if waiting == 0:
                    # A worker killed from outside must not leave a child that takes a call.
                    die_with_parent(worker)
                    _reseed_random()
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    for fd in (took_r, wake_r, wake_w, learned_r, given_w):
                        os.close(fd)
                    hints = (given_r if prefault else None, learned_w if learn else None)
                    _call_child(sock, nest, registry, failed, took_w, hints, planned, policy)
                mine.add(waiting)
                if hint is not None:
                    hinted = waiting  # forked with the hint planned
            if hint is not None and hinted != waiting:
                # The child copies them while the call before its own runs (on the other
                # core), or in the gap after it; it stops when its call comes.
                with contextlib.suppress(OSError):
                    os.write(given_w, hint)  # at most PIPE_BUF bytes: whole or not at all
                hinted = waiting
            select.select([took_r, wake_r, learned_r], [], [])
            _drain(wake_r)
            learned = _prefault.latest(_read_all(learned_r))
            if learned is not None:
                hint, since_learned = learned, 0
                planned = _prefault.plan(_prefault.parse(hint))
            # Reaped first, then the took byte read: a child that took its call and ended
            # meanwhile wrote the byte before it ended, so it is never taken for one that
            # died waiting (and replaced twice, leaving two children reading requests).
            ended = _reaped()
            if _drain(took_r):
                waiting = None  # one child waits at a time: the byte is its
                since_learned += 1
            for pid, status in ended:
                if pid not in mine:
                    continue
                mine.discard(pid)
                if pid == waiting:
                    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == _NO_MORE_CALLS:
                        return
                    waiting = None  # killed from outside while waiting
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
    registry: dict[Any, Any],
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
    worker = os.getpid()
    fork = _hookless_fork()
    child: int | None = None
    while True:
        if child is None:
            child = fork()  # this process runs no other thread
            if child == 0:
                die_with_parent(worker)
                _reseed_random()
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.close(wake_r)
                os.close(wake_w)
                _reused_child(sock, nest, registry, failed, budget)
        select.select([wake_r], [], [])
        _drain(wake_r)
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
    registry: dict[Any, Any],
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
            received = _receive_call(sock)
            if received is None:
                return
            data, result_w = received
            sock.sendall(_REPORT.pack(b"S", os.getpid(), 0))
            outcome = _outcome_of(data, registry, failed, budget.grant)
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


def _receive_call(sock: socket.socket) -> tuple[bytes, int] | None:
    """The next request on ``sock`` and the write end of its result pipe; ``None`` at end
    of file (the caller hung up) or on a malformed request."""
    header, fds, _, _ = socket.recv_fds(sock, 8, 1)
    rest = _receive_exactly(sock, 8 - len(header)) if 0 < len(header) < 8 else b""
    size = int.from_bytes(header + (rest or b""), "big")
    data = _receive_exactly(sock, size) if len(fds) == 1 and rest is not None else None
    if data is None:
        for fd in fds:
            os.close(fd)
        return None
    return data, fds[0]


def _hookless_fork() -> Callable[[], int]:
    """``fork`` for the worker's children: fork(2) without Python's at-fork hooks, where
    that is sound (Linux, an interpreter with a GIL), else :func:`os.fork`.

    The hooks (``threading``'s, ``logging``'s, ``random``'s, a library's) cost a child
    about 0.6 ms and 200 copied pages, for nothing: they reset what other threads may
    have held or started at a fork, they ran when the worker was forked from the
    caller, and the worker runs no other thread. The one that matters for each child,
    ``random``'s reseed, is done by :func:`_reseed_random`. glibc's ``fork`` still makes
    its own state (malloc's locks) safe in the child; the interpreter's lock stays with
    the one thread, which the child has too.

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


def _reseed_random() -> None:
    """What ``random``'s at-fork hook does: a child's ``random`` numbers are not its
    siblings' (:func:`_hookless_fork` runs no hook)."""
    module = sys.modules.get("random")
    if module is not None:
        module.seed()


def _yield_to_calls() -> int | None:
    """Put this worker under ``SCHED_BATCH`` when it runs under ``SCHED_OTHER``: woken
    (a child took its call, another ended), it then does not preempt the call running
    on its core to fork the next child, which would hold that call up by the fork's
    time. Returns the policy the children go back to, or ``None`` when it is unchanged."""
    try:
        if os.sched_getscheduler(0) != os.SCHED_OTHER:
            return None  # the caller's own choice: kept for the calls too
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):
        return None  # not Linux, or refused (a seccomp filter): the calls wait a little
    return os.SCHED_OTHER


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


def _read_all(fd: int) -> bytes:
    """What the non-blocking ``fd`` holds."""
    data = bytearray()
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 65536):
            data += chunk
    return bytes(data)


def _drain(fd: int) -> bool:
    """Read what the non-blocking ``fd`` holds; whether there was anything."""
    got = False
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, 4096):
            got = True
    return got


#: The exit code of a worker's child that met end of file instead of a call.
_NO_MORE_CALLS = 3
#: The exit code of a reused child that is to be replaced (``_reused_child``).
_RENEWED = 4
#: A call's child learns the pages it wrote (``_prefault.learn``, about a millisecond)
#: for the first call of a worker and after this many more.
_LEARN_EVERY = 16


def _call_child(
    sock: socket.socket,
    nest: Callable[[], None] | None,
    registry: dict[Any, Any],
    failed: BaseException | None,
    took_w: int,
    hints: tuple[int | None, int | None],
    planned: list[tuple[int, int]],
    policy: int | None,
) -> None:
    """A worker's child: its own session, subreaper and nested domain, set up before its
    call comes; while it waits, the pages of the hint the worker had planned when it forked
    it (``planned``) are copied, then those of a hint the worker gives it later
    (``hints[0]``); then take one call from ``sock``, tell the worker (``took_w``) and the
    caller (``S``, its pid), let both go (the call must read no later request), run it,
    deliver, and, asked to (``hints[1]``), tell the worker which pages it wrote. It runs
    under the caller's scheduling ``policy`` again, when the worker left it
    (``_yield_to_calls``)."""
    code = 0
    given_r, learned_w = hints
    try:
        failed = _set_up_child(nest, failed)
        if policy is not None:
            with contextlib.suppress(OSError):  # the worker could: so can its child
                os.sched_setscheduler(0, policy, os.sched_param(0))
        inherited = _prefault.mappings() if learned_w is not None else []
        if given_r is not None:
            _prefault_while_waiting(sock, given_r, planned)
        received = _receive_call(sock)
        if received is None:
            code = _NO_MORE_CALLS
            return
        data, result_w = received
        if given_r is not None:
            # Before the took byte, after which the worker gives the next child its hint.
            _read_all(given_r)
            os.close(given_r)
        os.write(took_w, b"t")
        os.close(took_w)
        sock.sendall(_REPORT.pack(b"S", os.getpid(), 0))
        sock.close()
        _deliver(_outcome_of(data, registry, failed), result_w)
        if learned_w is not None:
            with contextlib.suppress(OSError):
                os.write(learned_w, _prefault.learn(inherited))  # <= PIPE_BUF bytes: whole
    finally:
        os._exit(code)


def _set_up_child(
    nest: Callable[[], None] | None, failed: BaseException | None
) -> BaseException | None:
    """A worker's child's own set-up, fresh or reused: its own session, subreaper, and
    the nested domain (``nest``). Returns what the child's calls fail with: ``failed``
    (the worker's set-up), else what ``nest`` raised, else ``None``."""
    os.setsid()
    become_subreaper()
    if failed is None and nest is not None:
        try:
            nest()
        except BaseException as exc:
            return exc
    return failed


def _outcome_of(
    data: bytes,
    registry: dict[Any, Any],
    failed: BaseException | None,
    grant: Callable[[], None] | None = None,
) -> tuple[str, Any]:
    """The outcome of the call ``data`` requests: ``failed`` when the child could not be
    set up; ``unservable`` when it cannot be loaded here (nothing ran: the caller runs it
    in a child of its own); an error when its limits cannot be granted (``grant``, a
    reused child's); else what running it gave."""
    if failed is not None:
        return ("error", failed)
    try:
        call = _load_request(data, registry)
    except BaseException as exc:
        return ("unservable", f"{type(exc).__name__}: {exc}")
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
        data = _read_all(given_r)
        if not data:
            return  # the worker is gone: the socket says so too
        _prefault.populate(_prefault.plan(_prefault.parse(data)), sock.fileno())


def _deliver(outcome: tuple[str, Any], result_w: int) -> None:
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    # Before the result: once the caller has it, nothing of the call may be left.
    _kill_leftovers()
    result = _dumps(outcome)
    with contextlib.suppress(OSError):
        _write_all(result_w, len(result).to_bytes(8, "big") + result)


def _receive_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(min(_READ_SIZE, size - len(data)))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


class _WorkerGone(Exception):
    """The worker died before it started the call: the call may run elsewhere."""


async def _run_on_worker(worker: _Worker, request: bytes, grace: float) -> tuple[Any, Any]:
    """Send ``request`` to ``worker`` and collect its child's outcome: ``(result bytes,
    None)`` once the result is complete, else ``(None, wait status or None)``. Cancelled,
    it stops the call's tree first (the caller then lets the worker go).

    Raises:
        _WorkerGone: the worker died before it started the call.
    """
    result_r, result_w = os.pipe()
    sock = worker.sock
    try:
        frame = len(request).to_bytes(8, "big") + request
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
            if result_open:
                # The result's pipe alone: the child's report as it takes the call would
                # wake this task in the middle of every call, to preempt the call on its
                # core. The pipe's end of file says that the child ended; the reports are
                # read then, and every _REPORTS_EVERY seconds, for a child that ended
                # leaving a process that holds the pipe open.
                with anyio.move_on_after(_REPORTS_EVERY):
                    await anyio.wait_readable(result_r)
            else:
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
        """SIGTERM the call's tree, wait up to ``grace`` seconds for its end, SIGKILL what
        is left (the tree is listed before the child can die: the worker, a subreaper,
        would adopt its orphans, and be let go with them)."""
        if not self.gone:
            self.read()  # the child's pid, when it took the call since the last look
        pid = self.pid
        if pid is None:
            return  # not started, or the worker is gone with it: letting it go stops it
        tree = set(descendants(pid))
        _signal(tree, pid, signal.SIGTERM)
        with anyio.move_on_after(grace):
            while self.status is None and not self.gone:
                await anyio.wait_readable(self._worker.sock)
                self.read()
        tree.update(descendants(pid))
        # Stopped first, so that nothing forks between listing the tree and killing it.
        _signal(tree, pid, signal.SIGSTOP)
        _signal(tree | set(descendants(pid)), pid, signal.SIGKILL)


def _close_inherited_pipes(keep: set[int]) -> None:
    """Close the pipes the fork copied from the caller, but ``keep``.

    Other threads of the caller may be starting a subprocess or a sandboxed call at the
    instant of the fork: they wait for end of file on a pipe (``subprocess``'s exec-status
    pipe, a child's output) whose write end this copy would hold until it exits, which for
    a warm worker is when it is let go. Descriptors of other kinds
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


def _by_reference(obj: Any) -> bool:
    """Whether a call's argument is one a worker may keep and be sent by reference: a
    callable (not a class), or an object whose class sets ``sandbox_by_reference``."""
    if isinstance(obj, type):
        return False
    return callable(obj) or getattr(type(obj), "sandbox_by_reference", False) is True


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


#: How :class:`_ImportPickler` treats an object, by its type.
_PLAIN, _GLOBAL, _KEPT = 0, 1, 2


def _kind_of(cls: type) -> int:
    if issubclass(cls, (types.FunctionType, types.BuiltinFunctionType, type)):
        return _GLOBAL  # pickled as a reference to be imported
    if getattr(cls, "sandbox_by_reference", False) is True:
        return _KEPT
    return _PLAIN


class _ImportPickler(pickle.Pickler):
    """Pickles a call for a worker started by the spawn server, which imports what the
    call names: refuses what names ``__main__`` (the worker's is not the caller's), notes
    the modules named (``modules``) and pickles an object whose class sets
    ``sandbox_by_reference`` as ``("kept", its own pickle)`` (noted in ``kept``): the
    worker keeps one copy of each such pickle, made once, for its children. ``kinds``
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
            if module is None or module == "__main__":
                raise pickle.PicklingError(f"{obj!r} cannot be imported by another process")
            self.modules[module] = None
            return None
        if self._top is not None:
            return None  # within a kept object: pickled with it
        buffer = io.BytesIO()
        inner = _ImportPickler(buffer, self._kinds, top=obj)
        inner.dump(obj)
        self.modules.update(inner.modules)
        data = buffer.getvalue()
        self.kept[data] = None
        return ("kept", data)


class _RefUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, registry: dict[Any, Any]):
        super().__init__(file)
        self._registry = registry

    def persistent_load(self, pid: Any) -> Any:
        if type(pid) is tuple:  # ("kept", pickle): the worker's copy, else one made here
            kept = self._registry.get(pid[1])
            return kept if kept is not None else pickle.loads(pid[1])
        return self._registry[pid]


def _dump_request(call: Any, registry: dict[int, Any], known: frozenset[int]) -> bytes | None:
    buffer = io.BytesIO()
    try:
        _RefPickler(buffer, registry, known).dump(call)
    except Exception:
        return None  # something the child does not hold and cannot be pickled
    return buffer.getvalue()


def _load_request(data: bytes, registry: dict[Any, Any]) -> Any:
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
