"""seccomp: network off by refusing to create sockets; no kernel keyrings.

A classic-BPF filter (Documentation/userspace-api/seccomp_filter.rst, `struct sock_filter`
from `include/uapi/linux/filter.h`) that makes `socket(2)` fail with EACCES for *every*
address family. That is what closes UDP (Landlock handles only TCP) and host Unix sockets
(a read-only bind or a Landlock rule does not stop `connect` to a socket file). Denying all
families, not a list, also covers AF_PACKET, AF_NETLINK and AF_VSOCK, which a root process
could otherwise use to reach the network or reconfigure the host.

Costs of that choice: syslog(3) messages are dropped, nscd is bypassed (glibc falls back to
the files), and programs that listen on a Unix socket (multiprocessing managers, language
servers over sockets) fail. `socketpair(2)` stays allowed: its two ends only reach each
other, and asyncio's event loop and multiprocessing's pipes need it.

The filter also refuses `io_uring_setup` (ENOSYS, as on a kernel without io_uring, so
programs fall back), because io_uring can create and connect sockets without the `socket`
syscall, and `pidfd_getfd`, which could copy a connected socket out of another process.
And it refuses the kernel keyrings' `add_key`, `request_key` and `keyctl` (ENOSYS, as on a
kernel built without keys): keyrings are not namespaced, so a sandboxed process of the
user's uid would otherwise search, read and add keys in the user's own keyrings
(Kerberos tickets, disk and ecryptfs passphrases), as container runtimes' default filters
also refuse them.
A syscall made through another architecture's table (32-bit `int 0x80`, where
`socketcall` lives) kills the process; x32 syscalls (numbers with bit 30 set on x86_64) fail
with EACCES.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import socket
import struct

from sandbox.layers._checks import Check, run_checks
from sandbox.layers._syscall import (
    Arch,
    Verdict,
    prctl,
    require_arch,
    set_no_new_privs,
)

PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000

# Classic BPF opcodes.
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K

# Offsets in struct seccomp_data.
_NR = 0
_ARCH = 4

_SOCK_FILTER = struct.Struct("=HBBI")


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


@functools.lru_cache(maxsize=4)
def network_filter(arch: Arch | None = None) -> bytes:
    """The filter program as an array of `struct sock_filter`, in native byte order.

    This is the format bubblewrap's `--seccomp FD` reads. `arch` defaults to the host's;
    raises OSError(ENOSYS) on an architecture this package has no syscall table for.
    """
    arch = arch or require_arch()
    eacces = SECCOMP_RET_ERRNO | errno.EACCES
    enosys = SECCOMP_RET_ERRNO | errno.ENOSYS
    # Each check jumps forward to one of the three returns at the end.
    checks: list[tuple[int, int, int]] = []  # (opcode, constant, return index)
    if arch.x32_bit is not None:
        checks.append((_JGE_K, arch.x32_bit, 1))
    checks += [
        (_JEQ_K, arch.socket, 1),
        (_JEQ_K, arch.io_uring_setup, 2),
        (_JEQ_K, arch.io_uring_enter, 2),
        (_JEQ_K, arch.io_uring_register, 2),
        (_JEQ_K, arch.pidfd_getfd, 1),
        (_JEQ_K, arch.add_key, 2),
        (_JEQ_K, arch.request_key, 2),
        (_JEQ_K, arch.keyctl, 2),
    ]
    returns = [SECCOMP_RET_ALLOW, eacces, enosys, SECCOMP_RET_KILL_PROCESS]
    program = [
        (_LD_W_ABS, 0, 0, _ARCH),
        # Wrong architecture: jump past the whole body to the kill return.
        (_JEQ_K, 0, len(checks) + 4, arch.audit_arch),
        (_LD_W_ABS, 0, 0, _NR),
    ]
    for index, (opcode, constant, target) in enumerate(checks):
        remaining = len(checks) - index - 1
        program.append((opcode, remaining + target, 0, constant))
    program += [(_RET_K, 0, 0, value) for value in returns]
    return b"".join(_SOCK_FILTER.pack(*instruction) for instruction in program)


def deny_network() -> None:
    """Install `network_filter()` on the calling thread and everything it execs or forks.

    Call it in a single-threaded child right before exec (a filter installed with prctl
    binds only the calling thread). Sets PR_SET_NO_NEW_PRIVS first, which an unprivileged
    filter requires. Irreversible. Raises OSError (EINVAL when the kernel lacks
    CONFIG_SECCOMP_FILTER, ENOSYS on an unknown architecture).
    """
    # The program is built once per process (cached): a forked child then only installs it.
    program = network_filter()
    instructions = len(program) // _SOCK_FILTER.size
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(instructions, ctypes.cast(buffer, ctypes.c_void_p))
    set_no_new_privs()
    prctl(
        PR_SET_SECCOMP,
        SECCOMP_MODE_FILTER,
        ctypes.cast(ctypes.pointer(fprog), ctypes.c_void_p).value or 0,
    )


def works() -> Verdict:
    """Whether `deny_network` really refuses a UDP socket here (`denies_socket`, in a child
    of a spawned interpreter): a verdict that is True when it does, else says why not."""
    return run_checks([check()])[0]


def check() -> Check:
    """The check behind `works`, for `sandbox.layers._checks.run_checks`."""
    return Check(__name__, denies_socket.__name__)


def denies_socket() -> bool:
    """Apply `deny_network`, then try a UDP socket: True when refused. Irreversible: only
    for a child of its own."""
    deny_network()
    try:
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()
    except PermissionError:
        return True
    return False
