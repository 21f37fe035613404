"""seccomp layer: what the network filter refuses, lets through, and how it treats other
syscall tables. Each check runs in a forked child, with and without the filter."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import platform
import signal
import socket
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from sandbox.layers import seccomp
from sandbox.layers._syscall import host_arch, require_arch, syscall

pytestmark = pytest.mark.skipif(host_arch() is None, reason="no seccomp syscall table here")


def in_child(check: Callable[[], str], *, filtered: bool) -> str:
    """`check()`'s result from a forked child, or "signal N" when the child was killed."""
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        # Threads a test left (anyio's workers) do nothing the child needs.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            if filtered:
                seccomp.install_filter()
            os.write(write_end, check().encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        output = reader.read().decode()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return output


def create_socket(family: int, kind: int) -> Callable[[], str]:
    def check() -> str:
        try:
            socket.socket(family, kind).close()
        except OSError as exc:
            return errno.errorcode[exc.errno or 0]
        return "created"

    return check


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="raw sockets need CAP_NET_RAW")


@pytest.mark.parametrize(
    ("family", "kind"),
    [
        (socket.AF_INET, socket.SOCK_STREAM),
        (socket.AF_INET, socket.SOCK_DGRAM),
        (socket.AF_INET6, socket.SOCK_STREAM),
        (socket.AF_INET6, socket.SOCK_DGRAM),
        (socket.AF_UNIX, socket.SOCK_STREAM),
        (socket.AF_UNIX, socket.SOCK_DGRAM),
        (socket.AF_NETLINK, socket.SOCK_RAW),
        pytest.param(socket.AF_PACKET, socket.SOCK_RAW, marks=needs_root),
    ],
)
def test_socket_of_every_family_is_refused(family: int, kind: int) -> None:
    assert in_child(create_socket(family, kind), filtered=False) == "created"
    assert in_child(create_socket(family, kind), filtered=True) == "EACCES"


def test_socketpair_still_works() -> None:
    def check() -> str:
        left, right = socket.socketpair()
        left.sendall(b"pair")
        return right.recv(4).decode()

    assert in_child(check, filtered=True) == "pair"


def test_io_uring_looks_absent() -> None:
    def check() -> str:
        try:
            syscall(require_arch().io_uring_setup, 1, ctypes.c_void_p(None))
        except OSError as exc:
            return errno.errorcode[exc.errno or 0]
        return "created"

    unfiltered = in_child(check, filtered=False)
    if unfiltered == "ENOSYS":
        pytest.skip("this kernel has no io_uring")
    assert unfiltered != "created"  # NULL params: the kernel answers EFAULT
    assert in_child(check, filtered=True) == "ENOSYS"


# keyctl(2) operations and special keyring ids (include/uapi/linux/keyctl.h).
_KEYCTL_GET_KEYRING_ID = 0
_KEY_SPEC_USER_KEYRING = -4
_KEY_SPEC_PROCESS_KEYRING = -2


@pytest.mark.parametrize("call", ["keyctl", "add_key", "request_key"])
def test_the_kernel_keyrings_look_absent(call: str) -> None:
    # Not namespaced: unfiltered, the user's own keyring is found; filtered, no call of
    # the three reaches any keyring.
    def check() -> str:
        arch = require_arch()
        try:
            if call == "keyctl":
                found = syscall(arch.keyctl, _KEYCTL_GET_KEYRING_ID, _KEY_SPEC_USER_KEYRING, 0)
                return "found" if found > 0 else str(found)
            if call == "add_key":
                syscall(arch.add_key, b"user", b"wt-test", b"secret", 6, _KEY_SPEC_PROCESS_KEYRING)
                return "added"
            syscall(arch.request_key, b"user", b"wt-test-absent", None, 0)
            return "found"
        except OSError as exc:
            return errno.errorcode[exc.errno or 0]

    unfiltered = in_child(check, filtered=False)
    if unfiltered == "ENOSYS":
        pytest.skip("this kernel has no keyrings")
    assert unfiltered == {"keyctl": "found", "add_key": "added", "request_key": "ENOKEY"}[call]
    assert in_child(check, filtered=True) == "ENOSYS"


