"""Every message that crosses the wire between the caller, the spawn server and a
supervisor, typed: frozen dataclasses, encoded as JSON objects tagged with ``kind``.

The conversation (see :mod:`sandbox.spawn._server` for who answers what):

- caller to server: :class:`WantSupervisor`; the server answers :class:`SupervisorReady`
  with the caller's end of a socket to a new idle supervisor attached.
- caller to supervisor: :class:`CommandJob` with the stdout and stderr write ends attached,
  later perhaps :class:`StopTree`.
- supervisor to caller: :class:`StartFailed` (and nothing else for that job), or
  :class:`CommandExited` when the command exits while other processes of its tree live on,
  then :class:`TreeDone` when no process of the tree is left.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sandbox.layers._confinement import Confinement

#: ``(RLIMIT_* name, value)`` pairs.
Rlimits = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class WantSupervisor:
    """Caller to server: hand me a new idle supervisor."""

    kind: ClassVar[str] = "want"


@dataclass(frozen=True)
class SupervisorReady:
    """Server to caller: the attached descriptor is a socket to an idle supervisor."""

    kind: ClassVar[str] = "ready"


@dataclass(frozen=True)
class CommandJob:
    """Caller to supervisor: start one command, confined, and watch its tree.

    Attributes:
        argv: the command (under bubblewrap: bwrap's argv, the command at its end).
        cwd: absolute working directory.
        env: the command's whole environment; ``None``: the previous job's on this
            supervisor (a caller sends an unchanged one once per supervisor).
        rlimits: resource limits the supervisor applies to itself on its first job and
            its commands inherit (a later job must ask for the same).
        memory_bytes: ``RLIMIT_AS`` on top of ``rlimits``, or ``None``.
        layers: layers the command's child applies to itself before exec (mount
            namespace, Landlock, seccomp; see ``sandbox.layers._plan.child_layers``).
        confinement: what those layers enforce.
        cgroup: a cgroup directory the child joins before exec, or ``None``.
        seccomp_fd: the descriptor bubblewrap reads the network filter from, or ``None``.
        report_fd: the descriptor on which the command's tree reports what the command
            left running (``spawn._tree.reporting_argv``, under bubblewrap, whose PID
            namespace ends those processes itself), or ``None``.
    """

    kind: ClassVar[str] = "job"

    argv: tuple[str, ...]
    cwd: str
    env: Mapping[str, str] | None
    rlimits: Rlimits = ()
    memory_bytes: int | None = None
    layers: tuple[str, ...] = ()
    confinement: Confinement = field(default_factory=Confinement)
    cgroup: str | None = None
    seccomp_fd: int | None = None
    report_fd: int | None = None

    @property
    def limits(self) -> tuple[Rlimits, int | None]:
        """What a supervisor applies to itself for good: jobs with equal limits share it."""
        return self.rlimits, self.memory_bytes

    @property
    def forks(self) -> bool:
        """The child must run code of ours between fork and exec (layers, a cgroup)."""
        return bool(self.layers) or self.cgroup is not None


@dataclass(frozen=True)
class StopTree:
    """Caller to supervisor: stop every process of the tree (SIGTERM, ``grace`` seconds,
    SIGKILL), unless it is already gone. End of file stops it at once."""

    kind: ClassVar[str] = "stop"

    grace: float


@dataclass(frozen=True)
class StartFailed:
    """Supervisor to caller: the command could not start, and why."""

    kind: ClassVar[str] = "failed"

    error: str


@dataclass(frozen=True)
class CommandExited:
    """Supervisor to caller: the command exited with wait status ``status`` while other
    processes of its tree live on; its output pipes are closed on this side from now."""

    kind: ClassVar[str] = "exit"

    status: int


@dataclass(frozen=True)
class TreeDone:
    """Supervisor to caller: no process of the tree is left. ``status`` is the command's
    wait status when no :class:`CommandExited` came first, else ``None``.

    ``stopped`` counts the processes of the tree that were still running after the
    command itself had exited and that the supervisor stopped (0 when the tree ended by
    itself, and after a stop while the command still ran: a timeout or a cancel);
    ``stopped_names`` are the distinct program names (``argv[0]``'s last component) of a
    few of them."""

    kind: ClassVar[str] = "done"

    status: int | None
    stopped: int = 0
    stopped_names: tuple[str, ...] = ()


#: Any message of the conversation.
Message = (
    WantSupervisor
    | SupervisorReady
    | CommandJob
    | StopTree
    | StartFailed
    | CommandExited
    | TreeDone
)

_KINDS: dict[str, type[Any]] = {
    cls.kind: cls
    for cls in (
        WantSupervisor,
        SupervisorReady,
        CommandJob,
        StopTree,
        StartFailed,
        CommandExited,
        TreeDone,
    )
}


def encode(message: Message) -> dict[str, Any]:
    """``message`` as a JSON object: its fields and its ``kind``."""
    # vars(), not dataclasses.asdict: a shallow copy is all JSON needs, and it is on every
    # command's path.
    fields = dict(vars(message))
    if isinstance(message, CommandJob):
        fields["confinement"] = dict(vars(message.confinement))
    return {"kind": message.kind, **fields}


def decode(data: Mapping[str, Any]) -> Message:
    """The message ``data`` (from :func:`encode`) encodes; JSON arrays become tuples.

    Raises:
        ValueError: an unknown ``kind`` or fields that do not fit it.
    """
    fields = dict(data)
    cls = _KINDS.get(fields.pop("kind", None))
    if cls is None:
        raise ValueError(f"unknown message kind in {data!r}")
    if cls is CommandJob:
        fields["confinement"] = Confinement(**_tuples(fields.get("confinement", {})))
        fields["rlimits"] = tuple(tuple(pair) for pair in fields.get("rlimits", ()))
    try:
        message: Message = cls(**_tuples(fields))
    except TypeError as exc:
        raise ValueError(f"malformed {cls.__name__}: {exc}") from exc
    return message


def _tuples(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
