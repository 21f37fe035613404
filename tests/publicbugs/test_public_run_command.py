"""run_command against public reports on peers' shell tools."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.file_support import call, tools
from workspace_tools import ErrorCode

GIT = ["git", "-c", "user.email=a@example.com", "-c", "user.name=A"]


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository with one commit, and an editor in the environment that would
    wait ten minutes, as `code --wait` or vim on no terminal does."""
    root = tmp_path / "w"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "a.txt").write_text("a\n")
    subprocess.run([*GIT, "add", "a.txt"], cwd=root, check=True)
    subprocess.run([*GIT, "commit", "-qm", "first"], cwd=root, check=True)
    for name in ("EDITOR", "VISUAL", "GIT_EDITOR"):
        monkeypatch.setenv(name, "sleep 600")
    return root


def run(root: Path, command: str) -> dict[str, object]:
    result = call(tools(root)["run_command"], command=command, timeout=60)
    assert result.error_code is None, (result.error_code, result.error)
    assert isinstance(result.content, dict)
    return result.content


COMMIT = "git -c user.email=a@example.com -c user.name=A commit"


def test_git_commit_without_a_message_fails_instead_of_waiting_for_an_editor(
    repo: Path,
) -> None:
    """https://github.com/Aider-AI/aider/issues/185 and
    https://github.com/mitsuhiko/agent-stuff/issues/11: a git command that opens an editor
    hung the agent until it was killed."""
    (repo / "a.txt").write_text("b\n")
    out = run(repo, f"git add a.txt && {COMMIT} -q")
    assert out["exit_code"] == 1, out
    assert out["stderr"] == "Aborting commit due to empty commit message.\n"


def test_git_commands_that_edit_a_message_keep_the_one_they_have(repo: Path) -> None:
    """https://github.com/mitsuhiko/agent-stuff/issues/11: `commit --amend` and
    `rebase -i` finish with the message and todo git prepared."""
    (repo / "a.txt").write_text("c\n")
    out = run(repo, f"git add a.txt && {COMMIT} -q --amend && git log --format=%s")
    assert out == {"exit_code": 0, "stdout": "first\n", "stderr": ""}
    out = run(repo, "git rebase -q -i --root && git log --format=%s")
    assert (out["exit_code"], out["stdout"]) == (0, "first\n"), out


def test_an_interactive_read_gets_end_of_input_at_once(tmp_path: Path) -> None:
    """https://github.com/google-gemini/gemini-cli/issues/24707: a command waiting for
    input hung the call until its 5-minute timeout; stdin is empty, so it reads EOF."""
    out = run(tmp_path, 'read -r answer; echo "got [$answer] $?"; cat; echo done')
    assert out == {"exit_code": 0, "stdout": "got [] 1\ndone\n", "stderr": ""}


def test_a_background_server_does_not_hold_the_call(tmp_path: Path) -> None:
    """https://github.com/anomalyco/opencode/issues/22012: a backgrounded process that
    keeps writing to the inherited pipe held the call until its timeout."""
    result = call(
        tools(tmp_path)["run_command"],
        command="(while true; do echo tick; sleep 0.05; done) & echo started",
        timeout=60,
    )
    assert result.error_code is None, result.error
    content = result.content
    assert content["exit_code"] == 0, content
    assert "started\n" in content["stdout"], content
    assert "still running when the command ended and w" in content["note"], content


def test_timeout_is_an_error_with_the_code(tmp_path: Path) -> None:
    """https://github.com/google-gemini/gemini-cli/issues/4322: a command that never exits
    ends at its timeout with a result the model can act on."""
    result = call(tools(tmp_path)["run_command"], command="echo up; sleep 600", timeout=1)
    assert result.error_code is ErrorCode.TOOL_TIMEOUT, result.error
