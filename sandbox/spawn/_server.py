"""The spawn server and the per-command supervisor (run in a clean, single-threaded
interpreter started by :mod:`sandbox.spawn._client`).

The server forks supervisors and hands the caller a socket to each; the caller sends jobs
straight to an idle one, which serves them one after another. Forking from this small
single-threaded process avoids fork-with-threads hazards in the caller, and reusing
supervisors keeps forks off a job's path. Each supervisor is a child subreaper (Linux): it
starts the command in a new session, reports its exit, and on request (or when the caller
goes away) stops every process the command left behind.

Wire protocol (:class:`~sandbox.spawn._wire.Channel` messages):

- caller to server: ``{"want": 1}`` asks for an idle supervisor; the reply carries the
  caller's end of a socket to it.
- caller to idle supervisor: the job spec (see :func:`_start`) with two file descriptors
  attached: the stdout and stderr write ends. A spec without ``env`` reuses the previous
  job's environment (a caller sends an unchanged one once per supervisor). The supervisor
  keeps its copies of the write ends until it reports the command's exit ("exit" or
  "done"), so the pipes end only after that message.
- supervisor to caller: ``{"error": text}`` when the command could not start (and nothing
  else for that job); ``{"exit": wait_status}`` when the command exits while other
  processes of its tree live on; ``{"done": wait_status | null}`` when no process of the
  tree is left (its status is the command's, reported here if no "exit" came first).
- caller to supervisor: ``{"stop": grace_seconds}``. End of file stops the tree at once and
  ends the supervisor.
"""

from __future__ import annotations

import contextlib
import gc
import os
import select
import shutil
import signal
import socket
import sys
from typing import Any

from sandbox._limits import apply_rlimits
from sandbox.spawn._tree import become_subreaper, preload, reap, stop_tree
from sandbox.spawn._wire import Channel

_RESET_SIGNALS = {signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE}


def serve(fd: int) -> None:
    """Serve the caller on socket ``fd`` until it closes it: each message asks for one idle
    supervisor, whose socket end goes back attached to the reply."""
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
            if server.receive() is None:
                return
        except OSError:
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        if os.fork() == 0:
            server.close()
            ours.close()
            code = 1
            try:
                code = _idle(Channel(theirs))
            finally:
                os._exit(code)
        theirs.close()
        try:
            server.send({"idle": 1}, [ours.fileno()])
        except OSError:
            return
        finally:
            ours.close()


