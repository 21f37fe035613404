"""Sandboxes for the sandbox tests: made per test and closed at its end, and the layer plan
of a host without bubblewrap forced onto one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sandbox import Sandbox
from sandbox import _sandbox as sandbox_module
from sandbox.layers import LANDLOCK, MOUNT_NAMESPACE, SECCOMP, landlock, mountns, seccomp
from sandbox.layers._plan import LayerPlan

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
