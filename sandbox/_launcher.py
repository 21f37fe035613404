"""The caller's side of the spawn server: start it once per process, hand it jobs."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import weakref
from typing import Any

_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The server imports only the standard library and this package's process modules.
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[2]); "
    "from sandbox._supervisor import serve; serve(int(sys.argv[1]))"
)


class Launcher:
    """Starts commands through a spawn server owned by this object.

    The server is started on first use, and again in a forked child (a connection belongs
    to the process that opened it). It exits when this object is closed or collected, or
    when the process that started it exits.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner = -1
        self._sock: socket.socket | None = None
        self._pending = False
        self._finalizer: weakref.finalize | None = None

    def submit(self, spec: dict[str, Any], fds: list[int]) -> None:
        """Send one job: ``spec`` (primitives, see ``sandbox._supervisor``) and its stdout,
        stderr and job-socket descriptors, which the supervisor duplicates.

        Raises:
            OSError: the server could not be started or reached.
        """
        data = json.dumps(spec).encode()
        if self._owner != os.getpid():
            # A fork copies the lock in whatever state another thread left it.
            self._lock = threading.Lock()
        with self._lock:
            try:
                supervisor = self._take_idle()
            except OSError:
                # The server died (killed from outside): start a fresh one once.
                self._close()
                supervisor = self._take_idle()
            with supervisor:
                socket.send_fds(supervisor, [data], fds)

    def _take_idle(self) -> socket.socket:
        server = self._connect()
        if not self._pending:
            server.send(b"?")
        _, fds, _, _ = socket.recv_fds(server, 16, 1)
        if not fds:
            raise ConnectionError("the sandbox spawn server exited")
        # Ask for the next one now: the server forks it while this job runs.
        server.send(b"?")
        self._pending = True
        return socket.socket(fileno=fds[0])

    def close(self) -> None:
        """Stop the server; running jobs' supervisors stop their trees on their own."""
        with self._lock:
            self._close()

    def _connect(self) -> socket.socket:
        if self._sock is not None and self._owner == os.getpid():
            return self._sock
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
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
        self._sock, self._owner, self._pending = ours, os.getpid(), False
        self._finalizer = weakref.finalize(self, _shutdown, ours, pid, os.getpid())
        return ours

    def _close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self._sock, self._finalizer, self._owner = None, None, -1
        self._pending = False


def _shutdown(sock: socket.socket, pid: int, owner: int) -> None:
    sock.close()
    if os.getpid() == owner:
        # The server exits as soon as it sees end of file on its socket.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def _server_env() -> dict[str, str]:
    """The server needs no environment of its own: each job carries its command's. Only
    what the interpreter itself may need to start is kept."""
    keep = ("PATH", "LD_LIBRARY_PATH", "PYTHONHOME", "SYSTEMROOT")
    return {name: os.environ[name] for name in keep if name in os.environ}
