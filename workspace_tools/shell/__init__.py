"""Shells and processes that outlive a call: a persistent shell with per-command nonce
trailers (``_shell.py``), taken by one call at a time (``_turn.py``), background processes
and their registry with caps (``_registry.py``), both run through the sandbox by a thread
of their own (``_runner.py``), their output kept head and tail in memory and whole in the
session's output area (``_output.py``, ``_area.py``)."""

from workspace_tools.shell._area import make_area, remove_area
from workspace_tools.shell._output import NewOutput, OutputLog, StreamCapture, StreamView
from workspace_tools.shell._registry import (
    BackgroundProcess,
    ProcessInfo,
    ProcessRegistry,
    ProcessState,
)
from workspace_tools.shell._runner import RunningProcess
from workspace_tools.shell._shell import CommandOutcome, PersistentShell
from workspace_tools.shell._turn import ShellTurn, TurnGivenUp

__all__ = [
    "BackgroundProcess",
    "CommandOutcome",
    "NewOutput",
    "OutputLog",
    "PersistentShell",
    "ProcessInfo",
    "ProcessRegistry",
    "ProcessState",
    "RunningProcess",
    "ShellTurn",
    "StreamCapture",
    "StreamView",
    "TurnGivenUp",
    "make_area",
    "remove_area",
]
