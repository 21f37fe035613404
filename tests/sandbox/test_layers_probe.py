"""probe() reports what each layer really gives here; missing() says how to get the rest."""

from __future__ import annotations

import os
import socket
import tempfile

import pytest

from sandbox import layers
from sandbox.layers import bwrap, cgroup, landlock, mountns, seccomp, userns
from sandbox.layers._syscall import host_arch


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
    assert found.get(layers.WRITE_CONFINEMENT) == expected_writes
    assert found.get(layers.READ_DENIAL) == expected_reads
    if cgroup.available() is None:
        expected_cap: str | None = (
            layers.CGROUP_V1 if cgroup.is_v1(cgroup.locate()) else layers.CGROUP_V2
        )
    else:
        expected_cap = layers.USER_NAMESPACE_NPROC if userns.works() else None
    assert found.get(layers.PROCESS_CAP) == expected_cap


def test_landlock_and_seccomp_checks_confirm_what_the_kernel_offers() -> None:
    assert landlock.works() is (landlock.abi_version() >= 1)
    assert seccomp.works() is (host_arch() is not None)


def test_probe_leaves_the_calling_process_unconfined(found: dict[str, str]) -> None:
    # The checks apply irreversible restrictions; they must have stayed in the child.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM):
        pass
    with tempfile.TemporaryDirectory() as directory:
        os.mkdir(os.path.join(directory, "still-writable"))


@pytest.mark.parametrize(
    ("protection", "names"),
    [
        (layers.WRITE_CONFINEMENT, ("apt-get install bubblewrap", "Landlock", "namespaces")),
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
