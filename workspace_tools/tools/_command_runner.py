"""How run_command's commands are started: their environment (secret-looking variables
dropped), the shell found on their ``PATH``, and the runner that their calls share (the
sandbox they run in, the workspace root's identity)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import weakref
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from sandbox import Sandbox, SandboxLimits, SandboxUnavailable
from sandbox.layers import BUBBLEWRAP
from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools.tools._command_output import HEAD_BYTES, TAIL_BYTES
from workspace_tools.workspace import Workspace
from workspace_tools.workspace._files import open_dir

#: Environment variable names that look like they hold a credential (SPEC, run_command).
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)


def command_env(
    environ: Mapping[str, str],
    passthrough: tuple[str, ...] | frozenset[str],
    secret: dict[str, bool] | None = None,
) -> dict[str, str]:
    """``environ`` without secret-looking names (unless passed through), with ``PAGER=cat``,
    ``GIT_TERMINAL_PROMPT=0`` and ``GIT_EDITOR=true`` so that nothing waits for a terminal.

    ``secret`` memoises, per variable name, whether it looks like a credential (a name's
    verdict never changes; the pattern costs more than the copy)."""
    if secret is None:
        secret = {}
    env = dict(environ)  # one copy of a mapping like os.environ is its cheapest read
    for name in list(env):
        hidden = secret.get(name)
        if hidden is None:
            hidden = secret[name] = bool(SECRET_NAME.search(name))
        if hidden and name not in passthrough:
            del env[name]
    env["PAGER"] = "cat"
    env["GIT_TERMINAL_PROMPT"] = "0"
    # git opens an editor (``commit`` without ``-m``, ``rebase -i``, ``merge``) that no one
    # can type into: ``true`` keeps the message or todo it was given, and an empty commit
    # message aborts with git's own clear error.
    env["GIT_EDITOR"] = "true"
    return env


class _EnvCache:
    """The last environment built for a command, kept while the process environment
    stays the same.

    Reading ``os.environ`` decodes every variable, tens of microseconds per command;
    CPython keeps the encoded variables in a plain dict (``os.environ._data``) that
    compares at C speed. Elsewhere the environment is built every time.
    """

    def __init__(self) -> None:
        self._entry: tuple[dict[bytes, bytes], dict[str, str]] | None = None

    def get(self, build: Callable[[], dict[str, str]]) -> dict[str, str]:
        """``build()``, or its last result while the environment is unchanged. The result
        is shared: callers copy it before changing it."""
        raw = getattr(os.environ, "_data", None)
        if not isinstance(raw, dict):
            return build()
        entry = self._entry
        if entry is None or raw != entry[0]:
            # The snapshot is taken first, so a change during build() shows next time; one
            # assignment keeps snapshot and result a pair for calls from other threads.
            snapshot = dict(raw)
            entry = self._entry = (snapshot, build())
        return entry[1]


def plain_runner() -> Sandbox:
    """What runs commands when no sandbox is asked for: the sandbox's portable process level
    only (a new session, whole-tree stop on timeout), the network on, no resource limits
    but the output cap (head and tail)."""
    return Sandbox(
        layers=False,
        network=True,
        env_allowlist=(),
        limits=SandboxLimits(
            cpu_seconds=None,
            file_size_bytes=None,
            open_files=None,
            output_bytes=HEAD_BYTES + TAIL_BYTES,
        ),
    )


class CommandRunner:
    """What run_command's calls share (:attr:`Tool.runner`): the sandbox its commands run
    in and what is worth keeping between them (the shell found on each ``PATH``, the
    verdicts on variable names, the last environment built).

    Args:
        sandbox: run commands in this sandbox (no progress updates then); by default the
            sandbox's portable process level only, with no resource limits but the
            output cap: a new session, whole-tree stop on timeout.
    """

    #: A sandbox's warm worker may keep the runner and be sent it by reference (it does
    #: not pickle: it holds a sandbox and its connections), as it keeps the workspace.
    sandbox_by_reference: ClassVar[bool] = True

    def __init__(self, sandbox: Sandbox | None = None) -> None:
        self.sandbox = sandbox
        self.runner = sandbox or plain_runner()
        self.reports_progress = sandbox is None
        self.by_path = BUBBLEWRAP in self.runner.capabilities.values() or not os.path.isdir(
            "/proc/self/fd"
        )
        self.shells: dict[str, str] = {}  # PATH -> shell found on it; a lookup costs a dozen stats
        self.secret_names: dict[str, bool] = {}  # variable name -> looks like a credential
        self.env_cache = _EnvCache()
        # root -> (st_dev, st_ino) of the directory found there while its real path was
        # the root's (see open_root).
        self.roots: dict[str, tuple[int, int]] = {}
        #: Closed since its last command: a workspace's close lets go of the runners it
        #: closed, so the next command puts this one among its workspace's runners again.
        self.closed = False
        # Sandbox -> (root, the runner of these commands in it: in_sandbox). Weak: a
        # sandbox given to a call (a session's copy, closed with the session) is not kept
        # alive by it; the runner's sandbox is a clone that does not refer to it.
        self._in_sandboxes: weakref.WeakKeyDictionary[Sandbox, tuple[str, CommandRunner]] = (
            weakref.WeakKeyDictionary()
        )

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (for a call run whole in a sandbox child) without the runners kept for
        sandboxes: a copy in another process makes its own."""
        state = self.__dict__.copy()
        del state["_in_sandboxes"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._in_sandboxes = weakref.WeakKeyDictionary()

    def in_sandbox(self, sandbox: Sandbox, workspace: Workspace) -> CommandRunner | None:
        """The runner of these commands in ``sandbox`` for a call made with it in
        ``workspace`` (:attr:`Tool.commands_only`): they run in ``sandbox`` confined to the
        workspace root (``Sandbox.confined_to``), as the commands of ``run_command.build(
        workspace, sandbox=sandbox)`` do, with every protection it gives and no progress
        reported; ``sandbox`` stays its owner's to close, which stops them. Made once per
        sandbox, kept while both live.

        ``None`` (a call then runs whole in a child of ``sandbox``) when this runner runs
        its commands in a sandbox of its own, whose protections and ``sandbox``'s both
        apply so; when ``sandbox`` confines writes to directories that do not hold the
        root (confined to the root too, its commands could write there); or when no
        layer here can confine writes and ``sandbox`` does not accept going without."""
        if self.sandbox is not None:
            return None
        kept = self._in_sandboxes.get(sandbox)
        root = str(workspace.root)
        if kept is not None and kept[0] == root:
            return kept[1]
        writable = sandbox.confinement.writable
        if writable and not any(_within(root, directory) for directory in writable):
            return None
        # The root is bound writable: under bubblewrap a command sees only what is bound
        # there of a root in /tmp (a private tmpfs), and its working directory must be seen.
        try:
            confined = sandbox.confined_to(root)
        except SandboxUnavailable:
            return None  # no layer here confines writes, which the sandbox does not waive
        runner = CommandRunner(confined)
        self._in_sandboxes[sandbox] = (root, runner)
        return runner

    def close(self) -> None:
        """Stop every command running through this runner's own sandbox (the portable
        level's, when no sandbox was given: each whole tree; see ``Sandbox.close``); a
        later command starts it again. A given sandbox is its owner's to close."""
        self.closed = True
        if self.sandbox is None:
            self.runner.close()

    def close_commands(self, owner: object) -> None:
        """:meth:`close` for the commands started under ``owner`` (a tool session's, set
        around its calls): only those are stopped, and the rest is closed only when no
        other command runs (``Sandbox.close_commands``)."""
        if self.sandbox is None:
            self.runner.close_commands(owner)

    def open_root(self, workspace: Workspace) -> int | None:
        """An fd of ``workspace``'s root for a command run there (the caller closes it), or
        ``None`` when the root is not what it was: a link in its place, gone, or reached
        through an ancestor changed so that its real path is no longer the root
        (:func:`_open_working_dir` then says why). The fd is of a directory still linked
        in its parent (the ``fstat`` that checks its identity tells).

        The root's real path is resolved once (a ``stat`` per component); later calls check
        that the directory opened, without following a link, is the very one found then
        (its device and inode)."""
        root = str(workspace.root)
        try:
            fd = open_dir(root, "")
        except OSError:
            return None
        opened = os.fstat(fd)
        identity = (opened.st_dev, opened.st_ino)
        if self.roots.get(root) == identity:
            return _linked(fd, opened)
        with contextlib.suppress(OSError):
            if os.path.realpath(root) == root:
                self.roots[root] = identity
                return _linked(fd, opened)
        os.close(fd)
        return None

    def env(self, workspace: Workspace) -> dict[str, str]:
        """The environment of a command in ``workspace`` (shared: copy it to change it)."""
        sandbox = self.sandbox

        def make_env() -> dict[str, str]:
            base_env = os.environ if sandbox is None else sandbox.child_env()
            return command_env(base_env, workspace.options.env_passthrough, self.secret_names)

        return self.env_cache.get(make_env)


def _within(path: str, directory: str) -> bool:
    """Whether the real path ``path`` is ``directory`` or below it."""
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def working_dir_changed(rel: str) -> ToolError:
    """The error of a command whose working directory ``rel`` changed as it started."""
    return ToolError(
        f"Working directory {rel} changed while the command was starting; "
        "check it and run the command again",
        ErrorCode.NOT_FOUND,
    )


def _linked(fd: int, opened: os.stat_result) -> int:
    """``fd`` of the root, whose ``fstat`` is ``opened``, once it is seen still linked.

    Raises:
        ToolError: ``NOT_FOUND`` (:func:`working_dir_changed`) when it was removed since it was
            opened: a chdir would still enter it (``fd`` is closed then).
    """
    if opened.st_nlink == 0:
        os.close(fd)
        raise working_dir_changed(".")
    return fd


def shell_on(path: str) -> str:
    """The shell commands run with, found on ``path`` (a ``PATH`` value): bash, else sh,
    else ``/bin/sh``."""
    return shutil.which("bash", path=path) or shutil.which("sh", path=path) or "/bin/sh"
