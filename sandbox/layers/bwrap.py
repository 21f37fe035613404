"""bubblewrap: run a command in fresh mount, PID (and network) namespaces.

The option meanings are bubblewrap's (`bwrap(1)`, bubblewrap >= 0.4). The command sees `/`
read-only, the writable directories bound read-write, a private `/tmp`, a minimal `/dev`,
a `/proc` of its own PID namespace, and stand-ins over read-denied paths. All
capabilities are dropped, so a root command cannot remount `/` read-write.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Collection, Mapping, Sequence

from sandbox.layers._confinement import Confinement, pinned_directories
from sandbox.layers._realpath import realpath

INSTALL_HINT = "apt-get install bubblewrap"
# The namespaces and mounts every wrapped command gets; the probe runs exactly these.
_BASE = (
    "--die-with-parent",
    "--new-session",
    "--unshare-pid",
    "--cap-drop",
    "ALL",
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "--tmpfs",
    "/tmp",
)

#: bubblewrap's own processes in a wrapped command's tree: the one started, and the init
#: (pid 1) of the PID namespace it makes, whose child runs the command.
OWN_PROCESSES = 2

#: The exit status and the whole standard error of a command refused because its working
#: directory was not the one the caller opened (see `wrap_argv`'s `cwd_identity`).
CWD_CHANGED_STATUS = 125
CWD_CHANGED_MESSAGE = (
    b"sandbox: the working directory changed while the command was starting; nothing was run\n"
)
# Run by /bin/sh inside the sandbox with "$1" the directory and "$2" its "st_dev:st_ino":
# enter it, check that what was entered is that directory, then exec the command. A path
# can be changed between the caller's open and this chdir (a directory swapped for a
# link); the identity cannot. `cd` sets PWD (exported, as bwrap set it) and OLDPWD, which
# the command's environment did not have.
_ENTER_AND_CHECK = (
    'cd -P -- "$1" 2>/dev/null && [ "$({stat} -c %d:%i .)" = "$2" ] || '
    "{{ printf '%s' {message} >&2; exit {status}; }}\n"
    'unset OLDPWD\nshift 2\nexec "$@"'
)
# The same check where no `stat` program is installed, by the interpreter that runs this.
# Python's start may coerce a C locale into LC_CTYPE (PEP 538): the command's value (None:
# unset) is put back.
_ENTER_AND_CHECK_PY = (
    "import os, sys\n"
    "lc_ctype = {lc_ctype!r}\n"
    "if lc_ctype is None:\n"
    "    os.environ.pop('LC_CTYPE', None)\n"
    "else:\n"
    "    os.environ['LC_CTYPE'] = lc_ctype\n"
    "try:\n"
    "    os.chdir(sys.argv[1])\n"
    "    s = os.stat('.')\n"
    "except OSError:\n"
    "    s = None\n"
    "if s is None or f'{{s.st_dev}}:{{s.st_ino}}' != sys.argv[2]:\n"
    "    sys.stderr.buffer.write({message!r})\n"
    "    sys.exit({status})\n"
    "os.environ['PWD'] = sys.argv[1]\n"
    "os.execvp(sys.argv[3], sys.argv[3:])\n"
)


#: How :func:`available`'s answer begins when bubblewrap is there but refuses to run.
INSTALLED_PREFIX = "bubblewrap is installed but fails here: "


def available() -> str | None:
    """None when bubblewrap runs here with the options `wrap_argv` uses, else why not.

    Runs `bwrap <base options> --unshare-net true` for real (a few milliseconds): a binary
    can be installed yet unusable, e.g. where unprivileged user namespaces are disabled.
    """
    executable = shutil.which("bwrap")
    if executable is None:
        return f"bubblewrap is not installed ({INSTALL_HINT})"
    try:
        completed = subprocess.run(
            [executable, *_BASE, "--unshare-net", "true"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not run: {exc}"
    if completed.returncode != 0:
        detail = completed.stderr.decode(errors="replace").strip().splitlines()
        reason = detail[-1] if detail else f"exit status {completed.returncode}"
        return f"{INSTALLED_PREFIX}{reason}"
    return None


def wrap_argv(
    confinement: Confinement,
    argv: Sequence[str],
    cwd: str,
    env: Mapping[str, str],
    *,
    seccomp_fd: int | None = None,
    cwd_identity: tuple[int, int] | None = None,
) -> list[str]:
    """The argv that runs `argv` under bubblewrap with `confinement`.

    Args:
        confinement: what the command may touch. The most specific entry of `writable` or
            `read_denied` containing a path decides it (a denied file inside the workspace
            stays hidden; a workspace inside a denied home stays writable); `read_only`
            paths are bound read-only over their writable directory. A denied
            directory becomes an empty read-only tmpfs; over a denied file `/dev/null` is
            bound on a nodev mount, so opening it fails with EACCES. Paths that do not
            exist are skipped. `max_processes` is not bubblewrap's (see `cgroup` and
            `userns`); a cap on the tree counts `OWN_PROCESSES` of bubblewrap's.
        argv: the command; bwrap (or the shell that checks `cwd_identity`) resolves
            argv[0] with `env`'s PATH inside the sandbox.
        cwd: absolute working directory inside the sandbox.
        env: the command's whole environment, passed with `--clearenv`/`--setenv` so the
            wrapped argv does not depend on bwrap's own environment. Values appear in
            bwrap's command line (/proc/PID/cmdline): pass an allowlisted environment.
        seccomp_fd: a readable descriptor holding `seccomp.network_filter()` (with
            `network=False`) or `seccomp.hardening_filter()`, inherited by bwrap (e.g. a
            pipe passed in `pass_fds`); bwrap installs it right before exec. Required with
            `network=False`: a network namespace cuts TCP, UDP and abstract Unix sockets,
            but a socket *file* on the read-only `/` (a Docker or D-Bus socket) still
            accepts connections.
        cwd_identity: `(st_dev, st_ino)` of the directory `cwd` must be, taken from a
            descriptor the caller opened without following links. bubblewrap changes
            directory by path, so a directory swapped for a link meanwhile would start
            the command elsewhere; with this, bubblewrap starts in `/` and `/bin/sh`
            enters `cwd`, checks that the directory entered has that identity (with
            `stat`, else this interpreter), then execs `argv`. Otherwise (a directory
            swapped, removed, or not visible in the sandbox) nothing runs: the command
            exits with `CWD_CHANGED_STATUS` and `CWD_CHANGED_MESSAGE` as its whole
            standard error.
            (No descriptor of the host is ever passed in: entering one with fchdir
            would escape the sandbox's root.)

    Returns: `["bwrap", ...options, "--", *argv]`, with the executable's absolute path.

    Raises: ValueError when `network=False` and no `seccomp_fd`, or `cwd` is relative;
    FileNotFoundError when bwrap is not installed.

    bwrap dies with the thread that started it (`--die-with-parent` uses PR_SET_PDEATHSIG),
    so start it from a thread that outlives the command. Killing bwrap kills the whole
    command tree: its PID namespace dies with it.

    Example:
        >>> wrap_argv(Confinement(writable=("/ws",), network=False), ["make"], "/ws",
        ...           {"PATH": "/usr/bin"}, seccomp_fd=3)  # doctest: +SKIP
        ['/usr/bin/bwrap', '--die-with-parent', ..., '--bind', '/ws', '/ws',
         '--unshare-net', '--seccomp', '3', '--chdir', '/ws', '--clearenv',
         '--setenv', 'PATH', '/usr/bin', '--', 'make']
    """
    if not os.path.isabs(cwd):
        raise ValueError(f"cwd must be absolute, got {cwd!r}")
    if not confinement.network and seccomp_fd is None:
        raise ValueError("network=False under bubblewrap needs seccomp_fd (host Unix sockets)")
    executable = shutil.which("bwrap")
    if executable is None:
        raise FileNotFoundError(f"bubblewrap is not installed ({INSTALL_HINT})")
    base, mounts = list(_BASE), _mounts(confinement, _kept_from_tmp(env))
    if mounts[:3] == ["--bind", "/", "/"]:
        # The whole tree writable (no write confinement): bound in place of the read-only
        # root, before the private /dev, /proc and /tmp. Bound after them, its recursive
        # bind would put the host's back over them (the host's processes in /proc).
        root_at = base.index("--ro-bind")
        base[root_at : root_at + 3] = mounts[:3]
        mounts = mounts[3:]
    args = [executable, *base, *mounts]
    if not confinement.network:
        args += ["--unshare-net"]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    args += ["--chdir", cwd if cwd_identity is None else "/", "--clearenv"]
    for name, value in env.items():
        args += ["--setenv", name, value]
    if cwd_identity is not None:
        device, inode = cwd_identity
        argv = [*_entering(env), cwd, f"{device}:{inode}", *argv]
    return [*args, "--", *argv]


def _entering(env: Mapping[str, str]) -> list[str]:
    """The argv prefix that, given a directory, its "st_dev:st_ino" and a command, enters
    the directory, checks its identity and execs the command with `env` (see
    `wrap_argv`)."""
    message = CWD_CHANGED_MESSAGE.decode()
    stat = shutil.which("stat", path=os.defpath)
    if stat is None:
        script = _ENTER_AND_CHECK_PY.format(
            lc_ctype=env.get("LC_CTYPE"), message=CWD_CHANGED_MESSAGE, status=CWD_CHANGED_STATUS
        )
        return [sys.executable, "-I", "-S", "-c", script]
    script = _ENTER_AND_CHECK.format(
        stat=shlex.quote(stat), message=shlex.quote(message), status=CWD_CHANGED_STATUS
    )
    return ["/bin/sh", "-c", script, "sh"]


def _kept_from_tmp(env: Mapping[str, str]) -> set[str]:
    """Host directories under `/tmp` the command needs to start: the running interpreter's
    prefixes and the `PATH` entries there (a `bin` entry with its prefix, as a virtual
    environment's `lib` sits beside its `bin`). The private `/tmp` would hide them, and a
    checkout or virtual environment in `/tmp` is common in CI."""
    tmp = realpath("/tmp")
    candidates = {sys.prefix, sys.exec_prefix, sys.base_prefix}
    for entry in env.get("PATH", "").split(os.pathsep):
        if os.path.isabs(entry):
            real = realpath(entry)
            candidates.add(os.path.dirname(real) if os.path.basename(real) == "bin" else real)
    kept = set()
    for path in candidates:
        real = realpath(path)
        if real.startswith(tmp + os.sep) and os.path.isdir(real):
            kept.add(real)
    return kept


_WRITABLE, _VISIBLE, _DENIED = 0, 1, 2


def _mounts(confinement: Confinement, visible: Collection[str] = ()) -> list[str]:
    """Bind and tmpfs options, shallowest first so deeper (more specific) ones win.
    A read-only path inside a writable directory is bound over it read-only, like a
    visible one, and the directories between them over themselves (see
    `pinned_directories`)."""
    entries = [(path, _WRITABLE) for path in confinement.writable]
    # Bound over themselves so that the child cannot move a protected path's parents.
    entries += [
        (path, _WRITABLE)
        for path in pinned_directories(
            confinement.writable, confinement.read_only, confinement.read_denied
        )
    ]
    entries += [(path, _VISIBLE) for path in (*visible, *confinement.read_only)]
    entries += [(path, _DENIED) for path in confinement.read_denied]
    resolved = {(realpath(path), kind) for path, kind in entries if os.path.lexists(path)}
    options: list[str] = []
    # Made read-only only after every mount, since binds beneath need their mount points.
    read_only: list[str] = []
    for path, kind in sorted(resolved, key=lambda e: (e[0].rstrip("/").count("/"), e[1], e[0])):
        if kind == _WRITABLE:
            options += ["--bind", path, path]
        elif kind == _VISIBLE:
            options += ["--ro-bind", path, path]
        elif os.path.isdir(path):
            options += ["--tmpfs", path]
            read_only += ["--remount-ro", path]
        else:
            options += ["--ro-bind", "/dev/null", path]
    return options + read_only
