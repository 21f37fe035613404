"""Landlock: unprivileged filesystem and TCP confinement of the calling process.

Follows the kernel's userspace API (`include/uapi/linux/landlock.h`,
Documentation/userspace-api/landlock.rst). Landlock is an allow-list: a ruleset names the
access rights it *handles*, and every handled right is denied except beneath the paths a
rule grants it on. Rights granted on a directory reach its whole hierarchy and cannot be
taken back below it, so "read everything except D" is built by granting reads on the
siblings of every ancestor of D instead of on `/` (see `plan_rules`).

Written on ctypes: the one PyPI binding (`landlock`, a 1.0 development release) is not a
dependency worth taking for three system calls.
"""

from __future__ import annotations

import ctypes
import errno
import os
import tempfile
from collections.abc import Callable, Iterable
from typing import NoReturn

from sandbox.layers._checks import Check, run_checks
from sandbox.layers._confinement import Confinement
from sandbox.layers._realpath import realpath
from sandbox.layers._syscall import (
    Arch,
    Verdict,
    libc,
    require_arch,
    set_no_new_privs,
    syscall,
)

CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1

# Filesystem access rights, with the ABI version that introduced each.
ACCESS_FS_EXECUTE = 1 << 0
ACCESS_FS_WRITE_FILE = 1 << 1
ACCESS_FS_READ_FILE = 1 << 2
ACCESS_FS_READ_DIR = 1 << 3
ACCESS_FS_REMOVE_DIR = 1 << 4
ACCESS_FS_REMOVE_FILE = 1 << 5
ACCESS_FS_MAKE_CHAR = 1 << 6
ACCESS_FS_MAKE_DIR = 1 << 7
ACCESS_FS_MAKE_REG = 1 << 8
ACCESS_FS_MAKE_SOCK = 1 << 9
ACCESS_FS_MAKE_FIFO = 1 << 10
ACCESS_FS_MAKE_BLOCK = 1 << 11
ACCESS_FS_MAKE_SYM = 1 << 12
ACCESS_FS_REFER = 1 << 13  # ABI 2
ACCESS_FS_TRUNCATE = 1 << 14  # ABI 3
ACCESS_NET_BIND_TCP = 1 << 0  # ABI 4
ACCESS_NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6
#: The first ABI whose domains can be scoped (signals, abstract Unix sockets).
SCOPE_ABI = 6

READ = ACCESS_FS_EXECUTE | ACCESS_FS_READ_FILE | ACCESS_FS_READ_DIR
# Rights that only make sense on a directory; a rule on any other file may not carry them.
_DIR_ONLY = (
    ACCESS_FS_READ_DIR
    | ACCESS_FS_REMOVE_DIR
    | ACCESS_FS_REMOVE_FILE
    | ACCESS_FS_MAKE_CHAR
    | ACCESS_FS_MAKE_DIR
    | ACCESS_FS_MAKE_REG
    | ACCESS_FS_MAKE_SOCK
    | ACCESS_FS_MAKE_FIFO
    | ACCESS_FS_MAKE_BLOCK
    | ACCESS_FS_MAKE_SYM
    | ACCESS_FS_REFER
)
# Rights that let a process see a file's bytes; never granted where they would reach a
# denied path.
_CONTENT = ACCESS_FS_READ_FILE | ACCESS_FS_EXECUTE
# Device nodes every shell writes to (`> /dev/null`), opened with O_TRUNC.
_WRITABLE_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/ptmx", "/dev/pts")
_DEVICE_WRITE = ACCESS_FS_WRITE_FILE | ACCESS_FS_TRUNCATE


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


def abi_version() -> int:
    """The Landlock ABI version of the running kernel: 0 when Landlock is absent or disabled.

    Asks `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`; 1 arrived in
    Linux 5.13, TCP rules (4) in 6.7, abstract Unix socket scoping (6) in 6.12.
    """
    try:
        arch = require_arch()
        return syscall(
            arch.landlock_create_ruleset,
            ctypes.c_void_p(None),
            ctypes.c_size_t(0),
            ctypes.c_uint32(CREATE_RULESET_VERSION),
        )
    except OSError:
        return 0


