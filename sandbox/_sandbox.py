"""The Sandbox: limits, isolation layers and a warm spawn server behind one object."""

from __future__ import annotations

import dataclasses
import errno
import functools
import os
import shutil
import stat
import sys
import tempfile
import weakref
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from sandbox._defaults import (
    HOST_EXEC_PATHS,
    Guard,
    credential_paths,
    git_exec_paths,
    guards,
    homes,
    read_only_paths,
    set_aside,
    without_allowed,
)
from sandbox._env import DEFAULT_ENV_ALLOWLIST, allowlisted_env
from sandbox._errors import SandboxError, SandboxUnavailable
from sandbox._limits import SandboxLimits
from sandbox.layers import (
    BUBBLEWRAP,
    CGROUP_V1,
    CGROUP_V2,
    HOST_EXEC_PROTECTION,
    LANDLOCK,
    MOUNT_NAMESPACE,
    NETWORK_OFF,
    PROCESS_CAP,
    PROTECTIONS,
    READ_DENIAL,
    SECCOMP,
    WRITE_CONFINEMENT,
    bwrap,
    cgroup,
)
from sandbox.layers._confinement import Confinement
from sandbox.layers._plan import (
    child_layers,
    enforced,
    layer_confinement,
    layered_command,
    no_layers,
    plan_layers,
    seccomp_filter,
    signal_scoping,
    wanted,
    why_missing,
)
from sandbox.layers._realpath import realpath
from sandbox.spawn._calls import CallWorkers
from sandbox.spawn._client import Launcher
from sandbox.spawn._jobs import CallSetup, CommandJob, plain_job
from sandbox.spawn._process import OnOutput, ProcessResult, run_process
from sandbox.spawn._tree import (
    REPORT_FD,
    REPORTER_PROCESSES,
    reporting_argv,
)


