"""The command line echoes what the user typed clipped, as every message of the product
does: a value at most 200 characters (then ``…`` and its length), a path at most 8,192."""

from __future__ import annotations

from pathlib import Path

import pytest

from workspace_tools.cli._main import main
from workspace_tools.tools import TOOL_NAMES

LONG = "x" * 100_000
HEAD = "x" * 200
CLIPPED = f"'{HEAD}…' (100,000 characters)"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_an_unknown_tool_name_is_clipped(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    names = ", ".join(TOOL_NAMES)
    assert run(capsys, "call", LONG, "--root", str(tmp_path)) == (
        2,
        "",
        f"workspace-tools: error: unknown tool {CLIPPED}; choose one of: {names}\n",
    )


def test_a_pair_without_equals_is_clipped(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert run(capsys, "call", "read_file", LONG, "--root", str(tmp_path)) == (
        2,
        "",
        f"workspace-tools: error: argument {CLIPPED} is not key=value (or use --json '{{...}}')\n",
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ("schema", "--format", LONG),
            f"argument --format: invalid choice: {CLIPPED} "
            "(choose from 'mcp', 'openai', 'openai-responses', 'anthropic')",
        ),
        (("restore", "/nowhere", LONG), f"argument step: invalid int value: {CLIPPED}"),
        (
            ("call", "read_file", "--bogus" + LONG),
            f"unrecognized arguments: --bogus{HEAD[:-7]}… (100,007 characters)",
        ),
    ],
)
def test_argparse_errors_clip_what_was_typed(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    code, out, err = run(capsys, *argv)
    prog = "workspace-tools " + argv[0] if argv[0] in ("schema", "restore") else "workspace-tools"
    assert (code, out, err) == (2, "", f"{prog}: error: {message}\n")


def test_policy_flags_clip_the_rule_they_echo(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "mcp", "--deny", LONG)
    assert (code, out) == (2, "")
    assert err == (
        f"workspace-tools: error: policy rule '--deny {HEAD[:-7]}…' (100,007 characters) names "
        f"an unknown tool {HEAD}… (100,000 characters); the tools are: "
        + ", ".join(TOOL_NAMES)
        + "\n"
    ), err[:600]


def test_an_http_address_is_clipped(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert run(capsys, "serve", "--root", str(tmp_path), "--http", "127.0.0.1:" + LONG) == (
        2,
        "",
        f"workspace-tools: error: --http 127.0.0.1:{HEAD[:-10]}… (100,010 characters): the port "
        "must be a number from 0 to 65535\n",
    )


def test_paths_are_clipped_at_the_path_limit(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    deep = "/" + "/".join(["y" * 99] * 1000)  # 100,000 characters, no name over NAME_MAX
    code, out, err = run(capsys, "checkpoints", deep)
    assert (code, out) == (2, "")
    assert err == (
        "workspace-tools: error: cannot read the checkpoint record in "
        f"{deep[:8192]}… (100,000 characters): File name too long\n"
    ), err[:300]