def works() -> Verdict:
    """Whether `apply` really denies a write here (`denies_write`, in a child of a spawned
    interpreter): a verdict that is True when it does, else says why not."""
    with tempfile.TemporaryDirectory() as scratch:
        return run_checks([write_check(scratch)])[0]


def write_check(scratch: str) -> Check | Verdict:
    """The check behind `works`, making a directory in `scratch` (an existing directory
    the caller removes afterwards); or the verdict already known without one (no ABI)."""
    if abi_version() < 1:
        return Verdict(False, "the kernel offers no Landlock ABI")
    return Check(__name__, denies_write.__name__, (scratch,))


def denies_write(scratch: str) -> bool:
    """Apply a confinement with nothing writable, then try to make a directory in
    `scratch`: True when refused. Irreversible: only for a child of its own."""
    apply(Confinement())
    try:
        os.mkdir(os.path.join(scratch, "probe"))
    except PermissionError:
        return True
    return False


def scopes_signals() -> Verdict:
    """Whether `apply` really keeps a child from signalling a process outside its domain
    here (`refuses_signal`, in a child of a spawned interpreter): a verdict, True when it
    does."""
    return run_checks([signal_check()])[0]


def signal_check() -> Check | Verdict:
    """The check behind `scopes_signals`, or the verdict already known (ABI too old)."""
    if abi_version() < SCOPE_ABI:
        return Verdict(False, f"the kernel's Landlock ABI is below {SCOPE_ABI}")
    return Check(__name__, refuses_signal.__name__)


def refuses_signal() -> bool:
    """Apply a confinement, then send signal 0 to the parent process (outside the
    domain): True when refused with EPERM. Irreversible: only for a child of its own."""
    apply(Confinement(writable=("/",)))
    try:
        os.kill(os.getppid(), 0)
    except PermissionError:
        return True
    return False


def handled_fs(abi: int) -> int:
    """The filesystem rights a ruleset handles on ABI `abi`: reads and every kind of write."""
    rights = (1 << 13) - 1  # EXECUTE .. MAKE_SYM, all in ABI 1
    if abi >= 2:
        rights |= ACCESS_FS_REFER
    if abi >= 3:
        rights |= ACCESS_FS_TRUNCATE
    return rights


def plan_rules(confinement: Confinement, abi: int) -> list[tuple[str, int]]:
    """The path-beneath rules (path, allowed rights) that give `confinement` on ABI `abi`.

    Semantics, shared with the bubblewrap layer: the most specific entry of `writable` or
    `read_denied` that contains a path decides it (writable: everything; denied: nothing);
    any other path is readable and executable. Paths that do not exist are skipped.

    A directory that holds a denied path cannot get a read rule (it would reach the denied
    path), so it gets only the rights that cannot reveal bytes (listing, and in a writable
    directory creating, removing and writing files), and each of its entries gets its own
    rule. Consequences: names inside a denied directory stay listable, and in a directory
    that holds a denied path (e.g. a workspace holding a denied `.env`), files and
    directories created after `apply` directly in it can be written but not read; the
    entries that existed at `apply` keep their full rights. Bubblewrap has neither gap.
    """
    writable = _existing(confinement.writable)
    denied = _existing(confinement.read_denied)
    full = handled_fs(abi)
    rules: list[tuple[str, int]] = [
        (device, _DEVICE_WRITE & full) for device in _WRITABLE_DEVICES if os.path.exists(device)
    ]
    split = {ancestor for path in denied for ancestor in _strict_ancestors(path)}

    def rights_at(path: str) -> int:
        owner = max(
            (entry for entry in writable | denied if _contains(entry, path)),
            key=lambda entry: (len(entry), entry in denied),
            default=None,
        )
        if owner is None:
            return READ
        return 0 if owner in denied else full

    def visit(path: str, is_dir: bool) -> None:
        rights = rights_at(path)
        if path not in split:
            if rights:
                rules.append((path, rights if is_dir else rights & ~_DIR_ONLY))
            rules.extend(
                (entry, full if os.path.isdir(entry) else full & ~_DIR_ONLY)
                for entry in writable
                if entry != path and _contains(path, entry)
            )
            return
        if rights & ~_CONTENT:
            rules.append((path, rights & ~_CONTENT))
        if rights & _CONTENT:
            for entry in _entries(path):
                visit(entry.path, entry.is_dir(follow_symlinks=False))
        else:
            # Nothing to grant here but deeper entries that reopen access.
            for child in sorted(_children_towards(path, writable | denied | split)):
                visit(child, os.path.isdir(child))

    visit("/", True)
    return rules


