"""The spawn server and the per-command supervisor (run in a clean, single-threaded
interpreter started by :mod:`sandbox.spawn._client`).

The server forks supervisors and hands the caller a socket to each; the caller sends jobs
straight to an idle one, which serves them one after another. Forking from this small
single-threaded process avoids fork-with-threads hazards in the caller, and reusing
supervisors keeps forks off a job's path. Each supervisor is a child subreaper (Linux): it
starts the command in a new session, reports its exit, and on request (or when the caller
goes away) stops every process the command left behind.

The messages (:mod:`sandbox.spawn._jobs`): the caller asks the server for a supervisor
(``WantSupervisor``) and gets the caller's end of a socket to it (``SupervisorReady``);
it sends ``CommandJob``s straight to that supervisor, with the stdout and stderr write
ends attached. The supervisor closes its copies once the command started; the caller keeps
its own until the command's exit is reported (``CommandExited`` or ``TreeDone``), so that
the pipes end only after that message, and closes them then: a command that ends with
nothing left behind wakes the caller once ("done", and the pipes at their end as soon as
it closes them), not twice (end of file, then "done", or "done", then the end of file
of the supervisor's copies). ``StopTree`` asks it to stop the tree; end of file stops the
tree at once and ends the supervisor.

The server also forks the warm workers of Python calls (``WantCallWorker``): such a
worker takes the caller's ``sys.path`` and working directory, sets itself up, imports the
modules the calls name and serves them as ``sandbox.spawn._call_worker`` says; it is the
caller's to stop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import gc
import os
import select
import shutil
import signal
import socket
import sys
import time
from collections.abc import Mapping

from sandbox._limits import apply_rlimits
from sandbox.spawn._jobs import (
    CallWorkerReady,
    CommandExited,
    CommandJob,
    Message,
    Rlimits,
    StartFailed,
    StillRunning,
    StopTree,
    SupervisorReady,
    TreeDone,
    WantCallWorker,
)
from sandbox.spawn._tree import (
    CHILD_SIGMASK,
    NAMES_REPORTED,
    become_subreaper,
    child_ends,
    descendants,
    preload,
    program_names,
    read_report,
    read_start_failure,
    reap,
    stop_tree,
)
from sandbox.spawn._wire import RECEIVED_CLOEXEC, Channel

_RESET_SIGNALS = {signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE}

_STILL_RUNNING = StillRunning()


def serve(fd: int) -> None:
    """Serve the caller on socket ``fd`` until it closes it: each message asks for one idle
    supervisor (or warm worker of calls), whose socket end goes back attached to the reply."""
    server = Channel(socket.socket(fileno=fd))
    # Supervisors are reaped by the kernel; the server never waits for them.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    preload()
    # Supervisors are short-lived forks: a frozen heap and no collector keep their pages
    # shared with the server instead of copied on first touch.
    gc.freeze()
    gc.disable()
    while True:
        try:
            message = server.receive()
        except OSError:
            return
        if message is None:
            return
        if isinstance(message, WantCallWorker):
            if not _fork_call_worker(server, message):
                return
            continue
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            pid = os.fork()
        except OSError as exc:
            ours.close()
            theirs.close()
            if not _refuse(server, exc):
                return
            continue
        if pid == 0:
            server.close()
            ours.close()
            code = 1
            try:
                code = _idle(Channel(theirs))
            finally:
                os._exit(code)
        theirs.close()
        try:
            server.send(SupervisorReady(), [ours.fileno()])
        except OSError:
            return
        finally:
            ours.close()


def _refuse(server: Channel, exc: OSError) -> bool:
    """Tell the caller no process could be forked for it (the process limit reached, or
    memory short: ``exc``), and serve on; False when the caller is gone."""
    try:
        server.send(StartFailed(exc.strerror or str(exc), refused=True))
    except OSError:
        return False
    return True


def _fork_call_worker(server: Channel, want: WantCallWorker) -> bool:
    """Fork a warm worker of calls and send the caller its socket (and a pidfd of it:
    this server reaps it, so the caller cannot wait for it). False when the caller is gone."""
    # Imported on the first call worker, before the fork: a server that only starts
    # commands never loads the calls' side, and every later worker shares this import.
    from sandbox.spawn._call_worker import serve_calls

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        pid = os.fork()
    except OSError as exc:
        ours.close()
        theirs.close()
        return _refuse(server, exc)
    if pid == 0:
        try:
            server.close()
            ours.close()
            serve_calls(want.setup, want.preload, want.kept, theirs)
        finally:
            os._exit(1)
    theirs.close()
    fds = [ours.detach()]
    with contextlib.suppress(AttributeError, OSError):  # else the caller signals the pid
        fds.append(os.pidfd_open(pid))
    try:
        server.send(CallWorkerReady(pid), fds)
    except OSError:
        return False
    finally:
        for fd in fds:
            os.close(fd)
    return True


def _idle(channel: Channel) -> int:
    """Serve jobs one after another until the caller hangs up. Limits are applied to this
    supervisor on the first job (a limit, once lowered, cannot be raised): a later job
    asking for other limits is refused, so callers pool supervisors by limits."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    become_subreaper()
    wake_r = child_ends()
    # Commands inherit stdin from here: /dev/null, opened once rather than per command.
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    applied: tuple[Rlimits, int | None] | None = None
    env: Mapping[str, str] = {}
    while True:
        try:
            # A blocking read, not select: the caller's read of our last reply wakes this
            # read for nothing (a socket's freed space wakes every sleeper on it), and that
            # wake-up moves this process onto the caller's CPU, so that the next job's
            # wake-up is a switch there rather than a cross-CPU one (select, which sleeps
            # through it, measured 40 us a command slower back to back).
            job = channel.receive()
        except (OSError, ValueError):
            return 0
        if job is None:
            return 0
        if not isinstance(job, CommandJob):
            continue  # a stop request that crossed the last job's "done": that job is over
        if job.env is not None:
            env = job.env
        fds = channel.take_fds(2)
        if not RECEIVED_CLOEXEC:
            for fd in fds:
                os.set_inheritable(fd, False)
        limits = job.limits
        if applied is None:
            applied = limits
            _apply_limits(job)
        if len(fds) != 2 or limits != applied:
            for fd in fds:
                os.close(fd)
            _send(channel, StartFailed("this supervisor runs other limits, or got no pipes"))
            continue
        if not _supervise(channel, job, env, fds[0], fds[1], wake_r):
            return 0