def _idle(channel: Channel) -> int:
    """Serve jobs one after another until the caller hangs up. Limits are applied to this
    supervisor on the first job (a limit, once lowered, cannot be raised): a later job
    asking for other limits is refused, so callers pool supervisors by limits."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    become_subreaper()
    wake_r, wake_w = os.pipe()  # close-on-exec, as Python makes every descriptor
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    applied: list[Any] | None = None
    env: dict[str, str] = {}
    while True:
        try:
            spec = channel.receive()
        except OSError:
            return 0
        if spec is None:
            return 0
        if "argv" not in spec:
            continue  # a stop request that crossed the last job's "done": that job is over
        env = spec.setdefault("env", env)
        fds = channel.take_fds(2)
        for fd in fds:
            os.set_inheritable(fd, False)
        limits = [spec.get("rlimits", []), spec.get("memory_bytes")]
        if applied is None:
            applied = limits
            _apply_limits(spec)
        if len(fds) != 2 or limits != applied:
            for fd in fds:
                os.close(fd)
            _send(channel, {"error": "this supervisor runs other limits, or got no pipes"})
            continue
        if not _supervise(channel, spec, fds[0], fds[1], wake_r):
            return 0


def _apply_limits(spec: dict[str, Any]) -> None:
    limits = list(spec.get("rlimits", []))
    if spec.get("memory_bytes"):
        limits.append(["RLIMIT_AS", spec["memory_bytes"]])
    apply_rlimits(limits)


def _supervise(job: Channel, spec: dict[str, Any], out_fd: int, err_fd: int, wake_r: int) -> bool:
    """Run one job to its end. Returns False when the caller hung up."""
    pipes = [out_fd, err_fd]
    try:
        try:
            pid = _start(spec, out_fd, err_fd)
        except Exception as exc:
            _send(job, {"error": f"cannot start {spec['argv'][0]!r}: {exc}"})
            return True
        main_status, caller_gone = _wait(job, pid, wake_r, pipes)
        _send(job, {"done": main_status})
    finally:
        _close_all(pipes)
    return not caller_gone


def _close_all(fds: list[int]) -> None:
    """Close ``fds`` and empty the list, so that a second call closes nothing."""
    for fd in fds:
        os.close(fd)
    fds.clear()


def _start(spec: dict[str, Any], out_fd: int, err_fd: int) -> int:
    """Start the command in a new session with /dev/null stdin, limits and confinement.

    ``spec`` keys: ``argv``, ``cwd`` (or null), ``env``, ``rlimits`` (``[[RLIMIT_*
    name, value], ...]``), ``memory_bytes`` (or null), and for the isolation layers
    ``confinement`` (the :class:`~sandbox.layers._confinement.Confinement` fields),
    ``child_layers`` (layers the child applies to itself before exec), ``cgroup`` (a
    cgroup directory the child joins before exec) and ``seccomp_fd`` (where bubblewrap
    reads the network filter).

    Limits (see :func:`_idle`) and the working directory are set on this supervisor and
    inherited: it runs nothing else, and ``posix_spawn`` (vfork-fast) can set neither.
    """
    os.chdir(spec.get("cwd") or "/")
    remap = [(1, out_fd), (2, err_fd)]
    filter_fd = None
    if spec.get("seccomp_fd"):
        filter_fd = _filter_pipe()
        remap.append((spec["seccomp_fd"], filter_fd))
    try:
        return _spawn(spec, remap)
    finally:
        if filter_fd is not None:
            os.close(filter_fd)  # the child has its copy; this supervisor runs more jobs


def _spawn(spec: dict[str, Any], remap: list[tuple[int, int]]) -> int:
    argv, env = spec["argv"], spec["env"]
    if spec.get("child_layers") or spec.get("cgroup"):
        return _fork_exec(spec, remap)
    path = argv[0]
    if not os.path.isabs(path):
        path = shutil.which(path, path=env.get("PATH", os.defpath)) or path
    for target, fd in remap:
        if target == fd:
            os.set_inheritable(fd, True)  # dup2 onto itself would keep close-on-exec
    return os.posix_spawn(
        path,
        argv,
        env,
        file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            *((os.POSIX_SPAWN_DUP2, fd, target) for target, fd in remap),
        ],
        setsid=True,
        setsigdef=_RESET_SIGNALS,
    )


def _filter_pipe() -> int:
    from sandbox.layers._plan import seccomp_filter

    program = seccomp_filter()
    read_end, write_end = os.pipe()
    os.write(write_end, program)  # a few hundred bytes: fits in the pipe buffer
    os.close(write_end)
    return read_end


def _fork_exec(spec: dict[str, Any], remap: list[tuple[int, int]]) -> int:
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
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            for target, fd in remap:
                os.dup2(fd, target)
            apply_child_layers(
                spec.get("child_layers", []), spec.get("confinement") or {}, spec.get("cgroup")
            )
            os.execvpe(spec["argv"][0], spec["argv"], spec["env"])
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


def _wait(job: Channel, pid: int, wake_r: int, pipes: list[int]) -> tuple[int | None, bool]:
    """Report the command's exit; stop the tree when asked, or at once when the exit left
    no process behind. Returns the command's wait status and whether the caller hung up.

    This supervisor's copies of the output ``pipes`` are closed once an "exit" went out:
    until then the caller meets no end of file, so that a command that ends with nothing
    left behind wakes the caller once ("done"), not twice (end of file, then "done")."""
    main_status: int | None = None
    while True:
        request = job.poll()
        readable = [job] if request is not None else select.select([job, wake_r], [], [])[0]
        if wake_r in readable:
            _drain(wake_r)
            status, empty = reap(pid)
            if empty:
                # The "done" that follows carries the exit: one message, one wake-up.
                return main_status if status is None else status, False
            if status is not None and main_status is None:
                main_status = status
                _send(job, {"exit": status})
                _close_all(pipes)
        if job in readable:
            caller_gone = False
            while request is None and not caller_gone:
                try:
                    caller_gone = not job.fill()
                except OSError:
                    caller_gone = True
                request = job.poll()
            grace = 0.0 if caller_gone else float(request["stop"])  # type: ignore[index]
            status = stop_tree(pid, grace, wake_r)
            if main_status is None and status is not None:
                main_status = status
                _send(job, {"exit": status})
            return main_status, caller_gone


def _send(job: Channel, message: dict[str, Any]) -> None:
    # The caller may have gone away; the tree is stopped all the same.
    with contextlib.suppress(OSError):
        job.send(message)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


if __name__ == "__main__":
    serve(int(sys.argv[1]))
