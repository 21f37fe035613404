"""A built-in file tool's call crosses a process as data: its ``execute`` (a module-level
function, pickled by name), the validated arguments, the workspace (pickled as its settings)
and the content hashes of the files the call names go to a FRESH interpreter (not a fork:
nothing of this process's memory is there), and the result and the hashes the call changed
come back. Applied here, they give exactly what the same call gives in process: the same
content, details and errors, the same files on disk, the same hash table, and so the same
answer to a later staleness check."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from workspace_tools import ErrorCode, ToolError, ToolOutput, invoke_tool
from workspace_tools.session._pipeline import prepare
from workspace_tools.tools import workspace_tools
from workspace_tools.workspace import Workspace

TREE = {
    "a.py": b"def f():\n    return 1\n",
    "notes.txt": b"one\r\ntwo\r\n",
    "sub/b.txt": b"bee\n",
    ".gitignore": b"*.log\n",
    "x.log": b"return log\n",
}

CHILD = """\
import pickle, sys
from workspace_tools._child_call import execute_in_child
execute, args, workspace, files, name = pickle.load(sys.stdin.buffer)
assert workspace.file_states.snapshot() == {}, "not a fresh workspace"
try:
    value = execute_in_child(execute, args, "call_1", name, (None, None), workspace, files)
    outcome = ("ok", value)
except Exception as exc:
    outcome = ("error", exc)
sys.stdout.buffer.write(pickle.dumps(outcome))
"""

PATCH = (
    "*** Begin Patch\n"
    "*** Update File: sub/b.txt\n@@\n-bee\n+wasp\n"
    "*** Update File: notes.txt\n*** Move to: notes.md\n@@\n one\n-two\n+deux\n"
    "*** Add File: new.txt\n+fresh\n"
    "*** End Patch\n"
)

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {"path": "a.py"}),
    ("read_file", {"path": "notes.txt", "offset": 2}),
    ("write_file", {"path": "notes.txt", "content": "three\n"}),
    ("write_file", {"path": "sub/new/c.txt", "content": "sea\n"}),
    (
        "edit_file",
        {
            "path": "a.py",
            "edits": [
                {"old_text": "return 1", "new_text": "return 2"},
                {"old_text": "def f", "new_text": "def g"},
            ],
        },
    ),
    ("edit_file", {"path": "a.py", "edits": [{"old_text": "absent", "new_text": "x"}]}),
    ("list_files", {"path": ".", "recursive": True}),
    ("glob", {"pattern": "**/*.txt"}),
    ("grep", {"pattern": "return|bee", "context": 1}),
    ("apply_patch", {"patch": PATCH}),
    ("apply_patch", {"patch": PATCH.replace("-bee", "-wasp")}),  # no match: nothing changes
]


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _hashes(workspace: Workspace) -> dict[str, bytes]:
    """The workspace's hash table by path relative to its root."""
    prefix = str(workspace.root) + "/"
    return {k.removeprefix(prefix): v for k, v in workspace.file_states.snapshot().items()}


def _make(root: Path) -> dict[str, Any]:
    for rel, data in TREE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    tools = {t.name: t for t in workspace_tools(root)}
    for rel in ("a.py", "notes.txt", "sub/b.txt"):  # seen before: their hashes are known
        assert anyio.run(invoke_tool, tools["read_file"], {"path": rel}).error is None
    return tools


def _in_fresh_interpreter(tool: Any, arguments: dict[str, Any]) -> tuple[Any, ...]:
    """The call run in a new interpreter, its changed hashes applied to the tool's
    workspace: ``(content, details, error, code)`` as the result would carry them."""
    workspace = tool.workspace
    call = prepare(tool, arguments)
    assert call.error is None, call.error
    named = [] if tool.paths is None else tool.paths(call.args)
    files = workspace.snapshot_files(workspace.named_files(named))
    payload = pickle.dumps((tool.execute, call.args, workspace, files, tool.name))
    # execute travels by name, as workspace_tools.tools.<tool>.execute.
    execute = tool.execute
    assert (execute.__module__, execute.__qualname__) == (
        f"workspace_tools.tools.{tool.name}",
        "execute",
    )
    assert len(payload) < 4096, len(payload)
    done = subprocess.run(
        [sys.executable, "-c", CHILD], input=payload, capture_output=True, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    kind, value = pickle.loads(done.stdout)
    if kind == "error":
        assert isinstance(value, ToolError), repr(value)
        return None, value.details, value.message, value.code
    output, (changes, _state) = value
    workspace.apply_file_changes(changes)
    assert isinstance(output, ToolOutput)
    return output.content, output.details, None, None


@pytest.mark.parametrize(
    ("name", "arguments"), CALLS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CALLS)]
)
def test_a_call_in_a_fresh_interpreter_gives_what_it_gives_in_process(
    tmp_path: Path, name: str, arguments: dict[str, Any]
) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    here_tools, there_tools = _make(here), _make(there)
    result = anyio.run(invoke_tool, here_tools[name], arguments)
    expected = (result.content, result.details, result.error, result.error_code)
    assert _in_fresh_interpreter(there_tools[name], arguments) == expected

    assert _tree(there) == _tree(here)
    assert _hashes(there_tools[name].workspace) == _hashes(here_tools[name].workspace)
    # A later staleness check: a file changed outside the tools, then every file written.
    for root in (here, there):
        with (root / "a.py").open("ab") as handle:
            handle.write(b"# outside\n")
    for rel in sorted(_tree(here)):
        later = {"path": rel, "content": "later\n"}
        outcomes = [
            anyio.run(invoke_tool, tools["write_file"], later).error_code
            for tools in (here_tools, there_tools)
        ]
        assert outcomes[0] == outcomes[1], (rel, outcomes)
    assert _tree(there) == _tree(here)


def test_the_stale_check_needs_the_hashes_handed_back(tmp_path: Path) -> None:
    # Without applying the changed hashes, the next write of the file the call wrote is
    # judged against the old content: the round trip above is what keeps the check right.
    tools = _make(tmp_path)
    tool = tools["write_file"]
    workspace = tool.workspace
    call = prepare(tool, {"path": "notes.txt", "content": "three\n"})
    files = workspace.snapshot_files(workspace.named_files(tool.paths(call.args)))
    payload = pickle.dumps((tool.execute, call.args, workspace, files, tool.name))
    done = subprocess.run(
        [sys.executable, "-c", CHILD], input=payload, capture_output=True, check=True
    )
    kind, (_output, (changes, _)) = pickle.loads(done.stdout)
    assert kind == "ok"
    later = {"path": "notes.txt", "content": "four\n"}
    stale = anyio.run(invoke_tool, tool, later)
    assert stale.error_code is ErrorCode.STALE_FILE, stale.error
    workspace.apply_file_changes(changes)
    assert anyio.run(invoke_tool, tool, later).error is None
    assert (tmp_path / "notes.txt").read_bytes() == b"four\r\n"