def _apply_limits(job: CommandJob) -> None:
    limits: list[tuple[str, int]] = list(job.rlimits)
    if job.memory_bytes:
        limits.append(("RLIMIT_AS", job.memory_bytes))
    apply_rlimits(limits)


def _supervise(
    channel: Channel, job: CommandJob, env: Mapping[str, str], out_fd: int, err_fd: int, wake_r: int
) -> bool:
    """Run one job, with the environment ``env``, to its end. Returns False when the
    caller hung up."""
    pipes = [out_fd, err_fd]
    report: list[int] = []
    try:
        try:
            pid = _start(job, env, out_fd, err_fd, report)
        except Exception as exc:
            if isinstance(exc, OSError) and exc.errno in _NO_PROCESS:
                # The command is fine; no process could be made for it: a limit, for now.
                _send(channel, StartFailed(exc.strerror or str(exc), refused=True))
            else:
                _send(channel, StartFailed(f"cannot start {job.argv[0]!r}: {exc}"))
            return True
        _close_all(pipes)  # the command has its copies, the caller its own (see above)
        # With a report, what is left after the command's exit is the namespace's own
        # process and what its end is killing: the report tells what the command left.
        done, caller_gone = _wait(
            channel, pid, wake_r, count_left=not report, quiet_seconds=job.quiet_seconds
        )
        if job.set_aside:
            # Here, not by the caller after the result: a caller killed meanwhile (SIGTERM
            # from an MCP client, the OOM killer) would leave what the command planted.
            from sandbox._defaults import set_aside

            set_aside(job.set_aside)
        if report:
            # The tree is gone, so the report is complete: every writer has exited.
            data = _read_available(report[0])
            not_started = read_start_failure(data)
            if not_started is not None:
                # As _start's failure says it where no shell stands between: nothing ran.
                program, error = not_started
                _close_all(report)
                _send(channel, StartFailed(f"cannot start {program!r}: {error}"))
                return not caller_gone
            stopped, names = read_report(data)
            done = dataclasses.replace(done, stopped=stopped, stopped_names=names)
            _close_all(report)  # before "done": the caller may count descriptors then
        _send(channel, done)
    finally:
        _close_all(pipes)
        _close_all(report)
    return not caller_gone


