"""Layer checks for the tests, importable by the interpreter `run_checks` spawns (standard
library only: it starts without site-packages), and a fork helper for the layer tests."""

from __future__ import annotations

import os
import signal
import warnings
from collections.abc import Callable

from sandbox.layers._syscall import Verdict

#: The directory to import this module from (as ``tests.sandbox._layer_checks``).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def holds() -> bool:
    return True


def raises() -> bool:
    raise PermissionError(13, "refused by the test")


def answers_no() -> bool:
    return False


def dies() -> bool:
    os.kill(os.getpid(), signal.SIGKILL)
    return True


def leaves_a_process(release: str) -> bool:
    """Leaves a child holding the verdict pipe until the FIFO `release` was opened for
    writing and closed again (by the test)."""
    if os.fork() == 0:
        with open(release, "rb") as fifo:
            fifo.read()
        os._exit(0)
    raise RuntimeError("left one behind")


def in_fork(check: Callable[[], bool]) -> Verdict:
    """`check()` in a forked child of the test process (a layer it applies stays there):
    held when it returned True, else the exception's repr or the exit status."""
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        # Threads a test left (anyio's workers) do nothing the child needs.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        why = "answered no"
        try:
            os.close(read_end)
            if check():
                why = ""
        except BaseException as exc:
            why = repr(exc)
        finally:
            os.write(write_end, why.encode())
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        why = reader.read().decode()
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        return Verdict(False, f"exit status {code}")
    return Verdict(not why, why)
