"""Finding and stopping every process a child started, detached ones included.

On Linux the supervisor is a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``, see
prctl(2)): a process whose parent dies is reparented to it instead of to PID 1, so every
descendant stays in its tree until reaped. Elsewhere only the child's process group can be
reached.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import select
import signal
import sys
import time
from collections.abc import Iterator

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
PR_SET_PDEATHSIG = 1  # linux/prctl.h

#: ``PF_EXITING`` (linux/sched.h) in a process's flags, the 9th field of /proc/PID/stat.
_PF_EXITING = 0x4
#: The index of the flags among the fields after the command name's closing parenthesis.
_FLAGS = 6

#: Program names reported at most, of the processes a command left running.
NAMES_REPORTED = 3

#: The descriptor a command's PID namespace reports what the command left running on.
REPORT_FD = 4

#: The line before a report (what the shell itself says on REPORT_FD comes before it).
_MARKER = "--stopped--"

#: The line before the reporting shell's word that the command could not be started.
_NOT_STARTED = "--not-started--"

#: Processes the reporting shell adds to a command's tree (itself), to be added to a cap
#: on processes so that the command has as many as it would without it.
REPORTER_PROCESSES = 1

# In a PID namespace of its own (bubblewrap's), the processes a command left running die
# with it, killed by the kernel as the namespace's first process exits: no supervisor
# outside sees them. This shell runs the command as its child instead, and once it exited
# lists the namespace's other live processes (all but its init, pid 1, and this shell;
# neither zombies nor processes already exiting, PF_EXITING, as the supervisor counts)
# from /proc, then writes their count and the distinct names (/proc/PID/comm) of a few to
# REPORT_FD after a marker line and exits with the command's status. Its own stderr is
# REPORT_FD too (a shell reports a child killed by a signal there; /dev/null may be closed
# to writing), the command's is the original one (fd 5 meanwhile); the command inherits
# neither REPORT_FD nor fd 5.
# First it finds the program as the supervisor does without this shell (shutil.which with
# the command's PATH, then posix_spawn): a program that is missing, a directory, not a
# regular file or not executable is reported on REPORT_FD after another marker (errno,
# then argv[0] and the path, each ending in NUL) and nothing runs, so that the caller
# raises the error the supervisor raises elsewhere, not this shell's own message.
_REPORTER = """exec 5>&2 2>&{fd}
p=$1
case $p in
*/*) ;;
*)
  set -f
  IFS=:
  for d in ${{PATH-{defpath}}}; do
    f=${{d:+$d/}}$1
    if [ -e "$f" ] && [ -x "$f" ] && [ ! -d "$f" ]; then p=$f; break; fi
  done
  unset IFS
  set +f
  ;;
esac
e=
if [ ! -e "$p" ]; then
  e=2
  case $p in */?*) [ -e "${{p%/*}}" ] && [ ! -d "${{p%/*}}" ] && e=20 ;; esac
elif [ ! -f "$p" ] || [ ! -x "$p" ]; then
  e=13
fi
if [ -n "$e" ]; then
  printf '\\n{not_started}\\n%s\\n%s\\0%s\\0' "$e" "$1" "$p" >&{fd}
  exit 127
