"""run_command through a call's sandbox (``invoke_tool(..., sandbox=box)``, a
``ToolSession(..., sandbox=box)``): the command runs in the box itself, on its pooled
supervisors, as the commands of ``workspace_tools(root, sandbox=box)`` do."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from sandbox import Sandbox, SandboxLimits
from sandbox import _sandbox as sandbox_module
from sandbox.layers import (
    BUBBLEWRAP,
    HOST_EXEC_PROTECTION,
    NETWORK_OFF,
    READ_DENIAL,
    SECCOMP,
    seccomp,
)
from sandbox.layers._plan import LayerPlan
from sandbox.spawn._tree import descendants
from tests._processes import survivors
from workspace_tools import ErrorCode, ToolSession, invoke_tool
from workspace_tools.tools import workspace_tools

pytestmark = pytest.mark.anyio

#: The network namespace, then the CPU seconds and open files the command may use.
SEEN = "readlink /proc/self/ns/net; ulimit -t; ulimit -n"
LIMITS = SandboxLimits(cpu_seconds=7, open_files=50)


def run_command(root: Path, sandbox: Sandbox | None = None):
    return next(t for t in workspace_tools(root, sandbox=sandbox) if t.name == "run_command")


def _bubblewrapped(**options: object) -> Sandbox:
    box = Sandbox(**options)  # type: ignore[arg-type]
    if BUBBLEWRAP not in box.capabilities.values():
        box.close()
        pytest.skip(f"commands do not run under bubblewrap here: {box.capabilities}")
    return box


@pytest.mark.parametrize("door", ["invoke_tool", "session"])
async def test_the_command_runs_in_the_box_as_a_bound_tool_s_does(
    tmp_path: Path, door: str
) -> None:
    # Under bubblewrap a command of the box has a network namespace of its own; a
    # command started from a sandboxed call's child would have the host's (a call
    # cannot be wrapped in bubblewrap).
    box = _bubblewrapped(limits=LIMITS)
    host_net = os.readlink("/proc/self/ns/net")
    try:
        if door == "invoke_tool":
            result = await invoke_tool(run_command(tmp_path), {"command": SEEN}, sandbox=box)
        else:
            with ToolSession(tmp_path, sandbox=box) as session:
                result = await session.call("run_command", {"command": SEEN})
        bound = await invoke_tool(run_command(tmp_path, box), {"command": SEEN})
    finally:
        box.close()
    assert result.error is None, result.error
    net, *limits = result.content["stdout"].splitlines()
    bound_net, *bound_limits = bound.content["stdout"].splitlines()
    assert (net == host_net, limits) == (False, ["7", "50"])
    assert (bound_net == host_net, bound_limits) == (False, ["7", "50"])


async def test_calls_share_the_box_s_supervisor(tmp_path: Path) -> None:
    # Without layers the command's parent is the supervisor that started it: one of the
    # box's, pooled in this process, for every call; not one a call's child started.
    box = Sandbox(layers=False)
    tool = run_command(tmp_path)
    try:
        parents = []
        for _ in range(3):
            result = await invoke_tool(tool, {"command": "echo $PPID"}, sandbox=box)
            parents.append(int(result.content["stdout"]))
        ours = set(descendants(os.getpid()))
    finally:
        box.close()
    assert len(set(parents)) == 1, parents
    assert parents[0] in ours


@pytest.mark.parametrize("layers", [False, True], ids=["portable", "layers"])
async def test_the_command_s_timeout_stops_its_whole_tree(
    tmp_path: Path, marker: str, layers: bool
) -> None:
    # The marker is exported by the command, so the box's environment allowlist cannot
    # hide the processes it leaves.
    command = f"export {marker}; echo started; (setsid sleep 300 &); sleep 300"
    box = Sandbox(layers=layers)
    try:
        with anyio.fail_after(60):
            result = await invoke_tool(
                run_command(tmp_path), {"command": command, "timeout": 1}, sandbox=box
            )
    finally:
        box.close()
    assert (result.error_code, result.error) == (
        ErrorCode.TOOL_TIMEOUT,
        "Command timed out after 1 s; it and every process it started were killed.\n"
        "stdout so far:\nstarted\n",
    )
    assert survivors(marker) == []


async def test_a_box_whose_writes_leave_out_the_root_runs_the_call_in_a_child(
    tmp_path: Path,
) -> None:
    # Confined to the root too, the command could write there; run whole in a child of
    # the box, it cannot. It runs under the child's confinement, with the host's network
    # namespace (a call cannot be wrapped in bubblewrap), and the file stays unwritten.
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    box = _bubblewrapped(writable=[str(elsewhere)], best_effort=True)
    if "write_confinement" not in box.call_capabilities:
        box.close()
        pytest.skip(f"calls' writes are not confined here: {box.call_capabilities}")
    try:
        result = await invoke_tool(
            run_command(root),
            {"command": "readlink /proc/self/ns/net; echo x > made 2>/dev/null; echo $?"},
            sandbox=box,
        )
    finally:
        box.close()
    assert result.content["stdout"].splitlines() == [os.readlink("/proc/self/ns/net"), "1"]
    assert not (root / "made").exists()


CALL_CUT = (None, 3, "after the call's timeout of 3 s")
OWN_CUT = (1, 2, "after 1 s")


# Each case waits out a 4 s grace: trio's cancellation is checked at both doors with the
# call's timeout cutting the command, asyncio's in every case.
@pytest.mark.parametrize(
    ("anyio_backend", "own", "call", "words"),
    [
        ("asyncio", *CALL_CUT),
        ("asyncio", *OWN_CUT),
        ("trio", *CALL_CUT),
    ],
    ids=[
        "asyncio-the-call-s-timeout-cut-it",
        "asyncio-its-own-timeout",
        "trio-the-call-s-timeout-cut-it",
    ],
)
@pytest.mark.parametrize("door", ["bound", "invoke_tool"])
async def test_a_call_timeout_during_the_stop_keeps_the_output_so_far(
    tmp_path: Path, marker: str, door: str, own: float | None, call: float, words: str
) -> None:
    # The command ignores SIGTERM, so its stop takes the whole grace, 4 s: from 2 s (the
    # call's 3 s less the third kept for the stop), or from its own 1 s, the call's own
    # timeout (3 s, 2 s) fires while the tree is still being stopped.
    command = f"export {marker}; trap '' TERM; echo partial-out; echo err-out >&2; sleep 300"
    box = Sandbox(layers=False, limits=SandboxLimits(grace_seconds=4))
    arguments = {"command": command} if own is None else {"command": command, "timeout": own}
    try:
        tool, sandbox = (
            (run_command(tmp_path, box), None)
            if door == "bound"
            else (
                run_command(tmp_path),
                box,
            )
        )
        with anyio.fail_after(60):
            result = await invoke_tool(tool, arguments, timeout=call, sandbox=sandbox)
    finally:
        box.close()
    assert (result.error_code, result.error) == (
        ErrorCode.TOOL_TIMEOUT,
        f"Command timed out {words}; it and every process it started were killed.\n"
        "stdout so far:\npartial-out\n\nstderr so far:\nerr-out\n",
    )
    details = result.details.model_dump()
    del details["duration_ms"]
    assert details == {
        "command": command,
        "exit_code": None,
        "timed_out": True,
        "stdout_bytes": 12,
        "stderr_bytes": 8,
        "truncated": False,
        "stopped_processes": 0,
        "stopped_names": [],
        "stdout": "partial-out\n",
        "stderr": "err-out\n",
    }
    assert survivors(marker) == []


async def test_a_box_that_cannot_confine_writes_to_the_root_runs_the_call_in_a_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A host whose layers turn the network off but confine no writes: the box asks for
    # no write confinement and is made; confined to the root it would ask for one, which
    # it does not waive. The call runs in a child of the box, as it is.
    if not seccomp.works():
        pytest.skip("seccomp does not work here")
    plan = LayerPlan(commands={NETWORK_OFF: SECCOMP}, calls={NETWORK_OFF: SECCOMP})
    monkeypatch.setattr(sandbox_module, "plan_layers", lambda: plan)
    box = Sandbox(best_effort=[READ_DENIAL, HOST_EXEC_PROTECTION])
    try:
        result = await invoke_tool(run_command(tmp_path), {"command": "echo ran"}, sandbox=box)
    finally:
        box.close()
    assert (result.error, result.content) == (
        None,
        {"exit_code": 0, "stdout": "ran\n", "stderr": ""},
    )
