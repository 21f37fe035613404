"""seccomp: network off by refusing to create sockets; no kernel keyrings; no set-id bits.

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
And it refuses (EPERM) to set a set-user-ID or set-group-ID bit, as `chmod`, `fchmod`,
`fchmodat(2)`, `mknod(at)`, `creat` or a creating `open(at)` (`O_CREAT`, `O_TMPFILE`) with
such a mode: a command run as root (bubblewrap keeps the uid, dropping capabilities) could
otherwise leave `cp /bin/sh x; chmod 4755 x` in the workspace, a root shell for any user of
the host. `openat2`, whose mode a filter cannot read, fails with ENOSYS (callers fall back
to `openat`).
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
_ARGS = 16

_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_SET_ID_BITS = 0o6000  # S_ISUID | S_ISGID
_CREATING = 0o100 | 0o20000000  # O_CREAT | __O_TMPFILE (x86_64 and aarch64)

_SOCK_FILTER = struct.Struct("=HBBI")


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


@functools.lru_cache(maxsize=4)
def network_filter(arch: Arch | None = None) -> bytes:
    """The filter program as an array of `struct sock_filter`, in native byte order.

    This is the format bubblewrap's `--seccomp FD` reads. `arch` defaults to the host's;
    raises OSError(ENOSYS) on an architecture this package has no syscall table for.
    """
    return _program(arch or require_arch(), network_off=True)


@functools.lru_cache(maxsize=4)
def hardening_filter(arch: Arch | None = None) -> bytes:
    """`network_filter` without its refusal of sockets: for a child with network on whose
    mount namespace and files the rest of the filter must still keep (see the module)."""
    return _program(arch or require_arch(), network_off=False)


def _program(arch: Arch, network_off: bool) -> bytes:
    # Each line: (opcode, jump if true, jump if false, constant), jumps by label.
    program: list[tuple[int, str | int, str | int, int]] = [
        (_LD_W_ABS, 0, 0, _ARCH),
        # Wrong architecture: the kill return.
        (_JEQ_K, 0, "kill", arch.audit_arch),
        (_LD_W_ABS, 0, 0, _NR),
    ]
    if arch.x32_bit is not None:
        program.append((_JGE_K, "eacces", 0, arch.x32_bit))
    if network_off:
        program.append((_JEQ_K, "eacces", 0, arch.socket))
    for number, target in (
        (arch.io_uring_setup, "enosys"),
        (arch.io_uring_enter, "enosys"),
        (arch.io_uring_register, "enosys"),
        (arch.pidfd_getfd, "eacces"),
        (arch.add_key, "enosys"),
        (arch.request_key, "enosys"),
        (arch.keyctl, "enosys"),
        # openat2's flags and mode are in a struct a filter cannot read: as on a kernel
        # before 5.6, so that callers fall back to openat.
        (arch.openat2, "enosys"),
        # The mount namespace's read-only mounts hold only while no mount changes:
        # Landlock refuses mount(2) but not the new mount API (open_tree a copy of a
        # read-only mount, mount_setattr it writable).
        *((number, "eperm") for number in arch.mounting),
    ):
        program.append((_JEQ_K, target, 0, number))
    # No set-user-ID or set-group-ID bit on a file made or changed here: a program a
    # sandboxed root made setuid would run as root for any user of the host.
    for index, (number, mode_at, flags_at) in enumerate(arch.mode_setters):
        skip = f"after {index}"
        program.append((_JEQ_K, 0, skip, number))
        if flags_at is not None:
            # open and openat set a mode only when they create (O_CREAT, O_TMPFILE).
            program.append((_LD_W_ABS, 0, 0, _argument(flags_at)))
            program.append((_JSET_K, 0, "allow", _CREATING))
        program.append((_LD_W_ABS, 0, 0, _argument(mode_at)))
        program.append((_JSET_K, "eperm", "allow", _SET_ID_BITS))
        program.append((skip, 0, 0, 0))  # a label, not an instruction
    returns = {
        "allow": SECCOMP_RET_ALLOW,
        "eacces": SECCOMP_RET_ERRNO | errno.EACCES,
        "enosys": SECCOMP_RET_ERRNO | errno.ENOSYS,
        "eperm": SECCOMP_RET_ERRNO | errno.EPERM,
        "kill": SECCOMP_RET_KILL_PROCESS,
    }
    # Labels, each put before its return; the checks fall through to the first, "allow".
    program += [(name, 0, 0, 0) for name in returns]
    return _assemble(program, returns)


def _assemble(
    program: list[tuple[int | str, str | int, str | int, int]], returns: dict[str, int]
) -> bytes:
    """The instructions of ``program`` with each label resolved to the offset of the
    instruction after it (a classic-BPF jump counts the instructions it skips); a return's
    label is followed by its return."""
    labels: dict[str, int] = {}
    instructions: list[tuple[int, str | int, str | int, int]] = []
    for opcode, true, false, constant in program:
        if isinstance(opcode, str):
            labels[opcode] = len(instructions)
            if opcode in returns:
                instructions.append((_RET_K, 0, 0, returns[opcode]))
            continue
        instructions.append((opcode, true, false, constant))

    def offset(at: int, target: str | int) -> int:
        return target if isinstance(target, int) else labels[target] - at - 1

    return b"".join(
        _SOCK_FILTER.pack(opcode, offset(at, true), offset(at, false), constant)
        for at, (opcode, true, false, constant) in enumerate(instructions)
    )


def _argument(index: int) -> int:
    # struct seccomp_data: nr, arch, instruction_pointer, then six 64-bit arguments; the
    # low 32 bits (mode and flags fit there) come first on these little-endian machines.
    return _ARGS + 8 * index


def install_filter(network_off: bool = True) -> None:
    """Install `network_filter()` (`hardening_filter()` when not `network_off`) on the
    calling thread and everything it execs or forks.

    Call it in a single-threaded child right before exec (a filter installed with prctl
    binds only the calling thread). Sets PR_SET_NO_NEW_PRIVS first, which an unprivileged
    filter requires. Irreversible. Raises OSError (EINVAL when the kernel lacks
    CONFIG_SECCOMP_FILTER, ENOSYS on an unknown architecture).
    """
    # The program is built once per process (cached): a forked child then only installs it.
    program = network_filter() if network_off else hardening_filter()
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
    """Whether `install_filter` really refuses a UDP socket here (`denies_socket`, in a child
    of a spawned interpreter): a verdict that is True when it does, else says why not."""
    return run_checks([check()])[0]


def check() -> Check:
    """The check behind `works`, for `sandbox.layers._checks.run_checks`."""
    return Check(__name__, denies_socket.__name__)


def denies_socket() -> bool:
    """Apply `install_filter`, then try a UDP socket: True when refused. Irreversible: only
    for a child of its own."""
    install_filter()
    try:
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()
    except PermissionError:
        return True
    return False
