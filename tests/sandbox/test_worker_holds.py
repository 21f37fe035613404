"""A warm worker holds what later calls name too: a module (or a kept object) that a call
names and the worker lacked, because it was started before any call named it, is imported
(made) once by the worker, confined as at its start, between calls, so that every later
child has it; no child imports it again per call."""

from __future__ import annotations

import importlib
import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from sandbox import Sandbox
from tests.sandbox._boxes import call_worker
from workspace_tools import invoke_tool, tool

pytestmark = pytest.mark.anyio

#: A module whose import appends this process's pid to a log (and, where the directory
#: ``outside`` names exists, tries to write there, saying whether it could).
COUNTED = """\
import os
from pydantic import BaseModel

def _log(what):
    with open({log!r}, "a", encoding="utf-8") as f:
        f.write(f"{{what}} {{os.getpid()}}\\n")

_log("import")
if os.path.isdir(os.path.dirname({outside!r})):
    try:
        with open({outside!r}, "w", encoding="utf-8") as f:
            f.write("escaped")
        _log("wrote-outside")
    except OSError:
        _log("refused-outside")

class Args(BaseModel):
    n: int

def execute(args, context):
    return f"counted {{args.n}} in {{os.getpid()}}"

def pid():
    return os.getpid()

class Kept:
    sandbox_by_reference = True

    def __init__(self, value):
        self.value = value

    def __getstate__(self):
        return {{"value": self.value}}

    def __setstate__(self, state):
        _log("made")
        self.value = state["value"]

def peek(kept):
    return kept.value
"""

FIRST = """\
import os
from pydantic import BaseModel

class Args(BaseModel):
    text: str

def execute(args, context):
    return args.text

def pid():
    return os.getpid()
"""


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any, Path]]:
    """Two importable modules of custom tools (``first``, ``counted``; names unique to the
    test) on ``sys.path``, and the log ``counted`` appends to, in a writable directory."""
    source = tmp_path / "modules"
    source.mkdir()
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    log = log_dir / "imports.log"
    token = secrets.token_hex(4)
    names = (f"first_{token}", f"counted_{token}")
    outside = tmp_path / "outside" / "escaped.txt"
    (source / f"{names[0]}.py").write_text(FIRST, encoding="utf-8")
    (source / f"{names[1]}.py").write_text(
        COUNTED.format(log=str(log), outside=str(outside)), encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(source))
    loaded: list[ModuleType] = [importlib.import_module(name) for name in names]
    try:
        yield loaded[0], loaded[1], log
    finally:
        for name in names:
            sys.modules.pop(name, None)


def _lines(log: Path) -> list[str]:
    """The log's lines written by processes other than this one (its own import)."""
    me = str(os.getpid())
    return [line for line in log.read_text(encoding="utf-8").splitlines() if line.split()[1] != me]


async def test_a_tool_module_new_to_the_worker_is_imported_once_per_worker(
    modules: tuple[Any, Any, Path],
) -> None:
    first, counted, log = modules
    first_tool = tool(
        name="first", description="echo", parameters=first.Args, execute=first.execute
    )
    counted_tool = tool(
        name="counted", description="count", parameters=counted.Args, execute=counted.execute
    )
    box = Sandbox(layers=False)
    try:
        started = await invoke_tool(first_tool, {"text": "hi"}, sandbox=box)  # starts it
        worker = call_worker(box)
        results = [await invoke_tool(counted_tool, {"n": n}, sandbox=box) for n in range(5)]
        same = call_worker(box)
    finally:
        box.close()
    assert started.error is None and started.content == "hi", started
    assert worker is not None and same is worker, (worker, same)
    assert [r.error for r in results] == [None] * 5, results
    contents = [str(r.content) for r in results]
    assert [c.split(" in ")[0] for c in contents] == [f"counted {n}" for n in range(5)], contents
    assert len({c.split(" in ")[1] for c in contents}) == 5, contents  # a fresh child each
    # One import, by the worker itself (its children have it), not one per call.
    assert _lines(log) == [f"import {worker.pid}"], _lines(log)


async def test_the_reused_child_holds_a_module_new_to_its_worker_and_stays(
    modules: tuple[Any, Any, Path],
) -> None:
    # The one child of a worker of reused children takes the message itself: it imports
    # the module once and keeps serving (its caches stay warm), not replaced for it.
    first, counted, log = modules
    box = Sandbox(layers=False)
    try:
        child = await box.call(first.pid, reuse_process=True)
        worker = call_worker(box, reuse=True)
        pids = [await box.call(counted.pid, reuse_process=True) for _ in range(5)]
    finally:
        box.close()
    assert worker is not None and child != worker.pid, (worker, child)
    assert pids == [child] * 5, (child, pids)
    assert _lines(log) == [f"import {child}"], _lines(log)


async def test_a_kept_object_new_to_the_worker_is_made_once_per_worker(
    modules: tuple[Any, Any, Path],
) -> None:
    first, counted, log = modules
    box = Sandbox(layers=False)
    kept = counted.Kept("value")
    try:
        await box.call(first.pid)
        worker = call_worker(box)
        seen = [await box.call(counted.peek, kept) for _ in range(5)]
    finally:
        box.close()
    assert worker is not None
    assert seen == ["value"] * 5, seen
    assert _lines(log) == [f"import {worker.pid}", f"made {worker.pid}"], _lines(log)


async def test_what_the_worker_imports_later_runs_confined_as_at_its_start(
    modules: tuple[Any, Any, Path], tmp_path: Path
) -> None:
    first, counted, log = modules
    (tmp_path / "outside").mkdir()  # the import tries to write there from now on
    box = Sandbox(writable=[str(log.parent)], best_effort=True)
    if "write_confinement" not in box.call_capabilities:
        box.close()
        pytest.skip("no layer confines a call's writes here")
    try:
        await box.call(first.pid)
        worker = call_worker(box)
        pids = [await box.call(counted.pid) for _ in range(2)]
    finally:
        box.close()
    assert worker is not None and worker.pid not in pids, (worker, pids)
    assert _lines(log) == [f"import {worker.pid}", f"refused-outside {worker.pid}"], _lines(log)
    assert not (tmp_path / "outside" / "escaped.txt").exists()
