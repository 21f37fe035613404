"""The sandbox's exceptions."""

from __future__ import annotations


class SandboxUnavailable(RuntimeError):
    """A protection asked for (by an argument, a default or ``require=``) that no
    isolation layer on this host can give, and that the caller did not accept to go
    without (``best_effort``).

    Attributes:
        protection: the protection asked for (``"write_confinement"``, ``"read_denial"``,
            ``"network_off"``, ``"process_cap"``, ``"host_exec_protection"``).
        fix: the mechanism that is missing, how to get it, and (when not required) how
            to run without it.
    """

    def __init__(self, protection: str, fix: str) -> None:
        super().__init__(f"sandbox cannot enforce {protection}: {fix}")
        self.protection = protection
        self.fix = fix

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.protection, self.fix))


class SandboxError(RuntimeError):
    """A sandboxed child failed as a process: killed by a signal, out of memory, exited
    without a result, or could not be started.

    Attributes:
        signal: the name of the signal that killed the child (``"SIGSEGV"``), or ``None``.
    """

    def __init__(self, message: str, signal: str | None = None) -> None:
        super().__init__(message)
        self.signal = signal

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.signal))
