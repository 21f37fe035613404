"""Discovery is race-free like the file tools: with a directory of the workspace swapped for
a link to outside (``renameat2(RENAME_EXCHANGE)`` in a loop) while list_files, glob, grep
and run_command run, no call shows an outside name or byte, and no command starts outside.

A control run shows that the same swap defeats a walk that goes by path (``os.walk`` and
``open`` of the joined path), so a pass means the tools resist the race, not that the race
was never met."""

from __future__ import annotations

import ctypes
import os
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from workspace_tools import invoke_tool_sync, workspace_tools

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_SYS_RENAMEAT2_X86_64 = 316
#: Calls per case. Each call meets the race hundreds of times over (a loaded two-core host
#: made 180,000-1,100,000 exchanges in 1000 calls, and 35-90 % of the calls on a swapped
#: path ended OUTSIDE_WORKSPACE), so 300 calls still see the swap under every kind of step.
ITERATIONS = 300
MARKER = "OUTSIDE-MARKER-7f3a9c"
OUTSIDE_NAME = "outside-only-name"


def _renameat2() -> Any:
    """libc's ``renameat2``, else the raw system call (x86_64); ``None`` if neither."""
    libc = ctypes.CDLL(None, use_errno=True)
    function = getattr(libc, "renameat2", None)
    if function is not None:
        return function
    if os.uname().machine != "x86_64":
        return None
    return lambda *args: libc.syscall(_SYS_RENAMEAT2_X86_64, *args)


def _exchange(renameat2: Any, a: bytes, b: bytes) -> None:
    if renameat2(_AT_FDCWD, a, _AT_FDCWD, b, _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


@pytest.fixture
def swapped(tmp_path: Path) -> Iterator[tuple[Path, list[int]]]:
    """``ws/d`` is a directory one moment and a link to ``outside/`` the next: a thread
    exchanges it with ``ws/link`` until the test ends. Yields the workspace root and a
    one-item list counting the exchanges."""
    root, outside = tmp_path / "ws", tmp_path / "outside"
    (root / "d" / "sub").mkdir(parents=True)
    (outside / f"{OUTSIDE_NAME}-dir").mkdir(parents=True)
    for directory in (root / "d", root / "d" / "sub"):
        (directory / "secret.txt").write_text("inside\n")
        (directory / "f.txt").write_text("inside\n")
    for directory in (outside, outside / f"{OUTSIDE_NAME}-dir"):
        (directory / "secret.txt").write_text(f"{MARKER}\n")
        (directory / f"{OUTSIDE_NAME}.txt").write_text(f"{MARKER}\n")
    (outside / "sub").mkdir()
    (outside / "sub" / "f.txt").write_text(f"{MARKER}\n")
    (root / "link").symlink_to(outside)
    renameat2 = _renameat2()
    a, b = os.fsencode(root / "d"), os.fsencode(root / "link")
    try:
        if renameat2 is None:
            raise OSError("no renameat2")
        _exchange(renameat2, a, b)
        _exchange(renameat2, a, b)
    except OSError as exc:
        pytest.skip(f"renameat2(RENAME_EXCHANGE) is not available here: {exc}")
    stop = threading.Event()
    swaps = [0]

    def run() -> None:
        while not stop.is_set():
            _exchange(renameat2, a, b)
            swaps[0] += 1

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield root, swaps
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()


CASES: list[tuple[str, dict[str, Any]]] = [
    ("list_files", {"path": ".", "recursive": True, "limit": 10_000}),
    ("list_files", {"path": "d", "recursive": True, "limit": 10_000}),
    ("list_files", {"path": "d/sub"}),
    ("glob", {"pattern": "**/*", "limit": 10_000}),
    ("glob", {"pattern": "**/*", "path": "d", "limit": 10_000}),
    ("grep", {"pattern": "[A-Z]|inside", "limit": 10_000}),
    ("grep", {"pattern": "[A-Z]|inside", "path": "d/sub", "limit": 10_000}),
    ("grep", {"pattern": "[A-Z]|inside", "path": "d/sub/f.txt"}),
    ("run_command", {"command": "readlink /proc/$$/cwd; cat secret.txt", "cwd": "d"}),
    ("run_command", {"command": "readlink /proc/$$/cwd; cat f.txt", "cwd": "d/sub"}),
]


@pytest.mark.parametrize(("name", "arguments"), CASES, ids=[f"{n}-{a}" for n, a in CASES])
def test_no_outside_name_or_byte_while_a_directory_is_swapped_for_a_link(
    swapped: tuple[Path, list[int]], name: str, arguments: dict[str, Any]
) -> None:
    root, swaps = swapped
    tool = {t.name: t for t in workspace_tools(root)}[name]
    outcomes: Counter[str] = Counter()
    leaks: list[str] = []
    before = swaps[0]
    for _ in range(ITERATIONS):
        result = invoke_tool_sync(tool, arguments)
        if result.error_code is not None:
            outcomes[result.error_code.value] += 1
            text = result.error or ""
        else:
            outcomes["ok"] += 1
            text = result.model_text() + repr(result.details)
        if MARKER in text or OUTSIDE_NAME in text:
            leaks.append(text)
        if name == "run_command" and result.error_code is None:
            # The kernel's name of the shell's working directory (bash's own ``pwd -P``
            # resolves its remembered path again, which may name the link's target now).
            cwd = result.content["stdout"].splitlines()[0]
            if not cwd.startswith(f"{root}/"):
                leaks.append(f"started in {cwd}")
    print(f"{name} {arguments}: {dict(outcomes)}; {swaps[0] - before} exchanges")
    assert leaks == [], (dict(outcomes), leaks[:3])
    # The race was met: calls went through while it was a directory, and the directory
    # changed under them many times.
    assert outcomes["ok"] > 0, dict(outcomes)
    assert swaps[0] - before > ITERATIONS, swaps


def _walk_by_path(root: Path) -> str:
    """What a naive discovery sees: ``os.walk`` (by path) and each file opened by path."""
    seen = []
    for directory, _dirs, files in os.walk(root):
        for file in files:
            seen.append(file)
            try:
                seen.append(Path(directory, file).read_text())
            except OSError:
                continue
    return "\n".join(seen)


def test_control_the_swap_defeats_a_walk_by_path(swapped: tuple[Path, list[int]]) -> None:
    root, swaps = swapped
    leaked_in = None
    for index in range(20 * ITERATIONS):
        seen = _walk_by_path(root)
        if MARKER in seen or OUTSIDE_NAME in seen:
            leaked_in = index
            break
    print(f"walk by path leaked after {leaked_in} walks; {swaps[0]} exchanges")
    assert leaked_in is not None, swaps
