"""Raw Linux system calls through ctypes, shared by the Landlock and seccomp layers.

Syscall numbers and audit architectures come from the kernel's own tables
(`arch/x86/entry/syscalls/syscall_64.tbl`, `include/uapi/asm-generic/unistd.h` for
aarch64, `include/uapi/linux/audit.h`).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from dataclasses import dataclass

PR_SET_NO_NEW_PRIVS = 38


@dataclass(frozen=True)
class Arch:
    """The syscall numbers this package needs on one CPU architecture."""

    audit_arch: int
    socket: int
    add_key: int
    request_key: int
    keyctl: int
    # Syscalls numbered 424 and up (Linux 5.1 on) have one number on every architecture.
    io_uring_setup: int = 425
    io_uring_enter: int = 426
    io_uring_register: int = 427
    pidfd_getfd: int = 438
    landlock_create_ruleset: int = 444
    landlock_add_rule: int = 445
    landlock_restrict_self: int = 446
    # x86_64 also accepts x32 syscalls: the native number with this bit set.
    x32_bit: int | None = None
    #: Syscalls that set a new or existing file's mode, each ``(number, index of the mode
    #: argument, index of the open flags or None where the call always creates)``.
    mode_setters: tuple[tuple[int, int, int | None], ...] = ()
    openat2: int = 437
    #: Syscalls that change mounts (the classic ones, then the new mount API of 5.2 on).
    mounting: tuple[int, ...] = ()


# Numbers from the kernel's syscall tables (arch/x86/entry/syscalls/syscall_64.tbl,
# include/uapi/asm-generic/unistd.h); chmod(2), open(2) and mknod(2) give the arguments.
_X86_64 = Arch(
    audit_arch=0xC000003E,
    socket=41,
    add_key=248,
    request_key=249,
    keyctl=250,
    x32_bit=0x40000000,
    # mount, umount2, pivot_root; open_tree, move_mount, fsopen, fsconfig, fsmount, fspick,
    # mount_setattr, open_tree_attr
    mounting=(165, 166, 155, 428, 429, 430, 431, 432, 433, 442, 467),
    mode_setters=(
        (90, 1, None),  # chmod(path, mode)
        (91, 1, None),  # fchmod(fd, mode)
        (268, 2, None),  # fchmodat(dirfd, path, mode)
        (452, 2, None),  # fchmodat2(dirfd, path, mode, flags)
        (133, 1, None),  # mknod(path, mode, dev)
        (259, 2, None),  # mknodat(dirfd, path, mode, dev)
        (85, 1, None),  # creat(path, mode)
        (2, 2, 1),  # open(path, flags, mode)
        (257, 3, 2),  # openat(dirfd, path, flags, mode)
    ),
)
_AARCH64 = Arch(
    audit_arch=0xC00000B7,
    socket=198,
    add_key=217,
    request_key=218,
    keyctl=219,
    mounting=(40, 39, 41, 428, 429, 430, 431, 432, 433, 442, 467),
    mode_setters=(
        (52, 1, None),  # fchmod
        (53, 2, None),  # fchmodat
        (452, 2, None),  # fchmodat2
        (33, 2, None),  # mknodat
        (56, 3, 2),  # openat
    ),
)


def host_arch() -> Arch | None:
    """The syscall table of this machine, or None on an architecture this package lacks."""
    if platform.system() != "Linux":
        return None
    return {"x86_64": _X86_64, "aarch64": _AARCH64, "arm64": _AARCH64}.get(platform.machine())


def _load_libc() -> ctypes.CDLL | None:
    if os.name != "posix":
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


# Loaded once: building a CDLL costs tens of microseconds, and rules take a call each.
_LIBC = _load_libc()


def libc() -> ctypes.CDLL:
    """The C library, loaded once; raises OSError(ENOSYS) where there is none."""
    if _LIBC is None:
        raise OSError(errno.ENOSYS, "no C library to make system calls through")
    return _LIBC


def syscall(number: int, *args: int | ctypes.c_void_p | ctypes.c_size_t | ctypes.c_uint32) -> int:
    """Call syscall `number`; returns its non-negative result or raises OSError with errno."""
    result = libc().syscall(ctypes.c_long(number), *args)
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"syscall {number}: {os.strerror(code)}")
    return int(result)


def prctl(option: int, arg2: int | ctypes.c_void_p, arg3: int = 0) -> None:
    """prctl(2) with the trailing arguments zero; raises OSError on failure."""
    result = libc().prctl(
        ctypes.c_int(option),
        arg2 if isinstance(arg2, ctypes.c_void_p) else ctypes.c_ulong(arg2),
        ctypes.c_ulong(arg3),
        ctypes.c_ulong(0),
        ctypes.c_ulong(0),
    )
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"prctl({option}): {os.strerror(code)}")


def set_no_new_privs() -> None:
    """PR_SET_NO_NEW_PRIVS: exec can no longer gain privileges (setuid, file capabilities).

    Both Landlock and unprivileged seccomp filters require it (Documentation/userspace-api/
    no_new_privs.rst).
    """
    prctl(PR_SET_NO_NEW_PRIVS, 1)


PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAPABILITY_VERSION_3 = 0x20080522  # include/uapi/linux/capability.h


def drop_capabilities() -> None:
    """Give up every capability for good (capabilities(7)): the bounding set (so that no
    exec, a root one included, gets any back), the ambient set, then the effective,
    permitted and inheritable sets. A root child keeps its uid but may then do only what
    the files' modes let it, as under bubblewrap: no ``setxattr`` of file capabilities,
    no device node, no chown to another user, no mount.

    Raises:
        OSError: the kernel refused (the child must not go on to run untrusted work).
    """
    c = libc()
    for capability in range(64):
        if c.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(capability), 0, 0, 0) != 0:
            code = ctypes.get_errno()
            if code == errno.EINVAL:
                break  # past the last capability this kernel knows
            raise OSError(code, f"prctl(PR_CAPBSET_DROP): {os.strerror(code)}")
    # EINVAL on a kernel before 4.3, which has no ambient set.
    c.prctl(PR_CAP_AMBIENT, ctypes.c_ulong(PR_CAP_AMBIENT_CLEAR_ALL), 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: twice 32 bits
    if c.capset(header, data) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"capset: {os.strerror(code)}")


def require_arch() -> Arch:
    """The host's syscall table; raises OSError(ENOSYS) where this package has none."""
    arch = host_arch()
    if arch is None:
        raise OSError(errno.ENOSYS, f"no syscall table for {platform.machine()} on this system")
    return arch


@dataclass(frozen=True)
class Verdict:
    """A layer's check: ``held`` when the layer was applied and its effect seen; else
    ``why`` says what happened instead (the exception the check met, its child's death,
    or the effect that was missing), for the refusal that follows to name. True as a
    bool when it held."""

    held: bool
    why: str = ""

    def __bool__(self) -> bool:
        return self.held
