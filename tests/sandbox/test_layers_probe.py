"""probe() reports what each layer really gives here; missing() says how to get the rest."""

from __future__ import annotations

import os
import signal
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import Sandbox, SandboxUnavailable, layers
from sandbox.layers import (
    HOST_EXEC_PROTECTION,
    _checks,
    bwrap,
    cgroup,
    landlock,
    mountns,
    seccomp,
    userns,
)
from sandbox.layers._checks import Check, run_checks
from sandbox.layers._plan import why_missing
from sandbox.layers._syscall import Verdict, host_arch
from tests.sandbox._layer_checks import ROOT

_CHECKS = "tests.sandbox._layer_checks"


@pytest.fixture(scope="module")
def found() -> dict[str, str]:
    return layers.probe()


def test_probe_names_only_known_protections_and_mechanisms(found: dict[str, str]) -> None:
    assert set(found) <= set(layers.PROTECTIONS)
    assert set(found.values()) <= {
        layers.BUBBLEWRAP,
        layers.LANDLOCK,
        layers.SECCOMP,
        layers.MOUNT_NAMESPACE,
        layers.CGROUP_V2,
        layers.CGROUP_V1,
    }


def test_probe_agrees_with_each_layer(found: dict[str, str]) -> None:
    if bwrap.available() is None:
        expected_reads: str | None = layers.BUBBLEWRAP
        expected_writes: str | None = layers.BUBBLEWRAP
    elif landlock.works():
        expected_reads = layers.LANDLOCK
        # Landlock leaves metadata (chmod, chown, utime, xattrs) open: writes need the mount.
        expected_writes = layers.MOUNT_NAMESPACE if mountns.works() else None
    else:
        expected_reads = expected_writes = None
    assert found.get(layers.HOST_EXEC_PROTECTION) == expected_writes
    assert found.get(layers.READ_DENIAL) == expected_reads
    if cgroup.available() is None:
        expected_cap: str | None = (
            layers.CGROUP_V1 if cgroup.is_v1(cgroup.locate()) else layers.CGROUP_V2
        )
    else:
        expected_cap = layers.USER_NAMESPACE_NPROC if userns.works() else None
    assert found.get(layers.PROCESS_CAP) == expected_cap


def test_landlock_and_seccomp_checks_confirm_what_the_kernel_offers() -> None:
    assert bool(landlock.works()) is (landlock.abi_version() >= 1)
    assert bool(seccomp.works()) is (host_arch() is not None)


def test_probe_leaves_the_calling_process_unconfined(found: dict[str, str]) -> None:
    # The checks apply irreversible restrictions; they must have stayed in the child.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM):
        pass
    with tempfile.TemporaryDirectory() as directory:
        os.mkdir(os.path.join(directory, "still-writable"))


@pytest.mark.parametrize(
    ("protection", "names"),
    [
        (layers.HOST_EXEC_PROTECTION, ("apt-get install bubblewrap", "Landlock", "namespaces")),
        (layers.READ_DENIAL, ("apt-get install bubblewrap", "Landlock")),
        (layers.NETWORK_OFF, ("seccomp", "CONFIG_SECCOMP_FILTER")),
        (
            layers.PROCESS_CAP,
            ("cgroup v2", "Delegate=yes", "as root", "cgroup v1", "not root", "user namespaces"),
        ),
        (layers.HOST_EXEC_PROTECTION, ("apt-get install bubblewrap", "Landlock", "namespaces")),
    ],
)
def test_missing_names_the_mechanism_and_the_fix(protection: str, names: tuple[str, ...]) -> None:
    message = layers.missing(protection)

    assert [name for name in names if name not in message] == []
    assert "\n" not in message