#: What fork or posix_spawn fail with when the system starts no new process for now: the
#: limit on processes (EAGAIN) or memory (ENOMEM).
_NO_PROCESS = frozenset({errno.EAGAIN, errno.ENOMEM})


def _close_all(fds: list[int]) -> None:
    """Close ``fds`` and empty the list, so that a second call closes nothing."""
    for fd in fds:
        os.close(fd)
    fds.clear()


def _start(
    job: CommandJob, env: Mapping[str, str], out_fd: int, err_fd: int, report: list[int]
) -> int:
    """Start the command in a new session with /dev/null stdin, limits and confinement.
    With ``job.report_fd``, the read end of a pipe the command's tree reports on is
    appended to ``report`` (the caller closes it).

    Limits (see :func:`_idle`) and the working directory are set on this supervisor and
    inherited: it runs nothing else, and ``posix_spawn`` (vfork-fast) can set neither.
    """
    os.chdir(job.cwd or "/")
    remap = [(1, out_fd), (2, err_fd)]
    ours: list[int] = []  # the child's copies, closed here once it started
    try:
        if job.seccomp_fd is not None:
            ours.append(_filter_pipe(network_off=not job.confinement.network))
            remap.append((job.seccomp_fd, ours[-1]))
        if job.report_fd is not None:
            report_r, report_w = os.pipe()
            os.set_blocking(report_r, False)
            report.append(report_r)
            ours.append(report_w)
            remap.append((job.report_fd, report_w))
        return _spawn(job, env, remap)
    finally:
        _close_all(ours)  # this supervisor runs more jobs


