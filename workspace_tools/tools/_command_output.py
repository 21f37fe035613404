"""What the model reads of a command's output: head and tail of each stream, and updates."""

from __future__ import annotations

import codecs
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from sandbox import CapturedOutput, Sandbox
from sandbox.layers import NETWORK_OFF, PROCESS_CAP

T = TypeVar("T")

#: Bytes of each stream's head and tail the model reads; both streams together stay well
#: inside the default 50,000-character result limit.
HEAD_BYTES = 7_000
TAIL_BYTES = 7_000

#: Most new output one progress update carries; the rest of a burst is counted, not sent.
UPDATE_BYTES = 64 * 1024

#: Seconds between progress updates while output keeps coming.
UPDATE_INTERVAL = 0.1


def model_view(captured: CapturedOutput, name: str) -> tuple[str, bool]:
    """``(text, truncated)``: the stream whole when it fits, else its head, a marker with
    the count of bytes left out, and its tail. Cuts never split a UTF-8 sequence."""
    if not captured.total_bytes:
        return "", False  # the usual stderr, and a quiet command's stdout
    parts = _kept(captured)
    if len(parts) == 1:
        return _decode(parts[0]), False
    head, tail = parts
    left_out = captured.total_bytes - len(head) - len(tail)
    marker = f"\n[... {left_out:,} of {captured.total_bytes:,} bytes of {name} left out ...]\n"
    return _decode(head) + marker + _decode(tail), True


def not_utf8(captured: CapturedOutput) -> bool:
    """Whether what the model reads of the stream (:func:`model_view`) holds bytes that are
    not UTF-8, which it shows as U+FFFD."""
    for part in _kept(captured) if captured.total_bytes else ():
        try:
            part.decode("utf-8")
        except UnicodeDecodeError:
            return True
    return False


def not_utf8_note(names: list[str]) -> str:
    """What the model reads when the streams ``names`` printed bytes that are not UTF-8."""
    which = " and ".join(names)
    return (
        f"The {which} held bytes that are not UTF-8, shown here as \ufffd; pipe it through "
        "`od -c` or `xxd` to see them as they are"
    )


def _kept(captured: CapturedOutput) -> tuple[bytes] | tuple[bytes, bytes]:
    """The bytes of a stream the model reads: all of it, or its head and tail."""
    if captured.omitted_bytes == 0:
        whole = captured.complete
        if len(whole) <= HEAD_BYTES + TAIL_BYTES:
            return (whole,)
        head, tail = whole[:HEAD_BYTES], whole[-TAIL_BYTES:]
    else:
        head, tail = captured.head[:HEAD_BYTES], captured.tail[-TAIL_BYTES:]
    return _trim_head(head), _trim_tail(tail)


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _trim_head(head: bytes) -> bytes:
    """Drop a UTF-8 sequence cut short at the end."""
    for back in range(1, min(4, len(head)) + 1):
        byte = head[-back]
        if byte < 0x80:
            return head
        if byte >= 0xC0:
            needed = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return head if back >= needed else head[:-back]
    return head


def _trim_tail(tail: bytes) -> bytes:
    """Drop continuation bytes whose lead byte was cut off at the start."""
    start = 0
    while start < min(3, len(tail)) and 0x80 <= tail[start] < 0xC0:
        start += 1
    return tail[start:]


class ProgressBatcher:
    """Collects output chunks and hands them to ``emit`` in batches, so that a chatty
    command makes a few updates a second rather than one per read.

    ``emit(content, details)`` receives the new text (both streams in arrival order) and
    ``{"stdout_bytes": n, "stderr_bytes": m}`` so far.
    """

    def __init__(self, emit: Callable[[Any, Any], None]) -> None:
        self._emit = emit
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self._pending_bytes = 0
        self._skipped = 0
        self._totals = {"stdout": 0, "stderr": 0}
        self._decoders = {
            name: codecs.getincrementaldecoder("utf-8")(errors="replace") for name in self._totals
        }

    def feed(self, stream: str, chunk: bytes) -> None:
        """Account for a chunk of ``stream``; keeps at most ``UPDATE_BYTES`` pending."""
        with self._lock:
            self._totals[stream] += len(chunk)
            room = UPDATE_BYTES - self._pending_bytes
            if room <= 0:
                self._skipped += len(chunk)
                return
            kept = chunk[:room]
            self._skipped += len(chunk) - len(kept)
            self._pending_bytes += len(kept)
            self._pending.append(self._decoders[stream].decode(kept))

    def flush(self) -> None:
        """Emit what arrived since the last flush, if anything did."""
        with self._lock:
            if not self._pending and not self._skipped:
                return
            text = "".join(self._pending)
            if self._skipped:
                text += f"\n[... {self._skipped:,} bytes not shown in progress ...]\n"
            self._pending, self._pending_bytes, self._skipped = [], 0, 0
            totals = {f"{name}_bytes": count for name, count in self._totals.items()}
        self._emit(text, totals)

    async def flushing(self, run: Callable[[], Awaitable[T]]) -> T:
        """What ``run()`` returns, flushing every :data:`UPDATE_INTERVAL` seconds while it
        runs and once when it is done."""

        async def flush_periodically() -> None:
            while True:
                await anyio.sleep(UPDATE_INTERVAL)
                self.flush()

        async with anyio.create_task_group() as group:
            group.start_soon(flush_periodically)
            try:
                outcome = await run()
            finally:
                group.cancel_scope.cancel()
        self.flush()
        return outcome


