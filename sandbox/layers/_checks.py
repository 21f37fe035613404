"""Running layer checks in one spawned interpreter, never in a fork of the caller.

A check applies a layer irreversibly and looks for its effect, so it must run in a
process of its own. A caller that runs other threads is never forked (a fork of a threaded
process holds whatever locks they held): `run_checks` spawns one fresh interpreter
(``python -I -S``, importing only this package's layer modules), which is single-threaded
and forks one child per check there, all at once, and writes back each child's verdict.
A caller with one thread forks the children itself, the same way: the spawned
interpreter's start (its imports) would double the probe's time for nothing.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from sandbox.layers._syscall import Verdict

# The directory that holds the ``sandbox`` package (this file is sandbox/layers/_checks.py).
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The packages' own __init__ modules are left out (empty packages stand in for them): they
# import the caller's side (the Sandbox class, bubblewrap's probe), which would double this
# interpreter's start, and the checks need only their layer modules.
_BOOT = """
import sys, types
for name in ("sandbox", "sandbox.layers"):
    package = types.ModuleType(name)
    package.__path__ = [sys.argv[2] + "/" + name.replace(".", "/")]
    sys.modules[name] = package
sys.path[:0] = sys.argv[3:]
from sandbox.layers._checks import serve
serve(sys.argv[1])
"""

#: The longest reason a check's child sends back (one pipe write, never blocking).
_WHY_LIMIT = 1000

#: Seconds the checks may take in all before the interpreter running them is killed.
TIMEOUT = 30.0


@dataclass(frozen=True)
class Check:
    """One layer check: ``module.function(*args)`` run in a child of its own, holding when
    it returns True.

    Attributes:
        module: the importable module the function is defined in, e.g.
            ``"sandbox.layers.seccomp"``.
        function: the module-level function's name.
        args: plain JSON values (paths, numbers, lists of them).
    """

    module: str
    function: str
    args: tuple[object, ...] = ()


def run_checks(checks: Sequence[Check | Verdict], *, path: Sequence[str] = ()) -> list[Verdict]:
    """The verdict of each check, in order, each run in a child of its own, all at once:
    children of one spawned interpreter when this process runs other threads, else its
    own. A verdict given in place of a check (one known without running anything) is
    passed through.

    ``path`` names directories the spawned interpreter imports the checks' modules from
    besides this package's own (a process with one thread imports them from its own
    ``sys.path``). A check that raises does not hold, and its verdict carries the
    exception (``"PermissionError(13, ...)"``), as it carries a check that answered False
    or a child that died.

    Raises:
        OSError: a fork failed (e.g. EAGAIN under a process limit), or the interpreter
            could not be started, or failed or timed out without verdicts (that says
            nothing of the layers, so it is not a verdict).
    """
    to_run = [check for check in checks if isinstance(check, Check)]
    if not to_run:
        ran: Iterator[Verdict] = iter([])
    elif _threads() > 1:
        ran = iter(_spawn(to_run, path))
    else:
        ran = iter(_in_children(to_run))
    return [next(ran) if isinstance(check, Check) else check for check in checks]


def _spawn(checks: list[Check], path: Sequence[str]) -> list[Verdict]:
    spec = json.dumps([[check.module, check.function, list(check.args)] for check in checks])
    argv = [sys.executable, "-I", "-S", "-c", _BOOT, spec, _PACKAGE_PARENT, *path]
    # Imported here: the spawned interpreter imports this module too, and needs no
    # subprocess. subprocess starts the interpreter with vfork/exec (or posix_spawn), not a
    # fork of this (possibly threaded) process that would run Python code.
    import subprocess

    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise OSError(f"the layer checks took longer than {TIMEOUT} s") from exc
    try:
        answers = json.loads(done.stdout)
    except ValueError:
        answers = None
    if done.returncode != 0 or not isinstance(answers, list) or len(answers) != len(checks):
        stderr = done.stderr.decode(errors="replace").strip()[-_WHY_LIMIT:]
        raise OSError(f"the layer checks' interpreter exited with {done.returncode}: {stderr}")
    return [Verdict(bool(held), str(why)) for held, why in answers]


def _threads() -> int:
    # /proc counts threads started outside Python too (a C library's pool).
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _in_children(checks: list[Check]) -> list[Verdict]:
    children: list[tuple[int, int]] = []
    try:
        for check in checks:
            children.append(_start(check.module, check.function, list(check.args)))
    except BaseException:
        # A fork failed: the children already started are still waited for (no zombie).
        for pid, read_end in children:
            _verdict(pid, read_end)
        raise
    return [_verdict(pid, read_end) for pid, read_end in children]


def serve(spec: str) -> None:  # pragma: no cover - runs in the spawned interpreter
    """The spawned side: fork one child per check of ``spec`` (JSON ``[[module, function,
    args], ...]``), then write ``[[held, why], ...]`` as JSON on stdout."""
    checks = [Check(module, function, tuple(args)) for module, function, args in json.loads(spec)]
    verdicts = _in_children(checks)
    sys.stdout.write(json.dumps([[verdict.held, verdict.why] for verdict in verdicts]))
    sys.stdout.flush()


def _start(module: str, function: str, args: list[object]) -> tuple[int, int]:
    # Called only in a process that runs no other thread: forking it is safe.
    check = getattr(importlib.import_module(module), function)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        status, why = 1, "the check ran but the layer's effect was not seen"
        try:
            os.close(read_end)
            # What the check leaves running must not hold this interpreter's output open.
            quiet = os.open(os.devnull, os.O_WRONLY)
            os.dup2(quiet, 1)
            os.dup2(quiet, 2)
            if check(*args):
                status, why = 0, ""
        except BaseException as exc:
            why = repr(exc)
        finally:
            try:
                os.write(write_end, why.encode(errors="replace")[:_WHY_LIMIT])
            finally:
                os._exit(status)
    os.close(write_end)
    return pid, read_end


def _verdict(pid: int, read_end: int) -> Verdict:
    try:
        _, status = os.waitpid(pid, 0)
        # The child wrote (at most one pipe buffer) before it exited; processes the check
        # left running may still hold the write end, so read what is there, never to EOF.
        os.set_blocking(read_end, False)
        try:
            why = os.read(read_end, _WHY_LIMIT).decode(errors="replace")
        except BlockingIOError:
            why = ""
    finally:
        os.close(read_end)
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        return Verdict(True)
    if code < 0:
        why = f"the check's child was killed by signal {-code}"
    return Verdict(False, why or f"the check's child exited with status {code}")