class Sandbox:
    """Runs commands and Python callables in child processes under limits.

    The portable level is always on: a new session, stdin from ``/dev/null``, an
    environment allowlist, resource limits, a cap on kept output, and on timeout SIGTERM,
    a grace period, then SIGKILL of the whole process tree (on Linux a subreaper catches
    detached grandchildren). It is not a security boundary. The isolation layers found at
    construction (bubblewrap, Landlock, seccomp, a mount namespace, cgroups) add the
    protections asked for: ``writable`` confines writes, with ``host_exec_paths`` kept
    read-only inside each writable directory; the credential files of
    :data:`CREDENTIAL_PATHS` and ``read_denied`` are hidden; ``network=False`` turns the
    network off (the default); ``max_processes`` caps the process count.

    Every protection asked for, defaults included, is enforced or the constructor raises
    :class:`SandboxUnavailable`, unless ``best_effort`` accepts going without it.

    Args:
        limits: resource limits; :class:`SandboxLimits` defaults when omitted.
        writable: absolute directories writes are confined to (a private temp dir is
            added); empty: writes are not confined.
        read_denied: absolute paths whose contents the child must not read, on top of
            :data:`CREDENTIAL_PATHS` (in the account's home and in ``$HOME``).
        allow_read: paths taken off the denied ones: every denied entry equal to or
            beneath one of them becomes readable (``["/"]``: none is denied).
        host_exec_paths: paths, relative to each writable directory, that stay read-only
            because tools on the host execute what they hold (:data:`HOST_EXEC_PATHS`:
            ``.git``, ``.envrc``, ``.vscode``, ...); ``()`` allows writes to them.
        network: False (default) turns TCP, UDP and host Unix sockets off.
        max_processes: cap on the processes of one child's tree (cgroup pids, or for a
            caller that is not root without a delegated cgroup, RLIMIT_NPROC in a user
            namespace of the child's own).
        require: protections that must be enforced even under ``best_effort``
            (``"write_confinement"``, ``"read_denial"``, ``"network_off"``,
            ``"process_cap"``, ``"host_exec_protection"``).
        best_effort: True to go on without any protection no layer here gives, or the
            names of those that may be left out; ``capabilities`` then says what is
            enforced. False (default): every one asked for is enforced or this raises.
        env_allowlist: variables the child inherits from this process (plus ``LC_*``).
        layers: False for the portable level only (no probing, no isolation layers, and
            no protection asked for beyond it, as with ``best_effort=True``).

    Raises:
        SandboxUnavailable: a protection asked for that no layer on this host can give to
            commands, and that ``best_effort`` does not cover; the message names the
            mechanism it needs and how to get it (or how to accept its absence).
        ValueError: a required protection that the other arguments do not ask for, an
            unknown protection name, or an ``allow_read`` path inside a path that stays
            denied.

    Example:
        >>> box = Sandbox(writable=["/work/project"], require=["write_confinement"])
        >>> result = await box.run(["make", "test"], cwd="/work/project", timeout=60)
    """

    def __init__(
        self,
        *,
        limits: SandboxLimits | None = None,
        writable: Sequence[str] = (),
        read_denied: Sequence[str] = (),
        allow_read: Sequence[str] = (),
        host_exec_paths: Collection[str] = HOST_EXEC_PATHS,
        network: bool = False,
        max_processes: int | None = None,
        require: Collection[str] = (),
        best_effort: bool | Collection[str] = False,
        env_allowlist: Collection[str] = DEFAULT_ENV_ALLOWLIST,
        layers: bool = True,
    ) -> None:
        self.limits = limits or SandboxLimits()
        self.host_exec_paths = tuple(host_exec_paths)
        denied = [*credential_paths(homes(os.environ)), *read_denied]
        writable_dirs = tuple(realpath(p) for p in writable)
        self.confinement = Confinement(
            writable=writable_dirs,
            read_denied=without_allowed(
                dict.fromkeys(realpath(p) for p in denied),
                [realpath(p) for p in allow_read],
            ),
            read_only=self._read_only(writable_dirs),
            network=network,
            max_processes=max_processes,
        )
        self.require = frozenset(require)
        accepted = frozenset(best_effort) if not isinstance(best_effort, bool) else frozenset()
        _check_names(self.require | accepted)
        if not layers or best_effort is True:
            self.best_effort: frozenset[str] = frozenset(PROTECTIONS)
        else:
            self.best_effort = accepted
        self.env_allowlist = frozenset(env_allowlist)
        self._plan = plan_layers() if layers else no_layers()
        # Whether /proc/self/fd/N names this process's descriptors (Linux), asked once.
        self._fd_links = os.path.isdir("/proc/self/fd")
        self._own_processes()
        self._private_tmp: str | None = None
        # The last confinement with the temp dir, and the last command plan, with what
        # each was made from (see _confinement_with_tmp, _command_plan).
        self._with_tmp: tuple[Confinement, str, Confinement] | None = None
        self._plans: tuple[Confinement, SandboxLimits, _CommandPlan] | None = None
        self._check_enforceable()

    def __getstate__(self) -> dict[str, Any]:
        """A sandbox pickles as its settings and the layers it found (so that a copy in
        another process, a sandboxed call's, runs commands as this one does, without
        probing again), not its spawn server, workers or caches: a copy starts its own."""
        state = self.__dict__.copy()
        for name in ("_launcher", "_callers", "_caller", "_caller_absent", "_with_tmp", "_plans"):
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._own_processes()
        self._with_tmp = None
        self._plans = None

    def _own_processes(self) -> None:
        """A spawn server and calls' workers of its own, none started yet (a new sandbox,
        an unpickled one, a copy)."""
        self._launcher = Launcher()
        #: The calls' workers of this sandbox and of its clones (``confined_to``), which
        #: share its spawn server: ``close`` stops them all with it.
        self._callers: weakref.WeakSet[CallWorkers] = weakref.WeakSet()
        self._caller: CallWorkers | None = None
        self._caller_absent: list[str] = []

    @property
    def capabilities(self) -> dict[str, str]:
        """What a command run here really gets: protection -> mechanism (for example
        ``{"write_confinement": "bubblewrap", "network_off": "bubblewrap"}``), plus
        ``"tree_stop"`` -> ``"subreaper"`` (Linux) or ``"process_group"``, and
        ``"signal_scoping"`` -> ``"bubblewrap"`` or ``"landlock"`` when the command cannot
        signal processes outside its sandbox."""
        found = enforced(self._plan.commands, self._confinement_with_tmp({}))
        found.update(signal_scoping(found, self._plan))
        found["tree_stop"] = "subreaper" if sys.platform.startswith("linux") else "process_group"
        return found

    @property
    def call_capabilities(self) -> dict[str, str]:
        """What a Python callable run here really gets (it cannot be wrapped in bubblewrap,
        so only Landlock, a mount namespace, seccomp and cgroups apply), in the shape of
        ``capabilities`` (without ``"tree_stop"``): ``"write_confinement"`` ->
        ``"mount-namespace"`` covers contents and metadata (mode, owner, timestamps,
        extended attributes), and ``"signal_scoping"`` -> ``"landlock"`` appears when the
        call cannot signal processes outside its sandbox."""
        found = enforced(self._plan.calls, self._confinement_with_tmp({}))
        found.update(signal_scoping(found, self._plan))
        return found

    def copy(self) -> Sandbox:
        """A sandbox like this one (its settings, the layers it found, its temp dir) with a
        spawn server and workers of its own, started when first needed: closing either
        stops only its own (a session's, say)."""
        clone = object.__new__(Sandbox)
        clone.__dict__.update(self.__dict__)
        clone._own_processes()
        return clone

    def confined_to(self, *writable: str) -> Sandbox:
        """A sandbox like this one whose writes are confined to ``writable`` as well.
        It shares this one's probe and spawn server."""
        clone = object.__new__(Sandbox)
        clone.__dict__.update(self.__dict__)
        added = tuple(realpath(p) for p in writable)
        clone.confinement = dataclasses.replace(
            self.confinement,
            writable=(*self.confinement.writable, *added),
            read_only=(
                *self.confinement.read_only,
                *self._read_only(added),
            ),
        )
        clone._caller = None  # its worker is set up for other confinement
        clone._with_tmp = clone._plans = None
        clone._check_enforceable()
        return clone

    async def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        cwd_fd: int | None = None,
        env: Mapping[str, str] | None = None,
        on_output: OnOutput | None = None,
        timeout: float | None = None,
        on_fork_counter: Callable[[Callable[[], int]], None] | None = None,
    ) -> ProcessResult:
        """Run ``argv`` and wait until no process of its tree is left.

        Args:
            argv: the command (``argv[0]`` is looked up on the environment's PATH).
            cwd: absolute working directory; this process's by default.
            cwd_fd: an open descriptor of the directory ``cwd`` names, opened without
                following links (``openat`` with ``O_NOFOLLOW`` from a trusted root): the
                command starts in that very directory or not at all, even when a
                directory on ``cwd``'s path is swapped for a link meanwhile. Under
                bubblewrap, which enters ``cwd`` by path, the directory entered is
                checked against the descriptor's ``(st_dev, st_ino)`` before exec;
                elsewhere the command starts in ``/proc/self/fd/N`` of this process's
                descriptor (Linux). The caller keeps it open until this returns.
            env: the child's whole environment; the allowlisted part of this process's
                environment by default. ``TMPDIR`` points at the private temp dir when
                writes are confined.
            on_output: called with ``("stdout" | "stderr", bytes)`` as output arrives.
            timeout: seconds (else ``limits.timeout_seconds``) before the tree is stopped.
            on_fork_counter: where a cgroup caps the tree's processes, called before the
                command starts with a function giving how many forks the cap has refused
                so far (the ``refused_forks`` of the result, read while it runs: a
                long-lived process counts each of its turns by the difference).

        Returns a :class:`ProcessResult`: exit code (128 + N for signal N), the signal's
        name, whether it timed out, the head and tail of each stream with its byte
        count, and how many processes the command left running were stopped once it
        exited (``stopped_processes``, ``stopped_names``; under bubblewrap a shell in its
        PID namespace runs the command to report them; it and bubblewrap's own processes
        are not counted in ``max_processes``), and where a cgroup caps its processes how
        many forks the cap refused (``refused_forks``). A command that cannot be started raises
        the same error with or without bubblewrap. A non-zero exit is a result, not an
        error. A protected path (see ``host_exec_paths``) the command created is renamed
        to ``PATH.sandbox-blocked`` once it is done.

        Raises:
            SandboxError: the command could not be started; with ``cwd_fd``, also when
                the directory entered was not that descriptor's (the message names
                ``cwd`` and says it changed; nothing ran); or :meth:`close` stopped it
                while it ran ("the sandbox was closed while the command ran; it was
                stopped", its result so far in ``.result``).
        """
        cwd = cwd or os.getcwd()
        # An absolute path is only normalised: abspath's look at the working directory
        # and its separators are Python code on every command's path.
        cwd = os.path.normpath(cwd) if cwd.startswith("/") else os.path.abspath(cwd)
        child_env = dict(env) if env is not None else self.child_env()
        confinement = self._confinement_with_tmp(child_env)
        plan = self._command_plan(confinement)
        mechanisms = plan.mechanisms
        guarded = self._guards(mechanisms)  # before the layers bind what exists
        namespaced = plan.namespaced
        identity = None
        if cwd_fd is not None:
            if namespaced:
                opened = os.fstat(cwd_fd)
                identity = (opened.st_dev, opened.st_ino)
            elif self._fd_links:
                # chdir through the link to the open descriptor enters the very directory
                # opened, whatever its path has become (the supervisor is another process).
                cwd = f"/proc/{os.getpid()}/fd/{cwd_fd}"
        if namespaced:
            # bubblewrap's PID namespace ends what the command left running as it exits:
            # a shell inside reports those processes (spawn._tree.reporting_argv).
            if argv:
                _refuse_unknown_format(argv[0], cwd, child_env)
            if confinement.max_processes is not None:
                # bubblewrap's processes and the reporting shell are in the capped tree
                # too: the cap grows by them, so the command has max_processes, as
                # without them.
                confinement = dataclasses.replace(
                    confinement,
                    max_processes=confinement.max_processes
                    + bwrap.OWN_PROCESSES
                    + REPORTER_PROCESSES,
                )
            group = self._cgroup(confinement.max_processes) if plan.capped else None
            inner = [*reporting_argv(), *argv]
            command = layered_command(confinement, mechanisms, inner, cwd, child_env, identity)
            job = CommandJob(
                argv=command.argv,
                # Under the check, the shell inside the sandbox enters cwd; the supervisor's
                # own directory does not matter, and entering cwd there could fail first.
                cwd=cwd if identity is None else "/",
                env=command.env,
                rlimits=plan.rlimits,
                memory_bytes=plan.memory_bytes,
                layers=command.layers,
                confinement=command.confinement,
                cgroup=group,
                seccomp_fd=command.seccomp_fd,
                report_fd=REPORT_FD,
                set_aside=guarded,
            )
        else:
            group = self._cgroup(confinement.max_processes) if plan.capped else None
            # What layered_command gives without bubblewrap, worked out once (the plan).
            job = plain_job(
                tuple(argv),
                cwd,
                child_env,
                plan.rlimits,
                plan.memory_bytes,
                plan.layers,
                plan.layered,
                group,
                guarded,
            )
        refused = 0
        if group is not None and on_fork_counter is not None:
            on_fork_counter(functools.partial(cgroup.refused_forks, group))
        try:
            result = await run_process(
                self._launcher,
                job,
                on_output=on_output,
                timeout=timeout if timeout is not None else self.limits.timeout_seconds,
                grace=self.limits.grace_seconds,
                drain=self.limits.drain_seconds,
                output_bytes=self.limits.output_bytes,
            )
        finally:
            if guarded:
                set_aside(guarded)
            if group is not None:
                refused = cgroup.refused_forks(group)
                cgroup.remove(group)
        if refused:
            result = dataclasses.replace(result, refused_forks=refused)
        if identity is not None and _refused_for_cwd(result):
            raise SandboxError(
                f"cannot start in {cwd!r}: the working directory changed while the command "
                "was starting (it is no longer the directory that was opened); nothing ran. "
                "Check the directory and run the command again"
            )
        return result

    async def call(
        self,
        fn: Callable[..., Any],
        /,
        *args: Any,
        reuse_process: bool = False,
        on_taken: Callable[[], None] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` in a child process under this sandbox's limits and
        layers; an awaitable result is awaited in the child. Returns the result, pickled
        in the child and rebuilt here as data only (``sandbox.spawn._results``: plain
        values, the standard library's value types, and exceptions, enums, dataclasses,
        named tuples and pydantic models of modules already imported here).

        ``fn`` may be any callable, a closure or a lambda included. It runs in a fresh
        child of a warm worker that this sandbox's spawn server forked (a clean
        interpreter that applied the layers once), so nothing a call leaves behind reaches
        the next one, and nothing of this process's memory is there but what the call
        carries. The call crosses as a ``cloudpickle`` pickle: what can be imported
        (module-level functions and classes) by reference, imported by the worker from
        this process's ``sys.path`` as it is on disk, not as this process changed it; a
        closure, a lambda or a function of ``__main__`` by value, with the values it
        captures and the globals it names, as they are when the call is made. An
        argument whose class sets ``sandbox_by_reference = True`` is kept by the worker
        (one copy made from each distinct pickle) and reaches each call as that copy. The
        first call, and one while the other workers are busy, waits for a new worker
        (under the call's timeout). Under a process cap (``max_processes``) each call
        gets a worker of its own, whose one child runs it (the cap counts the worker
        too, and is one higher for it). See ``sandbox.spawn._calls``.

        ``reuse_process=True`` declares that ``fn`` keeps no state of its own between
        calls (what it keeps, it validates on each call, as a workspace's caches keyed by
        a file's stat). Such a call, when it pickles by import, may run in a long-lived
        child of the spawned worker that runs such calls one after another, with no fork
        per call: confined as a fresh child is (the same layers, its own session,
        subreaper, nested Landlock domain), what the call leaves running stopped after it,
        its CPU and memory limits granted anew for each call (under hard caps of twice
        each; the child is replaced before a call could not get them whole, and after a
        call that left a thread running), and the child replaced after a call that did not
        deliver (a crash, a timeout, a cancellation). What the call leaves in memory may
        reach later calls of the same kind. Other calls ignore it.

        ``on_taken`` is called (in this task) once a child took the call, so that a
        caller with a deadline of its own (a tool call's timeout) can count it from then
        too; a call that ends before that is seen may not call it.

        Stops after ``limits.timeout_seconds`` (raising ``TimeoutError``), counted from
        when a child of a worker took the call (not while a worker starts for it, which
        ``limits.start_seconds`` bounds), or when cancelled, taking the child's whole tree
        down.

        Raises:
            SandboxUnavailable: a protection asked for that no layer can give to a Python
                call (a required one, or one ``best_effort`` does not cover).
            UnpicklableCall: ``fn`` or an argument cannot be pickled (a lock, a socket, an
                open file, a generator); the message names it. Nothing ran.
            SandboxError: the child died by a signal (``.signal`` names it, e.g.
                ``"SIGSEGV"``) or exited without a result; or no worker took the call
                within ``limits.start_seconds`` ("the sandbox could not start a worker
                for the call within N s (SandboxLimits.start_seconds); nothing ran").
            TimeoutError: ``limits.timeout_seconds`` passed once the call was taken.
            SandboxError: the result names a function or a class that is not data (it
                could run code here, outside the sandbox); or ``fn`` raised an exception
                that is no ``Exception`` (``SystemExit``), which is not raised here.
            Exception: whatever ``fn`` raised.
        """
        self._check_calls()
        limits = self.limits
        mechanisms = self.call_capabilities
        guarded = self._guards(mechanisms)
        cap = mechanisms.get(PROCESS_CAP)
        group = None
        if cap is not None:
            # The cap counts the worker with the call's tree: a worker of its own whose one
            # child runs the call, the cap one higher for the worker, let go after the call
            # (with a cgroup of its own, which the worker joins).
            if cap in (CGROUP_V2, CGROUP_V1):
                group = self._cgroup(_plus_one(self.confinement.max_processes))
            caller = CallWorkers(
                self._call_setup(group, counted=1), self._launcher.call_worker, once=True
            )
        else:
            caller = self._call_workers(self._absent_protected(mechanisms))
        try:
            return await caller.call(
                fn,
                args,
                kwargs,
                limits.grace_seconds,
                reuse=reuse_process,
                timeout=limits.timeout_seconds,
                start_within=limits.start_seconds,
                on_taken=on_taken,
            )
        finally:
            set_aside(guarded)
            if cap is not None:
                caller.close()
            if group is not None:
                cgroup.remove(group)

    def start_calls_ahead(
        self,
        *calls: tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]],
        reuse_process: bool = False,
    ) -> None:
        """Start this sandbox's spawn server and one warm worker of calls now, in a thread
        of its own, where a call is sure to come (tools bound to this sandbox), so that the
        first call finds them ready or on their way rather than starting them. The worker
        holds what ``calls`` name (``(fn, args, kwargs)``, as :meth:`call` takes them:
        pickled, never run); ``reuse_process`` as for :meth:`call`. Returns at once;
        nothing is reported (a call made later reports its own errors). Nothing starts
        when calls cannot run here (a protection no layer gives them), or when each call
        gets a worker of its own (``max_processes``). :meth:`close` stops them."""
        try:
            self._check_calls()
        except SandboxUnavailable:
            return
        mechanisms = self.call_capabilities
        if PROCESS_CAP in mechanisms:
            return
        self._call_workers(self._absent_protected(mechanisms)).start_ahead(calls, reuse_process)

    def _call_workers(self, absent: list[str]) -> CallWorkers:
        """The calls' warm worker; a new one when a protected path appeared or went since
        it was set up (its layers bound what existed)."""
        caller = self._caller
        stale = caller is None or caller.closed or caller.owner != os.getpid()
        if stale or absent != self._caller_absent:
            if caller is not None and caller.owner == os.getpid():
                caller.close()
            caller = self._caller = CallWorkers(self._call_setup(None), self._launcher.call_worker)
            self._callers.add(caller)
            self._caller_absent = absent
            weakref.finalize(self, caller.close)
        return caller

    def _command_plan(self, confinement: Confinement) -> _CommandPlan:
        """What every command under ``confinement`` (this sandbox's, or it with the private
        temp dir) and the current limits shares, worked out once for both (see
        :meth:`_confinement_with_tmp`: the same object while they stay the same)."""
        cached = self._plans
        if cached is not None and cached[0] is confinement and cached[1] is self.limits:
            return cached[2]
        mechanisms = enforced(self._plan.commands, confinement)
        plan = _CommandPlan(
            mechanisms=mechanisms,
            namespaced=BUBBLEWRAP in mechanisms.values(),
            capped=mechanisms.get(PROCESS_CAP) in (CGROUP_V2, CGROUP_V1),
            rlimits=tuple(self.limits.rlimits()),
            memory_bytes=self.limits.memory_bytes,
            layers=tuple(child_layers(mechanisms)),
            layered=layer_confinement(confinement, mechanisms),
        )
        self._plans = (confinement, self.limits, plan)
        return plan

    def _guards(self, mechanisms: dict[str, str]) -> tuple[Guard, ...]:
        """What each protected path (``host_exec_paths`` in the writable directories) is
        now, when ``mechanisms`` protect them, for ``set_aside`` to compare with after the
        child: what it created there, or swapped on the way, is set aside."""
        if HOST_EXEC_PROTECTION not in mechanisms:
            return ()
        return guards(self.confinement.read_only, self.confinement.writable)

    def _absent_protected(self, mechanisms: dict[str, str]) -> list[str]:
        """The protected paths (``host_exec_paths`` in the writable directories) that do
        not exist now, when ``mechanisms`` protect them: a layer can only bind over what
        exists: a worker set up when one was absent is replaced once it exists."""
        if HOST_EXEC_PROTECTION not in mechanisms:
            return []
        return [path for path in self.confinement.read_only if not os.path.lexists(path)]

    def _call_setup(self, group: str | None, counted: int = 0) -> Callable[[], CallSetup]:
        """What the process calls run in does first (the portable level, limits, layers;
        the environment as this process's is when it is asked for), joining ``group``; a
        process cap ``counted`` higher (for the worker, counted with the call's tree)."""
        tmp_env: dict[str, str] = {}
        confinement = self._confinement_with_tmp(tmp_env)
        mechanisms = enforced(self._plan.calls, confinement)
        layers = tuple(child_layers(mechanisms))
        if SECCOMP in layers or MOUNT_NAMESPACE in layers:
            # Built (and cached) here, not in every child.
            seccomp_filter(network_off=SECCOMP in layers)
        layered = layer_confinement(confinement, mechanisms)
        if counted and layered.max_processes is not None:
            layered = dataclasses.replace(layered, max_processes=layered.max_processes + counted)
        limits = self.limits
        allowlist = self.env_allowlist

        def setup() -> CallSetup:
            return CallSetup(
                env=allowlisted_env(os.environ, allowlist) | tmp_env,
                rlimits=tuple(limits.rlimits()),
                memory_bytes=limits.memory_bytes,
                layers=layers,
                confinement=layered,
                cgroup=group,
                nest=LANDLOCK in layers,
                cwd=os.getcwd(),
                path=tuple(sys.path),
            )

        return setup

    def close(self) -> None:
        """Stop the calls' warm workers (those of the sandboxes :meth:`confined_to` made
        from this one too), its idle command supervisors and every command running through
        it, each whole tree (SIGTERM, ``limits.grace_seconds``, SIGKILL; detached and
        double-forked processes included), and give back its lease on the process's spawn
        server, which stops with the last sandbox or runner using it. A call or command
        running meanwhile raises :class:`SandboxError` ("the sandbox was closed while the
        call ran; it was stopped", "... the command ran ..."), a command's with its
        result so far (``result``: its output until then). Also done when the sandbox
        is collected or the process exits; a later call or command starts them again."""
        # First, so that no worker is left of the server the launcher stops; a later
        # call starts both again, as a later command starts the server.
        for caller in list(self._callers):
            if caller.owner == os.getpid():
                caller.close()
        self._callers.clear()
        self._caller = None
        self._launcher.close(self.limits.grace_seconds)

    def close_commands(self, owner: object) -> None:
        """Stop the commands running through this sandbox that were started under
        ``owner`` (:data:`sandbox.COMMAND_OWNER`, which a tool session sets around its
        calls), each whole tree, as :meth:`close` stops them; close its idle
        supervisors and give back its lease on the spawn server too when no other
        command runs. Its calls' warm workers are :meth:`close`'s to stop."""
        self._launcher.close(self.limits.grace_seconds, owner)

    def __enter__(self) -> Sandbox:
        """``with Sandbox(...) as box:`` closes it at the end (:meth:`close`)."""
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read_only(self, writable: tuple[str, ...]) -> tuple[str, ...]:
        """The protected paths in ``writable`` directories: ``host_exec_paths`` in each,
        and, unless those were turned off, what git's configuration names there as what
        it runs (``git_exec_paths``)."""
        named = read_only_paths(writable, self.host_exec_paths)
        if not self.host_exec_paths or not writable:
            return named
        return (*named, *(p for p in git_exec_paths(writable) if p not in named))

    def _check_enforceable(self) -> None:
        """Raise for a protection asked for that commands cannot get here (see
        ``best_effort``), or a required one nobody asked for."""
        asked = set(wanted(self.confinement))
        for protection in sorted(self.require):
            # Writes may be required confined before the writable dirs are known
            # (workspace_tools adds the workspace); until then only the temp dir is.
            if protection not in asked and protection != WRITE_CONFINEMENT:
                raise ValueError(
                    f"{protection} is required but not asked for: pass {_ASKS[protection]}"
                )
        for protection in sorted(asked | self.require):
            if protection not in self._plan.commands:
                self._unavailable(protection, "commands")

    def _check_calls(self) -> None:
        """The same check for a Python call (no bubblewrap), on each call."""
        asked = set(wanted(self._confinement_with_tmp({})))
        for protection in sorted(asked | self.require):
            if protection not in self._plan.calls:
                self._unavailable(protection, "calls")

    def _unavailable(self, protection: str, kind: str) -> None:
        """Raise SandboxUnavailable for ``protection`` missing for ``kind``, unless the
        caller accepted going without it."""
        if protection in self.require:
            raise SandboxUnavailable(protection, why_missing(protection, kind, self._plan))
        if protection not in self.best_effort:
            raise SandboxUnavailable(
                protection,
                f"{why_missing(protection, kind, self._plan)}; to run without it, pass "
                f"best_effort=True (or best_effort=[{protection!r}]) or {_DROPS[protection]}",
            )

    def child_env(self) -> dict[str, str]:
        """The environment a child gets by default: this process's allowlisted variables."""
        return allowlisted_env(os.environ, self.env_allowlist)

    def _confinement_with_tmp(self, env: dict[str, str]) -> Confinement:
        """With writes confined, a private temp dir is writable too and ``TMPDIR`` names it.
        The same object while the confinement and the temp dir stay the same."""
        confinement = self.confinement
        if not confinement.writable and WRITE_CONFINEMENT not in self.require:
            return confinement
        tmp = self._tmp_dir()
        env["TMPDIR"] = tmp
        cached = self._with_tmp
        if cached is not None and cached[0] is confinement and cached[1] == tmp:
            return cached[2]
        with_tmp = dataclasses.replace(confinement, writable=(*confinement.writable, tmp))
        self._with_tmp = (confinement, tmp, with_tmp)
        return with_tmp

    def _tmp_dir(self) -> str:
        if self._private_tmp is None or not os.path.isdir(self._private_tmp):
            self._private_tmp = tempfile.mkdtemp(prefix="sandbox-tmp-")
            weakref.finalize(self, shutil.rmtree, self._private_tmp, True)
        return self._private_tmp

    def _cgroup(self, max_processes: int | None) -> str | None:
        if self._plan.cgroup_parent is None:
            return None
        return cgroup.create(self._plan.cgroup_parent, max_processes=max_processes)


def _plus_one(max_processes: int | None) -> int | None:
    return None if max_processes is None else max_processes + 1


@dataclasses.dataclass(frozen=True, slots=True)
class _CommandPlan:
    """What :meth:`Sandbox.run` works out from a confinement and the limits: the
    mechanisms enforced, whether bubblewrap wraps the command (``namespaced``) and a
    cgroup caps it, the job's limits, and without bubblewrap the layers the child applies
    and what they enforce (``layered_command``'s ``layers`` and ``confinement``)."""

    mechanisms: dict[str, str]
    namespaced: bool
    capped: bool
    rlimits: tuple[tuple[str, int], ...]
    memory_bytes: int | None
    layers: tuple[str, ...]
    layered: Confinement


#: The argument that asks for each protection (write confinement: ``writable=``).
_ASKS = {
    READ_DENIAL: "read_denied=[paths]",
    NETWORK_OFF: "network=False",
    PROCESS_CAP: "max_processes=N",
    HOST_EXEC_PROTECTION: "writable=[dirs] with host_exec_paths",
}

#: The argument that stops asking for each protection.
_DROPS = {
    WRITE_CONFINEMENT: "writable=()",
    READ_DENIAL: "allow_read=['/']",
    NETWORK_OFF: "network=True",
    PROCESS_CAP: "max_processes=None",
    HOST_EXEC_PROTECTION: "host_exec_paths=()",
}


def _refuse_unknown_format(program: str, cwd: str, env: Mapping[str, str]) -> None:
    """Raise the error ``posix_spawn`` gives for an executable file it cannot run (no
    ``#!`` line, not ELF: ENOEXEC), which bubblewrap and the shell in it would run as a
    shell script instead; so a command starts, or fails to, as it does without them.

    Raises:
        SandboxError: ``cannot start PROGRAM: [Errno 8] Exec format error: PATH``.
    """
    path = program
    if "/" not in program:
        path = shutil.which(program, path=env.get("PATH", os.defpath)) or program
    full = os.path.join(cwd, path)
    try:
        info = os.stat(full)
        if not stat.S_ISREG(info.st_mode) or not os.access(full, os.X_OK):
            return  # refused inside as posix_spawn refuses it (see reporting_argv)
        fd = os.open(full, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    try:
        head = os.read(fd, 4)
    except OSError:
        return
    finally:
        os.close(fd)
    if not head.startswith((b"#!", b"\x7fELF")):
        error = OSError(errno.ENOEXEC, os.strerror(errno.ENOEXEC), path)
        raise SandboxError(f"cannot start {program!r}: {error}")


def _refused_for_cwd(result: ProcessResult) -> bool:
    """The command was refused by bubblewrap's working-directory check: its exit status
    and its whole output are the check's (see ``bwrap.wrap_argv``)."""
    return (
        result.exit_code == bwrap.CWD_CHANGED_STATUS
        and result.stdout.total_bytes == 0
        and result.stderr.complete == bwrap.CWD_CHANGED_MESSAGE
    )


def _check_names(protections: Collection[str]) -> None:
    for protection in sorted(protections):
        if protection not in PROTECTIONS:
            raise ValueError(f"unknown protection {protection!r}; one of {PROTECTIONS}")