def apply(confinement: Confinement) -> None:
    """Confine the calling thread, and every process it execs or forks, to `confinement`.

    Call it in a single-threaded child right before exec: Landlock restricts only the
    calling thread. Sets PR_SET_NO_NEW_PRIVS first (required). On ABI >= 6 the child cannot
    signal a process outside its Landlock domain (`kill` gives EPERM; see `scopes_signals`).
    With `network=False` on ABI >= 4, TCP bind and connect are denied; on ABI >= 6,
    connecting to abstract Unix sockets created outside the sandbox is denied. UDP and
    filesystem Unix sockets are not covered by Landlock: pair it with
    `seccomp.install_filter`. `max_processes` is not Landlock's. Nor are a file's mode,
    owner, timestamps and extended attributes: `mountns.confine` keeps those read-only.

    Raises OSError (ENOSYS/EOPNOTSUPP when Landlock is absent or disabled, EINVAL for a
    relative path) from the underlying calls; on error the process may be partly set up
    and must not exec the untrusted command.
    """
    for path in (*confinement.writable, *confinement.read_denied):
        if not os.path.isabs(path):
            raise OSError(errno.EINVAL, f"Landlock rules need absolute paths, got {path!r}")
    abi = abi_version()
    if abi < 1:
        raise OSError(errno.EOPNOTSUPP, "Landlock is not available on this kernel")
    arch = require_arch()
    attr = _RulesetAttr(handled_access_fs=handled_fs(abi))
    if abi >= SCOPE_ABI:
        attr.scoped = SCOPE_SIGNAL
    if not confinement.network:
        if abi >= 4:
            attr.handled_access_net = ACCESS_NET_BIND_TCP | ACCESS_NET_CONNECT_TCP
        if abi >= SCOPE_ABI:
            attr.scoped |= SCOPE_ABSTRACT_UNIX_SOCKET
    rules = plan_rules(confinement, abi)
    ruleset = _create_ruleset(arch, attr)
    try:
        for path, rights in rules:
            _add_path_rule(arch.landlock_add_rule, ruleset, path, rights)
        set_no_new_privs()
        _restrict_self(arch, ruleset)
    finally:
        os.close(ruleset)


#: How many Landlock domains Linux stacks on a thread at most (``LANDLOCK_MAX_NUM_LAYERS``).
MAX_DOMAINS = 16


def _restrict_self(arch: Arch, ruleset: int) -> None:
    """Put the calling thread in the domain of ``ruleset`` (``landlock_restrict_self``).

    Raises:
        OSError: refused; E2BIG says in words that Linux's limit of nested domains is
            reached (each sandbox a sandboxed call starts adds two).
    """
    try:
        syscall(arch.landlock_restrict_self, ruleset, ctypes.c_uint32(0))
    except OSError as exc:
        if exc.errno != errno.E2BIG:
            raise
        _raise_restrict_error(exc.errno, arch.landlock_restrict_self)


def _raise_restrict_error(code: int, number: int) -> NoReturn:
    """Raise the OSError of a refused ``landlock_restrict_self`` (``number``) with errno
    ``code``: E2BIG says in words that Linux's limit of nested domains is reached."""
    if code != errno.E2BIG:
        raise OSError(code, f"syscall {number}: {os.strerror(code)}") from None
    raise OSError(
        errno.E2BIG,
        f"cannot confine this process: it is in {MAX_DOMAINS} nested Landlock domains "
        "already, the most Linux allows (a sandbox started by a sandboxed call adds "
        "two: sandboxes nest at most 8 deep)",
    ) from None


def _create_ruleset(arch: Arch, attr: _RulesetAttr) -> int:
    """A new ruleset's fd: what ``attr`` says it handles, no rules yet."""
    return syscall(
        arch.landlock_create_ruleset,
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
        ctypes.c_uint32(0),
    )


