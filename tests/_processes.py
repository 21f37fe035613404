"""Finding processes a test started, by a random marker in their environment."""

from __future__ import annotations

import os

from tests._waiting import poll

#: Seconds a stopped process tree may take to be gone from ``/proc`` on a loaded host.
GONE_DEADLINE = 10.0


def marked_processes(marker: str) -> list[int]:
    """Pids (other than this one) whose environment (``/proc/PID/environ``) holds
    ``marker``, in ascending order. Zombies have an empty environment, so only live
    processes count."""
    needle = marker.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return sorted(found)


def command_line(pid: int) -> list[str]:
    """The argv of process ``pid`` (``/proc/PID/cmdline``); empty once it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [arg.decode(errors="replace") for arg in f.read().split(b"\0")[:-1]]
    except OSError:
        return []


def survivors(marker: str, deadline: float = GONE_DEADLINE) -> list[tuple[int, list[str]]]:
    """Marked processes still alive once ``deadline`` seconds passed without them all
    going away, as ``(pid, argv)``: the empty list when none survived (returned as soon as
    that holds)."""
    found = poll(lambda: marked_processes(marker), lambda pids: not pids, timeout=deadline)
    return [(pid, command_line(pid)) for pid in found]