def stopped_note(count: int, names: tuple[str, ...]) -> str:
    """What the model reads when ``count`` (> 0) processes, with program ``names`` (a few
    of them), were still running when the command ended and were stopped."""
    which = f" ({', '.join(names)})" if names else ""
    if count == 1:
        what = f"1 background process{which} was"
    else:
        what = f"{count} background processes{which} were"
    return (
        f"{what} still running when the command ended and "
        f"{'was' if count == 1 else 'were'} stopped; start long-running servers or "
        "watchers with start_process where it is offered"
    )


#: What commands print when a host name does not resolve or no route leads out, as they
#: do in a sandbox with the network off.
_OFFLINE_SIGNS = (
    "Could not resolve host",  # curl, git
    "unable to resolve host address",  # wget
    "Temporary failure in name resolution",  # glibc's EAI_AGAIN: Python, pip, apt
    "Name or service not known",  # glibc's EAI_NONAME
    "No address associated with hostname",
    "getaddrinfo ENOTFOUND",  # Node, npm
    "getaddrinfo EAI_AGAIN",
    "Network is unreachable",  # ENETUNREACH
    "Couldn't connect to server",  # curl
    "Failed to establish a new connection",  # urllib3: requests, pip
    "<urlopen error",  # Python's urllib
    "connect EACCES",  # Node, where socket() is refused
)
#: What commands print when they cannot start another process or thread (EAGAIN from
#: fork, clone or pthread_create), as under a sandbox's cap on processes.
_NO_PROCESS_SIGNS = (
    "fork: retry: Resource temporarily unavailable",  # bash, while it retries
    "fork: Resource temporarily unavailable",  # bash, when it gives up
    "Cannot fork",  # dash
    "can't fork",  # busybox
    "[Errno 11] Resource temporarily unavailable",  # Python's fork and subprocess
    "can't start new thread",  # Python
    "spawn EAGAIN",  # Node
)


def sandbox_note(
    box: Sandbox | None, exit_code: int | None, *output: str, refused_forks: int = 0
) -> str | None:
    """What the model reads when a command in the sandbox ``box`` met one of its
    protections: the cap on processes refused ``refused_forks`` forks (the kernel's count,
    :attr:`~sandbox.spawn._process.ProcessResult.refused_forks`: said whatever the exit
    code, since output sent to ``/dev/null`` shows nothing of it), or a command that failed
    (``exit_code`` not 0: ``None`` for a timeout) printed what such a protection makes
    commands print: the network is off (a name did not resolve, no route led out), or a
    fork failed under the cap. ``None`` when it ran in no sandbox, or neither the count nor
    its output (``output``: the streams as the model reads them) shows one. Only a
    protection the sandbox really enforces (:attr:`Sandbox.capabilities`) is named."""
    if box is None:
        return None
    confinement = box.confinement
    cap = confinement.max_processes
    if refused_forks and cap is not None:
        return _capped(cap, refused_forks)
    if exit_code == 0:
        return None
    offline = not confinement.network and _shows(_OFFLINE_SIGNS, output)
    if offline and NETWORK_OFF in box.capabilities:
        return (
            "The network is off in this command's sandbox (Sandbox(network=False)): host "
            "names do not resolve and connections fail, so nothing here can download or "
            "reach a server"
        )
    if cap is not None and _shows(_NO_PROCESS_SIGNS, output) and PROCESS_CAP in box.capabilities:
        return _capped(cap, 0)
    return None


def _capped(cap: int, refused: int) -> str:
    # ``refused`` 0: only the output tells that a fork failed, not how often.
    if refused == 1:
        how = "1 attempt to start another was refused"
    elif refused:
        how = f"{refused:,} attempts to start more were refused"
    else:
        how = "a command that starts more cannot fork past that"
    return (
        f"This command's sandbox allows {cap} processes and threads at once "
        f"(Sandbox(max_processes={cap})): {how}; run fewer at once (make -j2, fewer workers)"
    )


def _shows(signs: tuple[str, ...], output: tuple[str, ...]) -> bool:
    return any(sign in text for text in output for sign in signs)