def _add_path_rule(add_rule: int, ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # removed since planning: nothing left to grant on
    try:
        rule = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        try:
            syscall(
                add_rule,
                ruleset,
                ctypes.c_uint32(RULE_PATH_BENEATH),
                ctypes.byref(rule),
                ctypes.c_uint32(0),
            )
        except OSError as exc:
            # Kernel-internal files (pipefs, nsfs) take no rules; leaving one out only
            # denies more.
            if exc.errno != errno.EBADFD:
                raise
    finally:
        os.close(fd)


def _existing(paths: Iterable[str]) -> set[str]:
    return {realpath(path) for path in paths if os.path.lexists(path)}


def _entries(directory: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as entries:
            # A symbolic link gets the rights of the place it points to, not its own.
            return sorted(
                (entry for entry in entries if not entry.is_symlink()), key=lambda e: e.name
            )
    except OSError:
        return []


def _contains(directory: str, path: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _children_towards(directory: str, paths: Iterable[str]) -> set[str]:
    """The entries of `directory` that lie on the way to each path strictly beneath it."""
    prefix = directory.rstrip("/") + "/"
    return {
        prefix + path[len(prefix) :].split("/", 1)[0] for path in paths if path.startswith(prefix)
    }


def _strict_ancestors(path: str) -> list[str]:
    ancestors = []
    while path != "/":
        path = os.path.dirname(path)
        ancestors.append(path)
    return ancestors


def nest() -> None:
    """Put the calling thread, already confined by :func:`apply`, in a Landlock domain
    nested in its own that restricts nothing more but scoping: it can no longer ptrace
    (nor, on ABI >= 6, signal) processes of the enclosing domain, such as the warm worker
    that forked it. Three system calls: for a call's child forked from a confined worker.

    Raises OSError from the underlying calls; the child must not go on then.
    """
    prepare_nest()()


def prepare_nest() -> Callable[[], None]:
    """:func:`nest` in two steps, for a process whose many children each enter the nested
    domain (a warm worker of calls): the domain's ruleset is made now, once, with
    PR_SET_NO_NEW_PRIVS set (which children inherit); the function returned puts the
    calling thread in the domain with one system call and closes its copy of the
    ruleset's descriptor (close-on-exec), so that nothing that runs after it holds it.
    Each child calls it once; this process keeps the descriptor for the next child. (The
    ruleset grants every right it handles, so no rule added to it could loosen anything:
    the scoping is the domain's, not a rule's.)

    Raises OSError: here, Landlock is absent or the ruleset refused; from the function
    returned, the domain refused (the child must not go on then).
    """
    abi = abi_version()
    if abi < 1:
        raise OSError(errno.EOPNOTSUPP, "Landlock is not available on this kernel")
    arch = require_arch()
    # Every domain denies moving a file to another directory (REFER, ABI 2) unless a rule
    # grants it, whatever it handles: granted everywhere, the enclosing domain decides.
    # Below SCOPE_ABI a domain must handle some right to exist: EXECUTE, granted too.
    handled = ACCESS_FS_REFER if abi >= 2 else 0
    if abi < SCOPE_ABI:
        handled |= ACCESS_FS_EXECUTE
    attr = _RulesetAttr(handled_access_fs=handled, scoped=SCOPE_SIGNAL if abi >= SCOPE_ABI else 0)
    ruleset = _create_ruleset(arch, attr)
    try:
        if handled:
            # What the enclosing domain allows stays allowed: domains only intersect.
            _add_path_rule(arch.landlock_add_rule, ruleset, "/", handled)
        set_no_new_privs()
    except BaseException:
        os.close(ruleset)
        raise

    # Bound here: each child copies the pages it writes from this process, and a lookup
    # or a ctypes object made per call writes several times as many as the system call.
    restrict, close = libc().syscall, os.close
    number, flags = ctypes.c_long(arch.landlock_restrict_self), ctypes.c_uint32(0)

    def enter() -> None:
        try:
            if restrict(number, ruleset, flags) < 0:
                _raise_restrict_error(ctypes.get_errno(), number.value)
        finally:
            close(ruleset)

    return enter
