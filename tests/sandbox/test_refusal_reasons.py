"""A refusal names what the layer probe found: a protection no layer gives is refused with
the fix and, in parentheses, why bubblewrap does not run here (with the kernel switch that
turns user namespaces off), the failed checks' verdicts, why no cgroup caps processes.
The probe is made to fail for real: a bwrap on PATH that refuses, a check whose child
fails, a cgroup that cannot be found."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox import Sandbox, SandboxUnavailable, layers
from sandbox.layers import (
    HOST_EXEC_PROTECTION,
    PROCESS_CAP,
    bwrap,
    cgroup,
    landlock,
    missing,
    userns,
)
from sandbox.layers._checks import Check
from sandbox.layers._plan import why_missing
from workspace_tools import ErrorCode, invoke_tool_sync, workspace_tools

# A check whose forked child fails: the user namespace layer refuses a cap of 0.
FAILING_CHECK = Check("sandbox.layers.userns", "cap_processes", (0,))
FAILED = "OSError(22, 'max_processes must be at least 1, got 0')"
BWRAP_SAYS = "bwrap: setting up uid map: Permission denied"


@pytest.fixture
def refusing_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A ``bwrap`` first on PATH that refuses as it does where user namespaces are off,
    and a kernel switch saying they are; the switch's path (as the reason names it)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "bwrap"
    fake.write_text(f"#!/bin/sh\necho '{BWRAP_SAYS}' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    switch = tmp_path / "unprivileged_userns_clone"
    switch.write_text("0\n")
    monkeypatch.setattr(layers, "_USERNS_SWITCHES", ((str(switch), "0"),))
    return str(switch)


def test_a_command_refusal_names_bubblewrap_s_failure_and_the_failed_check(
    refusing_bwrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(landlock, "write_check", lambda scratch: FAILING_CHECK)
    with pytest.raises(SandboxUnavailable) as raised:
        Sandbox(writable=[str(tmp_path)])
    found = (
        f"bubblewrap is installed but fails here: {BWRAP_SAYS} (user namespaces disabled: "
        f"{refusing_bwrap} = 0); the Landlock check failed here: {FAILED}"
    )
    assert raised.value.protection == HOST_EXEC_PROTECTION
    assert raised.value.fix == (
        f"{missing(HOST_EXEC_PROTECTION)} ({found}); to run without it, pass "
        "best_effort=True (or best_effort=['host_exec_protection']) or host_exec_paths=()"
    )
    assert str(raised.value) == f"sandbox cannot enforce host_exec_protection: {raised.value.fix}"


def test_a_missing_bwrap_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(landlock, "write_check", lambda scratch: FAILING_CHECK)
    with pytest.raises(SandboxUnavailable) as raised:
        Sandbox(writable=[str(tmp_path)], require=[HOST_EXEC_PROTECTION])
    assert raised.value.fix == (
        f"{missing(HOST_EXEC_PROTECTION)} (bubblewrap is not installed ({bwrap.INSTALL_HINT}); "
        f"the Landlock check failed here: {FAILED})"
    )


def test_a_process_cap_refusal_names_the_cgroup_and_the_user_namespace(
    refusing_bwrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_cgroup(parent: str | None = None) -> str:
        raise cgroup.CgroupUnavailable(2, "no cgroup2 mount in /proc/self/mountinfo")

    monkeypatch.setattr(cgroup, "locate", no_cgroup)
    monkeypatch.setattr(userns, "check", lambda: FAILING_CHECK)
    with pytest.raises(SandboxUnavailable) as raised:
        Sandbox(
            max_processes=4,
            best_effort=["write_confinement", "read_denial", "host_exec_protection"],
        )
    assert raised.value.protection == PROCESS_CAP
    assert raised.value.fix == (
        f"{missing(PROCESS_CAP)} (no cgroup caps processes here: no cgroup2 mount in "
        f"/proc/self/mountinfo; the user namespace check failed here: {FAILED} (user "
        f"namespaces disabled: {refusing_bwrap} = 0)); to run without it, pass "
        "best_effort=True (or best_effort=['process_cap']) or max_processes=None"
    )


def test_a_refused_tool_call_s_message_names_the_failed_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Commands keep bubblewrap here; a Python call needs Landlock, whose check fails.
    if bwrap.available() is not None:
        pytest.skip("bubblewrap does not run here: the sandbox refuses commands as well")
    monkeypatch.setattr(landlock, "write_check", lambda scratch: FAILING_CHECK)
    (tmp_path / "a.txt").write_text("a\n")
    box = Sandbox(writable=[str(tmp_path)])
    try:
        read_file = next(t for t in workspace_tools(tmp_path) if t.name == "read_file")
        result = invoke_tool_sync(read_file, {"path": "a.txt"}, sandbox=box)
    finally:
        box.close()
    assert result.error_code == ErrorCode.SANDBOX_UNAVAILABLE
    assert result.error == (
        f"sandbox cannot enforce host_exec_protection: "
        f"{why_missing(HOST_EXEC_PROTECTION, 'calls')} (the Landlock check failed here: "
        f"{FAILED}); to run without it, pass best_effort=True (or "
        "best_effort=['host_exec_protection']) or host_exec_paths=()"
    )


def test_no_switch_is_named_where_none_is_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on = tmp_path / "max_user_namespaces"
    on.write_text("63318\n")
    absent = tmp_path / "absent"
    monkeypatch.setattr(layers, "_USERNS_SWITCHES", ((str(on), "0"), (str(absent), "1")))
    assert layers.userns_disabled() is None
    on.write_text("0\n")
    assert layers.userns_disabled() == f"user namespaces disabled: {on} = 0"