fi
(exec 2>&5 {fd}>&- 5>&- && exec "$@")
s=$?
n=0
k=0
names=
for d in /proc/[1-9]*; do
  case ${{d#/proc/}} in 1|$$|*[!0-9]*) continue ;; esac
  {{ read -r st <"$d/stat" && read -r c <"$d/comm"; }} || continue
  case ${{st##*) }} in Z*) continue ;; esac
  set -f
  set -- ${{st##*) }}
  set +f
  [ $(($7 & 4)) = 0 ] || continue
  n=$((n + 1))
  case "
$names" in *"
$c
"*) continue ;; esac
  [ "$k" = {most} ] || {{ k=$((k + 1)); names="$names$c
"; }}
done
[ "$n" = 0 ] || printf '\\n{marker}\\n%s\\n%s' "$n" "$names" >&{fd}
exit $s
"""


def reporting_argv() -> list[str]:
    """The argv prefix that runs a command (the argv after it) in a PID namespace of its
    own and reports on :data:`REPORT_FD` what it left running (see :func:`read_report`).

    The command's exit code comes back unchanged; a command killed by signal N gives
    128 + N, as bubblewrap reports it anyway; a program that cannot be started (missing,
    not executable) is not run and reported instead (see :func:`read_start_failure`)."""
    script = _REPORTER.format(
        fd=REPORT_FD,
        most=NAMES_REPORTED,
        marker=_MARKER,
        not_started=_NOT_STARTED,
        defpath=os.defpath,
    )
    return ["/bin/sh", "-c", script, "sh"]


def read_start_failure(data: bytes) -> tuple[str, OSError] | None:
    """``(argv[0], error)`` when :func:`reporting_argv`'s shell found that the command
    cannot be started (``error``: the ``OSError`` ``posix_spawn`` gives, e.g. ENOENT with
    the path), else ``None``."""
    _, marked, report = data.rpartition(f"\n{_NOT_STARTED}\n".encode())
    code, _, rest = report.partition(b"\n")
    fields = rest.split(b"\0")
    if not marked or not code.isdigit() or len(fields) < 3:
        return None
    number = int(code)
    path = os.fsdecode(fields[1])
    return os.fsdecode(fields[0]), OSError(number, os.strerror(number), path)


def read_report(data: bytes) -> tuple[int, tuple[str, ...]]:
    """``(count, names)`` from what :func:`reporting_argv`'s shell wrote: the number of
    processes the command left running and a few of their names; ``(0, ())`` for nothing
    or anything malformed."""
    _, marked, report = data.decode(errors="replace").rpartition(f"\n{_MARKER}\n")
    count, _, names = report.partition("\n")
    if not marked or not count.isdigit():
        return 0, ()
    return int(count), tuple(name for name in names.split("\n") if name)[:NAMES_REPORTED]


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux >= 3.4).

    Returns whether it worked; False on other systems.
    """
    if not sys.platform.startswith("linux"):
        return False
    return bool(_libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    # Loading libc costs a few milliseconds: the spawn server does it once, before forking.
    return ctypes.CDLL(None, use_errno=True)


def child_ends() -> int:
    """A non-blocking descriptor that becomes readable when a child of this process ends
    (SIGCHLD), emptied by reading it; set up once, by a process that then runs only this
    thread. Its children must start with SIGCHLD unblocked (``CHILD_SIGMASK``).

    On Linux a signalfd (signalfd(2)) with SIGCHLD blocked: the signal is taken from it
    and never delivered, so a command's end wakes the supervisor once, in ``select``,
    with no handler run in between, no interrupted call made again and no byte written
    to a pipe and read back (what Python's ``signal.set_wakeup_fd`` costs per signal).
    Elsewhere that wakeup pipe, written by a SIGCHLD handler.
    """
    if sys.platform.startswith("linux"):
        # SIGCHLD is ignored by default, and an ignored signal is discarded unless
        # blocked: a handler too, should the mask ever be lifted.
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        mask = ctypes.create_string_buffer(_SIGSET_BYTES)
        bit = signal.SIGCHLD - 1
        mask[bit // 8] = 1 << (bit % 8)
        libc = _libc()
        fd = int(libc.signalfd(-1, mask, os.O_NONBLOCK | os.O_CLOEXEC))
        if fd >= 0:
            return fd
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
    wake_r, wake_w = os.pipe()  # close-on-exec, as Python makes every descriptor
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    return wake_r


#: The signal mask a child of :func:`child_ends`' process starts with: none blocked.
CHILD_SIGMASK: frozenset[signal.Signals] = frozenset()

#: The C library's ``sigset_t``, in bytes (the kernel reads the first 8: 64 signals).
_SIGSET_BYTES = 128


def preload() -> None:
    """Do the one-time work of :func:`become_subreaper` now, in a process about to fork."""
    if sys.platform.startswith("linux"):
        _libc()


def _live_processes() -> Iterator[tuple[int, list[bytes]]]:
    """Each live (non-zombie) process, from ``/proc/<pid>/stat`` (proc(5)): its pid and
    the fields after its name (state, parent, process group, session, ...); none where
    ``/proc`` is absent. A zombie has ended: its children were handed on as it exited."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name is in parentheses and may contain spaces: split after it.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if fields[0] != b"Z":
            yield int(entry), fields


def descendants(root: int, *, exiting: bool = True) -> list[int]:
    """Live (non-zombie) descendants of ``root``, parents before children, read from
    ``/proc/<pid>/stat`` (proc(5)); an empty list where ``/proc`` is absent.

    ``exiting=False`` leaves out processes already exiting as well (``PF_EXITING`` in
    their flags: their files closed, on their way to being zombies), but not their
    children, while they are still theirs: what a command left running does not count
    what was ending by itself; a tree being stopped is signalled whole."""
    children: dict[int, list[tuple[int, bool]]] = {}
    for pid, fields in _live_processes():
        live = exiting or not int(fields[_FLAGS]) & _PF_EXITING
        children.setdefault(int(fields[1]), []).append((pid, live))
    found: list[int] = []
    queue = [root]
    while queue:
        for child, live in children.get(queue.pop(), ()):
            if live:
                found.append(child)
            queue.append(child)
    return found


def session_tree(leader: int, known: set[int]) -> set[int]:
    """The live (non-zombie) processes of the session ``leader`` leads (``leader``
    included), the members of ``known`` still alive, and every descendant of these;
    empty where ``/proc`` is absent.

    A Python call's tree, seen from outside it: the call's child leads a session and is
    the subreaper of what it starts, but once it is gone its worker adopts the orphans,
    which are no longer its descendants. They are found by their session, or, for one that
    left it (``setsid``), as a member of an earlier look (``known``)."""
    children: dict[int, list[int]] = {}
    roots: list[int] = []
    for pid, fields in _live_processes():
        children.setdefault(int(fields[1]), []).append(pid)
        if pid == leader or int(fields[3]) == leader or pid in known:
            roots.append(pid)
    found: set[int] = set()
    while roots:
        pid = roots.pop()
        if pid not in found:
            found.add(pid)
            roots.extend(children.get(pid, ()))
    return found


def program_names(pids: list[int], most: int) -> tuple[str, ...]:
    """The distinct program names (the last component of ``argv[0]``, from
    ``/proc/<pid>/cmdline``) of ``pids``, in their order, at most ``most`` of them; a
    process that is gone or shows no command line is left out."""
    names: list[str] = []
    for pid in pids:
        if len(names) >= most:
            break
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                first = f.read().split(b"\0", 1)[0]
        except OSError:
            continue
        name = os.path.basename(first.decode(errors="replace"))
        if name and name not in names:
            names.append(name)
    return tuple(names)


def reap(main_pid: int) -> tuple[int | None, bool]:
    """Reap every finished child without blocking.

    Returns ``(status of main_pid if it was reaped, whether no children remain)``.
    """
    main_status = None
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return main_status, True
        if pid == 0:
            return main_status, False
        if pid == main_pid:
            main_status = status


def signal_tree(me: int, group: int, sig: int) -> None:
    """Send ``sig`` to the process group ``group`` and to every descendant of ``me``."""
    # A group id <= 1 would address every process (kill(2)); never send to it.
    targets = descendants(me) if group <= 1 else [-group, *descendants(me)]
    for target in targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(target, sig)


def stop_tree(main_pid: int, grace: float, wakeup_fd: int) -> int | None:
    """Stop every descendant: SIGTERM (and SIGCONT, so that a stopped one acts on it) to
    each once, up to ``grace`` seconds for them to exit, then SIGKILL until none is left.
    ``wakeup_fd`` becomes readable on SIGCHLD.

    Each process is sent SIGTERM once, as it is first seen (systemd's stop does the
    same): a second one while its handler runs would start the handler again and cut its
    cleanup short.

    A subreaper with no child left has no descendant left either (orphans are reparented
    to it), so the common case of a finished command costs no ``/proc`` scan.

    Returns the main child's wait status when it was reaped here.
    """
    me = os.getpid()
    main_status, empty = reap(main_pid)
    deadline = time.monotonic() + grace
    killing = grace <= 0
    signalled: set[int] = set()
    while not empty:
        if killing:
            signal_tree(me, main_pid, signal.SIGKILL)
        else:
            fresh = [pid for pid in descendants(me) if pid not in signalled]
            if not signalled and not fresh and main_pid > 1:
                # No /proc to list the tree (not Linux): its process group, once. The group
                # is not sent to besides the list, which would signal its members twice.
                fresh = [-main_pid]
            # A stopped process acts on SIGTERM only once continued: without SIGCONT it
            # would sit out the grace and die by SIGKILL, its cleanup never run.
            for sig in (signal.SIGTERM, signal.SIGCONT):
                for target in fresh:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(target, sig)
            signalled.update(fresh)
            if time.monotonic() >= deadline:
                killing = True
                continue
        _wait_readable(wakeup_fd, 0.01 if killing else 0.05)
        status, empty = reap(main_pid)
        main_status = status if status is not None else main_status
    # Without a subreaper (not Linux) group members may have escaped the wait above.
    if main_pid > 1:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(main_pid, signal.SIGKILL)
    return main_status


def _wait_readable(fd: int, timeout: float) -> None:
    readable, _, _ = select.select([fd], [], [], timeout)
    if readable:
        with contextlib.suppress(BlockingIOError):
            os.read(fd, 4096)
