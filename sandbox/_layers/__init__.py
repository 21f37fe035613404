"""Isolation layers beneath the portable process level: bubblewrap, Landlock, seccomp and
cgroup v2, each a module taking primitives (`Confinement`, argv, paths), none importing
`workspace_tools`.

`probe()` says which protection each layer really gives on this host; the caller keeps
the result (e.g. on its Sandbox) instead of probing per call. `missing(protection)` is the
one-line message for a protection nobody can give.
"""

from __future__ import annotations

from . import bwrap, cgroup, landlock, seccomp

WRITE_CONFINEMENT = "write_confinement"
READ_DENIAL = "read_denial"
NETWORK_OFF = "network_off"
PROCESS_CAP = "process_cap"
PROTECTIONS = (WRITE_CONFINEMENT, READ_DENIAL, NETWORK_OFF, PROCESS_CAP)

BUBBLEWRAP = "bubblewrap"
LANDLOCK = "landlock"
SECCOMP = "seccomp"
CGROUP_V2 = "cgroup-v2"

_LANDLOCK_HINT = "Landlock (Linux >= 5.13 with landlock in the boot-time lsm= list)"
_MISSING = {
    WRITE_CONFINEMENT: f"no layer confines writes; needs bubblewrap ({bwrap.INSTALL_HINT}) "
    f"or {_LANDLOCK_HINT}",
    READ_DENIAL: f"no layer denies reads; needs bubblewrap ({bwrap.INSTALL_HINT}) "
    f"or {_LANDLOCK_HINT}",
    NETWORK_OFF: "no layer turns the network off; needs seccomp filters "
    "(a Linux kernel built with CONFIG_SECCOMP_FILTER, on x86_64 or aarch64)",
    PROCESS_CAP: f"no layer caps processes; needs {cgroup.DELEGATION_HINT}",
}


def probe() -> dict[str, str]:
    """Each protection this host can enforce -> the mechanism that gives it.

    Keys are from `PROTECTIONS`; values are `BUBBLEWRAP`, `LANDLOCK`, `SECCOMP` or
    `CGROUP_V2`; a protection no layer gives is absent. Every mechanism is tried for real:
    bubblewrap runs `true` with the options `bwrap.wrap_argv` uses, Landlock and seccomp
    are applied in a forked child that then checks their effect, and a trial cgroup is
    created and removed. Takes a few tens of milliseconds; keep the result.

    Where bubblewrap works it is preferred for files; network off under bubblewrap also
    needs seccomp (for host Unix sockets), so "bubblewrap" is given for it only when both
    work. Without bubblewrap, network off is seccomp's (with Landlock's TCP rules as a
    second wall where ABI >= 4). A caller that cannot exec bubblewrap (a forked Python
    callable) can ask `landlock.works()` and `seccomp.works()` directly.
    """
    found: dict[str, str] = {}
    has_bwrap = bwrap.available() is None
    has_landlock = landlock.works()
    has_seccomp = seccomp.works()
    files = BUBBLEWRAP if has_bwrap else LANDLOCK if has_landlock else None
    if files:
        found[WRITE_CONFINEMENT] = found[READ_DENIAL] = files
    if has_seccomp:
        found[NETWORK_OFF] = BUBBLEWRAP if has_bwrap else SECCOMP
    if cgroup.available() is None:
        found[PROCESS_CAP] = CGROUP_V2
    return found


def missing(protection: str) -> str:
    """One line naming what `protection` needs and how to get it (for SandboxUnavailable).

    Raises KeyError for a name not in `PROTECTIONS`.
    """
    return _MISSING[protection]
