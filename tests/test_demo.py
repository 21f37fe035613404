"""The demo's sample project and how the demo prints a finished step."""

from __future__ import annotations

import io
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from workspace_tools import ErrorCode, ToolResult, invoke_tool_sync, workspace_tools
from workspace_tools.cli._demo import (
    TICKS_COMMAND,
    _background_process,
    _Printer,
    _stopped_background,
    _text_editor_undo,
    _warm_index,
    repository_steps,
    sample_project,
    sample_steps,
    summary_lines,
)

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
        "apply_patch",
    }


def test_the_patch_step_applies_after_the_steps_before_it(tmp_path: Path) -> None:
    root = tmp_path / "project"
    shutil.copytree(sample_project(), root)
    steps = sample_steps()
    assert steps[-1].tool == "apply_patch"
    [write] = [s for s in steps if s.tool == "write_file"]
    (root / write.arguments["path"]).write_text(write.arguments["content"])
    readme = (root / "README.md").read_bytes()
    tool = {t.name: t for t in workspace_tools(root)}["apply_patch"]
    result = invoke_tool_sync(tool, steps[-1].arguments)
    assert result.error is None, result.error
    assert [(f.path, f.additions, f.deletions) for f in result.details.files] == [
        ("CHANGELOG.md", 1, 1),
        ("README.md", 2, 0),
    ]
    assert (root / "README.md").read_bytes() == readme + b"\nWhat changed: CHANGELOG.md.\n"


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


def test_background_process_step_reads_each_tick_and_stops_the_process(tmp_path: Path) -> None:
    out = io.StringIO()
    failed = anyio.run(_background_process, tmp_path, _Printer(out), 11)
    assert failed == 0, out.getvalue()
    assert out.getvalue().splitlines() == [
        "",
        "11. start a background process, read its output, stop it",
        f"● Start process [play] {TICKS_COMMAND}",
        "  p1: running",
        "● Read process output [terminal] p1",
        "  tick 1",
        "  tick 2",
        "  tick 3",
        "● Stop process [stop] p1",
        "  p1: stopped",
    ]
    assert list(tmp_path.iterdir()) == []  # the output area went with the session


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the index needs inotify")
def test_warm_index_step_reads_fewer_files_for_the_same_results(tmp_path: Path) -> None:
    root = tmp_path / "project"
    shutil.copytree(sample_project(), root)
    out = io.StringIO()
    assert anyio.run(_warm_index, root, _Printer(out), 12) == 0
    blank, title, line = out.getvalue().splitlines()
    assert blank == ""
    assert title == "12. grep again with the warm index a big tree gets"
    found = re.fullmatch(
        r"  (\d+) matches, read (\d+) of (\d+) files; index \d+ KiB; "
        r"same results as reading every file",
        line,
    )
    assert found is not None, line
    matches, read, files = map(int, found.groups())
    holding = [p for p in root.rglob("*") if p.is_file() and b"total_value" in p.read_bytes()]
    assert (matches, read) == (6, len(holding)), line
    assert files > read, line


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


def test_served_step_without_the_mcp_sdk_names_the_command_that_installs_it(
    tmp_path: Path,
) -> None:
    # A fresh interpreter: this one may have imported the adapters already.
    code = (
        "import sys, io, anyio\n"
        "sys.modules['mcp'] = None\n"
        "from pathlib import Path\n"
        "from workspace_tools.cli._demo import _Printer, _served_step\n"
        "from workspace_tools.tools import workspace_tools\n"
        f"root = Path({str(tmp_path)!r})\n"
        "out = io.StringIO()\n"
        "failed = anyio.run(_served_step, root, workspace_tools(root)[3], _Printer(out), 17)\n"
        "print(failed, out.getvalue(), end='')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert (done.returncode, done.stdout) == (
        0,
        "0 \n17. serve the workspace over HTTP on 127.0.0.1 and call it remotely\n"
        "  (skipped: mcp is not installed; install it with: "
        f"{shlex.quote(sys.executable)} -m pip install 'mcp<2,>=1.30')\n",
    ), done.stderr


