"""Every message that crosses the wire between the caller, the spawn server and a
supervisor, typed: frozen dataclasses, encoded as tuples of primitives led by their
``kind`` (see :func:`encode`).

The conversation (see :mod:`sandbox.spawn._server` for who answers what):

- caller to server: :class:`WantSupervisor`; the server answers :class:`SupervisorReady`
  with the caller's end of a socket to a new idle supervisor attached. Or
  :class:`WantCallWorker`; the server answers :class:`CallWorkerReady` with the caller's
  end of a socket to a new warm worker for Python calls attached (and a pidfd of it, where
  there are pidfds); the calls go over that socket as pickles (``sandbox.spawn._calls``).
- caller to supervisor: :class:`CommandJob` with the stdout and stderr write ends attached,
  later perhaps :class:`StopTree`.
- supervisor to caller: :class:`StartFailed` (and nothing else for that job), or
  :class:`StillRunning` once when the command still runs ``CommandJob.quiet_seconds``
  after it started, :class:`CommandExited` when the command exits while other processes
  of its tree live on, then :class:`TreeDone` when no process of the tree is left.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import TYPE_CHECKING, Any, ClassVar

from sandbox.layers._confinement import Confinement

if TYPE_CHECKING:
    from sandbox._defaults import Guard

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
class CallSetup:
    """What the process Python calls run in does first
    (``sandbox.spawn._call_worker.enter_calls``): the portable level, limits and layers, as
    a warm worker the spawn server forked.

    Attributes:
        env: the calls' whole environment.
        rlimits: resource limits.
        memory_bytes: ``RLIMIT_AS`` on top of the address space the process has once it
            is set up, or ``None``.
        layers: layers applied (mount namespace, Landlock, seccomp).
        confinement: what those layers enforce.
        cgroup: a cgroup directory to join, or ``None``.
        nest: each call's child forked from a warm worker enters a Landlock domain nested
            in the worker's (``landlock.nest``).
        cwd: the working directory (the caller's).
        path: ``sys.path`` (the caller's): a worker started by the spawn server imports
            what the calls name from there.
        reuse: a warm worker whose one child runs the calls one after another (calls that
            declare they keep no state of their own), instead of a fresh child per call;
            its CPU and memory limits are then hard caps of twice the limit, each call
            getting the limit itself on top of what the child has used
            (``sandbox.spawn._calls``).
    """

    env: Mapping[str, str]
    rlimits: Rlimits = ()
    memory_bytes: int | None = None
    layers: tuple[str, ...] = ()
    confinement: Confinement = field(default_factory=Confinement)
    cgroup: str | None = None
    nest: bool = False
    cwd: str = "/"
    path: tuple[str, ...] = ()
    reuse: bool = False


@dataclass(frozen=True)
class WantCallWorker:
    """Caller to server: fork me a warm worker for Python calls, set up as ``setup`` says,
    that imported ``preload`` (module names) and keeps the objects pickled in ``kept``
    (each call naming one by these bytes gets the worker's copy)."""

    kind: ClassVar[str] = "want-calls"
    setup: CallSetup
    preload: tuple[str, ...] = ()
    kept: tuple[bytes, ...] = ()


@dataclass(frozen=True)
class CallWorkerReady:
    """Server to caller: the attached descriptors are a socket to the warm worker
    ``pid`` and, where there are pidfds, a pidfd of it."""

    kind: ClassVar[str] = "calls-ready"
    pid: int


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
        seccomp_fd: the descriptor bubblewrap reads the seccomp filter from, or ``None``.
        report_fd: the descriptor on which the command's tree reports what the command
            left running (``spawn._tree.reporting_argv``, under bubblewrap, whose PID
            namespace ends those processes itself), or ``None``.
        quiet_seconds: seconds after the start at which the supervisor reports a command
            still running (:class:`StillRunning`, once), or ``None`` for no report: its
            caller waits for the job's channel alone until then, with no timer of its own.
        set_aside: the protected paths as they were at the start
            (``sandbox._defaults.Guard``): what the command created or swapped there the
            supervisor renames (``sandbox._defaults.set_aside``) once its tree is gone:
            before it reports the end, and when the caller is gone too.
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
    quiet_seconds: float | None = None
    set_aside: tuple[Guard, ...] = ()

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
    """Supervisor (or server) to caller: the command (or process) could not start, and why.
    ``refused``: the system would start no new process (EAGAIN, ENOMEM: the limit on
    processes or memory), ``error`` then in its words; the caller may try again later."""

    kind: ClassVar[str] = "failed"

    error: str
    refused: bool = False


@dataclass(frozen=True)
class StillRunning:
    """Supervisor to caller: the command still runs ``CommandJob.quiet_seconds`` after it
    started (sent once, only for a job that asks for it)."""

    kind: ClassVar[str] = "running"


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
    | WantCallWorker
    | CallWorkerReady
    | CommandJob
    | StopTree
    | StartFailed
    | StillRunning
    | CommandExited
    | TreeDone
)

_KINDS: dict[str, type[Any]] = {
    cls.kind: cls
    for cls in (
        WantSupervisor,
        SupervisorReady,
        WantCallWorker,
        CallWorkerReady,
        CommandJob,
        StopTree,
        StartFailed,
        StillRunning,
        CommandExited,
        TreeDone,
    )
}

#: Each kind's field names, in the order its values travel.
_FIELDS: dict[str, tuple[str, ...]] = {
    kind: tuple(f.name for f in fields(cls)) for kind, cls in _KINDS.items()
}


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A function of a message giving the values of ``names`` as a tuple, at C speed."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        one = attrgetter(names[0])
        return lambda message: (one(message),)
    return lambda message: ()


_VALUES = {kind: _getter(names) for kind, names in _FIELDS.items()}
_CONFINEMENT = _FIELDS[CommandJob.kind].index("confinement")
_ENV = _FIELDS[CommandJob.kind].index("env")
_QUIET = _FIELDS[CommandJob.kind].index("quiet_seconds")
_CONFINEMENT_FIELDS = tuple(f.name for f in fields(Confinement))
_CONFINEMENT_VALUES = _getter(_CONFINEMENT_FIELDS)
_SETUP_FIELDS = tuple(f.name for f in fields(CallSetup))
_SETUP_VALUES = _getter(_SETUP_FIELDS)
_SETUP_CONFINEMENT = _SETUP_FIELDS.index("confinement")
_SETUP_ENV = _SETUP_FIELDS.index("env")

#: What a message is on the wire: its ``kind``, then its fields' values in order.
Encoded = tuple[Any, ...]


def encode(message: Message) -> Encoded:
    """``message`` as a tuple of primitives (str, int, float, None, tuples, dicts): its
    ``kind`` and then its fields' values in declaration order; a job's confinement is a
    tuple of its own fields. Positional, so that a message costs no field names on the
    wire and no keyword matching at the other end (this is on every command's path)."""
    values = list(_VALUES[message.kind](message))
    if isinstance(message, CommandJob):
        confinement = message.confinement
        values[_CONFINEMENT] = _CONFINEMENT_VALUES(confinement)
        if message.env is not None and type(message.env) is not dict:
            values[_ENV] = dict(message.env)  # a plain mapping of primitives
    elif isinstance(message, WantCallWorker):
        setup = list(_SETUP_VALUES(message.setup))
        setup[_SETUP_CONFINEMENT] = _CONFINEMENT_VALUES(message.setup.confinement)
        setup[_SETUP_ENV] = dict(message.setup.env)
        values[0] = tuple(setup)
    return (message.kind, *values)


def encode_job(job: CommandJob, *, with_env: bool, quiet_seconds: float | None) -> Encoded:
    """``encode(job)``, without its environment unless ``with_env`` (``env`` ``None``:
    the supervisor's previous one, see :attr:`CommandJob.env`) and with ``quiet_seconds``
    for its own (the caller's wait, see :attr:`CommandJob.quiet_seconds`); no copy of the
    job made."""
    values = list(_VALUES[CommandJob.kind](job))
    values[_CONFINEMENT] = _CONFINEMENT_VALUES(job.confinement)
    values[_QUIET] = quiet_seconds
    env = job.env
    if not with_env:
        values[_ENV] = None
    elif env is not None and type(env) is not dict:
        values[_ENV] = dict(env)  # a plain mapping of primitives
    return (CommandJob.kind, *values)


def plain_job(
    argv: tuple[str, ...],
    cwd: str,
    env: Mapping[str, str] | None,
    rlimits: Rlimits,
    memory_bytes: int | None,
    layers: tuple[str, ...],
    confinement: Confinement,
    cgroup: str | None,
    set_aside: tuple[Guard, ...] = (),
) -> CommandJob:
    """The :class:`CommandJob` of these fields, without bubblewrap's (``seccomp_fd``,
    ``report_fd``) and without ``quiet_seconds`` (the caller's, sent with it), made as
    :func:`decode` makes one: a job is made on every command's path."""
    values = (argv, cwd, env, rlimits, memory_bytes, layers, confinement, cgroup, None, None)
    job: CommandJob = _made(CommandJob, _FIELDS[CommandJob.kind], (*values, None, set_aside))
    return job


def decode(data: Encoded) -> Message:
    """The message ``data`` (from :func:`encode`) encodes.

    Raises:
        ValueError: not a tuple, an unknown ``kind``, or values that do not fit it.
    """
    if not isinstance(data, tuple) or not data:
        raise ValueError(f"not an encoded message: {data!r}")
    cls = _KINDS.get(data[0]) if isinstance(data[0], str) else None
    if cls is None:
        raise ValueError(f"unknown message kind in {data!r}")
    values = list(data[1:])
    names = _FIELDS[cls.kind]
    if len(values) != len(names):
        raise ValueError(f"malformed {cls.__name__}: {len(values)} values for {len(names)} fields")
    if cls is CommandJob:
        values[_CONFINEMENT] = _confinement(cls, values[_CONFINEMENT])
    elif cls is WantCallWorker:
        setup = values[0]
        if not isinstance(setup, tuple) or len(setup) != len(_SETUP_FIELDS):
            raise ValueError(f"malformed {cls.__name__}: setup {setup!r}")
        setup = list(setup)
        setup[_SETUP_CONFINEMENT] = _confinement(cls, setup[_SETUP_CONFINEMENT])
        values[0] = _made(CallSetup, _SETUP_FIELDS, setup)
    message: Message = _made(cls, names, values)
    return message


def _confinement(cls: type[Any], values: Any) -> Confinement:
    """The :class:`Confinement` whose fields' values a message of ``cls`` carries.

    Raises:
        ValueError: ``values`` is not a tuple of as many values as it has fields.
    """
    if not isinstance(values, tuple) or len(values) != len(_CONFINEMENT_FIELDS):
        raise ValueError(f"malformed {cls.__name__}: confinement {values!r}")
    confinement: Confinement = _made(Confinement, _CONFINEMENT_FIELDS, values)
    return confinement


def _made(cls: type[Any], names: tuple[str, ...], values: Sequence[Any]) -> Any:
    """An instance of the dataclass ``cls`` with ``values`` for its fields ``names``, all of
    them, made without its ``__init__``: a frozen dataclass's sets each field through
    ``object.__setattr__``, a call a field, and a job and its reply are decoded on every
    command's path (none of these classes checks anything in ``__post_init__``)."""
    made = object.__new__(cls)
    made.__dict__.update(zip(names, values, strict=True))
    return made
