"""The sandbox's exceptions."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sandbox.spawn._process import ProcessResult


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
        result: for a command the sandbox was closed under (``Sandbox.close`` stopped
            its whole tree), how it ended, with its output so far; else ``None``.
    """

    def __init__(
        self, message: str, signal: str | None = None, result: ProcessResult | None = None
    ) -> None:
        super().__init__(message)
        self.signal = signal
        self.result = result

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.signal, self.result))


class UnpicklableCall(SandboxError):
    """A sandboxed call that cannot cross to the sandbox's process: its callable or an
    argument does not pickle (it holds a lock, a socket, an open file, a generator...).
    Nothing ran.

    Attributes:
        subject: what was to run (a callable's name, a tool).
        part: what could not cross (``"argument 'state' (a Counter)"``).
        reason: what pickling it raised.
    """

    def __init__(self, subject: str, part: str, reason: str) -> None:
        super().__init__(
            f"{subject} cannot run in the sandbox: {part} cannot be pickled to cross to "
            f"its process ({reason}); make it importable (a module-level function or "
            "class) or capture only values that pickle (no lock, socket, open file or "
            "generator)"
        )
        self.subject, self.part, self.reason = subject, part, reason

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.subject, self.part, self.reason))

    def about(self, subject: str) -> UnpicklableCall:
        """The same error said of ``subject`` (a tool, where the callable was its runner)."""
        return UnpicklableCall(subject, self.part, self.reason)
