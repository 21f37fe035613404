"""Workspaces as Ray actors (``agent-workspace-tools[ray]``).

A :class:`RayWorkspace` starts an actor that owns a root on the node Ray places it on: a
fresh copy of a repository directory or an extracted archive (or a directory already
there), with the eight tools over it, sandboxed inside the actor when asked. A root the
actor made is removed when it closes, and when its process ends otherwise (``ray.kill``, a
crash) by a small watcher process it started, detached; a root whose watcher could not run
is removed by the next actor on the node (:func:`sweep_roots`). Its ``tools`` look like
:func:`workspace_tools`'s (names, argument models, presentations) and route each call to
the actor, so :func:`invoke_tool`, :class:`ToolSession` and the adapters run them
unchanged; results come back whole (the details models too), and progress is streamed
back (a Ray streaming generator).

Placement is Ray's: pass ``num_cpus``, ``resources``, ``scheduling_strategy`` (``"SPREAD"``
or a placement group strategy) in ``actor_options``. :func:`run_episodes` runs N episodes,
each with its own workspace, spread over the cluster.

An actor that died (killed, its node lost) or could not answer (out of memory, a crashed
worker) makes the call an error result, ``WORKSPACE_UNAVAILABLE`` naming the actor;
:meth:`RayWorkspace.recreate` starts a new one from the same source. Ray schedules; it
does not isolate: ``sandbox=True`` confines each call inside the actor (see :mod:`sandbox`).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Awaitable, Callable, Iterator, Sequence
from functools import partial
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from workspace_tools._errors import ErrorCode, ToolError
from workspace_tools._output import ToolOutput
from workspace_tools._result import ToolResult, ToolUpdate
from workspace_tools._tool import Tool, ToolContext
from workspace_tools.adapters._common import missing_extra
from workspace_tools.adapters._proxy import proxy_tools
from workspace_tools.session._pipeline import invoke_tool
from workspace_tools.tools import workspace_tools

try:
    import ray
    import ray.exceptions
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise missing_extra("ray", "ray") from exc

T = TypeVar("T")

CALL_TIMEOUT = 900.0
"""Seconds a call may take before it is given up, an actor still pending for resources
included (the workspace's own timeouts normally end a call first)."""

CLOSE_TIMEOUT = 30.0
"""Seconds :meth:`RayWorkspace.close` waits for the actor to remove its root (an actor
still pending for resources has none) before it kills the actor anyway."""

Source = str | os.PathLike[str] | bytes | None
"""Where a workspace's files come from: a directory (copied), an archive file
(a tar archive, compressed or not, or a zip: extracted), the bytes of a tar archive (sent with the
actor, for nodes that do not share a file system), or ``None`` (an empty root)."""


ROOTS_DIRECTORY = "workspace-tools-roots"
"""The directory, in the node's temporary directory (one per user), that holds the roots
actors made, each beside a ``ROOT.owner`` file naming the actor's process."""

# Run detached from the actor: forks once more (so it is no child of the actor, whose
# children Ray may stop with it), waits for the actor's process to end (a pidfd; polling
# /proc where there is none), then removes the root and its owner file.
_WATCH = """
import os, select, shutil, sys, time
root, owner, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
if os.fork():
    os._exit(0)
try:
    fd = os.pidfd_open(pid)
except (AttributeError, OSError):
    while os.path.exists(f"/proc/{pid}"):
        time.sleep(0.5)
else:
    select.select([fd], [], [])
shutil.rmtree(root, ignore_errors=True)
try:
    os.unlink(owner)
except OSError:
    pass
"""


def _roots_directory() -> str:
    """This user's directory of actors' roots on this node (made if missing)."""
    path = os.path.join(tempfile.gettempdir(), f"{ROOTS_DIRECTORY}-{os.getuid()}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def _process_identity(pid: int) -> str | None:
    """``"PID START"``, the process's start time (``/proc/PID/stat`` field 22, clock ticks
    since boot) telling it from a later process with the same pid; ``None`` when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return f"{pid} {int(fields[19])}"


def sweep_roots(directory: str) -> list[str]:
    """Remove the roots in ``directory`` whose owner process is gone (an actor killed while
    its watcher could not run, e.g. the node restarted), with their owner files; returns
    the roots removed. A root whose owner file is missing or unreadable is left alone."""
    removed = []
    for entry in sorted(os.listdir(directory)):
        if not entry.endswith(".owner"):
            continue
        owner = os.path.join(directory, entry)
        try:
            with open(owner) as f:
                recorded = f.read().strip()
        except OSError:
            continue
        pid = recorded.partition(" ")[0]
        if not pid.isdigit() or _process_identity(int(pid)) == recorded:
            continue
        root = owner.removesuffix(".owner")
        shutil.rmtree(root, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(owner)
        removed.append(root)
    return removed


def _owned_root() -> tuple[str, str]:
    """A new root for this process and its owner file, with a watcher that removes both
    when this process ends, however it ends (``ray.kill`` included); roots left by owners
    that are gone are removed first."""
    directory = _roots_directory()
    sweep_roots(directory)
    root = tempfile.mkdtemp(prefix="workspace-", dir=directory)
    owner = root + ".owner"
    identity = _process_identity(os.getpid()) or str(os.getpid())
    with open(owner, "w") as f:
        f.write(identity + "\n")
    watcher = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _WATCH, root, owner, str(os.getpid())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd="/",
        start_new_session=True,
    )
    watcher.wait()  # the first fork's exit: the watcher itself lives on, detached
    return root, owner


class WorkspaceActor:
    """The actor's class (wrapped with ``ray.remote`` by :class:`RayWorkspace`): one root on
    the actor's node and the eight tools over it.

    Args:
        source: see :data:`Source`; the root is a new directory on the node filled from it.
        root: use this directory on the node as the root instead (``source`` must be None);
            it is left in place at :meth:`close`.
        sandbox: ``True`` for a default :class:`sandbox.Sandbox`, a dict of its arguments,
            or ``False``: every call runs in it, writes confined to the root.
        options: :class:`WorkspaceOptions` fields.
    """

    def __init__(
        self,
        source: Source = None,
        root: str | None = None,
        sandbox: bool | dict[str, Any] = False,
        options: dict[str, Any] | None = None,
    ) -> None:
        if root is not None and source is not None:
            raise ValueError("give a source to copy or a root to use, not both")
        self._owner: str | None = None
        if root is None:
            root, self._owner = _owned_root()
        self._root = root
        try:
            if source is not None:
                _fill(self._root, source)
            box = None
            if sandbox:
                from sandbox import Sandbox

                box = Sandbox(**(sandbox if isinstance(sandbox, dict) else {}))
            tools = workspace_tools(self._root, sandbox=box, **(options or {}))
        except BaseException:
            self.close()
            raise
        self._tools = {t.name: t for t in tools}

    def root(self) -> str:
        """The root directory, on the actor's node."""
        return self._root

    def node(self) -> str:
        """The id of the node the actor runs on."""
        return str(ray.get_runtime_context().get_node_id())

    async def call(self, name: str, arguments: dict[str, Any], call_id: str) -> ToolResult:
        """Run one call and return its :class:`ToolResult`."""
        return await invoke_tool(self._tools[name], arguments, call_id=call_id)

    async def call_streaming(
        self, name: str, arguments: dict[str, Any], call_id: str
    ) -> Any:  # an async generator of ToolUpdate, then the ToolResult
        """Run one call, yielding each :class:`ToolUpdate`, then the :class:`ToolResult`."""
        loop = asyncio.get_running_loop()
        updates: asyncio.Queue[ToolUpdate | ToolResult] = asyncio.Queue()

        def on_update(update: ToolUpdate) -> None:
            loop.call_soon_threadsafe(updates.put_nowait, update)  # from a worker thread too

        async def run() -> None:
            result = await invoke_tool(
                self._tools[name], arguments, call_id=call_id, on_update=on_update
            )
            loop.call_soon_threadsafe(updates.put_nowait, result)

        task = asyncio.ensure_future(run())
        try:
            while True:
                item = await updates.get()
                yield item
                if isinstance(item, ToolResult):
                    return
        finally:
            task.cancel()  # a cancelled call (ray.cancel) stops the tool, its processes too

    def close(self) -> None:
        """Remove the root when the actor made it (a killed actor's root is removed by
        its watcher when the actor's process ends)."""
        if self._owner is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.unlink(self._owner)


def _fill(root: str, source: Source) -> None:
    """Copy or extract ``source`` into the empty directory ``root``.

    Raises:
        FileNotFoundError: the source path does not exist on this node.
        tarfile.TarError, zipfile.BadZipFile: an archive that cannot be read, or a tar
            member that would land outside ``root`` or is a device (PEP 706's ``data``
            filter).
    """
    if isinstance(source, bytes):
        with tarfile.open(fileobj=io.BytesIO(source), mode="r:*") as archive:
            archive.extractall(root, filter="data")
        return
    path = os.fspath(source)  # type: ignore[arg-type]  # None is handled by the caller
    if os.path.isdir(path):
        shutil.copytree(path, root, symlinks=True, dirs_exist_ok=True)
    elif zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            archive.extractall(root)  # zipfile keeps members inside root by itself
    elif os.path.isfile(path):
        with tarfile.open(path, mode="r:*") as archive:
            archive.extractall(root, filter="data")
    else:
        raise FileNotFoundError(f"workspace source not found on this node: {path}")


class RayWorkspace:
    """A workspace held by a Ray actor, and tools that route calls to it.

    Args:
        source: see :data:`Source`.
        root: a directory on the actor's node to use as it is (instead of ``source``).
        sandbox: run every call in a sandbox inside the actor (``True``, or the
            :class:`sandbox.Sandbox` arguments as a dict).
        name: the actor's name (must be unique in its namespace); shown in errors.
        actor_options: Ray's actor options (``num_cpus``, ``resources``,
            ``scheduling_strategy``, ``runtime_env``, ...).
        call_timeout: seconds a call may wait for the actor's answer.
        **options: :class:`WorkspaceOptions` fields.

    Requires ``ray.init()`` first (the actor starts at once, and is placed by Ray).

    Attributes:
        tools: the eight tools, routed to the actor (the current one after
            :meth:`recreate`).
        handle: the actor handle.
    """

    def __init__(
        self,
        source: Source = None,
        *,
        root: str | None = None,
        sandbox: bool | dict[str, Any] = False,
        name: str | None = None,
        actor_options: dict[str, Any] | None = None,
        call_timeout: float = CALL_TIMEOUT,
        **options: Any,
    ) -> None:
        self._spec = (source, root, sandbox, options)
        self.name = name
        self._actor_options = dict(actor_options or {})
        if name is not None:
            self._actor_options["name"] = name
        self.call_timeout = call_timeout
        self.handle = self._start()
        self.tools: list[Tool[Any]] = proxy_tools(self._execute, **options)

    def __repr__(self) -> str:
        return f"RayWorkspace({self.label})"

    @property
    def label(self) -> str:
        """The actor's name, or its id."""
        if self.name is not None:
            return repr(self.name)
        return f"actor {self.handle._actor_id.hex()}"

    def _start(self) -> Any:
        source, root, sandbox, options = self._spec
        actor = ray.remote(WorkspaceActor).options(**self._actor_options)
        return actor.remote(source, root, sandbox, options)

    def root(self) -> str:
        """The root directory on the actor's node (waits for the actor to start).

        Raises:
            ray.exceptions.RayActorError: the actor died or could not start (a bad source).
        """
        return str(ray.get(self.handle.root.remote(), timeout=self.call_timeout))

    def node(self) -> str:
        """The id of the node the actor runs on."""
        return str(ray.get(self.handle.node.remote(), timeout=self.call_timeout))

    def recreate(self) -> None:
        """Start a new actor from the same source (the old one is killed if alive); the
        tools route to it from now on."""
        ray.kill(self.handle, no_restart=True)
        self.handle = self._start()

    def close(self) -> None:
        """Remove the root it made and stop the actor (an actor already dead is fine)."""
        # A dead actor has nothing left to clean; one not answering cannot clean.
        with contextlib.suppress(ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            ray.get(self.handle.close.remote(), timeout=CLOSE_TIMEOUT)
        ray.kill(self.handle, no_restart=True)

    def _execute(self, local: Tool[Any]) -> Any:
        name = local.name

        async def execute(args: Any, context: ToolContext) -> ToolOutput:
            arguments = args.model_dump(mode="json", exclude_unset=True)
            handle = self.handle
            if context.reports_progress:
                stream = handle.call_streaming.remote(name, arguments, context.call_id)
                wait = partial(self._drain, stream, context)
                cancel: Callable[[], None] = partial(ray.cancel, stream)
            else:
                ref = handle.call.remote(name, arguments, context.call_id)
                wait = partial(ray.get, ref, timeout=self.call_timeout)
                cancel = partial(ray.cancel, ref)
            try:
                result = await anyio.to_thread.run_sync(wait, abandon_on_cancel=True)
            except anyio.get_cancelled_exc_class():
                cancel()  # the actor stops the call (its processes too)
                raise
            except ray.exceptions.GetTimeoutError:
                cancel()
                raise ToolError(
                    f"The workspace {self.label} gave no answer within "
                    f"{self.call_timeout:g} s (is it still waiting for resources?)",
                    ErrorCode.WORKSPACE_UNAVAILABLE,
                ) from None
            except ray.exceptions.RayActorError as exc:
                raise ToolError(_death(self.label, exc), ErrorCode.WORKSPACE_UNAVAILABLE) from None
            except ray.exceptions.RayTaskError as exc:  # the actor's method raised; it lives on
                raise ToolError(
                    f"The workspace {self.label} failed the call: {_last_line(exc)}",
                    ErrorCode.TOOL_ERROR,
                ) from None
            except ray.exceptions.RayError as exc:  # out of memory, a crashed worker, a lost node
                raise ToolError(
                    f"The workspace {self.label} could not answer: {_last_line(exc)}",
                    ErrorCode.WORKSPACE_UNAVAILABLE,
                ) from None
            if result.error is not None:
                code = result.error_code or ErrorCode.TOOL_ERROR
                raise ToolError(result.error, code, details=result.details)
            return ToolOutput(
                content=result.content, details=result.details, presentation=result.presentation
            )

        return execute

    def _drain(self, stream: Any, context: ToolContext) -> ToolResult:
        """In a worker thread: pass the actor's updates to ``context``, return its result."""
        for item in _items(stream, self.call_timeout):
            if isinstance(item, ToolResult):
                return item
            context.update(item.content, item.details, item.presentation)
        raise ray.exceptions.RayActorError()  # pragma: no cover - the stream always ends so


def _items(stream: Any, timeout: float) -> Iterator[Any]:
    for ref in stream:
        yield ray.get(ref, timeout=timeout)


def _last_line(exc: BaseException) -> str:
    """The last line of Ray's error text: the exception that ended a remote traceback."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def _death(label: str, exc: BaseException) -> str:
    """What the model reads when the actor is gone: that it could not start and why (the
    exception its creation raised), or that it died, Ray's reason, and what to do."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if lines and "error raised in its creation task" in lines[0]:
        return f"The workspace {label} could not start: {_last_line(exc)}"
    reason = [line for line in lines if line.startswith("The actor is dead because")]
    said = " ".join(line.rstrip(".") + "." for line in [*lines[:1], *reason[:1]])
    said = said.rstrip(".") or type(exc).__name__
    advice = "recreate it (RayWorkspace.recreate) to go on with a fresh copy"
    return f"The workspace {label} died: {said}; {advice}"


async def run_episodes(
    episode: Callable[[int, list[Tool[Any]]], Awaitable[T]],
    sources: Sequence[Source],
    *,
    sandbox: bool | dict[str, Any] = False,
    actor_options: dict[str, Any] | None = None,
    **options: Any,
) -> list[T]:
    """Run ``episode(index, tools)`` for each source at once, each over its own
    :class:`RayWorkspace`, and return their results in the order of ``sources``.

    Actors are placed with ``scheduling_strategy="SPREAD"`` unless ``actor_options`` says
    otherwise; every workspace is closed at the end, also when an episode raised (its
    exception is raised then, in an exception group with any others).
    """
    chosen = {"scheduling_strategy": "SPREAD", **(actor_options or {})}
    workspaces: list[RayWorkspace] = []
    results: dict[int, T] = {}

    async def one(index: int, workspace: RayWorkspace) -> None:
        results[index] = await episode(index, workspace.tools)

    try:
        for source in sources:
            workspaces.append(
                RayWorkspace(source, sandbox=sandbox, actor_options=chosen, **options)
            )
        async with anyio.create_task_group() as tg:
            for index, workspace in enumerate(workspaces):
                tg.start_soon(one, index, workspace)
    finally:
        with anyio.CancelScope(shield=True):
            for workspace in workspaces:
                await anyio.to_thread.run_sync(workspace.close)
    return [results[i] for i in range(len(workspaces))]
