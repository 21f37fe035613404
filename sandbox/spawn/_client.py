"""The caller's side of the spawn server: a pool of reusable supervisors."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import weakref
from collections.abc import Hashable, Mapping

from sandbox.spawn._jobs import CallWorkerReady, SupervisorReady, WantCallWorker, WantSupervisor
from sandbox.spawn._wire import Channel

# The directory that holds the ``sandbox`` package (this file is sandbox/spawn/_client.py).
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The server imports only the standard library and this package's process modules.
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[2]); "
    "from sandbox.spawn._server import serve; serve(int(sys.argv[1]))"
)

#: Idle supervisors kept per set of limits; more are closed when handed back.
POOL_SIZE = 4


class Supervisor(Channel):
    """The caller's connection to one supervisor.

    Attributes:
        env: the environment of the last job sent to it, which a job with the same one
            need not carry again (see ``sandbox.spawn._server``).
    """

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock)
        self.env: Mapping[str, str] | None = None


class Launcher:
    """Hands out supervisors (see ``sandbox.spawn._server``) from a spawn server owned by this
    object, and takes them back for the next command.

    The server is started on first use, and again in a forked child (a connection belongs
    to the process that opened it). It and its idle supervisors exit when this object is
    closed or collected, or when the process that started it exits.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner = -1
        self._server: Channel | None = None
        self._idle: dict[Hashable, list[Supervisor]] = {}
        self._finalizer: weakref.finalize | None = None

    def acquire(self, limits: Hashable) -> Supervisor:
        """A connected supervisor that has run only jobs with these ``limits`` (a
        supervisor applies limits to itself once, for good: ``CommandJob.limits``).

        Raises:
            OSError: the server could not be started or reached.
        """
        if self._owner != os.getpid():
            # A fork copies the lock in whatever state another thread left it.
            self._lock = threading.Lock()
        with self._lock:
            idle = self._connect_pool().setdefault(limits, [])
            if idle:
                return idle.pop()
            try:
                return self._new_supervisor()
            except OSError:
                # The server died (killed from outside): start a fresh one once.
                self._close()
                return self._new_supervisor()

    def call_worker(self, want: WantCallWorker) -> tuple[socket.socket, int, int | None]:
        """A new warm worker of Python calls from this object's spawn server: its socket,
        its pid and a pidfd of it (``None`` where there are none); the caller stops it.

        Raises:
            OSError: the server could not be started or reached.
        """
        if self._owner != os.getpid():
            self._lock = threading.Lock()  # as in acquire
        with self._lock:
            self._connect_pool()
            try:
                return self._new_call_worker(want)
            except OSError:
                self._close()  # the server died (killed from outside): a fresh one, once
                self._connect_pool()
                return self._new_call_worker(want)

    def _new_call_worker(self, want: WantCallWorker) -> tuple[socket.socket, int, int | None]:
        server = self._server
        assert server is not None
        server.send(want)
        reply = server.receive()
        fds = server.take_fds(2)
        if not isinstance(reply, CallWorkerReady) or not fds:
            for fd in fds:
                os.close(fd)
            raise ConnectionError("the sandbox spawn server exited")
        return socket.socket(fileno=fds[0]), reply.pid, fds[1] if len(fds) > 1 else None

    def release(self, limits: Hashable, supervisor: Supervisor) -> None:
        """Hand back a supervisor whose job is over (its tree is gone)."""
        with self._lock:
            idle = self._idle.setdefault(limits, [])
            if self._owner == os.getpid() and len(idle) < POOL_SIZE:
                idle.append(supervisor)
                return
        supervisor.close()

    def close(self) -> None:
        """Stop the server and the idle supervisors."""
        with self._lock:
            self._close()

    def _connect_pool(self) -> dict[Hashable, list[Supervisor]]:
        if self._server is not None and self._owner == os.getpid():
            return self._idle
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
        finally:
            theirs.close()
        # Sockets copied from a parent process are left alone: they are the parent's.
        self._server, self._owner, self._idle = Channel(ours), os.getpid(), {}
        self._finalizer = weakref.finalize(
            self, _shutdown, self._server, self._idle, pid, os.getpid()
        )
        return self._idle

    def _new_supervisor(self) -> Supervisor:
        server = self._server
        assert server is not None
        server.send(WantSupervisor())
        reply = server.receive()
        fds = server.take_fds(1)
        if not isinstance(reply, SupervisorReady) or not fds:
            raise ConnectionError("the sandbox spawn server exited")
        return Supervisor(socket.socket(fileno=fds[0]))

    def _close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self._server, self._finalizer, self._owner, self._idle = None, None, -1, {}


def _shutdown(
    server: Channel, idle: dict[Hashable, list[Supervisor]], pid: int, owner: int
) -> None:
    for supervisors in idle.values():
        for supervisor in supervisors:
            supervisor.close()
    server.close()
    if os.getpid() == owner:
        # End of file would stop the server too, but a forked child may still hold a copy
        # of its socket: stop it outright. Idle supervisors exit on end of file.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def _server_env() -> dict[str, str]:
    """The server needs no environment of its own: each job carries its command's. Only
    what the interpreter itself may need to start is kept."""
    keep = ("PATH", "LD_LIBRARY_PATH", "PYTHONHOME")
    return {name: os.environ[name] for name in keep if name in os.environ}
