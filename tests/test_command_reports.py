"""run_command and the shell tool against public bug reports of peers' shell tools: each
test names the report (repository and issue or pull request number) and asserts what we do
in that case, exactly. Processes are judged by the host's process table (``survivors``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._processes import survivors
from tests.file_support import call, tools
from workspace_tools import ErrorCode, ShellSession, invoke_tool_sync, shell_tools

#: The note of a command that left one process running, which was stopped.
STOPPED_SLEEP = (
    "1 background process (sleep) was still running when the command ended and was "
    "stopped; start long-running servers or watchers with start_process where it is offered"
)


def run(root: Path, command: str, timeout: float = 60) -> Any:
    return call(tools(root)["run_command"], command=command, timeout=timeout)


def content(root: Path, command: str) -> dict[str, Any]:
    result = run(root, command)
    assert result.error is None, (result.error_code, result.error)
    assert isinstance(result.content, dict)
    return result.content


@pytest.fixture
def shells(tmp_path: Path, marker: str) -> Iterator[ShellSession]:
    (tmp_path / "sub").mkdir()
    session = ShellSession(tmp_path)
    yield session
    session.close()
    assert survivors(marker) == []


def shell(session: ShellSession, **arguments: Any) -> Any:
    tool = {t.name: t for t in shell_tools(session)}["shell"]
    return invoke_tool_sync(tool, arguments, timeout=60)


# Interactive prompts and stdin


def test_a_read_from_the_terminal_fails_at_once(tmp_path: Path) -> None:
    # genai-io/gen-code#264 and HKUDS/nanobot#2323: a command that opened /dev/tty (ssh,
    # a password prompt) took the agent's terminal and hung until the timeout.
    out = content(tmp_path, "read x < /dev/tty; echo rc=$?")
    assert (out["exit_code"], out["stdout"]) == (0, "rc=1\n"), out
    assert out["stderr"].endswith(": /dev/tty: No such device or address\n"), out


def test_a_program_asking_for_input_gets_end_of_input(tmp_path: Path) -> None:
    # MoonshotAI/kimi-cli#1117: stdin was a pipe nobody wrote to; input() blocked 60 s.
    out = content(tmp_path, "python3 -c 'input()'; echo rc=$?")
    assert (out["exit_code"], out["stdout"]) == (0, "rc=1\n"), out
    assert out["stderr"].endswith("EOFError: EOF when reading a line\n"), out


def test_an_interactive_interpreter_ends_at_once(tmp_path: Path) -> None:
    # OpenHands/OpenHands#3008: `python3` (a REPL) stuck the terminal until the timeout.
    out = content(tmp_path, "python3; echo rc=$?")
    assert out == {"exit_code": 0, "stdout": "rc=0\n", "stderr": ""}


def test_git_is_told_not_to_prompt_for_credentials(tmp_path: Path) -> None:
    # MoonshotAI/kimi-cli#1579 (fixes #1531, #1481): git waited for a password.
    assert content(tmp_path, "echo $GIT_TERMINAL_PROMPT")["stdout"] == "0\n"


# Background processes holding the output pipes

#: Ends a command once its background job has exec'd sleep: until then the job is a copy
#: of bash (or nohup, setsid), and the note names what is running when the command ends.
EXECED = '; until [ "$(cat /proc/$!/comm 2>/dev/null)" = sleep ]; do sleep 0.01; done'


@pytest.mark.parametrize(
    ("report", "command", "stdout"),
    [
        # anomalyco/opencode#48414: a silent holder hung the call just as a chatty one.
        ("opencode#48414", "sleep 1000 & echo started", "started\n"),
        # anthropics/claude-code#3372: with `&` the call gave no clear end and exit code.
        ("claude-code#3372", 'sleep 1000 & echo "exit $?"', "exit 0\n"),
        # anomalyco/opencode#47350: setsid took the holder out of the killed group.
        ("opencode#47350", "setsid sleep 1000 & echo started", "started\n"),
        # AaronCQL/pim-agent#7: nohup with its output in a log, then the log read.
        (
            "pim-agent#7",
            "nohup sleep 1000 > log 2>&1 & "
            "until [ -e log ]; do sleep 0.01; done; cat log; echo done",
            "done\n",
        ),
    ],
)
def test_a_process_left_running_does_not_hold_the_call(
    tmp_path: Path, marker: str, report: str, command: str, stdout: str
) -> None:
    out = content(tmp_path, command + EXECED)
    assert out == {"exit_code": 0, "stdout": stdout, "stderr": "", "note": STOPPED_SLEEP}, report
    assert survivors(marker) == []


def test_a_background_server_is_stopped_with_the_command(tmp_path: Path, marker: str) -> None:
    # turnstonelabs/turnstone#816: `python -m http.server &` wedged the session forever.
    out = content(
        tmp_path,
        "python3 -u -m http.server 0 --bind 127.0.0.1 > log 2>&1 & "
        "until grep -qs Serving log; do sleep 0.01; done; echo up",
    )
    assert out == {
        "exit_code": 0,
        "stdout": "up\n",
        "stderr": "",
        "note": STOPPED_SLEEP.replace("(sleep)", "(python3)"),
    }
    assert survivors(marker) == []


# Timeouts that must stop the whole tree


@pytest.mark.parametrize(
    ("report", "command"),
    [
        # coder/xum#41: `sleep & wait` must time out, not return early or hang.
        ("xum#41", "sleep 1000 & wait"),
        # HKUDS/Vibe-Trading#599: a child started after a delay outlived the shell.
        ("Vibe-Trading#599", "(sleep 0.1; sleep 1000) & sleep 1000"),
        # MagnaCapax/PMSS#737: a daemon (double fork, new session) orphaned to PID 1.
        ("PMSS#737", "(setsid sh -c 'sleep 1000 &' &); sleep 1000"),
        # samuelgursky/davinci-resolve-mcp#120: the kill hit a wrapper that ignored TERM
        # while its child held the pipes.
        ("davinci-resolve-mcp#120", "bash -c 'trap \"\" TERM; sleep 1000; :'"),
    ],
)
def test_a_timeout_kills_every_process_the_command_started(
    tmp_path: Path, marker: str, report: str, command: str
) -> None:
    result = run(tmp_path, command, timeout=1)
    assert (result.error_code, result.error) == (
        ErrorCode.TOOL_TIMEOUT,
        "Command timed out after 1 s; it and every process it started were killed.",
    ), report
    assert survivors(marker) == [], report


def test_the_shell_after_a_timeout_starts_over_and_says_so(
    shells: ShellSession, tmp_path: Path
) -> None:
    # gptme/gptme#3805: after a timeout the shell's cwd and env were lost silently.
    assert shell(shells, command="cd sub && export X=1").error is None
    result = shell(shells, command="sleep 1000", timeout=1)
    assert (result.error_code, result.error) == (
        ErrorCode.TOOL_TIMEOUT,
        "Command timed out after 1 s; the shell and every process it started were killed. "
        "The next command starts a new shell at the workspace root.",
    )
    after = shell(shells, command='pwd; echo "[$X]"')
    assert after.content["stdout"] == f"{tmp_path}\n[]\n", after.model_text()


# Output encodings, control characters, size


NOT_UTF8 = (
    "The {} held bytes that are not UTF-8, shown here as \ufffd; pipe it through `od -c` or "
    "`xxd` to see them as they are"
)


def test_bytes_that_are_not_utf8_do_not_fail_the_call_and_are_named(tmp_path: Path) -> None:
    # PrimeIntellect-ai/nano-rlm#61 and #156: strict decoding raised UnicodeDecodeError;
    # FerroxLabs/wayland#1076: the lossy decoding was then reported as faithful.
    out = content(tmp_path, "printf 'a\\xf0b\\xffc\\n'; printf '\\xfe' >&2")
    assert out == {
        "exit_code": 0,
        "stdout": "a\ufffdb\ufffdc\n",
        "stderr": "\ufffd",
        "note": NOT_UTF8.format("stdout and stderr"),
    }
    # A real U+FFFD is UTF-8 like any other character: nothing to note.
    assert content(tmp_path, "printf '\\357\\277\\275\\n'") == {
        "exit_code": 0,
        "stdout": "\ufffd\n",
        "stderr": "",
    }


def test_the_shell_names_bytes_that_are_not_utf8_too(shells: ShellSession) -> None:
    # FerroxLabs/wayland#1076, in the persistent shell.
    result = shell(shells, command="printf 'x\\x80\\n'")
    assert result.content == {
        "exit_code": 0,
        "stdout": "x\ufffd\n",
        "stderr": "",
        "notes": [NOT_UTF8.format("stdout") + "."],
    }


def test_utf8_output_is_not_garbled(tmp_path: Path) -> None:
    # grebmann1/workbench#55: emoji and dashes came out as mojibake (UTF-8 read as Latin-1).
    out = content(tmp_path, "printf '\\360\\237\\224\\215 Audit \\342\\200\\224 ok\\n'")
    assert out["stdout"] == "\U0001f50d Audit \u2014 ok\n"


def test_utf8_mixed_with_command_substitution_stays_whole(tmp_path: Path) -> None:
    # vercel-labs/just-bash#247: a literal and $(cat file) mixed gave mojibake.
    (tmp_path / "world.txt").write_text("\u4e16\u754c\n", encoding="utf-8")
    out = content(tmp_path, 'echo "\u4f60\u597d: $(cat world.txt)"')
    assert out["stdout"] == "\u4f60\u597d: \u4e16\u754c\n"


def test_carriage_returns_and_colours_reach_the_model_as_printed(tmp_path: Path) -> None:
    # Kilo-Org/kilocode#6811: progress frames drawn with \r; ANSI colours. We neither
    # replay a terminal nor strip: the model reads the bytes the command wrote.
    out = content(tmp_path, "printf 'a\\r50%%\\r100%%\\n\\033[31mred\\033[0m\\n'")
    assert out["stdout"] == "a\r50%\r100%\n\x1b[31mred\x1b[0m\n"


def test_huge_output_is_cut_to_head_and_tail_in_bounded_memory(tmp_path: Path) -> None:
    # NorthlandPositronics/Cogtrix#1241: all output buffered before truncation (`yes`);
    # openJiuwen-ai/jiuwenswarm#3568: head-only truncation lost the error at the end.
    out = content(tmp_path, "head -c 50000000 /dev/zero | tr '\\0' a; echo; echo FAILED >&2")
    marker = "\n[... 49,986,001 of 50,000,001 bytes of stdout left out ...]\n"
    assert out["stdout"] == "a" * 7000 + marker + "a" * 6999 + "\n"
    assert out["stderr"] == "FAILED\n"


def test_a_cut_shell_output_names_a_file_holding_all_of_it(
    shells: ShellSession, tmp_path: Path
) -> None:
    # yvgude/lean-ctx#1660: the truncation hint pointed at a read that had no file;
    # ai-ecoverse/slicc#2010: a cut output must say how to page the whole of it.
    result = shell(shells, command="seq 1 300000")
    details = result.details
    whole = "".join(f"{n}\n" for n in range(1, 300001))
    assert result.content["notes"] == [
        f"The whole stdout (300,000 lines, {len(whole):,} bytes) is in {details.stdout_file}; "
        "page through it with read_file."
    ]
    assert (tmp_path / details.stdout_file).read_text() == whole
    assert result.content["stdout"].endswith("299999\n300000\n")


# Working directory and environment


def test_cd_carries_over_to_the_next_shell_call(shells: ShellSession, tmp_path: Path) -> None:
    # melodic-software/claude-code-plugins#566 and kirodotdev/Kiro#6273: cwd reset between
    # calls, so edits landed in the wrong checkout.
    assert shell(shells, command="cd sub").error is None
    result = shell(shells, command="pwd")
    assert (result.content["stdout"], result.details.cwd) == (f"{tmp_path}/sub\n", "sub")


def test_a_cd_in_a_subshell_does_not_move_the_shell(shells: ShellSession, tmp_path: Path) -> None:
    # cowrie/cowrie#40428: a cd inside $(...) leaked into the session's cwd.
    result = shell(shells, command="echo $(cd /tmp; pwd); pwd")
    assert result.content["stdout"] == f"/tmp\n{tmp_path}\n", result.model_text()
    assert result.details.cwd == "."


def test_a_cd_out_of_the_workspace_is_reported_and_undone(
    shells: ShellSession, tmp_path: Path
) -> None:
    # melodic-software/claude-code-plugins#566 again: work went on outside the tree meant.
    result = shell(shells, command="cd /tmp")
    assert result.content["notes"] == [
        "The command left the shell in /tmp, outside the workspace; the shell was moved "
        "back to the workspace root."
    ]
    assert shell(shells, command="pwd").content["stdout"] == f"{tmp_path}\n"


def test_the_hosts_secrets_are_not_in_a_commands_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # kagent-dev/kagent#1504: the bash tool passed API keys through; `env` printed them.
    monkeypatch.setenv("MY_SERVICE_API_KEY", "s3cr3t")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    out = content(tmp_path, 'env | grep -c s3cr3t; echo "[$MY_SERVICE_API_KEY]"')
    assert out["stdout"] == "0\n[]\n", out
    assert os.environ["MY_SERVICE_API_KEY"] == "s3cr3t"
