"""Never a silent gap: a protection asked for is enforced, or the sandbox refuses to start
unless the caller accepts best effort; and the process cap, where given, holds on the host.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import anyio
import pytest

from sandbox import Sandbox, SandboxUnavailable
from sandbox import _sandbox as sandbox_module
from sandbox.layers import BUBBLEWRAP, PROCESS_CAP, missing
from sandbox.layers._plan import LayerPlan
from tests._processes import marked_processes, survivors

pytestmark = pytest.mark.anyio

#: Everything but the process cap, as on a host without a usable cgroup.
NO_CAP = {
    "write_confinement": "bubblewrap",
    "read_denial": "bubblewrap",
    "network_off": "bubblewrap",
    "host_exec_protection": "bubblewrap",
}


def _plan(monkeypatch: pytest.MonkeyPatch, commands: dict[str, str], calls: dict[str, str]) -> None:
    plan = LayerPlan(commands=commands, calls=calls)
    monkeypatch.setattr(sandbox_module, "plan_layers", lambda: plan)


def _fix(protection: str, drop: str) -> str:
    return (
        f"{missing(protection)}; to run without it, pass best_effort=True "
        f"(or best_effort=['{protection}']) or {drop}"
    )


@pytest.mark.parametrize(
    ("protection", "kwargs", "drop"),
    [
        ("process_cap", {"max_processes": 64}, "max_processes=None"),
        ("read_denial", {}, "allow_read=['/']"),
        ("network_off", {}, "network=True"),
        ("write_confinement", {"writable": ["/srv"]}, "writable=()"),
        ("host_exec_protection", {"writable": ["/srv"]}, "host_exec_paths=()"),
    ],
)
def test_option_no_layer_enforces_raises_naming_mechanism_and_fix(
    monkeypatch: pytest.MonkeyPatch, protection: str, kwargs: dict[str, object], drop: str
) -> None:
    available = {**NO_CAP, "process_cap": "cgroup-v2"}
    del available[protection]
    _plan(monkeypatch, available, {})
    with pytest.raises(SandboxUnavailable) as raised:
        Sandbox(**kwargs)  # type: ignore[arg-type]
    assert raised.value.protection == protection
    assert raised.value.fix == _fix(protection, drop)
    assert str(raised.value) == f"sandbox cannot enforce {protection}: {raised.value.fix}"


def test_best_effort_accepts_the_gap_and_reports_it(monkeypatch: pytest.MonkeyPatch) -> None:
    _plan(monkeypatch, NO_CAP, {})
    for best_effort in (True, ["process_cap"]):
        box = Sandbox(max_processes=64, best_effort=best_effort)
        assert PROCESS_CAP not in box.capabilities
        assert box.capabilities["network_off"] == "bubblewrap"
    with pytest.raises(SandboxUnavailable) as raised:  # accepting another gap is not this
        Sandbox(max_processes=64, best_effort=["network_off"])
    assert raised.value.protection == "process_cap"


def test_required_protection_is_enforced_even_under_best_effort(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _plan(monkeypatch, NO_CAP, {})
    with pytest.raises(SandboxUnavailable) as raised:
        Sandbox(max_processes=64, best_effort=True, require=["process_cap"])
    assert raised.value.fix == missing("process_cap")


async def test_call_missing_a_protection_raises_unless_best_effort(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _plan(monkeypatch, NO_CAP, {"read_denial": "landlock"})
    box = Sandbox()
    with pytest.raises(SandboxUnavailable) as raised:
        await box.call(os.getpid)
    assert raised.value.protection == "network_off"
    assert raised.value.fix.startswith("no layer turns the network off")
    relaxed = Sandbox(best_effort=["network_off"], layers=True)
    try:
        assert await relaxed.call(os.getpid) != os.getpid()
    finally:
        relaxed.close()
        box.close()


def test_portable_level_asks_for_nothing_it_cannot_give() -> None:
    box = Sandbox(layers=False, max_processes=8)
    assert box.capabilities == {"tree_stop": "subreaper"}


# --- the process cap holds, counted on the host ------------------------------------------

# Forks up to 200 children that block on a pipe, prints how many it got, then waits for
# the host to create the release file (at most 30 s) before letting them go.
FORK_200 = """
import os, sys, time
release = sys.argv[1]
read_end, write_end = os.pipe()
children = []
for _ in range(200):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.close(write_end)
        os.read(read_end, 1)
        os._exit(0)
    children.append(pid)
print(len(children), flush=True)
deadline = time.monotonic() + 30
while not os.path.exists(release) and time.monotonic() < deadline:
    time.sleep(0.01)
os.close(write_end)
for pid in children:
    os.waitpid(pid, 0)
"""


@pytest.mark.parametrize("capped", [False, True], ids=["plain", "sandbox"])
async def test_fork_bomb_is_capped_on_the_host(
    tmp_path: Path, capped: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = f"WT_TEST_MARKER={secrets.token_hex(12)}"
    monkeypatch.setenv(*marker.split("="))
    allow = {"PATH", "WT_TEST_MARKER"}
    if capped:
        try:
            # The release file's directory is bound in, or bubblewrap's private /tmp hides it.
            box = Sandbox(max_processes=16, env_allowlist=allow, writable=[str(tmp_path)])
        except SandboxUnavailable as exc:
            pytest.skip(str(exc))
    else:
        box = Sandbox(layers=False, env_allowlist=allow)
    release = tmp_path / "release"
    counted: list[int] = []

    def count_then_release(stream: str, chunk: bytes) -> None:
        # The command's tree is blocked until the release file exists: all are alive.
        counted.append(len(marked_processes(marker)))
        release.touch()

    with anyio.fail_after(60):
        result = await box.run(
            [sys.executable, "-c", FORK_200, str(release)], on_output=count_then_release
        )
    forked = int(result.stdout.complete)
    # Under bubblewrap the shell that reports what the command left running is one more.
    reporter = 1 if BUBBLEWRAP in box.capabilities.values() else 0
    assert counted == [forked + 1 + reporter], (counted, forked, result.stderr.complete)
    if capped:
        # The cap counts every process of the tree, bubblewrap's own included.
        assert forked + 1 <= 16
        assert forked >= 10
    else:
        assert forked == 200
    assert survivors(marker) == []


def test_unknown_protection_in_best_effort_is_refused() -> None:
    with pytest.raises(ValueError) as raised:
        Sandbox(layers=False, best_effort=["process_caps"])
    assert str(raised.value).startswith("unknown protection 'process_caps'; one of (")


@pytest.mark.parametrize(
    ("protection", "asks"),
    [
        ("write_confinement", {}),
        ("read_denial", {"read_denied": ["/nonexistent-secret"]}),
        ("process_cap", {"max_processes": 8}),
    ],
)
def test_a_requirement_without_layers_names_layers_false(
    protection: str, asks: dict[str, object]
) -> None:
    # With layers=False the host's layers are never probed: the refusal must not send the
    # user to install bubblewrap (which may well be there) without saying why it is unused.
    with pytest.raises(SandboxUnavailable) as raised:
        Sandbox(layers=False, require=[protection], **asks)  # type: ignore[arg-type]
    message = str(raised.value)
    assert message.startswith(f"sandbox cannot enforce {protection}: "), message
    assert message.endswith(
        " (layers=False: this sandbox neither probes nor uses a layer; pass layers=True)"
    ), message
