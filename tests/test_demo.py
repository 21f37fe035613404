"""The demo's sample project and how the demo prints a finished step."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workspace_tools import ErrorCode, ToolResult
from workspace_tools.cli._demo import repository_steps, sample_project, sample_steps, summary_lines

REPO = Path(__file__).resolve().parents[1]


def unittest_run(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "unittest"], cwd=root, capture_output=True, text=True, timeout=60
    )


def test_sample_project_is_read_from_the_repository_fixtures() -> None:
    assert sample_project() == REPO / "fixtures" / "sample_project"


def test_sample_project_has_one_failing_test_that_the_demo_edit_fixes(tmp_path: Path) -> None:
    root = tmp_path / "project"
    shutil.copytree(sample_project(), root)
    before = unittest_run(root)
    assert before.returncode == 1
    assert before.stderr.splitlines()[-1] == "FAILED (failures=1)"
    [edit] = [s for s in sample_steps() if s.tool == "edit_file"]
    target = root / edit.arguments["path"]
    text = target.read_text()
    assert text.count(edit.arguments["old_text"]) == 1
    target.write_text(text.replace(edit.arguments["old_text"], edit.arguments["new_text"]))
    after = unittest_run(root)
    assert (after.returncode, after.stderr.splitlines()[-1]) == (0, "OK")


def test_sample_story_uses_every_tool() -> None:
    assert {s.tool for s in sample_steps()} == {
        "read_file",
        "write_file",
        "edit_file",
        "list_files",
        "glob",
        "grep",
        "run_command",
    }


@pytest.mark.parametrize(
    ("files", "read", "command"),
    [
        (["README.md", "b.txt"], "README.md", "ls"),
        (["b.txt", "a.txt"], "a.txt", "ls"),
        ([".git/HEAD", "x.py"], "x.py", "git status --short"),
        ([], None, "ls"),
    ],
)
def test_repository_story_reads_a_readme_or_the_first_file(
    tmp_path: Path, files: list[str], read: str | None, command: str
) -> None:
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n")
    steps = repository_steps(tmp_path)
    reads = [s.arguments["path"] for s in steps if s.tool == "read_file"]
    assert reads == ([] if read is None else [read])
    assert [s.arguments["command"] for s in steps if s.tool == "run_command"] == [command]


def _result(**fields: object) -> ToolResult:
    return ToolResult(call_id="c", name="t", **fields)  # type: ignore[arg-type]


DIFF = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-old\n+new\n"
EDIT_DETAILS = {"diff": DIFF, "additions": 1, "deletions": 1}


@pytest.mark.parametrize(
    ("result", "lines"),
    [
        (
            _result(error="no such file: a.txt", error_code=ErrorCode.NOT_FOUND),
            ["✗ NOT_FOUND: no such file: a.txt"],
        ),
        (
            _result(
                content={"path": "x.py"}, details={"diff": DIFF, "additions": 1, "deletions": 1}
            ),
            ["diff +1 −1", "--- a/x.py", "+++ b/x.py", "@@ -1 +1 @@", "-old", "+new"],
        ),
        (_result(content={"exit_code": 1, "stdout": "", "stderr": "boom"}), ["exit code 1"]),
        (
            _result(content="\n".join(f"line {i}" for i in range(1, 11))),
            [*(f"line {i}" for i in range(1, 9)), "… 2 more lines"],
        ),
    ],
)
def test_summary_lines(result: ToolResult, lines: list[str]) -> None:
    assert summary_lines(result) == lines


def test_served_step_lists_the_workspace_over_http_as_in_process(tmp_path: Path) -> None:
    import io

    import anyio

    from workspace_tools.cli._demo import _Printer, _served_step
    from workspace_tools.tools import workspace_tools

    (tmp_path / "a.txt").write_text("x\n")
    out = io.StringIO()
    list_files = workspace_tools(tmp_path)[3]
    failed = anyio.run(_served_step, tmp_path, list_files, _Printer(out), 11)
    assert (failed, out.getvalue()) == (
        0,
        "\n11. serve the workspace over HTTP on 127.0.0.1 and call it remotely\n"
        "  workspace-tools serve --http 127.0.0.1:0 --read-only (a bearer token)\n"
        "● List files [folder] .\n"
        "  a.txt\n"
        "  the same answer as in process: yes\n",
    )
