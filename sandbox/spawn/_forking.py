"""Forking a process that runs other threads, for a child that does only its own work."""

from __future__ import annotations

import os
import threading
import warnings

# The warnings filter is process-wide: forks from several threads at once must not restore
# it under one another.
_FILTER_LOCK = threading.Lock()


def fork_in_threaded_process() -> int:
    """``os.fork()`` without Python 3.12+'s DeprecationWarning that other threads are running.

    Only for children that run their own code and leave with ``os._exit``: a lock another
    thread held at the fork stays held in the child, so the child must not need one (the
    callers' module docstrings say why theirs do not). Returns what ``os.fork`` returns.

    Raises:
        OSError: the fork failed (e.g. EAGAIN under a process limit).
    """
    with _FILTER_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()
