"""Bounded capture of an output stream: its head and its tail, and a count of the rest."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CapturedOutput:
    """What was kept of one output stream.

    Attributes:
        head: the first bytes, up to half the cap.
        tail: the last bytes after ``head``, up to half the cap.
        total_bytes: every byte the stream carried.
    """

    head: bytes
    tail: bytes
    total_bytes: int

    @property
    def omitted_bytes(self) -> int:
        """Bytes between ``head`` and ``tail`` that were counted but not kept."""
        return self.total_bytes - len(self.head) - len(self.tail)

    @property
    def complete(self) -> bytes:
        """Head and tail joined; the whole stream when nothing was omitted."""
        return self.head + self.tail


#: A stream that carried nothing (frozen: one shared by every such stream).
NOTHING_CAPTURED = CapturedOutput(b"", b"", 0)


class OutputBuffer:
    """Keeps at most ``cap`` bytes of a stream (half head, half tail) however much arrives.

    Args:
        cap: bytes kept in all; memory stays bounded by it.
    """

    def __init__(self, cap: int) -> None:
        self._head_cap = cap - cap // 2
        self._tail_cap = cap // 2
        self._head = bytearray()
        self._tail = bytearray()
        self._total = 0

    def feed(self, chunk: bytes) -> None:
        """Account for ``chunk``, keeping what fits in the head and the latest tail."""
        self._total += len(chunk)
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if not chunk or self._tail_cap == 0:
            return
        self._tail += chunk[-self._tail_cap :]
        excess = len(self._tail) - self._tail_cap
        if excess > 0:
            del self._tail[:excess]

    def snapshot(self) -> CapturedOutput:
        """The kept bytes and the total so far."""
        if not self._total:
            return NOTHING_CAPTURED
        return CapturedOutput(bytes(self._head), bytes(self._tail), self._total)