def test_text_editor_undo_step_goes_back_to_no_file(tmp_path: Path) -> None:
    root = tmp_path / "project"
    shutil.copytree(sample_project(), root)
    out = io.StringIO()
    assert anyio.run(_text_editor_undo, root, _Printer(out), 13) == 0
    assert out.getvalue().splitlines() == [
        "",
        "13. the text editor's undo_edit, served from the checkpoints",
        "● Create file [file-plus] undo-demo.txt",
        "  File created successfully at: undo-demo.txt",
        "  undo-demo.txt: 'draft\\n'",
        "● Edit file [file-pen] undo-demo.txt",
        "  Successfully replaced text at exactly one location.",
        "  undo-demo.txt: 'final\\n'",
        "● Undo edit [undo] undo-demo.txt",
        "  Last edit to undo-demo.txt undone successfully.",
        "  undo-demo.txt: 'draft\\n'",
        "● Undo edit [undo] undo-demo.txt",
        "  Last edit to undo-demo.txt undone successfully.",
        "  undo-demo.txt: gone",
        "  the workspace is as before",
    ]
    assert not (root / "undo-demo.txt").exists()


def test_stopped_background_step_shows_the_note(tmp_path: Path) -> None:
    out = io.StringIO()
    run_command = {t.name: t for t in workspace_tools(tmp_path)}["run_command"]
    assert anyio.run(_stopped_background, tmp_path, run_command, _Printer(out), 14) == 0
    lines = out.getvalue().splitlines()
    assert lines[:4] == [
        "",
        "14. a command's background process is stopped, and the model told",
        "● Run command [terminal] sleep 1000 & echo started",
        "  exit code 0",
    ]
    # The job is stopped as "sleep" once bash's fork of itself has run it, which the
    # demo's command does not wait for.
    [note] = lines[4:]
    assert re.fullmatch(
        r"  note: 1 background process \((sleep|bash)\) was still running when the command "
        "ended and was stopped; start long-running servers or watchers with start_process "
        "where it is offered",
        note,
    ), note


def test_shipped_call_step_runs_write_file_in_a_fresh_interpreter(tmp_path: Path) -> None:
    import io

    from workspace_tools.cli._demo import _Printer, _shipped_call

    out = io.StringIO()
    failed = anyio.run(_shipped_call, tmp_path, _Printer(out), 19)
    lines = out.getvalue().splitlines()
    assert failed == 0, lines
    assert lines[1] == "19. a write_file call run by a fresh Python interpreter, as data"
    assert lines[2].endswith(
        "back: {'path': 'shipped-demo.txt', 'created': False, 'lines': 1, 'bytes': 8} and 1 hash"
    ), lines
    assert lines[3] == "  edit_file here then: done; after a change outside: STALE_FILE"
    assert list(tmp_path.iterdir()) == []


def test_closure_step_runs_the_closure_elsewhere_and_refuses_the_one_over_a_lock(
    tmp_path: Path,
) -> None:
    from workspace_tools.cli._demo import _closure_call, _Printer

    out = io.StringIO()
    failed = anyio.run(_closure_call, tmp_path, _Printer(out), 21)
    lines = out.getvalue().splitlines()
    assert failed == 0, lines
    assert lines[1] == "21. a custom tool that is a closure, run in a sandbox"
    assert lines[2].startswith("  captured: 'first line', run by pid "), lines
    assert lines[3] == (
        "  over a lock: SANDBOX_ERROR: the tool 'guarded_first_line' cannot run in the "
        "sandbox: argument 'execute' (_closure_tools.<locals>.guarded) cannot be pickled to "
        "cross to its process (TypeError: cannot pickle '_thread.lock' object); make it "
        "importable (a module-level function or class) or capture only values that pickle "
        "(no lock, socket, open file or generator)"
    )
    assert list(tmp_path.iterdir()) == []


def test_wrong_shaped_item_step_answers_in_the_item_s_shape(tmp_path: Path) -> None:
    from workspace_tools.cli._demo import _wrong_shaped_item

    out = io.StringIO()
    assert anyio.run(_wrong_shaped_item, tmp_path, _Printer(out), 21) == 0
    assert out.getvalue().splitlines() == [
        "",
        "21. an OpenAI custom tool call of the wrong shape, then the right one",
        "  input a list: Error: The custom_tool_call's input is an array, not text: send the whole "
        "patch, from *** Begin Patch to *** End Patch, as the input",
        "  input the patch: Success. Updated the following files:",
        "    A item-demo.txt",
    ]
    assert not (tmp_path / "item-demo.txt").exists()


def test_closed_under_command_step_stops_the_command(tmp_path: Path) -> None:
    from workspace_tools.cli._demo import _closed_under_command

    out = io.StringIO()
    assert anyio.run(_closed_under_command, tmp_path, _Printer(out), 22) == 0
    assert out.getvalue().splitlines() == [
        "",
        "22. closing the workspace while a command runs",
        "  SANDBOX_ERROR: The workspace was closed while the command ran; it and every process "
        "it started were stopped.",
        "  its output so far: started",
    ]
