"""A call's turn at the persistent shell (see :class:`ShellTurn`)."""

from __future__ import annotations

import threading

from workspace_tools.shell._runner import RunningProcess


class TurnGivenUp(Exception):
    """The call gave up its :class:`ShellTurn` before the shell was its: nothing ran."""


class ShellTurn:
    """One call's place in line for the shell, so that a call that ends (its timeout, a
    cancel) stops its own command and never another's.

    A call that gives its turn up (:meth:`give_up`) while it still waits behind another
    call's command leaves that command alone, and its own never runs; once its command
    runs, giving up stops that shell (the command's tree with it). Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: RunningProcess | None = None
        self._given_up = False
        self._began = False

    @property
    def given_up(self) -> bool:
        """Whether :meth:`give_up` was called."""
        return self._given_up

    @property
    def began(self) -> bool:
        """Whether the call's command was handed to the shell."""
        return self._began

    def give_up(self) -> None:
        """Leave the line; stop the shell without waiting when the command runs in it."""
        with self._lock:
            self._given_up = True
            if self._process is not None:
                self._process.stop(wait=None)

    def take(self, process: RunningProcess) -> bool:
        """The shell (``process``) is the call's now; ``False`` when it gave up
        meanwhile. Called by :meth:`PersistentShell.run` with the shell's lock held."""
        with self._lock:
            if self._given_up:
                return False
            self._process, self._began = process, True
            return True

    def leave(self) -> None:
        """The command is over: giving up no longer stops anything."""
        with self._lock:
            self._process = None
