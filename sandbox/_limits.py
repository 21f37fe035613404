"""Resource limits of a sandboxed child and how the child applies them to itself."""

from __future__ import annotations

import resource
from dataclasses import dataclass

GIB = 1024**3


@dataclass(frozen=True)
class SandboxLimits:
    """Limits on one sandboxed command or call. ``None`` leaves a limit off.

    Attributes:
        cpu_seconds: CPU time of each process (``RLIMIT_CPU``); past it the kernel sends
            SIGXCPU, then SIGKILL.
        file_size_bytes: largest file a process may write (``RLIMIT_FSIZE``); past it a
            write fails with EFBIG (and SIGXFSZ).
        open_files: file descriptors per process (``RLIMIT_NOFILE``).
        memory_bytes: opt-in address-space cap (``RLIMIT_AS``). For a command it is the
            whole address space; for a Python callable it is what the call may add to the
            address space of the worker its child is forked from. Allocation past it fails
            (``MemoryError`` in Python, ENOMEM elsewhere).
        output_bytes: bytes of each output stream kept (half the head, half the tail); the
            rest is counted, not stored, so memory stays bounded whatever a command prints.
        timeout_seconds: wall time before the whole process tree is stopped. For a
            Python call it counts from when a child of a warm worker took the call, not
            while a worker is started for it (see ``start_seconds``).
        start_seconds: for a Python call, how long it may wait for a worker to take it
            (a new worker sets up and imports what the calls name: a few hundred ms);
            past it the call fails with ``SandboxError`` ("the sandbox could not start a
            worker for the call within N s ...; nothing ran"), not a timeout.
        grace_seconds: time between SIGTERM and SIGKILL when a tree is stopped.
        drain_seconds: how long output is still read after the command itself exited, when
            a background process keeps the pipe open; then the leftovers are stopped.
    """

    cpu_seconds: int | None = 600
    file_size_bytes: int | None = 4 * GIB
    open_files: int | None = 1024
    memory_bytes: int | None = None
    output_bytes: int = 1024 * 1024
    timeout_seconds: float | None = None
    start_seconds: float = 60.0
    grace_seconds: float = 1.0
    drain_seconds: float = 0.2

    def rlimits(self) -> list[tuple[str, int]]:
        """The process limits as ``(RLIMIT_* name, value)`` pairs, primitives a child
        applies with :func:`apply_rlimits`. Memory is left to the caller (see
        ``memory_bytes``)."""
        pairs = [
            ("RLIMIT_CPU", self.cpu_seconds),
            ("RLIMIT_FSIZE", self.file_size_bytes),
            ("RLIMIT_NOFILE", self.open_files),
        ]
        return [(name, value) for name, value in pairs if value is not None]


def apply_rlimits(pairs: list[tuple[str, int]] | list[list[object]]) -> None:
    """Lower this process's limits to ``pairs`` (``(RLIMIT_* name, value)``), never raising
    one above its current hard limit (POSIX ``setrlimit``: only a privileged process may).

    Raises:
        OSError, ValueError: the kernel refused a limit.
    """
    for name, value in pairs:
        which = getattr(resource, str(name))
        wanted = int(value)  # type: ignore[call-overload]
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            wanted = min(wanted, hard)
        resource.setrlimit(which, (wanted, wanted))


def address_space_bytes() -> int:
    """This process's current virtual memory size in bytes (``/proc/self/statm``), or 0
    where ``/proc`` is absent."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[0])
    except OSError:
        return 0
    return pages * resource.getpagesize()
