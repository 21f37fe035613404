"""The calls every remote workspace must answer exactly as a local one does."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from workspace_tools import ErrorCode, ToolResult, invoke_tool_sync
from workspace_tools.adapters._common import jsonable
from workspace_tools.tools import TOOL_NAMES

# A 1x1 PNG (red), for read_file's image content.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
#: The workspace tools a remote root serves, in the order ``workspace_tools`` gives them.
TOOLS = list(TOOL_NAMES)


def named(tools: list[Any], name: str = "run_command") -> Any:
    """The tool called ``name`` among ``tools``."""
    return next(t for t in tools if t.name == name)


#: The error codes of :func:`calls`' results, in order.
CODES = [
    None,
    ErrorCode.NOT_FOUND,
    ErrorCode.OUTSIDE_WORKSPACE,
    ErrorCode.INVALID_ARGUMENTS,
    None,
    None,
    None,
    None,
    ErrorCode.NO_MATCH,
    None,
    ErrorCode.STALE_FILE,
    None,
    None,
    None,
    None,
    ErrorCode.INVALID_ARGUMENTS,
    None,
    None,
    None,
]


def populate(root: Path) -> None:
    """The same tree in the served root and the local one (bytes exact)."""
    (root / "eq" / "src").mkdir(parents=True)
    (root / "eq" / "notes.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    (root / "eq" / "src" / "app.py").write_bytes(b"def main():\n    return 1\n")
    (root / "eq" / "pixel.png").write_bytes(PNG)
    many = root / "eq" / "many"
    many.mkdir()
    for i in range(1200):  # a listing longer than the 50,000-character result limit
        (many / f"a_rather_long_file_name_to_fill_the_listing_{i:05}.txt").write_bytes(b"")


def calls(root: Path) -> list[tuple[str, Any]]:
    """The calls both roots get, in order; two edit the tree from outside in between."""
    return [
        ("read_file", {"path": "eq/notes.txt"}),
        ("read_file", {"path": "eq/missing.txt"}),
        ("read_file", {"path": "../outside.txt"}),
        ("read_file", {"path": 3, "bogus": 1}),
        ("read_file", '{"path": "eq/src/app.py", "offset": 2}'),
        ("read_file", {"path": "eq/pixel.png"}),
        ("write_file", {"path": "eq/new/hello.py", "content": "print('hi')\n"}),
        ("edit_file", {"path": "eq/new/hello.py", "old_text": "hi", "new_text": "hello"}),
        ("edit_file", {"path": "eq/new/hello.py", "old_text": "absent", "new_text": "x"}),
        ("read_file", {"path": "eq/src/app.py"}),
        ("outside", lambda: (root / "eq" / "src" / "app.py").write_bytes(b"changed\n")),
        ("edit_file", {"path": "eq/src/app.py", "old_text": "changed", "new_text": "x"}),
        ("list_files", {"path": "eq", "recursive": True}),
        ("list_files", {"path": "eq/many", "limit": 1200}),
        ("glob", {"pattern": "**/*.py", "path": "eq"}),
        ("grep", {"pattern": "t[wh]", "path": "eq", "glob": "*.txt"}),
        ("grep", {"pattern": "(unclosed"}),
        ("run_command", {"command": "cat notes.txt; echo err >&2; exit 3", "cwd": "eq"}),
        ("read_file", {"path": "eq/new/hello.py"}),
        (
            "apply_patch",
            {
                "patch": "*** Begin Patch\n*** Update File: eq/new/hello.py\n@@\n"
                "-print('hello')\n+print('patched')\n*** End Patch\n"
            },
        ),
    ]


def comparable(result: ToolResult) -> dict[str, Any]:
    """A result as data, without wall times (which differ run to run)."""
    data = result.model_dump(mode="json", exclude={"duration_ms", "details", "arguments"})
    data["content"] = jsonable(result.content)
    data["arguments"] = jsonable(result.arguments)
    details = jsonable(result.details)
    if isinstance(details, dict):
        details.pop("duration_ms", None)
    data["details"] = details
    return data


def run_all(tools: list[Any], root: Path) -> list[ToolResult]:
    by_name = {t.name: t for t in tools}
    results = []
    for index, (name, arguments) in enumerate(calls(root)):
        if name == "outside":
            arguments()
            continue
        results.append(invoke_tool_sync(by_name[name], arguments, call_id=f"call-{index}"))
    return results