@pytest.fixture(params=["one thread", "threaded"])
def threads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The test process as the checks find it: alone (they fork it), or running another
    thread (they run in a spawned interpreter)."""
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    if request.param == "one thread":
        # Idle threads earlier tests left (anyio's workers) hold no lock these checks need.
        monkeypatch.setattr(_checks, "_threads", lambda: 1)
    else:
        other.start()
    try:
        yield request.param
    finally:
        release.set()
        if other.is_alive():
            other.join()


@pytest.mark.parametrize(
    ("function", "expected"),
    [
        ("holds", Verdict(True, "")),
        ("raises", Verdict(False, "PermissionError(13, 'refused by the test')")),
        ("answers_no", Verdict(False, "the check ran but the layer's effect was not seen")),
        ("dies", Verdict(False, f"the check's child was killed by signal {signal.SIGKILL}")),
    ],
    ids=["held", "raised", "answered-no", "killed"],
)
def test_a_check_that_does_not_hold_says_why(
    threads: str, function: str, expected: Verdict
) -> None:
    verdict = run_checks([Check(_CHECKS, function)], path=[ROOT])
    assert verdict == [expected]
    assert bool(verdict[0]) is expected.held


def test_checks_run_together_in_order_and_known_verdicts_pass_through(threads: str) -> None:
    known = Verdict(False, "known without a check")
    checks = [Check(_CHECKS, "dies"), known, Check(_CHECKS, "holds"), Check(_CHECKS, "raises")]
    assert run_checks(checks, path=[ROOT]) == [
        Verdict(False, f"the check's child was killed by signal {signal.SIGKILL}"),
        known,
        Verdict(True, ""),
        Verdict(False, "PermissionError(13, 'refused by the test')"),
    ]


def test_a_process_the_check_leaves_running_does_not_hold_up_the_verdict(
    threads: str, tmp_path: Path
) -> None:
    # The straggler keeps the verdict pipe's write end open until the test lets it go.
    release = tmp_path / "release"
    os.mkfifo(release)
    check = Check(_CHECKS, "leaves_a_process", (str(release),))
    try:
        assert run_checks([check], path=[ROOT]) == [
            Verdict(False, "RuntimeError('left one behind')")
        ]
    finally:
        # Blocks until the straggler opened the FIFO; closing it lets the straggler go.
        with open(release, "wb"):
            pass


def test_a_sandbox_made_in_a_threaded_process_forks_nothing_from_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        unpatched = Sandbox()
        try:
            expected = (unpatched.capabilities, unpatched.call_capabilities)
        finally:
            unpatched.close()

        def no_fork() -> int:
            raise AssertionError("os.fork called in the threaded test process")

        monkeypatch.setattr(os, "fork", no_fork)
        box = Sandbox()
        try:
            assert (box.capabilities, box.call_capabilities) == expected
        finally:
            box.close()
    finally:
        release.set()
        other.join()
    assert expected[1], "no layer held for calls here: the probes were not exercised"


@pytest.mark.anyio
async def test_a_refusal_for_calls_names_what_the_layer_s_check_met(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The mount namespace's check fails for real in its forked child (its confine refused),
    # and the refusal of a call that needs the layer (the default host-exec paths kept
    # read-only: the first protection checked) carries what the child met.
    if not landlock.works():
        pytest.skip("without Landlock no mount namespace is checked for calls")

    def refused(scratch: str) -> Check:
        return Check("sandbox.layers.userns", "cap_processes", (0,))

    monkeypatch.setattr(mountns, "check", refused)
    box = Sandbox(writable=[str(tmp_path)])
    try:
        with pytest.raises(SandboxUnavailable) as raised:
            await box.call(os.getpid)
    finally:
        box.close()
    assert raised.value.protection == HOST_EXEC_PROTECTION
    assert raised.value.fix == (
        f"{why_missing(HOST_EXEC_PROTECTION, 'calls')} (the mount namespace check failed here: "
        "OSError(22, 'max_processes must be at least 1, got 0')); to run without it, pass "
        "best_effort=True (or best_effort=['host_exec_protection']) or host_exec_paths=()"
    )
