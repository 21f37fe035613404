"""What a session owns for shell tools: one persistent shell, its background processes and
the output area; closing it ends every process it started."""

from __future__ import annotations

import os
import threading
import weakref
from functools import partial
from pathlib import Path
from typing import Any

from sandbox import Sandbox
from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools._tool import ToolContext
from workspace_tools.shell import PersistentShell, ProcessRegistry, make_area, remove_area
from workspace_tools.tools._command_output import HEAD_BYTES, TAIL_BYTES
from workspace_tools.tools._command_runner import command_env, plain_runner, shell_on
from workspace_tools.workspace import Workspace, as_workspace

#: Background processes running at once, by default.
MAX_PROCESSES = 8
#: Bytes of one stream (a shell command's) or one process's output kept in its file.
OUTPUT_FILE_BYTES = 64 * 1024 * 1024
#: Memory for a background process's output not yet read (head and tail).
UNREAD_BYTES = 256 * 1024


class ShellSession:
    """The persistent shell and the background processes of one agent session.

    Args:
        root_or_workspace: a :class:`Workspace` or its root directory.
        sandbox: run the shell and every process in this sandbox (writes confined to the
            workspace root where a layer can confine them), as ``run_command`` with the
            same sandbox would; calls then report no progress. By default the portable
            level only, as ``run_command``: a new session per process tree, the whole tree
            stopped at a timeout, a stop or the session's end.
        max_processes: background processes running at once.
        output_file_bytes: most bytes of one stream of a shell command, or of one
            process's output, kept in its file in the output area.
        unread_bytes: memory per process for output not yet read (its head and tail
            when more arrives between two reads).
        **options: :class:`WorkspaceOptions` fields, when a root is given.

    The shell, the processes and the output area (``.shell-output.<hex>.wt-tmp`` in the
    root, see ``workspace_tools.shell._area``) are made on first use. :meth:`close` (or
    ``with``) kills every process tree they started and removes the area; so does the
    object's collection or the interpreter's exit, and when this process is killed each
    tree's supervisor sees it gone and kills the tree.

    Raises:
        NotADirectoryError: the root does not exist.
        SandboxUnavailable: the sandbox requires a protection no layer here can give.
    """

    def __init__(
        self,
        root_or_workspace: Workspace | str | os.PathLike[str],
        *,
        sandbox: Sandbox | None = None,
        max_processes: int = MAX_PROCESSES,
        output_file_bytes: int = OUTPUT_FILE_BYTES,
        unread_bytes: int = UNREAD_BYTES,
        **options: Any,
    ) -> None:
        self.workspace = as_workspace(root_or_workspace, **options)
        root = str(self.workspace.root)
        self._parts: dict[str, Any] = {}
        if sandbox is not None:
            self.sandbox = sandbox.confined_to(root)
        else:
            self.sandbox = plain_runner()  # as run_command without a sandbox
            self._parts["runner"] = self.sandbox  # ours: closed with the rest
        #: Whether calls report progress (not from a sandbox, as ``run_command``).
        self.reports_progress = sandbox is None
        self._given_sandbox = sandbox
        self.max_processes = max_processes
        self._file_bytes = output_file_bytes
        self._unread_bytes = unread_bytes
        self._lock = threading.Lock()
        self._closed = False
        self._finalizer = weakref.finalize(self, _close_parts, self._parts)

    def in_sandbox(self, sandbox: Sandbox, workspace: Workspace | None = None) -> ShellSession:
        """This session, for a call of its tools made with ``sandbox``
        (:attr:`Tool.commands_only`): the call runs in process, its commands in the
        sandbox this session was made with, which must be ``sandbox`` (the shell and the
        processes live in this process and run in that one sandbox).

        Raises:
            ToolError: ``SANDBOX_ERROR`` when this session runs its commands in another
                sandbox, or in none.
        """
        if sandbox is not self._given_sandbox:
            raise ToolError(
                "The shell tools run their commands in their shell session's sandbox, and "
                "this call's sandbox is another: make the ShellSession with it "
                "(ShellSession(root, sandbox=box))",
                ErrorCode.SANDBOX_ERROR,
            )
        return self

    @property
    def given_sandbox(self) -> Sandbox | None:
        """The sandbox this session was made with (its commands run in it, confined to the
        root as well), or ``None``."""
        return self._given_sandbox

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def output_area(self) -> Path | None:
        """The output area's path, once it exists."""
        return self._parts.get("area")

    def rel(self, path: Path) -> str:
        """``path`` relative to the workspace root, as the model names it to ``read_file``."""
        return os.path.relpath(path, self.workspace.root)

    def environment(self) -> dict[str, str]:
        """The environment a new shell or process gets: as ``run_command``'s."""
        return _environment(self._given_sandbox, self.workspace.options.env_passthrough)

    def shell_path(self) -> str:
        """The shell found on the environment's PATH (bash, else sh)."""
        return shell_on(self.environment().get("PATH", os.defpath))

    @property
    def shell(self) -> PersistentShell:
        """The persistent shell (made on first use).

        Raises:
            ToolError: ``ABORTED`` once the session is closed.
        """
        return self._part("shell")  # type: ignore[no-any-return]

    @property
    def processes(self) -> ProcessRegistry:
        """The background processes (made on first use).

        Raises:
            ToolError: ``ABORTED`` once the session is closed.
        """
        return self._part("processes")  # type: ignore[no-any-return]

    def _part(self, name: str) -> Any:
        with self._lock:
            if self._closed:
                raise ToolError(
                    "The shell session is closed; its shell and processes are gone",
                    ErrorCode.ABORTED,
                )
            if name not in self._parts:
                area = self._parts.get("area")
                if area is None:
                    area = self._parts["area"] = make_area(self.workspace.root)
                # Not a bound method: the shell and the processes, held by the threads
                # that run them, must not keep this object from its collection (which
                # stops them) when it is dropped without a close.
                environment = partial(
                    _environment, self._given_sandbox, self.workspace.options.env_passthrough
                )
                if name == "shell":
                    self._parts[name] = PersistentShell(
                        self.sandbox,
                        self.shell_path(),
                        self.workspace.root,
                        area,
                        environment,
                        memory_bytes=HEAD_BYTES + TAIL_BYTES,
                        file_bytes=self._file_bytes,
                    )
                else:
                    self._parts[name] = ProcessRegistry(
                        self.sandbox,
                        self.shell_path(),
                        area,
                        environment,
                        max_running=self.max_processes,
                        file_bytes=self._file_bytes,
                        unread_bytes=self._unread_bytes,
                    )
            return self._parts[name]

    def close(self) -> None:
        """Kill the shell and every background process (each whole tree) and wait until
        they are gone, then remove the output area. Idempotent."""
        with self._lock:
            self._closed = True
        self._finalizer()

    def __enter__(self) -> ShellSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _environment(given: Sandbox | None, passthrough: tuple[str, ...]) -> dict[str, str]:
    base = os.environ if given is None else given.child_env()
    return command_env(base, passthrough)


def _close_parts(parts: dict[str, Any]) -> None:
    # Processes first (all asked to stop at once inside), then the shell, then the files.
    processes, shell = parts.get("processes"), parts.get("shell")
    if processes is not None:
        processes.close()
    if shell is not None:
        shell.close()
    area = parts.get("area")
    if area is not None:
        remove_area(area)
    runner = parts.get("runner")
    if runner is not None:
        runner.close()  # its idle supervisors; a later session starts its own


def session_of(context: ToolContext) -> ShellSession:
    """The :class:`ShellSession` a shell or process tool's call runs on
    (:attr:`ToolContext.runner`).

    Raises:
        ToolError: ``TOOL_ERROR`` when the tool was built without one.
    """
    session = context.runner
    if not isinstance(session, ShellSession):
        raise ToolError(
            f"{context.tool_name} has no shell session: build it with shell_tools(session)",
            ErrorCode.TOOL_ERROR,
        )
    return session
