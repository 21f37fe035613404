"""Isolation layers beneath the portable process level: bubblewrap, Landlock, seccomp,
a mount namespace, cgroups and a user namespace with RLIMIT_NPROC, each a module taking
primitives (`Confinement`, argv, paths), none importing `workspace_tools`.

`probe()` says which protection each layer really gives on this host; the caller keeps
the result (e.g. on its Sandbox) instead of probing per call. `missing(protection)` is the
one-line message for a protection nobody can give.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping

from sandbox.layers import bwrap, cgroup, landlock, mountns, seccomp, userns
from sandbox.layers._checks import run_checks
from sandbox.layers._syscall import Verdict

WRITE_CONFINEMENT = "write_confinement"
READ_DENIAL = "read_denial"
NETWORK_OFF = "network_off"
PROCESS_CAP = "process_cap"
HOST_EXEC_PROTECTION = "host_exec_protection"
PROTECTIONS = (WRITE_CONFINEMENT, READ_DENIAL, NETWORK_OFF, PROCESS_CAP, HOST_EXEC_PROTECTION)
#: Reported, not asked for: the child cannot signal processes outside its sandbox.
SIGNAL_SCOPING = "signal_scoping"

BUBBLEWRAP = "bubblewrap"
LANDLOCK = "landlock"
SECCOMP = "seccomp"
CGROUP_V2 = "cgroup-v2"
CGROUP_V1 = "cgroup-v1"
MOUNT_NAMESPACE = "mount-namespace"
#: A user namespace of the child's own in which RLIMIT_NPROC caps its uid's processes.
USER_NAMESPACE_NPROC = "user-namespace-nproc"

_LANDLOCK_HINT = "Landlock (Linux >= 5.13 with landlock in the boot-time lsm= list)"
_MISSING = {
    WRITE_CONFINEMENT: "no layer confines writes (contents and metadata); needs bubblewrap "
    f"({bwrap.INSTALL_HINT}), or {_LANDLOCK_HINT} together with a mount namespace (root, or "
    "user namespaces: sysctl user.max_user_namespaces > 0)",
    READ_DENIAL: f"no layer denies reads; needs bubblewrap ({bwrap.INSTALL_HINT}) "
    f"or {_LANDLOCK_HINT}",
    NETWORK_OFF: "no layer turns the network off; needs seccomp filters "
    "(a Linux kernel built with CONFIG_SECCOMP_FILTER, on x86_64 or aarch64)",
    PROCESS_CAP: f"no layer caps processes; needs {cgroup.DELEGATION_HINT}, or {userns.HINT}",
    HOST_EXEC_PROTECTION: "no layer keeps paths inside writable directories read-only; "
    f"needs bubblewrap ({bwrap.INSTALL_HINT}), or {_LANDLOCK_HINT} together with a mount "
    "namespace (root, or user namespaces: sysctl user.max_user_namespaces > 0)",
}


def check_all() -> dict[str, Verdict]:
    """The verdict of every check `probe` and a sandbox's plan need, keyed `LANDLOCK`
    (denies a write), `SIGNAL_SCOPING` (Landlock's), `MOUNT_NAMESPACE`, `SECCOMP` and
    `USER_NAMESPACE_NPROC`: all at once, each in a child of its own (`run_checks`), forked
    from this process only while it runs no other thread, else from one spawned
    interpreter.

    Raises:
        OSError: the interpreter could not run the checks (says nothing of the layers).
    """
    with tempfile.TemporaryDirectory() as scratch:
        wanted = {
            LANDLOCK: landlock.write_check(scratch),
            SIGNAL_SCOPING: landlock.signal_check(),
            MOUNT_NAMESPACE: mountns.check(scratch),
            SECCOMP: seccomp.check(),
            USER_NAMESPACE_NPROC: userns.check(),
        }
        return dict(zip(wanted, run_checks(list(wanted.values())), strict=True))


def probe(verdicts: Mapping[str, Verdict] | None = None) -> dict[str, str]:
    """Each protection this host can enforce -> the mechanism that gives it.

    Keys are from `PROTECTIONS`; values are `BUBBLEWRAP`, `LANDLOCK`, `SECCOMP`,
    `MOUNT_NAMESPACE`, `CGROUP_V2`, `CGROUP_V1` or `USER_NAMESPACE_NPROC`; a protection no
    layer gives is absent. Every mechanism is tried for real: bubblewrap runs `true` with
    the options `bwrap.wrap_argv` uses, Landlock, seccomp, the mount namespace and the
    user namespace's process cap are applied in children of one spawned interpreter that
    then check their effect (`check_all`; pass its `verdicts` when they are at hand), and
    a trial cgroup is created and removed.
    Takes a few tens of milliseconds; keep the result.

    Confined writes (contents and metadata: mode, owner, timestamps, extended attributes)
    and paths kept read-only inside writable directories (host exec protection) are
    bubblewrap's read-only view, or without it a read-only mount namespace of the child's
    own, which only Landlock keeps it from undoing (Landlock alone confines contents only).

    Where bubblewrap works it is preferred for files; network off under bubblewrap also
    needs seccomp (for host Unix sockets), so "bubblewrap" is given for it only when both
    work. Without bubblewrap, network off is seccomp's (with Landlock's TCP rules as a
    second wall where ABI >= 4). A caller that cannot exec bubblewrap (a forked Python
    callable) can ask `landlock.works()` and `seccomp.works()` directly.
    """
    return probe_with_reasons(verdicts)[0]


def probe_with_reasons(
    verdicts: Mapping[str, Verdict] | None = None,
) -> tuple[dict[str, str], dict[str, str]]:
    """What `probe` finds, and for each protection no layer gives a command, what the
    probe met on the way: why bubblewrap does not run here, the failed checks' verdicts
    (`Verdict.why`), why no cgroup caps processes; ``"; "``-joined, for a refusal to name
    (`SandboxUnavailable`)."""
    verdicts = check_all() if verdicts is None else verdicts
    found: dict[str, str] = {}
    why: dict[str, list[str]] = {protection: [] for protection in PROTECTIONS}
    bwrap_refused = bwrap.available()
    has_bwrap = bwrap_refused is None
    disabled = userns_disabled()
    has_landlock = verdicts[LANDLOCK]
    has_seccomp = verdicts[SECCOMP]
    files = (WRITE_CONFINEMENT, READ_DENIAL, HOST_EXEC_PROTECTION)
    if has_bwrap:
        found[WRITE_CONFINEMENT] = found[READ_DENIAL] = BUBBLEWRAP
        found[HOST_EXEC_PROTECTION] = BUBBLEWRAP
    else:
        runs = bwrap_refused is not None and bwrap_refused.startswith(bwrap.INSTALLED_PREFIX)
        refused = f"{bwrap_refused} ({disabled})" if runs and disabled else str(bwrap_refused)
        for protection in files:
            why[protection].append(refused)
    if not has_bwrap and has_landlock:
        found[READ_DENIAL] = LANDLOCK
        if verdicts[MOUNT_NAMESPACE]:
            found[WRITE_CONFINEMENT] = found[HOST_EXEC_PROTECTION] = MOUNT_NAMESPACE
        else:
            failed = f"the mount namespace check failed here: {verdicts[MOUNT_NAMESPACE].why}"
            why[WRITE_CONFINEMENT].append(failed)
            why[HOST_EXEC_PROTECTION].append(failed)
    elif not has_bwrap:
        for protection in files:
            why[protection].append(f"the Landlock check failed here: {has_landlock.why}")
    if has_seccomp:
        found[NETWORK_OFF] = BUBBLEWRAP if has_bwrap else SECCOMP
    else:
        why[NETWORK_OFF].append(f"the seccomp check failed here: {has_seccomp.why}")
    by_userns = verdicts[USER_NAMESPACE_NPROC]
    process_cap = process_cap_mechanism(by_userns=by_userns)
    if process_cap:
        found[PROCESS_CAP] = process_cap
    else:
        try:
            cgroup.locate()
        except OSError as exc:
            why[PROCESS_CAP].append(f"no cgroup caps processes here: {exc.strerror or exc}")
        if not by_userns:
            failed = f"the user namespace check failed here: {by_userns.why}"
            why[PROCESS_CAP].append(f"{failed} ({disabled})" if disabled else failed)
    reasons = {p: "; ".join(met) for p, met in why.items() if p not in found and met}
    return found, reasons


#: Switches that turn unprivileged user namespaces off (bubblewrap needs them as a user),
#: each with the value that does.
_USERNS_SWITCHES = (
    ("/proc/sys/kernel/unprivileged_userns_clone", "0"),
    ("/proc/sys/user/max_user_namespaces", "0"),
    ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1"),
)


def userns_disabled() -> str | None:
    """``user namespaces disabled: <switch> = <value>`` for each kernel switch here that
    turns unprivileged user namespaces off (the usual reason bubblewrap and the user
    namespace layer fail), else None (none of them exists, or none is set so)."""
    found = []
    for path, off in _USERNS_SWITCHES:
        try:
            # Bytes, decoded without the codec registry: a process that dropped privileges
            # may no longer be able to import a codec module from its interpreter's home.
            with open(path, "rb") as switch:
                value = switch.read().strip().decode("ascii", "replace")
        except OSError:
            continue
        if value == off:
            found.append(f"{path} = {value}")
    return f"user namespaces disabled: {', '.join(found)}" if found else None


def process_cap_mechanism(
    parent: str | None = None, *, by_userns: Verdict | None = None
) -> str | None:
    """`CGROUP_V2` or `CGROUP_V1` when `cgroup.locate(parent)` finds where to cap
    processes (a cgroup also kills what the child leaves), else `USER_NAMESPACE_NPROC`
    when `by_userns` (default: `userns.works()`) held (a caller that is not root), else
    None."""
    try:
        located = cgroup.locate(parent)
    except OSError:
        if by_userns is None:
            by_userns = userns.works()
        return USER_NAMESPACE_NPROC if by_userns else None
    return CGROUP_V1 if cgroup.is_v1(located) else CGROUP_V2


def missing(protection: str) -> str:
    """One line naming what `protection` needs and how to get it (for SandboxUnavailable).

    Raises KeyError for a name not in `PROTECTIONS`.
    """
    return _MISSING[protection]
