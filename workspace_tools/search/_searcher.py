"""The searcher process: a fresh interpreter that searches blocks of files for grep calls,
started once per workspace and reused (the caller's side is ``_worker``).

It is started with ``python -c`` :data:`BOOT`, which imports only the search modules (the
packages' ``__init__``, which import every tool, are not run): it is ready in about 50 ms
and holds none of the caller's memory. It serves one socket, one job at a time:

* a job (:func:`encode_job`) is a length-prefixed :mod:`marshal` tuple: the job's number,
  the pattern and its flags, whether Python's engine may run (``in_process``: no), the
  limit and context, the root, and the files to search (or the one file a call named, or
  ``None``: the files of the job before), with the read end of the job's block queue
  attached (a pipe of two-byte block indices that the caller and its searchers take from
  in turn until it is empty);
* once ready, it says so: ``(0, -1, DONE, 0)``;
* for each block it takes it answers ``(job, index, status, size)`` and ``size`` bytes of
  marshal: :data:`FOUND` and the block's ``RunState``, :data:`REFUSED` and the message and
  code of a ``ToolError``, or :data:`FAILED` (the caller searches that block itself: text
  only Python's engine can search, when that was refused, or any other failure); at the
  end of the queue, ``(job, -1, DONE, 0)``.

It dies with its owner: ``PR_SET_PDEATHSIG`` ties it to the caller's thread that started it
(a thread that waits for it and lives as long as it does), and end of file on the socket
ends it too. Its address space is capped at what it holds at start plus
:data:`EXTRA_MEMORY`: a backtracking search's stack grows with the text.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import marshal
import os
import resource
import signal
import socket
import struct
import sys
from collections import OrderedDict

from workspace_tools._errors import ToolError
from workspace_tools.search._matcher import Matcher
from workspace_tools.search._reading import WHOLE_READ
from workspace_tools.search._runner import GrepRun, RunState

# Address space the searcher may add to what it holds at start.
EXTRA_MEMORY = 2 << 30
# Compiled patterns kept for jobs that repeat one.
KEPT_MATCHERS = 8
# A job's length; an answer's job, block index, status and length.
JOB_HEADER = struct.Struct("<I")
ANSWER_HEADER = struct.Struct("<IiII")
FOUND, REFUSED, FAILED, DONE = range(4)
# A job: number, (pattern, ignore_case, multiline), in_process, limit, context, root,
# files (a list of paths relative to root, (real, rel) of a file the call named, or None:
# the list of the job before), and where in the files each block starts (and the files'
# count last): block i is files[starts[i]:starts[i + 1]].
Job = tuple[int, tuple[str, bool, bool], bool, int, int, str, object, list[int]]

_PR_SET_PDEATHSIG = 1

#: ``python -c`` program of the searcher: argv is the socket's fd, the caller's pid, and
#: the directory holding the ``workspace_tools`` package. The packages are made bare
#: (a module with a path, their ``__init__`` not run): what the search modules import is
#: all the searcher needs.
BOOT = (
    "import sys, types\n"
    "for name in ('workspace_tools', 'workspace_tools.workspace'):\n"
    "    package = types.ModuleType(name)\n"
    "    package.__path__ = [sys.argv[3] + '/' + name.replace('.', '/')]\n"
    "    sys.modules[name] = package\n"
    "from workspace_tools.search._searcher import serve\n"
    "serve(int(sys.argv[1]), int(sys.argv[2]))\n"
)


def serve(fd: int, parent: int) -> None:
    """Serve jobs on socket ``fd`` until it ends; exit at once if process ``parent`` is
    gone (see the module docstring)."""
    _die_with_parent(parent)
    _cap_memory()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # What the imports made lives as long as this process: collections of the objects
    # a job makes need not go over it again.
    gc.freeze()
    channel = socket.socket(fileno=fd)
    matchers: OrderedDict[tuple[str, bool, bool], Matcher] = OrderedDict()
    buffer = bytearray(WHOLE_READ)
    files: object = None  # the file list of the last job that sent one
    try:
        send_answer(channel, 0, -1, DONE, None)  # ready
    except OSError:
        return
    while True:
        received = _receive_job(channel)
        if received is None:
            return
        job, queue = received
        if job[6] is None:
            job = (*job[:6], files, job[7])
        elif isinstance(job[6], list):
            files = job[6]
        try:
            _run_job(channel, job, queue, matchers, buffer)
        except OSError:
            return  # the caller is gone
        finally:
            os.close(queue)


def _run_job(
    channel: socket.socket,
    job: Job,
    queue: int,
    matchers: OrderedDict[tuple[str, bool, bool], Matcher],
    buffer: bytearray,
) -> None:
    number, key, in_process, limit, context, root, files, starts = job
    matcher = matchers.pop(key, None)
    if matcher is None:
        pattern, ignore_case, multiline = key
        matcher = Matcher(pattern, ignore_case=ignore_case, multiline=multiline)
    matchers[key] = matcher
    while len(matchers) > KEPT_MATCHERS:
        matchers.popitem(last=False)
    matcher.in_process = in_process
    # Readers of a pipe take turns, and a read of the two bytes of an index gets both;
    # so the blocks a process takes come in order, and what its earlier blocks kept
    # counts against the limit of the next (see GrepRun's kept_before).
    kept = 0
    while len(item := os.read(queue, 2)) == 2:
        index = int.from_bytes(item, "big")
        run = GrepRun(matcher, limit=limit, context=context, kept_before=kept)
        status: int = FOUND
        answer: object
        try:
            if isinstance(files, tuple):
                run.search_named_file(root, *files)
            else:
                run.search_files(root, files[starts[index] : starts[index + 1]], buffer)
            answer = run.state()
            kept = run.kept
        except ToolError as exc:
            status, answer = REFUSED, (exc.message, exc.code.value)
        except Exception:
            status, answer = FAILED, None
        send_answer(channel, number, index, status, answer)
    send_answer(channel, number, -1, DONE, None)


def send_answer(
    channel: socket.socket, job: int, index: int, status: int, answer: RunState | object
) -> None:
    """Send one block's answer (see the module docstring)."""
    # Plain tuples, lists, dicts, str and int: marshal writes them about twice as fast as
    # pickle (0.3 against 0.8 ms for 6,300 matching lines).
    payload = b"" if answer is None else marshal.dumps(answer)
    channel.sendall(ANSWER_HEADER.pack(job, index, status, len(payload)) + payload)


def encode_job(job: Job) -> bytes:
    """``job`` as sent (see the module docstring); its queue rides with the first bytes."""
    payload = marshal.dumps(job)
    return JOB_HEADER.pack(len(payload)) + payload


def _receive_job(channel: socket.socket) -> tuple[Job, int] | None:
    """The next job and its queue's fd; ``None`` at end of file."""
    try:
        head, fds, _, _ = socket.recv_fds(channel, JOB_HEADER.size, 1)
    except OSError:
        return None
    if not head or not fds:
        for fd in fds:
            os.close(fd)
        return None
    head += _receive_exactly(channel, JOB_HEADER.size - len(head))
    (size,) = JOB_HEADER.unpack(head)
    payload = _receive_exactly(channel, size)
    if len(payload) < size:
        os.close(fds[0])
        return None
    return marshal.loads(payload), fds[0]


def _receive_exactly(channel: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = channel.recv(min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _die_with_parent(parent: int) -> None:
    # SIGKILL when the caller's thread that started this process ends (it waits for this
    # process, so: when the caller's process ends); exit now if it is gone already.
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        sys.exit(1)


def _cap_memory() -> None:
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/statm", "rb") as statm:
            size = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        limit = size + EXTRA_MEMORY
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
