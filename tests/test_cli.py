"""The command line: subcommands, their output, and one-line usage errors with exit code 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workspace_tools import TOOL_NAMES, workspace_tools
from workspace_tools.adapters.anthropic import anthropic_tool
from workspace_tools.adapters.mcp import mcp_tool
from workspace_tools.adapters.openai import openai_chat_tool, openai_responses_tool
from workspace_tools.cli import main

REPO = Path(__file__).resolve().parents[1]


def cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "workspace_tools", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["call", "nope"],
            "workspace-tools: error: unknown tool 'nope'; choose one of: " + ", ".join(TOOL_NAMES),
        ),
        (
            ["call", "read_file", "path=a.txt", "limit=lots"],
            "workspace-tools: error: Invalid arguments for read_file: - limit: Input should be a "
            "valid integer, unable to parse string as an integer",
        ),
        (
            ["call", "read_file"],
            "workspace-tools: error: Invalid arguments for read_file: - path: Field required",
        ),
        (
            ["call", "read_file", "path=a.txt", "limt=2"],
            "workspace-tools: error: Invalid arguments for read_file: - limt: unknown argument "
            "(the arguments are: path, offset, limit)",
        ),
        (
            ["call", "read_file", "path"],
            "workspace-tools: error: argument 'path' is not key=value (or use --json '{...}')",
        ),
        (
            ["call", "read_file", "--json", "{nope"],
            "workspace-tools: error: --json is not valid JSON: Expecting property name enclosed "
            "in double quotes: line 1 column 2 (char 1)",
        ),
        (
            ["call", "read_file", "--root", "/nonexistent/dir", "path=a"],
            "workspace-tools: error: workspace root is not a directory: /nonexistent/dir",
        ),
        (
            ["mcp", "--root", "/nonexistent/dir"],
            "workspace-tools: error: workspace root is not a directory: /nonexistent/dir",
        ),
        (
            ["schema", "--root", "/nonexistent/dir"],
            "workspace-tools: error: workspace root is not a directory: /nonexistent/dir",
        ),
        (
            ["demo", "--root", "/nonexistent/dir"],
            "workspace-tools: error: --root is not a directory: /nonexistent/dir",
        ),
        (
            ["schema", "--format", "gemini"],
            "workspace-tools schema: error: argument --format: invalid choice: 'gemini' "
            "(choose from 'mcp', 'openai', 'openai-responses', 'anthropic')",
        ),
        (["mcp", "--bogus"], "workspace-tools: error: unrecognized arguments: --bogus"),
        (
            ["frobnicate"],
            "workspace-tools: error: argument command: invalid choice: 'frobnicate' "
            "(choose from 'call', 'mcp', 'schema', 'demo')",
        ),
        ([], "workspace-tools: error: the following arguments are required: command"),
    ],
)
def test_usage_errors_are_one_line_with_exit_code_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's own errors leave through parser.exit
        code = exc.code
    captured = capsys.readouterr()
    assert (code, captured.err, captured.out) == (2, message + "\n", "")


def test_usage_error_from_the_console_entry_point_has_no_traceback() -> None:
    done = cli("call", "read_file", "--root", ".", "limit=lots")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "workspace-tools: error: Invalid arguments for read_file: - path: Field required "
        "- limit: Input should be a valid integer, unable to parse string as an integer\n"
    )


@pytest.mark.parametrize(
    ("fmt", "convert"),
    [
        ("mcp", lambda t: mcp_tool(t).model_dump(mode="json", by_alias=True, exclude_none=True)),
        ("openai", openai_chat_tool),
        ("openai-responses", openai_responses_tool),
        ("anthropic", anthropic_tool),
    ],
)
@pytest.mark.parametrize("read_only", [False, True])
def test_schema_prints_each_format(fmt: str, convert: object, read_only: bool) -> None:
    done = cli("schema", "--format", fmt, *(["--read-only"] if read_only else []))
    tools = [t for t in workspace_tools(REPO) if t.read_only or not read_only]
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [convert(t) for t in tools]  # type: ignore[operator]


def test_schema_defaults_to_mcp() -> None:
    assert json.loads(cli("schema").stdout) == json.loads(cli("schema", "--format", "mcp").stdout)


def test_demo_fixes_the_sample_project_and_shows_each_step() -> None:
    done = cli("demo")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("● ")]
    assert rows[:8] == [
        "● List files [folder] .",
        "● Find files [search] **/*.py",
        "● Search files [text-search] def total_value",
        "● Read file [file-text] inventory/stock.py",
        "● Run command [terminal] python3 -m unittest -v",
        "● Edit file [file-pen] inventory/stock.py",
        "● Write file [file-plus] CHANGELOG.md",
        "● Run command [terminal] python3 -m unittest -v",
    ]
    progress = [line[4:] for line in done.stdout.splitlines() if line.startswith("  │ ")]
    assert "FAILED (failures=1)" in progress
    assert "OK" in progress
    assert "  diff +1 −1" in done.stdout.splitlines()
    assert "  -    return sum(item.price for item in items)" in done.stdout.splitlines()
    assert "  +    return sum(item.price * item.quantity for item in items)" in (
        done.stdout.splitlines()
    )
    lines = done.stdout.splitlines()
    sandboxed = lines[lines.index("9. the last command again, inside the sandbox") :]
    assert "● Run command [terminal] python3 -m unittest -v" in sandboxed
    assert "  progress updates reported from the sandbox: 0" in sandboxed
    assert "  its output ends: OK" in sandboxed
    assert not [line for line in sandboxed if line.startswith("  │ ")]
    assert lines[-1] == "done"


def test_demo_works_on_a_copy_of_any_directory(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# Something\n\nTODO: write more\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    done = cli("demo", "--root", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "● Read file [file-text] README.md" in done.stdout.splitlines()
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_mcp_exits_cleanly_when_the_client_closes_stdin(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "workspace_tools", "mcp", "--root", str(tmp_path)],
        input="",
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap for commands")
def test_call_with_sandbox_confines_writes_to_the_root(tmp_path: Path) -> None:
    outside = Path(f"/var/tmp/workspace-tools-cli-{os.getpid()}")
    command = f"touch {outside}; touch inside.txt; echo ran"
    done = cli("call", "run_command", f"command={command}", "--root", str(tmp_path), "--sandbox")
    assert done.returncode == 0
    assert '"stdout":"ran\\n"' in done.stdout
    assert "Read-only file system" in done.stdout
    assert not outside.exists()
    assert (tmp_path / "inside.txt").exists()


def test_call_prints_the_step_row_before_progress_and_result(tmp_path: Path) -> None:
    done = cli("call", "run_command", "command=echo a; echo b >&2", "--root", str(tmp_path))
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert lines[0] == "● Run command [terminal] echo a; echo b >&2"
    assert lines[-1] == '{"exit_code":0,"stdout":"a\\n","stderr":"b\\n"}'
    assert set(lines[1:-1]) <= {"  │ a", "  │ b"}
