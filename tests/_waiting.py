"""Waiting for an event in a test: poll with a deadline, then say what was seen.

A test never sleeps and hopes. It waits for the state it needs (a process started, a file
written, a count reached) by polling a probe until a condition holds, with a deadline far
beyond what a loaded two-core host needs: a passing run returns as soon as the condition
holds, only a failing one waits the deadline out. On a timeout the error names what was
awaited and the last value the probe returned.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import anyio

T = TypeVar("T")

#: Seconds before a wait gives up. Generous: only a failing test ever waits this long.
DEADLINE = 30.0
#: Seconds between two probes.
INTERVAL = 0.01


def poll(probe: Callable[[], T], until: Callable[[T], bool], *, timeout: float = DEADLINE) -> T:
    """Call ``probe`` until ``until(value)`` holds or ``timeout`` seconds passed.

    Returns the last value ``probe`` returned, which fails ``until`` only on a timeout:
    the caller's assertion shows it (``assert value == expected, value``).
    """
    end = time.monotonic() + timeout
    while True:
        value = probe()
        if until(value) or time.monotonic() > end:
            return value
        time.sleep(INTERVAL)


def wait_until(
    probe: Callable[[], T],
    until: Callable[[T], bool],
    what: str,
    *,
    timeout: float = DEADLINE,
) -> T:
    """Like :func:`poll`, but a timeout raises.

    Raises:
        AssertionError: ``until`` never held; the message names ``what`` was awaited and
            the last value seen.
    """
    value = poll(probe, until, timeout=timeout)
    if not until(value):
        raise AssertionError(f"waited {timeout} s for {what}; last saw {value!r}")
    return value


async def poll_async(
    probe: Callable[[], T], until: Callable[[T], bool], *, timeout: float = DEADLINE
) -> T:
    """:func:`poll` for a test running in an event loop: sleeps without blocking the
    loop, so tasks the condition depends on keep running."""
    end = time.monotonic() + timeout
    while True:
        value = probe()
        if until(value) or time.monotonic() > end:
            return value
        await anyio.sleep(INTERVAL)


async def wait_until_async(
    probe: Callable[[], T],
    until: Callable[[T], bool],
    what: str,
    *,
    timeout: float = DEADLINE,
) -> T:
    """:func:`wait_until` for a test running in an event loop (see :func:`poll_async`).

    Raises:
        AssertionError: ``until`` never held; the message names ``what`` was awaited and
            the last value seen.
    """
    value = await poll_async(probe, until, timeout=timeout)
    if not until(value):
        raise AssertionError(f"waited {timeout} s for {what}; last saw {value!r}")
    return value