@pytest.mark.skipif(platform.machine() != "x86_64", reason="32-bit int 0x80 exists on x86_64")
def test_syscall_through_the_32_bit_table_kills_the_process() -> None:
    # mov eax, 20 (getpid in the i386 table); int 0x80; ret
    code = b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"

    def check() -> str:
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        page.write(code)
        address = ctypes.addressof(ctypes.c_char.from_buffer(page))
        getpid = ctypes.CFUNCTYPE(ctypes.c_int)(address)
        return "same pid" if getpid() == os.getpid() else "other pid"

    assert in_child(check, filtered=False) == "same pid"
    assert in_child(check, filtered=True) == f"signal {signal.SIGSYS.value}"


def set_id_attempts(directory: str) -> Callable[[], str]:
    """Each way to give a file in ``directory`` a set-id bit, and the mode it then has
    (or the errno name it failed with); and the plain modes that must still work."""

    def check() -> str:
        seen = []
        target = os.path.join(directory, "shell")
        with open(target, "wb") as handle:
            handle.write(b"#!/bin/sh\n")

        def mode_of(path: str) -> str:
            return oct(os.stat(path).st_mode & 0o7777)

        attempts: list[tuple[str, Callable[[], str]]] = [
            ("chmod", lambda: (os.chmod(target, 0o4755), mode_of(target))[1]),
            ("chmod g+s", lambda: (os.chmod(target, 0o2755), mode_of(target))[1]),
            ("fchmod", lambda: _fchmod(target, 0o4755)),
            ("open", lambda: _created(os.path.join(directory, "o"), 0o4755)),
            ("mknod", lambda: (os.mknod(os.path.join(directory, "n"), 0o104755), "made")[1]),
            ("chmod 755", lambda: (os.chmod(target, 0o755), mode_of(target))[1]),
            ("open 755", lambda: _created(os.path.join(directory, "p"), 0o755)),
            ("open existing", lambda: _opened(target, 0o4755)),
        ]
        for name, attempt in attempts:
            try:
                seen.append(f"{name}: {attempt()}")
            except OSError as exc:
                seen.append(f"{name}: {errno.errorcode[exc.errno or 0]}")
        return "; ".join(seen)

    return check


def _fchmod(path: str, mode: int) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return oct(os.stat(path).st_mode & 0o7777)


def _created(path: str, mode: int) -> str:
    os.umask(0o022)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))
    return oct(os.stat(path).st_mode & 0o7777)


def _opened(path: str, mode: int) -> str:
    # A mode without O_CREAT is ignored by the kernel: no reason to refuse the open.
    os.close(os.open(path, os.O_RDONLY, mode))
    return "opened"


def test_no_file_gets_a_set_id_bit(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    filtered = tmp_path / "filtered"
    plain.mkdir()
    filtered.mkdir()
    assert in_child(set_id_attempts(str(plain)), filtered=False) == (
        "chmod: 0o4755; chmod g+s: 0o2755; fchmod: 0o4755; open: 0o4755; mknod: made; "
        "chmod 755: 0o755; open 755: 0o755; open existing: opened"
    )
    assert in_child(set_id_attempts(str(filtered)), filtered=True) == (
        "chmod: EPERM; chmod g+s: EPERM; fchmod: EPERM; open: EPERM; mknod: EPERM; "
        "chmod 755: 0o755; open 755: 0o755; open existing: opened"
    )
    assert not (filtered / "o").exists() and not (filtered / "n").exists()


def test_openat2_looks_absent() -> None:
    # Its mode is in a struct the filter cannot read: ENOSYS, so that callers use openat.
    def check() -> str:
        try:
            syscall(require_arch().openat2, -100, b"/", None, 0)
        except OSError as exc:
            return errno.errorcode[exc.errno or 0]
        return "opened"

    unfiltered = in_child(check, filtered=False)
    if unfiltered == "ENOSYS":
        pytest.skip("this kernel has no openat2")
    assert unfiltered == "EINVAL"  # a struct open_how of size 0
    assert in_child(check, filtered=True) == "ENOSYS"
