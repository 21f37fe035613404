"""Which isolation layer gives which protection, and applying them to one command or call.

The layers themselves live in :mod:`sandbox.layers`; this module decides, from a probe
taken once, what a command (which may be wrapped in bubblewrap) and a forked Python call
(which can only confine itself: Landlock, seccomp, a cgroup) each get.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Collection
from dataclasses import dataclass, field

from sandbox.layers import (
    BUBBLEWRAP,
    CGROUP_V1,
    CGROUP_V2,
    HOST_EXEC_PROTECTION,
    LANDLOCK,
    MOUNT_NAMESPACE,
    NETWORK_OFF,
    PROCESS_CAP,
    READ_DENIAL,
    SECCOMP,
    SIGNAL_SCOPING,
    USER_NAMESPACE_NPROC,
    WRITE_CONFINEMENT,
    bwrap,
    cgroup,
    check_all,
    landlock,
    missing,
    mountns,
    probe_with_reasons,
    seccomp,
    userns,
)
from sandbox.layers._confinement import Confinement, pinned_directories
from sandbox.layers._syscall import drop_capabilities

#: The descriptor a bubblewrapped command's supervisor puts the seccomp filter on.
SECCOMP_FD = 3


@dataclass(frozen=True)
class LayerPlan:
    """What this host can enforce, per kind of child.

    Attributes:
        commands: protection -> mechanism for a command (bubblewrap preferred).
        calls: protection -> mechanism for a forked Python callable (no bubblewrap).
        cgroup_parent: the delegated cgroup to create per-child cgroups under, if any.
        landlock_scopes_signals: Landlock keeps a child it confines from signalling
            processes outside its domain (ABI >= 6).
        calls_missing: protection -> why the layer that would give it to a call failed its
            check here (the check's exception or the effect it did not see), for the
            refusal to name.
        commands_missing: the same for a command: why bubblewrap does not run here (with
            the kernel switch that turns user namespaces off, when one does), the failed
            checks' verdicts, why no cgroup caps processes.
    """

    commands: dict[str, str] = field(default_factory=dict)
    calls: dict[str, str] = field(default_factory=dict)
    cgroup_parent: str | None = None
    landlock_scopes_signals: bool = False
    calls_missing: dict[str, str] = field(default_factory=dict)
    commands_missing: dict[str, str] = field(default_factory=dict)


def plan_layers() -> LayerPlan:
    """Probe every layer for real (tens of milliseconds; keep the result): the checks that
    apply a layer run together (`check_all`), never in a fork of a threaded process."""
    verdicts = check_all()
    commands, commands_why = probe_with_reasons(verdicts)
    calls: dict[str, str] = {}
    missing_why: dict[str, str] = {}
    scopes_signals = False
    by_landlock = verdicts[LANDLOCK]
    if by_landlock:
        calls[READ_DENIAL] = LANDLOCK
        by_mounts = verdicts[MOUNT_NAMESPACE]
        if by_mounts:
            calls[WRITE_CONFINEMENT] = calls[HOST_EXEC_PROTECTION] = MOUNT_NAMESPACE
        else:
            why = f"the mount namespace check failed here: {by_mounts.why}"
            missing_why[WRITE_CONFINEMENT] = missing_why[HOST_EXEC_PROTECTION] = why
        scopes_signals = bool(verdicts[SIGNAL_SCOPING])
    else:
        why = f"the Landlock check failed here: {by_landlock.why}"
        for protection in (READ_DENIAL, WRITE_CONFINEMENT, HOST_EXEC_PROTECTION):
            missing_why[protection] = why
    by_seccomp = verdicts[SECCOMP]
    if by_seccomp:
        calls[NETWORK_OFF] = SECCOMP
    else:
        missing_why[NETWORK_OFF] = f"the seccomp check failed here: {by_seccomp.why}"
    parent = None
    if PROCESS_CAP in commands:
        calls[PROCESS_CAP] = commands[PROCESS_CAP]
    elif PROCESS_CAP in commands_why:
        missing_why[PROCESS_CAP] = commands_why[PROCESS_CAP]
    if commands.get(PROCESS_CAP) in (CGROUP_V2, CGROUP_V1):
        with contextlib.suppress(OSError):
            parent = cgroup.locate()
    return LayerPlan(commands, calls, parent, scopes_signals, missing_why, commands_why)


def no_layers() -> LayerPlan:
    """The plan of a sandbox made with ``layers=False``: nothing probed, nothing enforced
    beyond the portable level, and a refusal (of a ``require``d protection) that says so
    instead of pointing at layers this host may well have."""
    why = "layers=False: this sandbox neither probes nor uses a layer; pass layers=True"
    protections = (
        WRITE_CONFINEMENT,
        READ_DENIAL,
        NETWORK_OFF,
        PROCESS_CAP,
        HOST_EXEC_PROTECTION,
    )
    reasons = dict.fromkeys(protections, why)
    return LayerPlan(calls_missing=reasons, commands_missing=dict(reasons))


def wanted(confinement: Confinement) -> list[str]:
    """The protections ``confinement`` asks for."""
    asked = []
    if confinement.writable:
        asked.append(WRITE_CONFINEMENT)
    if confinement.read_denied:
        asked.append(READ_DENIAL)
    if not confinement.network:
        asked.append(NETWORK_OFF)
    if confinement.max_processes is not None:
        asked.append(PROCESS_CAP)
    if confinement.read_only:
        asked.append(HOST_EXEC_PROTECTION)
    return asked


def enforced(available: dict[str, str], confinement: Confinement) -> dict[str, str]:
    """Protection -> mechanism for what ``confinement`` asks and ``available`` gives."""
    return {p: available[p] for p in wanted(confinement) if p in available}


def signal_scoping(mechanisms: dict[str, str], plan: LayerPlan) -> dict[str, str]:
    """``{"signal_scoping": mechanism}`` when a child under ``mechanisms`` cannot signal
    processes outside its sandbox: bubblewrap's PID namespace names none of them, and
    Landlock (applied whenever ``child_layers`` lists it) scopes signals on ABI >= 6."""
    if BUBBLEWRAP in mechanisms.values():
        return {SIGNAL_SCOPING: BUBBLEWRAP}
    if LANDLOCK in child_layers(mechanisms) and plan.landlock_scopes_signals:
        return {SIGNAL_SCOPING: LANDLOCK}
    return {}


def why_missing(protection: str, kind: str, plan: LayerPlan | None = None) -> str:
    """The fix for a protection no layer gives to ``kind`` (``"commands"``/``"calls"``),
    followed by what the probe of its layers met on this host when ``plan`` recorded it
    (``"... (bubblewrap is installed but fails here: ...; the Landlock check failed here:
    ...)"``)."""
    fix = _fix(protection, kind)
    found = None
    if plan is not None:
        found = (plan.calls_missing if kind == "calls" else plan.commands_missing).get(protection)
    return f"{fix} ({found})" if found else fix


def _fix(protection: str, kind: str) -> str:
    if kind == "calls" and protection == READ_DENIAL:
        return (
            "a Python call cannot be wrapped in bubblewrap; it needs Landlock "
            "(Linux >= 5.13 with landlock in the boot-time lsm= list)"
        )
    if kind == "calls" and protection == WRITE_CONFINEMENT:
        return (
            "a Python call cannot be wrapped in bubblewrap; it needs Landlock (Linux >= 5.13 "
            "with landlock in the boot-time lsm= list) together with a mount namespace (root, "
            "or user namespaces: sysctl user.max_user_namespaces > 0), since Landlock alone "
            "leaves file modes, owners, timestamps and extended attributes writable"
        )
    return missing(protection)


def layer_confinement(confinement: Confinement, mechanisms: dict[str, str]) -> Confinement:
    """The confinement the layers apply: what ``mechanisms`` enforce of ``confinement``,
    everything else left open. Bubblewrap starts from a read-only root and Landlock from
    no right at all, so unconfined writes must be spelled "/ is writable"."""
    return Confinement(
        writable=confinement.writable if WRITE_CONFINEMENT in mechanisms else ("/",),
        read_denied=confinement.read_denied if READ_DENIAL in mechanisms else (),
        read_only=confinement.read_only if HOST_EXEC_PROTECTION in mechanisms else (),
        network=NETWORK_OFF not in mechanisms,
        max_processes=confinement.max_processes,
    )


@dataclass(frozen=True)
class LayeredCommand:
    """A command as the layers run it.

    Attributes:
        argv: the command, or under bubblewrap bwrap's argv with the command at its end.
        env: the environment to start ``argv`` with: under bubblewrap none (the command's
            travels in bwrap's ``--setenv`` options, so bwrap's processes do not pass for
            the command's), else the command's.
        layers: layers the child applies to itself before exec (:func:`child_layers`).
        confinement: what the layers enforce (:func:`layer_confinement`).
        seccomp_fd: where bubblewrap reads the seccomp filter (:data:`SECCOMP_FD`), or
            ``None``.
    """

    argv: tuple[str, ...]
    env: dict[str, str]
    layers: tuple[str, ...]
    confinement: Confinement
    seccomp_fd: int | None = None


def layered_command(
    confinement: Confinement,
    mechanisms: dict[str, str],
    argv: list[str],
    cwd: str,
    env: dict[str, str],
    cwd_identity: tuple[int, int] | None = None,
) -> LayeredCommand:
    """How to run ``argv`` (in ``cwd`` with ``env``) under ``mechanisms``. Under bubblewrap,
    ``cwd_identity`` (``(st_dev, st_ino)``) is checked against the directory the command
    starts in (see ``bwrap.wrap_argv``)."""
    layered = layer_confinement(confinement, mechanisms)
    layers = tuple(child_layers(mechanisms))
    if BUBBLEWRAP not in mechanisms.values():
        return LayeredCommand(tuple(argv), env, layers, layered)
    network_off = mechanisms.get(NETWORK_OFF) == BUBBLEWRAP
    # The filter with network on too: no set-id bit (bubblewrap keeps root's uid).
    seccomp_fd = SECCOMP_FD
    wrapped = bwrap.wrap_argv(
        dataclasses.replace(layered, network=not network_off),
        argv,
        cwd,
        env,
        seccomp_fd=seccomp_fd,
        cwd_identity=cwd_identity,
    )
    # The command's environment travels in bwrap's --setenv options; bwrap itself needs
    # none, and so its processes do not pass for the command's.
    return LayeredCommand(tuple(wrapped), {}, layers, layered, seccomp_fd)


def child_layers(mechanisms: dict[str, str]) -> list[str]:
    """Layers a child applies to itself before exec or before running a callable."""
    names = []
    if mechanisms.get(PROCESS_CAP) == USER_NAMESPACE_NPROC:
        names.append(USER_NAMESPACE_NPROC)  # first: its count must hold every namespace after
    if MOUNT_NAMESPACE in mechanisms.values():
        names.append(MOUNT_NAMESPACE)  # before Landlock, which then locks the mounts
    if LANDLOCK in mechanisms.values() or MOUNT_NAMESPACE in mechanisms.values():
        names.append(LANDLOCK)
    if mechanisms.get(NETWORK_OFF) == SECCOMP:
        names.append(SECCOMP)
    return names


def apply_child_layers(
    names: Collection[str], confinement: Confinement, cgroup_dir: str | None = None
) -> None:
    """In a single-threaded child: join ``cgroup_dir``, enter a user namespace capping its
    processes at ``confinement.max_processes``, and apply a mount namespace (read-only but
    for the writable directories, unless ``/`` is one of them; the ``read_only`` paths bound
    read-only), Landlock and seccomp as ``names`` says, enforcing ``confinement``.

    Raises:
        OSError: a layer refused; the child must not go on to run untrusted work.
    """
    if cgroup_dir:
        cgroup.add_process(cgroup_dir)
    if USER_NAMESPACE_NPROC in names:
        userns.cap_processes(confinement.max_processes)
    if MOUNT_NAMESPACE in names:
        writable = confinement.writable
        mountns.confine(
            None if "/" in writable else writable,
            confinement.read_only,
            pinned_directories(writable, confinement.read_only, confinement.read_denied),
        )
    if LANDLOCK in names:
        landlock.apply(confinement)
    if SECCOMP in names:
        seccomp.install_filter()
    elif MOUNT_NAMESPACE in names:
        # Network on: the filter's other refusals still keep the mounts read-only (the new
        # mount API) and files without set-id bits.
        seccomp.install_filter(network_off=False)
    if MOUNT_NAMESPACE in names:
        drop_capabilities()


def seccomp_filter(network_off: bool = True) -> bytes:
    """The filter bubblewrap installs from :data:`SECCOMP_FD`: the network filter, or with
    network on the hardening one (``seccomp.hardening_filter``)."""
    return seccomp.network_filter() if network_off else seccomp.hardening_filter()
