"""A sandboxed call's time limit counts from when a child of a worker took the call, not
while a new worker starts for it (its setup and imports: a few hundred ms for a first
call); that wait has a bound of its own (``SandboxLimits.start_seconds``), past which the
call fails with an error saying so and nothing ran. The worker's start is made slow on
purpose: the call's function lives in a module whose import, in any process but this
one, sleeps."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import anyio
import pytest

from sandbox import Sandbox, SandboxError, SandboxLimits
from workspace_tools import invoke_tool, tool

pytestmark = pytest.mark.anyio

#: Seconds the module's import takes in a worker.
SLOW_IMPORT = 1.5


@pytest.fixture
def slow_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    name = f"slow_start_{os.getpid()}_{tmp_path.name}".replace("-", "_")
    (tmp_path / f"{name}.py").write_text(
        "import os, time\n"
        f"if os.getpid() != {os.getpid()}:\n"
        f"    time.sleep({SLOW_IMPORT})\n"
        "def answer(x):\n"
        "    return ('ran in', os.getpid() != " + str(os.getpid()) + ", x * 2)\n"
        "def forever():\n"
        "    time.sleep(3600)\n"
        "from pydantic import BaseModel\n"
        "class Args(BaseModel):\n"
        "    x: int\n"
        "def execute(args, context):\n"
        "    # The time the call's own deadline leaves it as it starts, in tenths.\n"
        "    left = context.deadline - time.monotonic()\n"
        "    return {'x': args.x, 'time left': left > 0.3}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(name)
    yield module
    sys.modules.pop(name, None)


async def test_a_short_time_limit_does_not_count_the_workers_start(
    slow_module: ModuleType,
) -> None:
    # The worker takes SLOW_IMPORT seconds to import the call's module; the call itself
    # takes milliseconds, well within its 0.5 s.
    box = Sandbox(layers=False, limits=SandboxLimits(timeout_seconds=0.5))
    try:
        with anyio.fail_after(60):
            assert await box.call(slow_module.answer, 21) == ("ran in", True, 42)
    finally:
        box.close()


async def test_the_time_limit_still_stops_a_call_that_runs_too_long(
    slow_module: ModuleType,
) -> None:
    box = Sandbox(layers=False, limits=SandboxLimits(timeout_seconds=0.5))
    try:
        with anyio.fail_after(60), pytest.raises(TimeoutError):
            await box.call(slow_module.forever)
    finally:
        box.close()


async def test_a_worker_that_does_not_start_in_time_is_a_clear_error(
    slow_module: ModuleType,
) -> None:
    box = Sandbox(layers=False, limits=SandboxLimits(timeout_seconds=30, start_seconds=0.3))
    try:
        with anyio.fail_after(60), pytest.raises(SandboxError) as raised:
            await box.call(slow_module.answer, 1)
        assert str(raised.value) == (
            "the sandbox could not start a worker for the call within 0.3 s "
            "(SandboxLimits.start_seconds); nothing ran"
        )
    finally:
        box.close()


async def test_a_tool_calls_timeout_does_not_count_the_workers_start(
    slow_module: ModuleType,
) -> None:
    """The same for a tool call's timeout (``invoke_tool(..., timeout=)``): it counts
    from when a child took the call, in the caller as in the child's context."""
    slow_tool = tool(
        name="slow_start", description="d", parameters=slow_module.Args, execute=slow_module.execute
    )
    box = Sandbox(layers=False)
    try:
        with anyio.fail_after(60):
            result = await invoke_tool(slow_tool, {"x": 7}, timeout=0.5, sandbox=box)
    finally:
        box.close()
    assert (result.error_code, result.error, result.content) == (
        None,
        None,
        {"x": 7, "time left": True},
    )
