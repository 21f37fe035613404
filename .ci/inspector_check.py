"""Drive `workspace-tools mcp` with the MCP Inspector CLI and check its JSON output.

Usage: python .ci/inspector_check.py PATH_TO_MCP_INSPECTOR
Exit code 0 when every check holds; otherwise 1 with one line per failed check.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TOOL_NAMES = [
    "read_file",
    "write_file",
    "edit_file",
    "list_files",
    "glob",
    "grep",
    "run_command",
    "apply_patch",
]
READ_ONLY = ["read_file", "list_files", "glob", "grep"]
LABELS = {
    "read_file": "Read file",
    "write_file": "Write file",
    "edit_file": "Edit file",
    "list_files": "List files",
    "glob": "Find files",
    "grep": "Search files",
    "run_command": "Run command",
    "apply_patch": "Apply patch",
}
NS = "dev.agent-workspace-tools/"


def inspect(inspector: str, root: Path, *options: str, server_flags: tuple[str, ...] = ()) -> Any:
    """Run one Inspector CLI request against a fresh server; its stdout parsed as JSON."""
    command = [
        inspector,
        "--cli",
        "-e",
        f"PYTHONPATH={REPO}",
        *options,
        "--",
        sys.executable,
        "-m",
        "workspace_tools",
        "mcp",
        "--root",
        str(root),
        *server_flags,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"inspector exited {done.returncode}: {done.stdout}{done.stderr}")
    return json.loads(done.stdout)


def main() -> int:
    inspector = sys.argv[1]
    failures: list[str] = []

    def check(ok: bool, what: str) -> None:
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "notes.txt").write_text("hello from the inspector\n")

        listed = inspect(inspector, root, "--method", "tools/list", "--strict")["tools"]
        check([t["name"] for t in listed] == TOOL_NAMES, "tools/list names the eight tools")
        check(
            all(t.get("title") == LABELS.get(t["name"]) for t in listed),
            "each tool's title is its presentation label",
        )
        check(
            all(
                t.get("_meta", {}).get(NS + "presentation", {}).get("label")
                == LABELS.get(t["name"])
                for t in listed
            ),
            "each tool's _meta carries its step label and icon",
        )
        check(
            all(t["annotations"]["readOnlyHint"] == (t["name"] in READ_ONLY) for t in listed),
            "readOnlyHint marks exactly the read-only tools",
        )
        check(
            all(t["inputSchema"].get("type") == "object" for t in listed),
            "every tool has an object input schema",
        )

        read_only = inspect(
            inspector, root, "--method", "tools/list", server_flags=("--read-only",)
        )["tools"]
        check([t["name"] for t in read_only] == READ_ONLY, "--read-only serves the read-only tools")

        called = inspect(
            inspector,
            root,
            "--method",
            "tools/call",
            "--tool-name",
            "read_file",
            "--tool-arg",
            "path=notes.txt",
        )
        text = "".join(block.get("text", "") for block in called.get("content", []))
        check(called.get("isError") is False, "tools/call read_file succeeds")
        check("hello from the inspector" in text, "the model text holds the file's line")
        check(
            called.get("_meta", {}).get(NS + "presentation", {}).get("label") == "Read file",
            "the presentation travels in _meta",
        )
        check(NS not in text, "nothing of _meta reaches the model text")

    if failures:
        print(f"{len(failures)} MCP Inspector check(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
