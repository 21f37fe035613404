"""The warm worker of Python calls and its children: the side of ``sandbox.spawn._calls``
that runs in the process the spawn server forks (:func:`serve_calls`).

It imports the standard library and the sandbox's layers and process modules, not the
caller's side (``_calls``: anyio, cloudpickle, the supervisors' client), so that what the
worker holds, and so what each fork of it copies (its page tables) and each child's exit
frees, is what its calls need. What a call names comes by import (:func:`_hold`): its
modules, ``cloudpickle``'s for a call by value, ``anyio`` for an async call.

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
Each child lowers its own CPU limit to the call's (``_limit_cpu``): its CPU time starts at
zero at the fork, so what the worker spent importing counts against no call; the worker's
own limit counts from the end of its set-up.
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
(``_calls._learn_frame``): the child waiting for a call sees it and exits, leaving it to the
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
from dataclasses import dataclass
from typing import Any

from sandbox._errors import SandboxError
from sandbox._limits import address_space_bytes, apply_rlimits
from sandbox.layers import landlock
from sandbox.layers._plan import apply_child_layers
from sandbox.layers._syscall import libc
from sandbox.spawn import _prefault
from sandbox.spawn._jobs import CallSetup
from sandbox.spawn._tree import (
    PR_SET_CHILD_SUBREAPER,
    PR_SET_PDEATHSIG,
    become_subreaper,
    descendants,
)

#: What ``poll`` reports of a socket whose peer closed it, without reading from it (HUP
#: and ERR are always reported; RDHUP, Linux's, when the peer closed its end).
_HUNG_UP = getattr(select, "POLLRDHUP", 0) | select.POLLHUP | select.POLLERR

#: Bytes read at a time from a socket or pipe.
_READ_SIZE = 256 * 1024
#: Worker to caller: ``(kind, pid, wait status)``; kind ``S``: forked the call's child,
#: ``E``: reaped it.
_REPORT = struct.Struct("!cii")
#: Objects a worker keeps, at most (the oldest let go first).
_KEPT_SIZE = 16
#: Set in a message's length: the message tells the worker what to hold (:func:`_learn`),
#: it carries no call.
_LEARN_FLAG = 1 << 63
#: Set in a request's length: the call names no kept object, so its child loads it as a
#: plain pickle (no unpickler of its own made: a fresh child copies fewer pages).
_PLAIN_FLAG = 1 << 62

#: Set while a worker or its child imports what calls name (:func:`_hold`, a call's
#: loading): a call started then is that module's own code, run at import, which would
#: start a worker that imports it again, and so on (``CallWorkers.call`` refuses it).
_IMPORTING: ContextVar[bool] = ContextVar("importing_for_calls", default=False)


def enter_calls(setup: CallSetup, prepare: Callable[[], None] | None = None) -> None:
    """Set up this process for Python calls as ``setup`` says: its own session, subreaper,
    default signal handling, /dev/null stdin, the environment, limits and layers; then
    ``prepare()`` (a spawned worker's imports), then the address-space limit, on top of
    the memory this process has by then, and the CPU limit, on top of the CPU it has used
    by then (a fresh call's child sets its own on top of that: :func:`_limit_cpu`).

    Raises:
        OSError: a limit or layer could not be applied.
    """
    _enter_child(dict(setup.env))
    rlimits = list(setup.rlimits)
    cpu = _budget(setup).cpu_seconds
    if cpu is not None:
        rlimits = [(name, value) for name, value in rlimits if name != "RLIMIT_CPU"]
    apply_rlimits(rlimits)
    if setup.layers or setup.cgroup:
        apply_child_layers(setup.layers, setup.confinement, setup.cgroup)
    if prepare is not None:
        prepare()
    if cpu is not None and not setup.reuse:
        # Counted from here, as a reusing worker's: importing what the calls name must not
        # end the worker by SIGXCPU before any call. Each child, whose CPU time starts at
        # zero, lowers both limits to ``cpu`` for its call.
        used = _cpu_used()
        _limit(resource.RLIMIT_CPU, used + cpu, used + cpu)
    elif cpu is not None:
        # On top of the CPU the set-up used, as the address-space limit below: importing
        # what the calls name (a test module with pytest: about 1 s) must not spend a
        # call's share, or end the worker by SIGXCPU before any call. A reused child's
        # calls each get ``cpu`` seconds more (``_Budget.grant``); a second more in the
        # cap keeps that soft limit below it, so that passing it is SIGXCPU (the hard
        # limit's SIGKILL is for a call that ignores SIGXCPU).
        used = _cpu_used()
        _limit(resource.RLIMIT_CPU, used + cpu, used + _REUSE_CAP * cpu + 1)
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
    budget = _budget(setup)
    reuse = budget if setup.reuse else None
    entered = functools.partial(enter_calls, setup, prepare)
    _worker_main(entered, _nest(setup), copies, sock, reuse, budget.cpu_seconds)


def _worker_main(
    setup: Callable[[], None],
    nest: Callable[[], Callable[[], None]] | None,
    copies: dict[bytes, Any],
    sock: socket.socket,
    reuse: _Budget | None = None,
    cpu_seconds: int | None = None,
) -> None:
    """The warm worker: set up once, then keep one child forked ahead that waits for the
    next call on the socket; fork the next as soon as it took one; report each child's
    end (``E``) until the caller hangs up. Its own only: adopted orphans of a call that
    did not deliver are reaped silently (the caller lets this worker go after such a call).
    With ``reuse`` (each call's share of the limits), its one child runs the calls one
    after another instead (:func:`_serve_with_one_child`). ``nest`` prepares, once set
    up, what each child calls to enter its nested domain (``landlock.prepare_nest``);
    without ``reuse``, each child first limits its CPU time to ``cpu_seconds``
    (:func:`_limit_cpu`)."""
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
        enter = _limit_cpu(cpu_seconds, enter)
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


def _limit_cpu(seconds: int | None, nest: Callable[[], None] | None) -> Callable[[], None] | None:
    """What a fresh call's child calls to set itself up (:func:`_set_up_child`): both CPU
    limits lowered to ``seconds`` (a forked process's CPU time starts at zero, so the call
    gets the whole limit, whatever the worker spent importing), then ``nest``. Made once
    in the worker: the child makes one system call (``setrlimit``) for the limit."""
    if seconds is None:
        return nest
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        seconds = min(seconds, hard)
    limit = functools.partial(resource.setrlimit, resource.RLIMIT_CPU, (seconds, seconds))
    if nest is None:
        return limit

    def limit_then_nest() -> None:
        limit()
        nest()

    return limit_then_nest


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
    poller = select.poll()
    poller.register(wake_r, select.POLLIN)
    # The caller's end hung up (it died, or let this worker go) while the child runs a
    # call and reads nothing: requests are the child's to read, a hang-up is this one's
    # to see. Returning kills the child and what its call started (_worker_main).
    poller.register(sock, _HUNG_UP)
    while True:
        if child is None:
            child = fork()  # this process runs no other thread
            if child == 0:
                start()
                os.close(wake_r)
                os.close(wake_w)
                _reused_child(sock, nest, copies, failed, budget)
        if any(fd != wake_r for fd, _ in poller.poll()):
            return
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
    ``_calls._learn_frame``), import those modules and make those objects, as at its start
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
    ``copies``, newest last, at most :data:`_KEPT_SIZE`: the caller's ``_calls._told`` keeps
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


def _trim(kept: dict[bytes, Any]) -> None:
    while len(kept) > _KEPT_SIZE:
        del kept[next(iter(kept))]


def _run(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, Any]:
    try:
        value = fn(*args, **kwargs)
        if type(value) not in _NEVER_AWAITED and inspect.isawaitable(value):
            # Imported here, not at the top: a worker imports anyio (and asyncio) only for
            # calls that are async (``_CallPickler`` names it then), so that the worker of
            # plain calls, and each fork of it, is that much smaller.
            import anyio

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
