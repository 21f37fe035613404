"""The caller's side of the spawn server: a pool of reusable supervisors."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import weakref
from collections.abc import Callable, Hashable, Mapping
from contextvars import ContextVar
from typing import TypeVar

from sandbox.spawn._jobs import (
    CallWorkerReady,
    StartFailed,
    StopTree,
    SupervisorReady,
    WantCallWorker,
    WantSupervisor,
)
from sandbox.spawn._wire import Channel

# The directory that holds the ``sandbox`` package (this file is sandbox/spawn/_client.py).
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The server imports only the standard library and this package's process modules.
#: The server's first lines. posix_spawn hands the server every descriptor the caller
#: left inheritable (a host application's pipe, what its own parent passed down): closed
#: first, but for the standard three and the server's socket, so that no command and no
#: sandboxed call inherits them.
_BOOT = (
    "import os, sys; fd = int(sys.argv[1]); os.closerange(3, fd); "
    "os.closerange(fd + 1, os.sysconf('SC_OPEN_MAX')); sys.path.insert(0, sys.argv[2]); "
    "from sandbox.spawn._server import serve; serve(fd)"
)

T = TypeVar("T")

#: Idle supervisors kept per set of limits; more are closed when handed back.
POOL_SIZE = 4

#: Who starts the commands started in this context: any object, set around the code
#: that starts them (``token = COMMAND_OWNER.set(owner)``, then
#: ``COMMAND_OWNER.reset(token)``; a tool session sets it around each of its calls);
#: ``None`` (the default): no one in particular. ``Sandbox.close_commands(owner)`` stops
#: only the commands started under ``owner`` (:meth:`Launcher.close`). Public as
#: ``sandbox.COMMAND_OWNER``.
COMMAND_OWNER: ContextVar[object | None] = ContextVar("sandbox_command_owner", default=None)

#: :meth:`Launcher.close`'s ``owner`` that stands for every owner.
EVERYONE = object()


class Supervisor(Channel):
    """The caller's connection to one supervisor.

    Attributes:
        env: the environment of the last job sent to it, which a job with the same one
            need not carry again (see ``sandbox.spawn._server``).
        stopped_by_close: its launcher was closed while it ran a job, whose tree it was
            asked to stop (see :meth:`Launcher.close`).
    """

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock)
        self.env: Mapping[str, str] | None = None
        self.stopped_by_close = False
        #: The :data:`COMMAND_OWNER` of the job it was handed out for.
        self.owner: object | None = None
        # The grace of a stop asked for before the job went out (None: none asked), and
        # whether it went out; both under the lock (close() may run in another thread).
        self._stop_grace: float | None = None
        self._job_sent = False
        self._job_over = False
        self._stop_lock = threading.Lock()

    def job_sent(self) -> None:
        """The job is out: a stop asked for by :meth:`Launcher.close` before it went is
        sent now, after it (the supervisor ignores a stop that comes before a job)."""
        with self._stop_lock:
            self._job_sent = True
            grace = self._stop_grace
        if grace is not None:
            with contextlib.suppress(OSError):
                self.send(StopTree(grace))

    def job_over(self) -> bool:
        """The job's tree is gone: a later close has nothing of it to stop. Whether a
        close stopped it (:attr:`stopped_by_close`)."""
        with self._stop_lock:
            self._job_over = True
            return self.stopped_by_close

    def reuse(self) -> None:
        """Ready for its next job, back in its launcher's idle pool: a close while that
        job runs must find it neither sent nor over, as for a new supervisor."""
        with self._stop_lock:
            self._stop_grace, self._job_sent, self._job_over = None, False, False

    def stop_for_close(self, grace: float) -> None:
        """Ask the supervisor to stop the job's tree (SIGTERM, ``grace`` seconds, SIGKILL)
        because its launcher is closing: now if the job is out, else as soon as it is;
        nothing once the job is over."""
        with self._stop_lock:
            if self._job_over:
                return
            self.stopped_by_close = True
            self._stop_grace = grace
            sent = self._job_sent
        if sent:
            with contextlib.suppress(OSError):
                self.send(StopTree(grace))


class SpawnRefused(OSError):
    """The spawn server could not fork a process for the caller (the limit on processes
    reached, or memory short); it serves on. The message says what to do."""

    def __init__(self, cause: str) -> None:
        super().__init__(
            f"No new process could be started: {cause} (the limit on processes, or memory, "
            "is reached); try again when fewer commands run at once"
        )


class _SharedServer:
    """The one spawn server of this process, shared by every :class:`Launcher` in it.

    The server holds nothing of a launcher's: it only forks supervisors and call workers,
    each handed to the asker, who owns it from then on (see ``sandbox.spawn._server``). So
    sandboxes, their copies (a session each) and the plain runners of many workspaces need
    not start a server (an interpreter, about 5 MiB) each: hundreds of workspaces in one
    process share one. It runs while a launcher holds a lease on it and stops when the last
    lease is given back (each launcher's ``close``, its collection, the interpreter's exit);
    a forked child starts its own, as a connection belongs to the process that opened it.
    Requests from different launchers are serialised by one lock (each is a fork in the
    server, well under a millisecond).
    """

    def __init__(self) -> None:
        # Reentrant: a launcher collected while this thread makes a request gives its
        # lease back from inside it (the requester's own lease keeps the server running).
        self.lock = threading.RLock()
        self.channel: Channel | None = None
        self.pid = -1
        self.owner = -1
        self.leases = 0

    def after_fork(self) -> None:
        """In a forked child: nothing of the parent's server is this process's (its socket
        is left alone: it is the parent's), and the lock is made anew, as a fork copies it
        in whatever state another thread left it."""
        if self.owner != os.getpid() and self.owner != -1:
            self.lock = threading.RLock()
            self.channel, self.pid, self.owner, self.leases = None, -1, -1, 0

    def connect(self) -> Channel:
        """The server's channel, started when none runs (call with :attr:`lock` held).

        Raises:
            OSError: the server could not be started.
        """
        if self.channel is not None and self.owner == os.getpid():
            return self.channel
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        theirs.set_inheritable(True)
        try:
            pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-c", _BOOT, str(theirs.fileno()), _PACKAGE_PARENT],
                _server_env(),
                setsid=True,
                file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)],
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.channel, self.pid, self.owner = Channel(ours), pid, os.getpid()
        return self.channel

    def stop(self) -> None:
        """Stop the server (call with :attr:`lock` held): it died, or no lease is left. A
        later request starts a fresh one."""
        channel, pid = self.channel, self.pid
        self.channel, self.pid = None, -1
        if channel is None or self.owner != os.getpid():
            return
        channel.close()
        # End of file would stop the server too, but a forked child may still hold a copy
        # of its socket: stop it outright. Idle supervisors exit on end of file.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)

    def take_lease(self) -> None:
        """One more launcher uses the server (call with :attr:`lock` held)."""
        self.owner = os.getpid()
        self.leases += 1

    def give_back(self, owner: int) -> None:
        """A launcher of process ``owner`` is done with the server; the last one stops it."""
        if owner != os.getpid():
            return  # a lease taken in the parent: the parent gives it back
        with self.lock:
            self._give_back_held()

    def _give_back_held(self) -> None:
        self.leases -= 1
        if self.leases <= 0:
            self.leases = 0
            self.stop()

    def give_back_soon(self, owner: int) -> None:
        """:meth:`give_back`, from a collection: at once when the server is free, else
        in a thread of its own, so that the thread the collection runs in (often an event
        loop's) does not wait while another serves a request (a call worker's start can
        take a second under load)."""
        if owner != os.getpid():
            return  # a lease taken in the parent: the parent gives it back
        if not self.lock.acquire(blocking=False):
            threading.Thread(target=self.give_back, args=(owner,), daemon=True).start()
            return
        try:
            self._give_back_held()
        finally:
            self.lock.release()


#: The process's spawn server (see :class:`_SharedServer`): one process-wide object, as the
#: server it stands for is one per process; launchers lease it.
_SERVER = _SharedServer()


class Launcher:
    """Hands out supervisors (see ``sandbox.spawn._server``) forked by this process's spawn
    server, and takes them back for the next command.

    The server is shared with every other launcher of the process (see
    :class:`_SharedServer`) and started on first use, and again in a forked child (a
    connection belongs to the process that opened it). This object's idle supervisors exit,
    and its lease on the server is given back (the last one stops it), when it is closed or
    collected, or when the process that started them exits.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock_pid = os.getpid()  # the process the lock was made in
        self._owner = -1
        self._idle: dict[Hashable, list[Supervisor]] = {}
        # Supervisors handed out and not handed back: running a job (see close).
        self._busy: set[Supervisor] = set()
        self._finalizer: weakref.finalize | None = None

    def acquire(self, limits: Hashable) -> Supervisor:
        """A connected supervisor that has run only jobs with these ``limits`` (a
        supervisor applies limits to itself once, for good: ``CommandJob.limits``).

        Raises:
            OSError: the server could not be started or reached.
        """
        with self._own_lock():
            return self._acquire_held(limits)

    def _acquire_held(self, limits: Hashable) -> Supervisor:
        """:meth:`acquire`'s work, with this launcher's lock held."""
        idle = self._connect_pool().setdefault(limits, [])
        supervisor = idle.pop() if idle else _ask(_new_supervisor)
        supervisor.owner = COMMAND_OWNER.get()
        self._busy.add(supervisor)
        return supervisor

    def try_acquire(self, limits: Hashable) -> Supervisor | None:
        """:meth:`acquire`, or ``None`` at once when it would wait for another thread: one
        that holds this launcher, or the process's spawn server while it serves another
        sandbox's request (a call worker's start can take a second under load). An event
        loop calls this, and waits for :meth:`acquire` in a thread only then."""
        lock = self._own_lock()
        if not lock.acquire(blocking=False):
            return None
        try:
            if self._finalizer is not None and self._owner == os.getpid():
                idle = self._idle.get(limits)
                if idle:
                    supervisor = idle.pop()
                    supervisor.owner = COMMAND_OWNER.get()
                    self._busy.add(supervisor)
                    return supervisor
            _SERVER.after_fork()  # a forked child's lock made anew first, then held
            server_lock = _SERVER.lock
            if not server_lock.acquire(blocking=False):
                return None
            try:
                return self._acquire_held(limits)
            finally:
                server_lock.release()
        finally:
            lock.release()

    def call_worker(self, want: WantCallWorker) -> tuple[socket.socket, int, int | None]:
        """A new warm worker of Python calls from this process's spawn server: its socket,
        its pid and a pidfd of it (``None`` where there are none); the caller stops it.

        Raises:
            OSError: the server could not be started or reached.
        """
        with self._own_lock():
            self._connect_pool()
            return _ask(lambda channel: _new_call_worker(channel, want))

    def _own_lock(self) -> threading.Lock:
        """This object's lock, made anew in a forked child (a fork copies it in whatever
        state another thread left it). Only then: threads of one process that replaced it
        on first use would each hold a lock of their own, and each lease the server."""
        if self._lock_pid != os.getpid():
            self._lock, self._lock_pid = threading.Lock(), os.getpid()
        return self._lock

    def release(self, limits: Hashable, supervisor: Supervisor) -> None:
        """Hand back a supervisor whose job is over (its tree is gone)."""
        with self._lock:
            self._busy.discard(supervisor)
            idle = self._idle.setdefault(limits, [])
            if (
                self._owner == os.getpid()
                and len(idle) < POOL_SIZE
                and not supervisor.stopped_by_close
            ):
                supervisor.reuse()
                idle.append(supervisor)
                return
        supervisor.close()

    def forget(self, supervisor: Supervisor) -> None:
        """A supervisor handed out that its user closed rather than handed back."""
        with self._lock:
            self._busy.discard(supervisor)

    def close(self, grace: float = 1.0, owner: object = EVERYONE) -> bool:
        """Close the idle supervisors, give back the lease on the server (the last
        launcher's stops it), and stop the command each busy one runs: its whole tree
        (SIGTERM, ``grace`` seconds, SIGKILL); the job's caller sees the end (see
        :attr:`Supervisor.stopped_by_close`) and closes that supervisor.

        With an ``owner``, only the commands started under it (:data:`COMMAND_OWNER`) are
        stopped, and the rest is done only when no other command runs. Returns whether
        the rest was done (the launcher is closed)."""
        with self._lock:
            ours = self._owner == os.getpid()
            busy = [s for s in self._busy if ours and (owner is EVERYONE or s.owner is owner)]
            whole = len(busy) == len(self._busy) or not ours
            if whole:
                self._busy = set()
                self._close()
        for supervisor in busy:
            supervisor.stop_for_close(grace)
        return whole

    def _connect_pool(self) -> dict[Hashable, list[Supervisor]]:
        if self._finalizer is not None and self._owner == os.getpid():
            return self._idle
        # Supervisors copied from a parent process are left alone: they are the parent's.
        _SERVER.after_fork()
        with _SERVER.lock:
            _SERVER.take_lease()
        self._owner, self._idle = os.getpid(), {}
        self._finalizer = weakref.finalize(self, _shutdown, self._idle, os.getpid())
        return self._idle

    def _close(self) -> None:
        if self._finalizer is not None:
            detached = self._finalizer.detach()
            if detached is not None:  # not run yet: closed, not collected
                _shutdown(*detached[2], collected=False)
        self._finalizer, self._owner, self._idle = None, -1, {}


def _ask(request: Callable[[Channel], T]) -> T:
    """``request`` made of this process's spawn server, started if need be; once more of a
    fresh one when the server died (killed from outside)."""
    _SERVER.after_fork()
    with _SERVER.lock:
        try:
            return request(_SERVER.connect())
        except SpawnRefused:
            raise  # the server lives on: another one could fork no more
        except OSError:
            _SERVER.stop()
            return request(_SERVER.connect())


def _new_supervisor(server: Channel) -> Supervisor:
    server.send(WantSupervisor())
    reply = server.receive()
    if isinstance(reply, StartFailed):
        raise SpawnRefused(reply.error)
    fds = server.take_fds(1)
    if not isinstance(reply, SupervisorReady) or not fds:
        raise ConnectionError("the sandbox spawn server exited")
    return Supervisor(socket.socket(fileno=fds[0]))


def _new_call_worker(
    server: Channel, want: WantCallWorker
) -> tuple[socket.socket, int, int | None]:
    server.send(want)
    reply = server.receive()
    if isinstance(reply, StartFailed):
        raise SpawnRefused(reply.error)
    fds = server.take_fds(2)
    if not isinstance(reply, CallWorkerReady) or not fds:
        for fd in fds:
            os.close(fd)
        raise ConnectionError("the sandbox spawn server exited")
    return socket.socket(fileno=fds[0]), reply.pid, fds[1] if len(fds) > 1 else None


def _shutdown(idle: dict[Hashable, list[Supervisor]], owner: int, collected: bool = True) -> None:
    for supervisors in idle.values():
        for supervisor in supervisors:
            supervisor.close()
    if collected:
        _SERVER.give_back_soon(owner)
    else:
        _SERVER.give_back(owner)


def _server_env() -> dict[str, str]:
    """The server needs no environment of its own: each job carries its command's. Only
    what the interpreter itself may need to start is kept."""
    keep = ("PATH", "LD_LIBRARY_PATH", "PYTHONHOME")
    return {name: os.environ[name] for name in keep if name in os.environ}