def _spawn(job: CommandJob, env: Mapping[str, str], remap: list[tuple[int, int]]) -> int:
    argv = job.argv
    if job.forks:
        return _fork_exec(job, env, remap)
    path = argv[0]
    if not path.startswith("/"):
        path = shutil.which(path, path=env.get("PATH", os.defpath)) or path
    for target, fd in remap:
        if target == fd:
            os.set_inheritable(fd, True)  # dup2 onto itself would keep close-on-exec
    return os.posix_spawn(
        path,
        argv,
        env,
        # stdin is this supervisor's, /dev/null (see _idle).
        file_actions=[(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in remap],
        setsid=True,
        setsigmask=CHILD_SIGMASK,
        setsigdef=_RESET_SIGNALS,
    )


def _filter_pipe(network_off: bool) -> int:
    from sandbox.layers._plan import seccomp_filter

    program = seccomp_filter(network_off)
    read_end, write_end = os.pipe()
    os.write(write_end, program)  # a few hundred bytes: fits in the pipe buffer
    os.close(write_end)
    return read_end


def _fork_exec(job: CommandJob, env: Mapping[str, str], remap: list[tuple[int, int]]) -> int:
    """Fork, let the child confine itself (Landlock, seccomp and cgroups act on the calling
    process), then exec. A failure in the child is reported through a close-on-exec pipe."""
    from sandbox.layers._plan import apply_child_layers

    report_r, report_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            for sig in _RESET_SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
            signal.set_wakeup_fd(-1)
            signal.pthread_sigmask(signal.SIG_SETMASK, CHILD_SIGMASK)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            for target, fd in remap:
                os.dup2(fd, target)
            apply_child_layers(job.layers, job.confinement, job.cgroup)
            # Found as _spawn finds it, so that a failure names the same path.
            path = job.argv[0]
            if "/" not in path:
                path = shutil.which(path, path=env.get("PATH", os.defpath)) or path
            os.execve(path, job.argv, dict(env))
        except BaseException as exc:
            os.write(report_w, str(exc).encode(errors="replace"))
        finally:
            os._exit(127)
    os.close(report_w)
    failure = _read_all(report_r)
    if failure:
        os.waitpid(pid, 0)
        raise OSError(failure.decode(errors="replace"))
    return pid


def _wait(
    channel: Channel,
    pid: int,
    wake_r: int,
    *,
    count_left: bool,
    quiet_seconds: float | None = None,
) -> tuple[TreeDone, bool]:
    """Report the command's exit; stop the tree when asked, or at once when the exit left
    no process behind; and, with ``quiet_seconds``, that the command still runs that long
    after it started (once: its caller, waiting for the channel alone until then, watches
    its output and its timeout from then on). Returns the "done" to send (the command's
    wait status unless an "exit" carried it, and, when ``count_left``, what was stopped
    after the command exited) and whether the caller hung up."""
    main_status: int | None = None
    channel_fd = channel.fileno()
    quiet_until = None if quiet_seconds is None else time.monotonic() + quiet_seconds
    while True:
        request = channel.poll()
        if request is not None:
            readable = [channel_fd]
        elif quiet_until is None:
            readable = select.select([channel_fd, wake_r], [], [])[0]
        else:
            left = max(0.0, quiet_until - time.monotonic())
            readable = select.select([channel_fd, wake_r], [], [], left)[0]
            if not readable:
                quiet_until = None
                _send(channel, _STILL_RUNNING)
                continue
        if wake_r in readable:
            _drain(wake_r)
            status, empty = reap(pid)
            if empty:
                # The "done" that follows carries the exit: one message, one wake-up.
                return TreeDone(main_status if status is None else status), False
            if status is not None and main_status is None:
                main_status = status
                quiet_until = None  # the caller wakes for this message
                _send(channel, CommandExited(status))
        if channel_fd in readable:
            caller_gone = False
            while request is None and not caller_gone:
                try:
                    caller_gone = not channel.fill()
                except OSError:
                    caller_gone = True
                request = channel.poll()
            grace = request.grace if isinstance(request, StopTree) else 0.0
            # What the command left running is counted before it is stopped, so that the
            # caller can tell the model its background processes did not survive.
            left = (
                descendants(os.getpid(), exiting=False)
                if main_status is not None and count_left
                else []
            )
            names = program_names(left, NAMES_REPORTED)
            status = stop_tree(pid, grace, wake_r)
            if main_status is None and status is not None:
                main_status = status
                _send(channel, CommandExited(status))
            return TreeDone(main_status, len(left), names), caller_gone


def _send(channel: Channel, message: Message) -> None:
    # try rather than contextlib.suppress: this is on every command's path, where each
    # call of Python costs (its code is cold after the command ran).
    try:
        channel.send(message)
    except OSError:
        return  # the caller may have gone away; the tree is stopped all the same


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _read_available(fd: int) -> bytes:
    """What can be read from the non-blocking ``fd`` now, up to end of file."""
    chunks = []
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    return b"".join(chunks)


def _drain(fd: int) -> None:
    # A signalfd gives a record per pending signal, a wakeup pipe a byte: one read takes
    # all a wake-up can have.
    try:
        os.read(fd, 4096)
    except BlockingIOError:
        return  # another wake-up took them


if __name__ == "__main__":
    serve(int(sys.argv[1]))
