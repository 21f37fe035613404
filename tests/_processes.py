"""Finding processes a test started, by a random marker in their environment."""

from __future__ import annotations

import os
import time


def marked_processes(marker: str) -> list[int]:
    """Pids (other than this one) whose environment (``/proc/PID/environ``) holds
    ``marker``. Zombies have an empty environment, so only live processes count."""
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
    return found


def wait_for_processes(marker: str, count: int, deadline: float = 5.0) -> list[int]:
    """Wait until at least ``count`` marked processes exist; returns them (maybe fewer when
    the deadline passed)."""
    end = time.monotonic() + deadline
    while True:
        found = marked_processes(marker)
        if len(found) >= count or time.monotonic() > end:
            return found
        time.sleep(0.02)


def survivors(marker: str, deadline: float = 2.0) -> list[int]:
    """Marked processes still alive once ``deadline`` seconds passed without them all
    going away: the empty list when none survived."""
    end = time.monotonic() + deadline
    while True:
        found = marked_processes(marker)
        if not found or time.monotonic() > end:
            return found
        time.sleep(0.02)
