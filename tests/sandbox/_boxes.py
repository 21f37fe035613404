"""Sandboxes for the sandbox tests: made per test and closed at its end, and the layer plan
of a host without bubblewrap forced onto one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

from sandbox import Sandbox
from sandbox import _sandbox as sandbox_module
from sandbox.layers import LANDLOCK, MOUNT_NAMESPACE, SECCOMP, landlock, mountns, seccomp
from sandbox.layers._plan import LayerPlan
from tests._waiting import DEADLINE

NewBox = Callable[..., Sandbox]


@pytest.fixture
def new_box() -> Iterator[NewBox]:
    """Makes sandboxes that are closed when the test ends: a child forked ahead must not
    outlive its test."""
    made: list[Sandbox] = []

    def make(**kwargs: Any) -> Sandbox:
        box = Sandbox(**kwargs)
        made.append(box)
        return box

    yield make
    for box in made:
        box.close()


async def call_on_a_new_worker(
    box: Sandbox, fn: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """``box.call(fn, *args, **kwargs)`` where the call waits for a new worker under a
    short limit (a test of timeouts): the limit also covers the worker's start, which a
    loaded host can make longer; the worker started for a call that timed out goes back
    to the pool and serves the next try. Tries again on ``TimeoutError`` for
    :data:`~tests._waiting.DEADLINE` seconds."""
    deadline = anyio.current_time() + DEADLINE
    while True:
        try:
            return await box.call(fn, *args, **kwargs)
        except TimeoutError:
            if anyio.current_time() > deadline:
                raise


def call_worker(box: Sandbox, *, reuse: bool = False) -> Any:
    """``box``'s warm worker of calls of one kind (``reuse``: whose one child runs the
    stateless calls), when there is exactly one (tests that call one at a time), else
    ``None``."""
    caller = box._caller
    if caller is None:
        return None
    workers = [w for w in list(caller._workers) if w.reuse == reuse]
    return workers[0] if len(workers) == 1 else None


def force_landlock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give commands and calls what a host without bubblewrap gives them: Landlock, seccomp
    and a mount namespace (skips where those do not work)."""
    if not (landlock.works() and seccomp.works() and mountns.works()):
        pytest.skip("Landlock, seccomp or a mount namespace does not work here")
    forced = {
        "write_confinement": MOUNT_NAMESPACE,
        "read_denial": LANDLOCK,
        "network_off": SECCOMP,
        "host_exec_protection": MOUNT_NAMESPACE,
    }
    plan = LayerPlan(
        commands=forced, calls=dict(forced), landlock_scopes_signals=bool(landlock.scopes_signals())
    )
    monkeypatch.setattr(sandbox_module, "plan_layers", lambda: plan)
